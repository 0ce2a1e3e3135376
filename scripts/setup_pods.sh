#!/usr/bin/env bash
# Prepare this machine for the pods e2e (`pytest -m pods`, tests/operator/test_pods_e2e.py):
# the Debian packages a node needs, the node binaries (kubelet, kube-scheduler, kube-proxy, CoreDNS,
# KubeRay's ray-operator) and the images (base, operator, Ray, KubeRay). Needs root. Everything is
# cached under ${RAGINDEX_CACHE:-~/.cache/ragindex}; a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ "$(id -u)" == 0 ]] || { echo "setup_pods.sh: needs root (containerd, kubelet, iptables)" >&2; exit 2; }
t0=$SECONDS
packages=(debootstrap docker.io containerd runc containernetworking-plugins iptables conntrack)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup_pods: packages ready ($((SECONDS - t0)) s)"
# The Go builds hold both cores for most of a cold run while the images wait mostly on downloads
# (debootstrap, the wheelhouse): build them side by side. KubeRay's image needs its binary.
scripts/build_images.sh base operator ray &
images=$!
scripts/build_k8s.sh --node
echo "setup_pods: binaries ready ($((SECONDS - t0)) s)"
wait "$images"
scripts/build_images.sh kuberay
echo "setup_pods: done in $((SECONDS - t0)) s"
