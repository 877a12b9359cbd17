#!/usr/bin/env bash
# Installs the real programs the tests drive: tmux (to type into `agentplane proc
# attach` as a person would), vim and bash (on real PTYs), script (the benchmark's
# baseline), git (a GitOps checkout swapping a watched directory), openssl (the test API server's
# service-account key), Node.js and npm (the node agent installs the real agent CLIs
# from the npm registry; the TypeScript SDK and the inspector are built and tested
# with them), chromium (the inspector's tests, headless), python3 with venv and pip (the
# Python SDK's tests, in virtual environments), g++ and make (node-gyp builds node-pty,
# the PTY benchmark's peer), curl (the file benchmark's client), socat (the egress
# benchmark's bare relay, the floor its proxy is read against). Idempotent: does
# nothing when they are all present.
set -euo pipefail

need=()
command -v tmux >/dev/null || need+=(tmux)
command -v vim >/dev/null || need+=(vim)
command -v bash >/dev/null || need+=(bash)
command -v script >/dev/null || need+=(bsdutils)
command -v cc >/dev/null || need+=(gcc)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v curl >/dev/null || need+=(curl)
command -v git >/dev/null || need+=(git)
command -v openssl >/dev/null || need+=(openssl)
command -v socat >/dev/null || need+=(socat)
# bubblewrap: the codex tests run with a distro bwrap present, as users' machines have.
command -v bwrap >/dev/null || need+=(bubblewrap)
# chromium (headless) and a font for it: the web inspector's tests drive a real browser.
command -v chromium >/dev/null || need+=(chromium)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
# python3 that can make a virtual environment with pip in it: Debian moves ensurepip
# (what `python3 -m venv` puts pip in with) out of python3 into python3-venv, so a
# bare python3 fails to make one until that is installed.
python_venv_works() {
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1
}
if ! command -v python3 >/dev/null; then
  need+=(python3 python3-venv python3-pip)
elif ! python_venv_works; then
  need+=(python3-venv python3-pip)
fi
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
check_node() {
  # pi and gemini-cli need Node.js 20 or newer.
  local major
  major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
  if [ "$major" -lt 20 ]; then
    echo "Node.js $(node --version 2>/dev/null || echo missing) is too old: the agent CLIs need 20 or newer (https://nodejs.org)" >&2
    exit 1
  fi
}
if [ ${#need[@]} -eq 0 ]; then
  check_node
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
check_node
