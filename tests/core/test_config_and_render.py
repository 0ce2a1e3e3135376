import pytest
import yaml
from pydantic import ValidationError
from ray.serve.schema import ServeDeploySchema

from ragindex.config import RagIndexSpec
from ragindex.serve_config import (
    INGEST,
    INGEST_EMBEDDER,
    LEXICAL,
    MAIN_LOOP_ENV,
    QUERY_EMBEDDER,
    RERANKER,
    ROUTER,
    render_serve_config,
    to_yaml,
)


def test_spec_accepts_camel_case_and_defaults():
    spec = RagIndexSpec.model_validate({"dense": {"shards": 3, "hnsw": {"efSearch": 64}}})
    assert spec.dense.shards == 3
    assert spec.dense.hnsw.ef_search == 64
    assert spec.fusion.rrf_k == 60


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"dense": {"shards": 0}}, "shards"),
        ({"fusion": {"candidates": 5, "topK": 10}}, "candidates must be >= fusion.topK"),
        ({"lexical": {"backend": "solr"}}, "backend"),
        ({"reranker": {"enabled": True}}, "reranker.model is required"),
        ({"dense": {"shards": "two"}}, "shards"),
        ({"unknownField": 1}, "unknownField"),
        ({"scaling": {"query": {"minReplicas": 5, "maxReplicas": 2}}}, "minReplicas"),
        ({"fusion": {"denseWeight": 0, "lexicalWeight": 0}}, "cannot both be 0"),
        ({"lexical": {"bodyBoost": 0}}, "bodyBoost"),
        ({"feedback": {"rm3": {"originalWeight": 1.5}}}, "originalWeight"),
        ({"feedback": {"rocchio": {"alpha": 0, "beta": 0}}}, "cannot both be 0"),
    ],
)
def test_invalid_specs_name_the_field(spec, message):
    with pytest.raises(ValidationError, match=message):
        RagIndexSpec.model_validate(spec)


@pytest.mark.parametrize("runtime", ["local", "cluster"])
def test_rendered_config_validates_as_serve_deploy_schema(runtime):
    config = render_serve_config(RagIndexSpec(), name="docs", data_dir="/d", runtime=runtime)
    ServeDeploySchema.model_validate(config)
    # The YAML form (what serveConfigV2 holds) round-trips to the same config.
    assert yaml.safe_load(to_yaml(config)) == config


def test_cluster_layout_has_one_deployment_per_shard_and_separate_scaling():
    spec = RagIndexSpec.model_validate(
        {
            "dense": {"shards": 3, "replicas": 2},
            "embedder": {"backend": "sentence-transformers", "gpus": 1},
            "reranker": {"enabled": True, "model": "/models/ce"},
            "scaling": {"ingest": {"minReplicas": 0, "maxReplicas": 7}},
        }
    )
    app = render_serve_config(spec, name="docs", data_dir="/d", runtime="cluster")["applications"][
        0
    ]
    by_name = {d["name"]: d for d in app["deployments"]}
    assert {"Shard0", "Shard1", "Shard2", ROUTER, QUERY_EMBEDDER, RERANKER, INGEST} <= set(by_name)
    assert by_name["Shard1"]["num_replicas"] == 2
    assert by_name[QUERY_EMBEDDER]["ray_actor_options"]["num_gpus"] == 1
    assert by_name[INGEST]["autoscaling_config"]["max_replicas"] == 7
    assert by_name[INGEST_EMBEDDER]["autoscaling_config"]["max_replicas"] == 7
    assert by_name[ROUTER]["autoscaling_config"]["max_replicas"] == 4
    # the Router's internal calls log nothing per call; the Router's own requests do
    quiet = {"enable_access_log": False}
    assert all(by_name[n].get("logging_config") == quiet for n in ("Shard0", LEXICAL, RERANKER))
    assert "logging_config" not in by_name[ROUTER]
    # the query path's hops run their code on Serve's main loop; the pools and Ingest, which
    # block their loop while a batch runs, keep Serve's own thread for it
    on_main_loop = {
        n
        for n, d in by_name.items()
        if d["ray_actor_options"].get("runtime_env") == {"env_vars": MAIN_LOOP_ENV}
    }
    assert on_main_loop == {ROUTER, LEXICAL, "Shard0", "Shard1", "Shard2"}
    assert app["args"]["spec"]["dense"]["shards"] == 3


def test_a_cpu_embedder_embeds_queries_in_the_router_without_a_pool():
    """On CPU a QueryEmbedder pool does the Router's work on the same kind of core plus a
    hop; only GPU embedders get one."""
    cpu = RagIndexSpec.model_validate({"embedder": {"gpus": 0}})
    app = render_serve_config(cpu, name="docs", data_dir="/d", runtime="cluster")
    names = {d["name"] for d in app["applications"][0]["deployments"]}
    assert QUERY_EMBEDDER not in names and {ROUTER, INGEST_EMBEDDER} <= names


def test_ingest_never_scales_past_one_replica_per_docs_partition():
    spec = RagIndexSpec.model_validate(
        {
            "log": {"docsPartitions": 3},
            "scaling": {"ingest": {"minReplicas": 5, "maxReplicas": 7}},
        }
    )
    app = render_serve_config(spec, name="docs", data_dir="/d", runtime="cluster")["applications"][
        0
    ]
    ingest = next(d for d in app["deployments"] if d["name"] == INGEST)["autoscaling_config"]
    assert (ingest["min_replicas"], ingest["max_replicas"]) == (3, 3)


def test_local_layout_colocates_the_query_path_on_fractional_cpus():
    app = render_serve_config(RagIndexSpec(), name="docs", data_dir="/d", runtime="local")[
        "applications"
    ][0]
    names = [d["name"] for d in app["deployments"]]
    assert names == [ROUTER, INGEST]
    router, ingest = app["deployments"]
    assert router["ray_actor_options"]["runtime_env"] == {"env_vars": MAIN_LOOP_ENV}
    assert "runtime_env" not in ingest["ray_actor_options"]
    assert sum(d["ray_actor_options"]["num_cpus"] for d in app["deployments"]) <= 2


@pytest.mark.parametrize("name", ["ES_PASSWORD", "ELASTIC_PASSWORD", "RAGINDEX_GENERATOR_", "x"])
def test_generator_keys_come_only_from_ragindex_generator_variables(name):
    # apiKeyEnv could name any variable, e.g. the Elasticsearch password (issue #14).
    spec = {"generator": {"backend": "openai-compatible", "baseUrl": "http://g", "model": "m"}}
    with pytest.raises(ValidationError, match="apiKeyEnv"):
        RagIndexSpec.model_validate({"generator": spec["generator"] | {"apiKeyEnv": name}})
    good = spec["generator"] | {"apiKeyEnv": "RAGINDEX_GENERATOR_KEY"}
    assert RagIndexSpec.model_validate({"generator": good}).generator.api_key_env


def test_a_spec_with_pod_templates_is_hashable_and_equal_specs_hash_alike() -> None:
    # Specs are dict keys (generation records); pod templates hold core/v1 maps and lists.
    raw = {
        "pods": {
            "embedders": {
                "resources": {"limits": {"nvidia.com/gpu": 1}},
                "nodeSelector": {"pool": "gpu"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {}},
            }
        }
    }
    one, same = RagIndexSpec.model_validate(raw), RagIndexSpec.model_validate(raw)
    other = RagIndexSpec.model_validate({"pods": {"embedders": {"nodeSelector": {"pool": "x"}}}})
    assert {one: "a"}[same] == "a"
    assert hash(one) == hash(same)
    assert one != other and len({one, other}) == 2
