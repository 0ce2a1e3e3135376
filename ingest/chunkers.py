"""Cut documents into chunks: pure functions of (document, spec, token counter).

Three strategies (ChunkingSpec.strategy):

- `structure` (default): cut on the author's boundaries. Blocks (headings, paragraphs, lists,
  code, tables) are merged while they fit; a heading starts a new chunk once the current one
  is at least a quarter full; an oversize block is split by sentences or lines, then words.
  An edit then only moves chunk boundaries inside its own section.
- `window`: fixed windows of `max_tokens` with `overlap` (share of max_tokens) repeated.
- `parent-child`: small windows (`max_tokens`) are embedded and matched; each carries its
  enclosing section (up to PARENT_FACTOR x max_tokens) in `Chunk.context` for the prompt.

With `contextual`, each chunk also carries its document title and section path in
`Chunk.search_prefix` ("Title > Heading > Subheading"): embedded and indexed for BM25 before
its text, never shown. Its tokens are reserved in the model's window.

Sizes are counted with the embedder's own tokenizer (`count_tokens`) and capped by what the
model can see (`limit`), so no chunk is silently truncated at embedding time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from ragindex.config import ChunkingSpec
from ragindex.errors import InvalidInput
from ragindex.hashing import chunk_id, content_hash
from ragindex.ingest.parsers import FORMATS, Block, parse_blocks
from ragindex.types import Chunk, Document, validate_tenant

CountTokens = Callable[[str], int]

PARENT_FACTOR = 4
MIN_FILL = 0.25
DEFAULT_FORMAT = "markdown"
_WORD = re.compile(r"\S+\s*")
_SENTENCE_END = re.compile(r"(?<=[.!?])(?=\s)")


def token_budget(spec: ChunkingSpec, limit: int | None = None) -> int:
    """Chunk size in tokens: spec.max_tokens, capped by the model's window for passage text."""
    if limit is None:
        return spec.max_tokens
    if limit < 1:
        raise InvalidInput(f"the embedder leaves no room for passage text (limit {limit})")
    return min(spec.max_tokens, limit)


def chunk_hash(
    title: str,
    text: str,
    context: str | None,
    doc: Document | None = None,
    search_prefix: str = "",
) -> str:
    """Hash of everything indexed for a chunk: a change to any of it re-embeds the chunk.
    The document's ACL, metadata and `updated` count too: every view must see a new ACL.
    A search prefix is hashed only when there is one, so chunks without keep their hashes."""
    attrs = "" if doc is None else json.dumps([doc.acl, doc.metadata, doc.updated], sort_keys=True)
    prefix = f"\x1f{search_prefix}" if search_prefix else ""
    return content_hash(f"{title}\x1f{context or ''}\x1f{text}\x1f{attrs}{prefix}")


CONTEXT_SEPARATOR = " > "


def search_prefix(title: str, heading_path: tuple[str, ...]) -> str:
    """A contextual chunk's search prefix: the document title and the headings it sits under,
    outermost first, a heading equal to the one before it (often the title) said once."""
    parts: list[str] = []
    for part in (title, *heading_path):
        part = part.strip()
        if part and (not parts or parts[-1] != part):
            parts.append(part)
    return CONTEXT_SEPARATOR.join(parts)


def _path_reserve(blocks: list[Block], count: CountTokens) -> int:
    """Tokens the longest section path of a document adds to its title in a search prefix
    (the caller's limit already leaves room for the title)."""
    paths = {b.heading_path for b in blocks if b.heading_path}
    return max((count(CONTEXT_SEPARATOR.join(("", *p))) for p in paths), default=0)


@dataclass(frozen=True)
class _Unit:
    text: str
    tokens: int
    heading_path: tuple[str, ...]
    is_heading: bool


class _Counter:
    """Token counts memoised per call: documents repeat words, tokenizers are not free."""

    def __init__(self, count_tokens: CountTokens) -> None:
        self._count = count_tokens
        self._memo: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        key = text.strip()
        if key not in self._memo:
            self._memo[key] = self._count(key)
        return self._memo[key]


