#!/usr/bin/env bash
# Installs the real programs the tests drive: tmux (to type into `agentplane proc
# attach` as a person would), vim and bash (on real PTYs), script (the benchmark's
# baseline), git (a GitOps checkout swapping a watched directory), openssl (the test API server's
# service-account key). Idempotent: does nothing when they are all present.
set -euo pipefail

need=()
command -v tmux >/dev/null || need+=(tmux)
command -v vim >/dev/null || need+=(vim)
command -v bash >/dev/null || need+=(bash)
command -v script >/dev/null || need+=(bsdutils)
command -v cc >/dev/null || need+=(gcc)
command -v git >/dev/null || need+=(git)
command -v openssl >/dev/null || need+=(openssl)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "need root or sudo to install: ${need[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "installing: ${need[*]}" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
