"""Build-time check of the Ray image: the Serve app imports, and a document ingested through the
log is found by a hybrid search, all without importing torch, transformers or
sentence-transformers (the image has none of them: an import would fail the build here, not in
a replica)."""

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

import ragindex.app.serve  # noqa: F401  (the modules every Serve deployment loads)
from ragindex.app.cli import main

HEAVY = ("torch", "transformers", "sentence_transformers")

with tempfile.TemporaryDirectory() as tmp:
    docs = Path(tmp) / "docs.jsonl"
    doc = {
        "source": "check",
        "doc_id": "lighthouse",
        "title": "Lighthouses",
        "text": "A lighthouse is a tower with a bright lamp that guides ships at night.",
    }
    docs.write_text(json.dumps(doc) + "\n")
    data = str(Path(tmp) / "data")
    assert main(["ingest", str(docs), "--tenant", "check", "--data-dir", data]) == 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["search", "tower with a lamp", "--tenant", "check", "--data-dir", data])
    assert code == 0 and "check:lighthouse:0" in out.getvalue(), out.getvalue()

loaded = [name for name in HEAVY if name in sys.modules]
if loaded:
    sys.exit(f"the Ray image loaded {loaded}: the ONNX path must not need them")
print("ray image check: ingest + hybrid search answered, no torch/transformers loaded")
