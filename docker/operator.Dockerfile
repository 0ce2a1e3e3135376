# The ragindex operator image: the pure core + kopf + lightkube, no torch, FAISS or Ray.
# Build from the repository root: docker build -f docker/operator.Dockerfile -t ragindex/operator .
# Python 3.11 matches requirements.lock (uv pip compile --python 3.11).
FROM python:3.11-slim AS build
WORKDIR /src
COPY requirements.lock pyproject.toml ./
# Only what the operator imports (ragindex.config/serve_config/types, kopf, lightkube, httpx,
# pydantic, pyyaml), pinned by the lock file used as constraints.
RUN pip install --no-cache-dir --prefix=/install -c requirements.lock \
        kopf lightkube httpx pydantic pyyaml
# The distribution maps every top-level folder into ragindex.*; copy them all so setuptools
# can build it, but install it without its (heavy) dependencies.
COPY ragindex/ ragindex/
COPY ingest/ ingest/
COPY shards/ shards/
COPY lexical/ lexical/
COPY models/ models/
COPY router/ router/
COPY evals/ evals/
COPY app/ app/
COPY operator/ operator/
RUN pip install --no-cache-dir --no-deps --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
# The chart runs it as 65532 with a read-only root filesystem and a /tmp emptyDir.
USER 65532:65532
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
EXPOSE 8080
ENTRYPOINT ["python", "-m", "ragindex.operator"]
CMD ["--runtime=cluster", "--all-namespaces", "--liveness=http://0.0.0.0:8080/healthz"]
