"""Build the corpus of the bundled `gnu-manuals` collection from Debian's GNU info manuals.

One document per info node (a manual section) of seven GNU manuals, all under the GNU Free
Documentation License 1.3 or later with no Invariant Sections and no Cover Texts (see the
collection's README.md). Navigation is dropped (each node's menu, the indexes, the licence
node itself) and the replacement character U+FFFD, which ragindex refuses as a sign of
undecodable input, is written as the text "U+FFFD"; the text is otherwise verbatim.

    python -m ragindex.measure.evals.build_gnu_manuals [--info-dir /usr/share/info] [--out DIR]

It writes only corpus.jsonl: the queries and judgments are hand-made (see the README), and the
committed files are what evaluation reads, so a machine without these Debian packages still has
the collection.
"""

from __future__ import annotations

import argparse
import gzip
import re
from pathlib import Path

from ragindex.measure.evals.collections import CorpusDoc, write_corpus

MANUALS = ("coreutils", "diffutils", "find", "grep", "sed", "gzip", "wget")
"""Info file stems (find.info is split into find.info-1.gz and find.info-2.gz)."""

DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "gnu-manuals"
MIN_CHARS = 120  # nodes shorter than this (after dropping menus) are headings only
_SKIP_NODE = re.compile(r"(index|free documentation license|copying this manual)", re.I)
_HEADER = re.compile(r"^File: [^,]+,\s+Node: ([^,\n]+)")
_SLUG = re.compile(r"[^A-Za-z0-9_.+-]+")


def info_text(info_dir: Path, stem: str) -> str:
    """The whole manual: its numbered parts (stem.info-N.gz) in order, or stem.info.gz."""
    parts = sorted(
        info_dir.glob(f"{stem}.info-*.gz"), key=lambda p: int(p.name.rsplit("-", 1)[1][:-3])
    )
    paths = parts or [info_dir / f"{stem}.info.gz"]
    return "".join(gzip.open(p, "rt", encoding="utf-8").read() for p in paths)


def nodes(text: str) -> list[tuple[str, str]]:
    """(node name, body) of every node, the body without its header line and menu."""
    out: list[tuple[str, str]] = []
    for block in text.split("\x1f"):
        lines = block.strip("\n").split("\n")
        match = _HEADER.match(lines[0]) if lines else None
        if not match:
            continue  # the preamble, the tag table, the indirect table
        body: list[str] = []
        for line in lines[1:]:
            if line.startswith("* Menu:"):
                break  # a node's menu closes it: the rest is navigation
            body.append(line.rstrip())
        out.append((match.group(1).strip(), "\n".join(body).strip()))
    return out


def manual_docs(info_dir: Path, stem: str) -> list[CorpusDoc]:
    manual = "findutils" if stem == "find" else stem
    docs: list[CorpusDoc] = []
    for name, body in nodes(info_text(info_dir, stem)):
        if _SKIP_NODE.search(name) or len(body) < MIN_CHARS:
            continue
        slug = _SLUG.sub("-", name).strip("-")
        # ragindex refuses U+FFFD (it marks undecodable input); sed's manual shows it literally
        body = body.replace("\ufffd", "U+FFFD")
        docs.append(CorpusDoc(f"{manual}.{slug}", f"{manual}: {name}", body))
    return docs


def build(info_dir: Path, out: Path) -> int:
    return write_corpus((doc for stem in MANUALS for doc in manual_docs(info_dir, stem)), out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--info-dir", type=Path, default=Path("/usr/share/info"))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    count = build(args.info_dir, args.out)
    print(f"wrote {count} documents to {args.out / 'corpus.jsonl'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
