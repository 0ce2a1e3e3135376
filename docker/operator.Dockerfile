# The ragindex operator image: the pure core + kopf + lightkube, no torch, FAISS or Ray.
# Built by scripts/build_images.sh (no registry needed: the base comes from debootstrap and the
# wheels from a local wheelhouse). By hand, from the repository root:
#   docker build -f docker/operator.Dockerfile --build-arg BASE_IMAGE=ragindex/base:bookworm \
#     -t ragindex/operator:dev .
# The base is Debian bookworm (Python 3.11, as requirements.lock is compiled for).
ARG BASE_IMAGE=ragindex/base:bookworm
FROM ${BASE_IMAGE} AS build
# pip reads these from the environment: a wheelhouse instead of PyPI when the build script sets them.
ARG PIP_FIND_LINKS=""
ARG PIP_NO_INDEX=""
WORKDIR /src
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY requirements.lock pyproject.toml ./
# Only what the operator imports (ragindex.config/serve_config/types, kopf, lightkube, httpx,
# pydantic, pyyaml, prometheus-client for its metrics), pinned by the lock file used as
# constraints.
RUN pip install --no-cache-dir --disable-pip-version-check -c requirements.lock \
        kopf lightkube httpx pydantic pyyaml prometheus-client
# The distribution maps every top-level folder into ragindex.*; copy them all so setuptools
# can build it, but install it without its (heavy) dependencies.
COPY ragindex/ ragindex/
COPY ingest/ ingest/
COPY shards/ shards/
COPY lexical/ lexical/
COPY log/ log/
COPY models/ models/
COPY netutil/ netutil/
COPY router/ router/
COPY measure/ measure/
COPY testing/ testing/
COPY app/ app/
COPY operator/ operator/
# Checked from / : in /src the source folder `ragindex/` would shadow the installed package.
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps . \
    && cd / && python -c "import ragindex.operator.handlers"

FROM ${BASE_IMAGE}
COPY --from=build /opt/venv /opt/venv
# The chart runs it as 65532 with a read-only root filesystem and a /tmp emptyDir.
USER 65532:65532
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
EXPOSE 8080
ENTRYPOINT ["python", "-m", "ragindex.operator"]
CMD ["--runtime=cluster", "--all-namespaces", "--liveness=http://0.0.0.0:8080/healthz"]