def _words(text: str, budget: int, count: _Counter) -> list[tuple[str, int]]:
    """Whitespace-delimited pieces (keeping their trailing space) with token counts."""
    out: list[tuple[str, int]] = []
    for word in _WORD.findall(text):
        out.extend(_split_word(word, budget, count))
    return out


def _split_word(word: str, budget: int, count: _Counter) -> list[tuple[str, int]]:
    n = count(word)
    if n <= budget or len(word.strip()) <= 1:
        return [(word, n)]
    half = len(word) // 2
    return _split_word(word[:half], budget, count) + _split_word(word[half:], budget, count)


def _greedy_end(words: list[tuple[str, int]], start: int, budget: int) -> int:
    """End of the longest run of words from `start` whose counts fit the budget (at least one)."""
    end, total = start, 0
    while end < len(words) and total + words[end][1] <= budget:
        total += words[end][1]
        end += 1
    return max(end, start + 1)


def _pack_words(text: str, budget: int, count: _Counter) -> list[str]:
    """Greedy windows of whole words (whitespace kept), each verified with the real count."""
    words = _words(text, budget, count)
    out: list[str] = []
    start = 0
    while start < len(words):
        end = _greedy_end(words, start, budget)
        while end > start + 1 and count("".join(w for w, _ in words[start:end])) > budget:
            end -= 1  # tokenizers that merge across spaces: shrink until it truly fits
        out.append("".join(w for w, _ in words[start:end]))
        start = end
    return out


def _pieces(block: Block) -> list[str]:
    """Finer author boundaries inside an oversize block: lines for code, tables and lists."""
    if block.kind in ("code", "table", "list"):
        return block.text.splitlines(keepends=True)
    return _SENTENCE_END.split(block.text)


