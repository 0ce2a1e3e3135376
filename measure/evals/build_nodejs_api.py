"""Build the corpus of the bundled `nodejs-api` collection from Node.js's Markdown API docs.

One document per heading-delimited section (any level) of the Markdown API reference that the
Debian-style `nodejs` package ships in /usr/share/doc/nodejs/api, for a fixed list of modules,
under the MIT licence of Node.js (see the collection's README.md). Comments (the YAML change
history, source links) and link-reference definitions are dropped, and the replacement
character U+FFFD, which ragindex refuses as a sign of undecodable input, is written as the text
"U+FFFD"; the text, code examples included, is otherwise verbatim. A section's title is its
page and heading, without backticks.

    python -m ragindex.measure.evals.build_nodejs_api [--api-dir DIR] [--out DIR]

It writes only corpus.jsonl: the queries and judgments are hand-made (see the README), and the
committed files are what evaluation reads, so a machine without the nodejs package still has
the collection.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ragindex.measure.evals.collections import CorpusDoc, write_corpus

PAGES = (
    "buffer",
    "child_process",
    "events",
    "fs",
    "http",
    "os",
    "path",
    "process",
    "readline",
    "stream",
    "timers",
    "url",
    "util",
    "worker_threads",
    "zlib",
)
DEFAULT_API_DIR = Path("/usr/share/doc/nodejs/api")
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "nodejs-api"
MIN_CHARS = 120  # shorter sections are headings over their subsections
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*$")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_LINK_DEF = re.compile(r"^\[[^\]]+\]:\s+\S+.*$", re.M)
_SLUG = re.compile(r"[^A-Za-z0-9_.+-]+")


def sections(markdown: str) -> list[tuple[str, str]]:
    """(heading, body) of every section, headings inside code fences ignored."""
    text = _LINK_DEF.sub("", _COMMENT.sub("", markdown))
    out: list[tuple[str, list[str]]] = []
    fenced = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        match = None if fenced else _HEADING.match(line)
        if match:
            out.append((match.group(2).replace("`", ""), []))
        elif out:
            out[-1][1].append(line.rstrip())
    return [(heading, re.sub(r"\n{3,}", "\n\n", "\n".join(body)).strip()) for heading, body in out]


def page_docs(api_dir: Path, page: str) -> list[CorpusDoc]:
    docs: list[CorpusDoc] = []
    seen: dict[str, int] = {}
    for heading, body in sections((api_dir / f"{page}.md").read_text(encoding="utf-8")):
        if len(body) < MIN_CHARS:
            continue
        slug = _SLUG.sub("-", heading).strip("-")[:120] or "section"
        seen[slug] = seen.get(slug, 0) + 1
        doc_id = f"{page}.{slug}" + (f"-{seen[slug]}" if seen[slug] > 1 else "")
        # ragindex refuses U+FFFD (it marks undecodable input); buffer's page shows it literally
        body = body.replace("\ufffd", "U+FFFD")
        docs.append(CorpusDoc(doc_id, f"{page}: {heading}", body))
    return docs


def build(api_dir: Path, out: Path) -> int:
    return write_corpus((doc for page in PAGES for doc in page_docs(api_dir, page)), out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api-dir", type=Path, default=DEFAULT_API_DIR)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    count = build(args.api_dir, args.out)
    print(f"wrote {count} documents to {args.out / 'corpus.jsonl'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
