"""Measure answers on Cranfield: calibrate the refusal threshold, then report generation figures.

Not a test (benchmarks are not tests). Run:
    OMP_NUM_THREADS=1 .venv/bin/python tests/measure/evals/measure_answers.py [--json out.json]
The Cranfield index is built once under ${RAGINDEX_CACHE:-~/.cache/ragindex}/answers-cranfield
(through the log, as served; later runs find every chunk unchanged).
Cases alternate into a calibration half and a test half; thresholds are set on the first and
refusal rates reported on the second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch

from ragindex.app import EmbeddedIndex, cranfield_dir
from ragindex.measure.evals import (
    calibrate_threshold,
    cranfield_cases,
    evaluate_answers,
    load_cranfield,
    out_of_domain_cases,
    split_halves,
)
from ragindex.router import AnswerService, ExtractiveGenerator, assemble_context
from ragindex.router.grounded_answer import dense_support, lexical_support

TENANT = "cranfield"


def open_index(cranfield: Path) -> EmbeddedIndex:
    cache = Path(os.environ.get("RAGINDEX_CACHE", Path.home() / ".cache/ragindex"))
    engine = EmbeddedIndex(cache / "answers-cranfield")
    collection = load_cranfield(cranfield)
    docs = [d.to_document("cranfield") for d in collection.corpus.values() if d.text.strip()]
    engine.upsert(TENANT, docs)  # incremental: a second run embeds nothing
    return engine


def rates(values: list[float], threshold: float) -> float:
    return round(sum(v < threshold for v in values) / len(values), 4)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cranfield", type=Path, default=None, help="default: ../shared")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--minilm", action="store_true", help="also run the MiniLM-scored extractive generator"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.cranfield = args.cranfield or cranfield_dir()
    engine = open_index(args.cranfield)
    try:
        answerable = cranfield_cases(load_cranfield(args.cranfield))
        ood = out_of_domain_cases()
        (a_cal, a_test), (o_cal, o_test) = split_halves(answerable), split_halves(ood)

        signals: dict[str, dict[str, float]] = {}
        for case in answerable + ood:
            hits = engine.query.search(TENANT, case.question, 8).hits
            ctx = assemble_context(hits, engine.embedder.count_tokens)
            signals[case.qid] = {
                "dense": dense_support(case.question, ctx, engine.embedder),
                "lexical": lexical_support(case.question, ctx),
            }
        report: dict[str, object] = {}
        for name in ("dense", "lexical"):
            threshold = calibrate_threshold(
                [signals[c.qid][name] for c in a_cal], [signals[c.qid][name] for c in o_cal]
            )
            report[name] = {
                "threshold": round(threshold, 4),
                "calibration_half": {
                    "answerable_refusal": rates([signals[c.qid][name] for c in a_cal], threshold),
                    "ood_refusal": rates([signals[c.qid][name] for c in o_cal], threshold),
                },
                "test_half": {
                    "answerable_refusal": rates([signals[c.qid][name] for c in a_test], threshold),
                    "ood_refusal": rates([signals[c.qid][name] for c in o_test], threshold),
                },
            }
        print(json.dumps(report, indent=2))

        dense_threshold = report["dense"]["threshold"]  # type: ignore[index]
        generators = [("extractive-lexical", ExtractiveGenerator())]
        if args.minilm:
            generators.append(("extractive-minilm", ExtractiveGenerator(engine.embedder)))
        for label, gen in generators:
            svc = AnswerService(
                engine.query,
                gen,
                engine.embedder.count_tokens,
                embedder=engine.embedder,
                refusal_threshold=dense_threshold,
            )
            start = time.perf_counter()
            result = evaluate_answers(
                lambda q, svc=svc: svc.answer(TENANT, q), a_test + o_test, embedder=None
            )
            result.pop("per_question")
            result["seconds"] = round(time.perf_counter() - start, 1)
            report[label] = result
            print(label, json.dumps(result, indent=2))
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
