"""What a generation is, and the pure promotion and rollback decisions."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.generations import (
    CHECKS,
    GENERATION_FIELDS,
    BuildReport,
    GenerationRecord,
    PromotionEvidence,
    alias_switch,
    backfill_goal,
    build_report,
    changed_generation_fields,
    expired,
    fail,
    first_generation,
    forget,
    index_generation,
    ingest_group,
    lexical_alias,
    lexical_index_name,
    promote,
    promotion_failures,
    rollback_target,
    self_check_sample,
    start_building,
)
from ragindex.operator import render_crd


def spec(**fields: Any) -> RagIndexSpec:
    return RagIndexSpec.model_validate(fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"embedder": {"model": "other"}},
        {"embedder": {"backend": "flagembedding"}},
        {"embedder": {"queryPrefix": "query: "}},
        {"embedder": {"passagePrefix": "passage: "}},
        {"dense": {"shards": 3}},
        {"dense": {"hnsw": {"m": 16}}},
        {"dense": {"hnsw": {"efConstruction": 100}}},
        {"chunking": {"maxTokens": 100}},
        {"chunking": {"strategy": "window"}},
        {"chunking": {"overlap": 0.25}},
    ],
)
def test_rebuild_fields_start_a_new_generation(fields: dict[str, Any]) -> None:
    assert index_generation(spec(**fields)) != index_generation(spec())
    assert len(changed_generation_fields(spec(), spec(**fields))) == 1


@pytest.mark.parametrize(
    "fields",
    [
        {"dense": {"hnsw": {"efSearch": 16}, "replicas": 3, "exactThreshold": 5}},
        {  # sentence-transformers: same vectors as the default onnx, and it may use GPUs
            "embedder": {
                "backend": "sentence-transformers",
                "batchSize": 64,
                "replicas": 4,
                "gpus": 1,
                "queryCacheSize": 0,
            }
        },
        {"fusion": {"rrfK": 10}, "freshnessS": 5, "generations": {"selfCheckSample": 3}},
        {"lexical": {"onUnavailable": "dense-only"}, "scaling": {"query": {"maxReplicas": 9}}},
    ],
)
def test_other_fields_change_in_place(fields: dict[str, Any]) -> None:
    assert index_generation(spec(**fields)) == index_generation(spec())
    assert changed_generation_fields(spec(), spec(**fields)) == []


def test_every_generation_field_says_so_in_the_crd() -> None:
    schema = render_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    for path in GENERATION_FIELDS:
        node = schema["spec"]
        for part in path.split("."):
            node = node["properties"][part]
        assert "starts a new index generation" in node["description"], path
    ef_search = schema["spec"]["properties"]["dense"]["properties"]["hnsw"]["properties"]
    assert "Changes in place" in ef_search["efSearch"]["description"]


def test_specs_without_index_types_keep_their_generation() -> None:
    """The generation of a spec written before `dense.index` existed is unchanged (a new
    field in the identity would rebuild every running index on upgrade). Such a spec holds
    the chunking defaults of its time (`contextual: false`, `maxTokens: 200`): the API server
    wrote them into every stored RagIndex."""
    before = {"contextual": False, "max_tokens": 200}
    assert index_generation(spec(chunking=before)) == "03b5db25"
    assert index_generation(spec(chunking=before, dense={"shards": 3, "hnsw": {"m": 16}})) == (
        "ada964e7"
    )
    ivf_unused = {"index": {"type": "hnsw", "ivf": {"nlist": 8}}}
    assert index_generation(spec(chunking=before, dense=ivf_unused)) == "03b5db25"


IVF_PQ = {"type": "ivf_pq", "trainMin": 40_000, "ivf": {"nlist": 1024, "nprobe": 16}}


@pytest.mark.parametrize(
    ("old", "new", "changed"),
    [
        ({}, {"type": "hnsw_sq8"}, ["dense.index.type", "dense.index.trainMin"]),
        (
            {},
            {"type": "ivf_sq8"},
            [
                "dense.index.type",
                "dense.index.trainMin",
                "dense.index.ivf.nlist",
                "dense.index.refine.storage",
                "dense.hnsw.m",
                "dense.hnsw.efConstruction",
            ],
        ),
        ({"type": "hnsw_sq8"}, {"type": "hnsw_sq8", "trainMin": 5000}, ["dense.index.trainMin"]),
        (IVF_PQ, {**IVF_PQ, "ivf": {"nlist": 512}}, ["dense.index.ivf.nlist"]),
        (IVF_PQ, {**IVF_PQ, "pq": {"m": 32}}, ["dense.index.pq.m"]),
        (IVF_PQ, {**IVF_PQ, "pq": {"nbits": 6}}, ["dense.index.pq.nbits"]),
        (IVF_PQ, {**IVF_PQ, "refine": {"storage": "sq4"}}, ["dense.index.refine.storage"]),
        (
            IVF_PQ,
            {**IVF_PQ, "type": "ivf_sq8"},
            ["dense.index.type", "dense.index.pq.m", "dense.index.pq.nbits"],
        ),
        # query-time parameters, and build parameters of a type not chosen: in place
        (IVF_PQ, {**IVF_PQ, "ivf": {"nlist": 1024, "nprobe": 64}}, []),
        (IVF_PQ, {**IVF_PQ, "refine": {"kFactor": 10}}, []),
        ({**IVF_PQ, "trainMin": 39_936}, {**IVF_PQ, "trainMin": None}, []),  # 39 x nlist
        ({}, {"pq": {"m": 8}, "refine": {"storage": "flat"}, "trainMin": 99}, []),
        ({"type": "hnsw_sq8"}, {"type": "hnsw_sq8", "ivf": {"nlist": 16}}, []),
    ],
)
def test_index_build_parameters_start_a_generation_only_for_their_type(
    old: dict[str, Any], new: dict[str, Any], changed: list[str]
) -> None:
    a, b = spec(dense={"index": old}), spec(dense={"index": new})
    assert changed_generation_fields(a, b) == changed
    assert (index_generation(a) != index_generation(b)) == bool(changed)


def test_each_generation_has_its_own_ingest_group() -> None:
    a, b = index_generation(spec()), index_generation(spec(dense={"shards": 3}))
    assert ingest_group(a) != ingest_group(b)


def evidence(**overrides: Any) -> PromotionEvidence:
    values: dict[str, Any] = {
        "docs_end": {0: 10, 1: 5},
        "consumed": {0: 10, 1: 5},
        "documents": {"a": 7, "b": 3},
        "indexed": {"a": 7, "b": 3},
        "self_check_missed": [],
        "self_check_sampled": 4,
    }
    return PromotionEvidence(**(values | overrides))


def test_complete_evidence_promotes() -> None:
    assert promotion_failures(evidence()) == []


def test_each_failed_check_is_named() -> None:
    behind = promotion_failures(evidence(consumed={0: 8, 1: 5}))
    assert len(behind) == 1 and behind[0].startswith("caught-up")
    assert "2 docs records behind" in behind[0] and "[0]" in behind[0]
    counts = promotion_failures(evidence(indexed={"a": 6, "b": 3}))
    assert len(counts) == 1 and counts[0].startswith("chunk-counts") and "a: 6 of 7" in counts[0]
    missing_tenant = promotion_failures(evidence(indexed={"a": 7}))
    assert "b: 0 of 3" in missing_tenant[0]
    missed = promotion_failures(evidence(self_check_missed=["a/s/1"]))
    assert len(missed) == 1 and missed[0].startswith("self-check") and "1 of 4" in missed[0]
    all_three = promotion_failures(
        evidence(consumed={}, indexed={}, self_check_missed=["a/s/1", "a/s/2"])
    )
    assert [f.split(":")[0] for f in all_three] == ["caught-up", "chunk-counts", "self-check"]


def test_the_build_report_gives_progress_then_checks_naming_no_tenant() -> None:
    behind = build_report("g", evidence(consumed={0: 4, 1: 5}))
    assert (behind.consumed, behind.end, behind.progress, behind.checks) == (9, 15, 60, None)
    passed = build_report("g", evidence())
    assert passed.checks == dict.fromkeys(CHECKS, "") and passed.failed == []
    failed = build_report("g", evidence(indexed={"a": 6, "b": 3}, self_check_missed=["a/s/1"]))
    assert failed.failed == ["chunk-counts", "self-check"]
    assert "1 of 2 tenants" in (failed.checks or {})["chunk-counts"]
    text = json.dumps(failed.to_json())
    assert '"a"' not in text and "a/s/1" not in text  # served to anyone on the Serve port
    assert BuildReport.from_json(failed.to_json()) == failed
    for bad in [{}, {"generation": "g", "consumed": "x", "end": 1, "checks": None}]:
        with pytest.raises(InvalidInput, match="malformed"):
            BuildReport.from_json(bad)
    with pytest.raises(InvalidInput, match="checks"):
        BuildReport.from_json({"generation": "g", "consumed": 1, "end": 1, "checks": {"x": ""}})


def test_the_read_alias_moves_in_one_call() -> None:
    assert alias_switch("docs", ["docs-a", "docs-b"], "docs-c") == [
        {"remove": {"index": "docs-a", "alias": "docs"}},
        {"remove": {"index": "docs-b", "alias": "docs"}},
        {"add": {"index": "docs-c", "alias": "docs"}},
    ]
    assert alias_switch("docs", ["docs-c"], "docs-c") == [
        {"add": {"index": "docs-c", "alias": "docs"}}
    ]
    assert lexical_index_name("docs", "ab12cd34") == "docs-ab12cd34"


def test_self_check_sample_is_deterministic_and_bounded() -> None:
    keys = [f"t/s/{n}".encode() for n in range(50)]
    sample = self_check_sample(keys, 10)
    assert len(sample) == 10 and sample == self_check_sample(list(reversed(keys)), 10)
    assert self_check_sample(keys, 100) == self_check_sample(keys, 50)
    with pytest.raises(InvalidInput):
        self_check_sample(keys, -1)


def test_promote_retains_the_old_generation_and_rolls_back_inside_the_window() -> None:
    old, new = spec(), spec(dense={"shards": 3})
    g_old, g_new = index_generation(old), index_generation(new)
    record = first_generation(old, now=100.0)
    assert record.active == g_old
    building = start_building(record, new, now=110.0)
    assert building.active == g_old and building.generations[g_new].state == "building"
    promoted = promote(building, g_new, now=120.0)
    assert promoted.active == g_new
    assert promoted.generations[g_old].state == "retained"
    assert GenerationRecord.from_json(promoted.to_json()) == promoted
    assert promoted.spec_of(g_new) == new

    assert rollback_target(promoted, now=130.0, window_s=60) == g_old
    with pytest.raises(InvalidInput, match="beyond the rollback window"):
        rollback_target(promoted, now=500.0, window_s=60)
    assert expired(promoted, now=500.0, window_s=60) == [g_old]
    assert set(forget(promoted, [g_old]).generations) == {g_new}
    with pytest.raises(InvalidInput, match="serves"):
        forget(promoted, [g_new])
    back = promote(promoted, g_old, now=140.0)
    assert back.active == g_old and back.generations[g_new].state == "retained"


def test_bad_transitions_are_refused_and_change_nothing() -> None:
    record = first_generation(spec(), now=0.0)
    with pytest.raises(InvalidInput, match="already serving"):
        start_building(record, spec(embedder={"batchSize": 8}), now=1.0)
    with pytest.raises(InvalidInput, match="nothing serves yet"):
        start_building(GenerationRecord(), spec(), now=1.0)
    with pytest.raises(InvalidInput, match="no generation is retained"):
        rollback_target(record, now=1.0, window_s=60)
    new = spec(dense={"shards": 3})
    failed = fail(start_building(record, new, 1.0), index_generation(new), "self-check: x", 2.0)
    assert failed.active == record.active
    assert failed.generations[index_generation(new)].reason == "self-check: x"
    with pytest.raises(InvalidInput, match="is not built"):
        promote(failed, index_generation(new), now=3.0)


def test_a_backfill_that_trails_steady_writes_catches_up() -> None:
    # Found on real pods: under one write every few seconds, a new generation's workers trailed
    # `docs` by 4 records for minutes, and its report, holding them to the end `docs` had at
    # the previous report, stayed "Backfilling 96%" forever. Here the workers trail by 3
    # records and consume exactly as fast as the writer writes, one report per write.
    end, consumed, goal = 10, 7, None
    caught_up_at = None
    for report in range(6):
        reached, goal = backfill_goal(goal, {0: consumed}, {0: end})
        if reached:
            caught_up_at = report
            break
        assert goal == {0: 10}  # held until reached, not moved to each report's end
        end, consumed = end + 1, consumed + 1
    assert caught_up_at == 3
    assert goal == {0: 13}  # the next goal is the end when this one was reached


def test_a_backfill_goal_counts_every_partition() -> None:
    reached, goal = backfill_goal({0: 5, 1: 5}, {0: 9, 1: 4}, {0: 9, 1: 6})
    assert (reached, goal) == (False, {0: 5, 1: 5})
    assert backfill_goal(None, {0: 3}, {0: 3}) == (True, {0: 3})


def test_each_ragindex_has_its_own_elasticsearch_alias_unless_the_spec_names_one() -> None:
    """The default alias was `ragindex` for every RagIndex: two on one cluster shared it."""
    names = [("team-a", "docs"), ("team-b", "docs"), ("team", "a-docs"), ("team-a", "docs.v2")]
    aliases = [lexical_alias(spec(), ns, name) for ns, name in names]
    assert len(set(aliases)) == len(names)  # '-' and '.' map to '_': the hash tells them apart
    longest = lexical_alias(spec(), "n" * 63, "x" * 253)
    for alias in [*aliases, longest]:
        assert re.fullmatch(r"[a-z][a-z0-9_]{0,99}", alias), alias  # the spec's own pattern
    assert aliases[0].startswith("ragindex_team_a_docs_")
    assert lexical_alias(spec(lexical={"elasticsearchAlias": "kb"}), "team-a", "docs") == "kb"