def _pack(pieces: list[tuple[str, int]], budget: int, sep: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    total = 0
    for text, n in pieces:
        if cur and total + n > budget:
            out.append(sep.join(cur))
            cur, total = [], 0
        cur.append(text)
        total += n
    if cur:
        out.append(sep.join(cur))
    return out


def _units(blocks: list[Block], budget: int, count: _Counter) -> list[_Unit]:
    units: list[_Unit] = []
    for b in blocks:
        n = count(b.text)
        if n <= budget:
            units.append(_Unit(b.text, n, b.heading_path, b.kind == "heading"))
            continue
        sized: list[tuple[str, int]] = []
        for piece in _pieces(b):
            if not piece.strip():
                continue
            m = count(piece)
            if m <= budget:
                sized.append((piece, m))
            else:
                sized.extend((w, count(w)) for w in _pack_words(piece, budget, count))
        for text in _pack(sized, budget, ""):
            if text.strip():
                kept = text.strip("\n").rstrip() if b.kind == "code" else text.strip()
                units.append(_Unit(kept, count(kept), b.heading_path, False))
    return units


def _group(units: list[_Unit], budget: int) -> list[list[_Unit]]:
    """Merge units up to the budget; a heading opens a new group once the current is full enough
    and never ends one (it moves to the group of the content it introduces)."""
    groups: list[list[_Unit]] = []
    cur: list[_Unit] = []
    for u in units:
        total = sum(x.tokens for x in cur)
        full = total + u.tokens > budget
        if cur and (full or (u.is_heading and total >= budget * MIN_FILL)):
            carry = [cur.pop()] if full and cur[-1].is_heading and not u.is_heading else []
            if carry and carry[0].tokens + u.tokens > budget:
                cur, carry = cur + carry, []
            if cur:
                groups.append(cur)
            cur = carry
        cur.append(u)
    if cur:
        groups.append(cur)
    return groups


def _fit(text: str, budget: int, count: _Counter) -> list[str]:
    if count(text) <= budget:
        return [text]
    return [t.strip() for t in _pack_words(text, budget, count) if t.strip()]


def _structure(
    blocks: list[Block], budget: int, count: _Counter
) -> list[tuple[str, tuple[str, ...]]]:
    out: list[tuple[str, tuple[str, ...]]] = []
    for group in _group(_units(blocks, budget, count), budget):
        text = "\n\n".join(u.text for u in group)
        out.extend((t, group[0].heading_path) for t in _fit(text, budget, count))
    return out


def _windows(text: str, budget: int, overlap: float, count: _Counter) -> list[str]:
    """Windows of at most `budget` tokens; consecutive windows share about overlap x budget."""
    words = _words(text, budget, count)
    shared = min(round(overlap * budget), budget - 1)
    out: list[str] = []
    start = 0
    while start < len(words):
        end = _greedy_end(words, start, budget)
        out.extend(_fit("".join(w for w, _ in words[start:end]).strip(), budget, count))
        if end >= len(words):
            break
        back, kept = end, 0
        while back > start + 1 and kept + words[back - 1][1] <= shared:
            kept += words[back - 1][1]
            back -= 1
        start = back
    return [t for t in out if t]


def _sections(blocks: list[Block]) -> list[list[Block]]:
    sections: list[list[Block]] = []
    for b in blocks:
        if b.kind == "heading" or not sections:
            sections.append([])
        sections[-1].append(b)
    return sections


def document_format(doc: Document) -> str:
    """The document's format (metadata.format, markdown by default); InvalidInput for one that
    no parser reads."""
    fmt = doc.metadata.get("format", DEFAULT_FORMAT)
    if not isinstance(fmt, str):
        raise InvalidInput(f"document {doc.key}: metadata.format must be a string")
    if fmt not in FORMATS:
        raise InvalidInput(
            f"document {doc.key}: unknown document format {fmt!r}: use one of {', '.join(FORMATS)}"
        )
    return fmt


def chunk_document(
    doc: Document,
    tenant_id: str,
    spec: ChunkingSpec,
    count_tokens: CountTokens,
    limit: int | None = None,
) -> list[Chunk]:
    """Chunks of one document with ids `{source}:{doc_id}:{n}` (n from 0) and content hashes.

    `limit` is the most passage-text tokens the embedder sees (its window less special tokens
    and prefix); chunks never exceed min(spec.max_tokens, limit) tokens. With
    `spec.contextual`, the limit is lowered by the document's longest section path (never
    below half of it), which the search prefix puts before the text.
    """
    validate_tenant(tenant_id)
    count = _Counter(count_tokens)
    try:
        blocks = parse_blocks(doc.text, document_format(doc))
    except InvalidInput as exc:
        raise InvalidInput(f"document {doc.key}: {exc}") from None
    if spec.contextual and limit is not None:
        limit = max(limit - _path_reserve(blocks, count), limit // 2)
    budget = token_budget(spec, limit)

    pieces: list[tuple[str, tuple[str, ...], str | None]] = []
    if spec.strategy == "window":
        pieces = [(t, (), None) for t in _windows(doc.text, budget, spec.overlap, count)]
    elif spec.strategy == "parent-child":
        for section in _sections(blocks):
            for parent, path in _structure(section, budget * PARENT_FACTOR, count):
                pieces.extend(
                    (child, path, parent) for child in _windows(parent, budget, spec.overlap, count)
                )
    else:
        pieces = [(t, path, None) for t, path in _structure(blocks, budget, count)]
    if not pieces:
        raise InvalidInput(f"document {doc.key}: no text to index")

    prefixes = [search_prefix(doc.title, path) if spec.contextual else "" for _, path, _ in pieces]
    return [
        Chunk(
            tenant_id=tenant_id,
            chunk_id=chunk_id(doc.source, doc.doc_id, n),
            source=doc.source,
            doc_id=doc.doc_id,
            n=n,
            title=doc.title,
            text=text,
            content_hash=chunk_hash(doc.title, text, context, doc, prefix),
            context=context,
            updated=doc.updated,
            metadata={**doc.metadata, "headings": list(path)},
            acl=doc.acl,
            search_prefix=prefix,
        )
        for n, ((text, path, context), prefix) in enumerate(zip(pieces, prefixes, strict=True))
    ]
