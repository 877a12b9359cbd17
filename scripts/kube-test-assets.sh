#!/usr/bin/env bash
# Prints a directory holding `etcd`, `kube-apiserver` and `kubectl`, the way
# controller-runtime's envtest expects KUBEBUILDER_ASSETS to look, provisioning
# it on Debian when there is none.
#
#   - KUBEBUILDER_ASSETS set and complete: printed as is.
#   - Otherwise a cache outside the checkout ($AGENTPLANE_CACHE_DIR, else
#     $XDG_CACHE_HOME/agentplane, else ~/.cache/agentplane) holds the assets,
#     built once per machine:
#       etcd            Debian's etcd-server package;
#       kubectl         Debian's kubernetes-client package (unpacked, not installed);
#       kube-apiserver  built from Debian's `kubernetes` source package (v1.20.2),
#                       with its vendored github.com/modern-go/reflect2 v1.0.1
#                       replaced by Debian's 1.0.2: 1.0.1 faults in map iteration
#                       under Go 1.19 as soon as a CRD is served.
#
# Progress goes to stderr; stdout carries only the directory.
set -euo pipefail

need_tools() {
  local dir=$1
  [ -x "$dir/etcd" ] && [ -x "$dir/kube-apiserver" ] && [ -x "$dir/kubectl" ]
}

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  if need_tools "$KUBEBUILDER_ASSETS"; then
    echo "$KUBEBUILDER_ASSETS"
    exit 0
  fi
  echo "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks etcd, kube-apiserver or kubectl" >&2
  exit 1
fi

version=1.20.2
cache_root=${AGENTPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agentplane}
assets="$cache_root/kube-assets-$version"
if need_tools "$assets"; then
  echo "$assets"
  exit 0
fi

log() { echo "kube-test-assets: $*" >&2; }
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { log "need root or sudo to install Debian packages"; exit 1; }
  sudo="sudo"
fi
apt_get() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get "$@"; }

mkdir -p "$cache_root"
# One provisioning at a time per machine (parallel test binaries share it).
exec 9>"$cache_root/.kube-assets.lock"
flock 9
if need_tools "$assets"; then
  echo "$assets"
  exit 0
fi

log "provisioning kube-apiserver $version, etcd and kubectl into $assets (once per machine, several minutes)"

# Source packages come from the same archive as the binary ones.
src_list=/etc/apt/sources.list.d/agentplane-deb-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  log "adding deb-src entries ($src_list)"
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources | $sudo tee "$src_list" >/dev/null
  else
    grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' | $sudo tee /etc/apt/sources.list.d/agentplane-deb-src.list >/dev/null
  fi
fi
apt_get update -qq
apt_get install -y -qq --no-install-recommends \
  etcd-server golang-go golang-github-modern-go-reflect2-dev dpkg-dev make rsync gcc libc6-dev >&2

work=$(mktemp -d "$cache_root/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

log "fetching Debian's kubernetes source package"
apt-get source -qq kubernetes >&2
# `find -print -quit`, never `find | head`: under pipefail, head exiting early
# kills the writer with SIGPIPE (exit 141) and the whole script with it.
src=$(find . -maxdepth 1 -type d -name 'kubernetes-*' -print -quit)
[ -n "$src" ] || { log "apt-get source kubernetes unpacked nothing"; exit 1; }

reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
[ -d "$reflect2" ] || { log "$reflect2 is missing"; exit 1; }
rm -rf "$src/vendor/github.com/modern-go/reflect2"
cp -r "$reflect2" "$src/vendor/github.com/modern-go/reflect2"

log "building kube-apiserver (about 7 minutes on 2 cores)"
(
  cd "$src"
  export GOFLAGS=-mod=vendor GOPROXY=off GO111MODULE=on GOTOOLCHAIN=local
  export GOCACHE="$work/go-cache" GOPATH="$work/go"
  make WHAT=cmd/kube-apiserver >&2
)
apiserver=$(find "$src/_output" -type f -name kube-apiserver -perm -u+x -print -quit)
[ -n "$apiserver" ] || { log "the build left no kube-apiserver binary"; exit 1; }

log "unpacking kubectl from kubernetes-client"
apt-get download -qq kubernetes-client >&2
dpkg-deb -x kubernetes-client_*.deb client
kubectl=client/usr/bin/kubectl
[ -x "$kubectl" ] || { log "kubernetes-client holds no usr/bin/kubectl"; exit 1; }

staged="$work/assets"
mkdir -p "$staged"
cp "$apiserver" "$staged/kube-apiserver"
cp "$kubectl" "$staged/kubectl"
cp "$(command -v etcd || echo /usr/bin/etcd)" "$staged/etcd"
chmod 0755 "$staged"/*
"$staged/kube-apiserver" --version >&2
"$staged/etcd" --version >&2
"$staged/kubectl" version --client --short >&2

rm -rf "$assets"
mv "$staged" "$assets"
log "ready: $assets"
echo "$assets"
