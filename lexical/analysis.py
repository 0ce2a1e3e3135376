"""One tokenisation for both BM25 backends: Elasticsearch's `standard` analyzer, reproduced.

Why: the embedded (tantivy) and Elasticsearch backends must rank the same corpus the same way,
and BM25 only agrees when both sides see the same terms. Elasticsearch's `standard` analyzer
is Lucene's StandardTokenizer (Unicode UAX #29 word boundaries, max token length 255) plus a
per-code-point lowercase filter, with no stemming and no stop words. tantivy has no UAX #29
tokenizer, so we register a regex tokenizer that implements the word-boundary rules that
matter for text in Latin, Greek, Cyrillic and similar scripts:

- a word is a run of letters (with combining marks), digits and underscores that holds at
  least one letter or digit; a leading run of underscores is kept ("_a"), a lone "___" is not;
- "." and apostrophes join letter-letter and digit-digit ("u.s.a", "don't", "3.14");
  ":" and "·" join only letters ("a:b"); "," and ";" join only digits ("1,000", "1;2");
- a letter followed by a digit (or the reverse) stays one word ("ab12"), but "x.1" splits;
- every Han ideograph and every Hiragana character is its own token, Katakana runs stay whole.

Documented differences from Lucene (none occurs in the Cranfield corpus, where the token
streams are checked equal against Elasticsearch's `_analyze`): tokens longer than 255
characters are not split; emoji are dropped rather than emitted; Hebrew quote rules, the
Katakana + underscore rule and dictionary segmentation of Thai/Lao/Khmer/Myanmar (Lucene keeps
a run whole, as we do) are approximated; a few special lowercase mappings differ (Rust maps
"İ" to "i̇", Java to "i").
"""

from __future__ import annotations

from functools import cache

import tantivy

ANALYZER_NAME = "ragindex_standard"

_LETTER = r"[\p{Alphabetic}\p{M}--\p{Han}--\p{Hiragana}--\p{Katakana}--\x{30FC}]"
_DIGIT = r"\p{Nd}"
# UAX #29 MidNumLet and Single_Quote join letters and digits alike.
_MID_NUM_LET = r".'\x{2018}\x{2019}\x{2024}\x{FE52}\x{FF07}\x{FF0E}"
_MID_LETTER = r":\x{B7}\x{387}\x{55F}\x{5F4}\x{2027}\x{FE13}\x{FE55}\x{FF1A}"
_MID_NUM = (
    r",;\x{37E}\x{589}\x{60C}\x{60D}\x{66C}\x{7F8}\x{2044}"
    r"\x{FE10}\x{FE14}\x{FE50}\x{FE54}\x{FF0C}\x{FF1B}"
)

_LETTERS = rf"{_LETTER}(?:[{_MID_LETTER}{_MID_NUM_LET}]{_LETTER})*"
_DIGITS = rf"{_DIGIT}(?:[{_MID_NUM}{_MID_NUM_LET}]{_DIGIT})*"
_WORD = rf"_*(?:{_DIGITS}|{_LETTERS})(?:_|{_DIGITS}|{_LETTERS})*"

STANDARD_PATTERN = rf"\p{{Han}}|\p{{Hiragana}}|[\p{{Katakana}}\x{{30FC}}]+|{_WORD}"


def build_analyzer() -> tantivy.TextAnalyzer:
    """A fresh tantivy analyzer equal to Elasticsearch's `standard` analyzer (see above)."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(STANDARD_PATTERN))
        .filter(tantivy.Filter.lowercase())
        .build()
    )


@cache
def _shared_analyzer() -> tantivy.TextAnalyzer:
    return build_analyzer()


def analyze(text: str) -> list[str]:
    """Tokens of `text`, in order, as both backends index and query them."""
    if not text:
        return []
    return list(_shared_analyzer().analyze(text))
