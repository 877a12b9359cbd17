#!/usr/bin/env bash
# The Python SDK's gate (the repository's scripts/test.sh runs it after the TypeScript
# SDK's): a virtual environment outside the checkout with every tool pinned
# (requirements-dev.txt), then
#   1. the models regenerated from the binary's OpenAPI document and compared with the
#      committed ones (drift fails here);
#   2. mypy --strict on the package and the examples;
#   3. pytest against the real binary, sync and asyncio;
#   4. the wheel, which must stay under 200 kB and hold only the package;
#   5. the README's examples, installed from that wheel into a fresh virtual
#      environment and run against the real binary (tests/test_examples.py).
# The binary is $AGENTPLANE_BIN, else the workspace's target/debug/agentplane; the
# scratch folder (the environment, the wheel, mypy's cache) is $AGENTPLANE_PY_DIR,
# else target/python-sdk.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
step() { echo "-- python: $1 (at $((SECONDS - started)) s)" >&2; }

export AGENTPLANE_BIN="${AGENTPLANE_BIN:-$PWD/../../target/debug/agentplane}"
if [ ! -x "$AGENTPLANE_BIN" ]; then
  echo "$AGENTPLANE_BIN is not there: build it (cargo build -p agentplane) or set AGENTPLANE_BIN" >&2
  exit 1
fi
scratch="${AGENTPLANE_PY_DIR:-${CARGO_TARGET_DIR:-$PWD/../../target}/python-sdk}"
mkdir -p "$scratch"
scratch="$(cd "$scratch" && pwd)"
# Nothing written into the checkout: no __pycache__, no .pytest_cache.
export PYTHONDONTWRITEBYTECODE=1

step "environment ($scratch/venv)"
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "the Python SDK needs Python 3.10 or later, and python3 is $(python3 --version 2>&1)" >&2
  exit 1
fi
if [ ! -x "$scratch/venv/bin/python" ]; then
  python3 -m venv "$scratch/venv"
fi
py="$scratch/venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt

step "models against the server's document"
"$py" scripts/generate.py --check

step "mypy --strict"
"$py" -m mypy --strict --cache-dir "$scratch/mypy-cache" src/agentplane examples

step "pytest"
"$py" -m pytest -q -p no:cacheprovider --ignore tests/test_examples.py tests

step "wheel"
rm -rf "$scratch/dist"
# --no-isolation: the pinned hatchling of the environment, nothing fetched.
"$py" -m build --wheel --no-isolation --outdir "$scratch/dist" . >/dev/null
wheel="$(ls "$scratch"/dist/agentplane-*.whl)"
size="$(stat -c %s "$wheel")"
echo "wheel: $(basename "$wheel"), $size bytes" >&2
if [ "$size" -ge 204800 ]; then
  echo "the wheel is $size bytes: past the 200 kB budget" >&2
  exit 1
fi
leaked="$("$py" -c 'import sys, zipfile; print("\n".join(n for n in zipfile.ZipFile(sys.argv[1]).namelist() if not n.startswith(("agentplane/", "agentplane-"))))' "$wheel")"
if [ -n "$leaked" ]; then
  echo "the wheel would ship files it should not: $leaked" >&2
  exit 1
fi

step "the README's examples, from the wheel in a fresh environment"
AGENTPLANE_SDK_WHEEL="$wheel" "$py" -m pytest -q -p no:cacheprovider tests/test_examples.py
step "done"
