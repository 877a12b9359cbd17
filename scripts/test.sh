#!/usr/bin/env bash
# The test command: every tier, nothing hidden (docs/testing.md says what each tests,
# how long it takes and how to run one tier or one test).
#   0. `cargo fmt --all --check`, then clippy with every warning an error;
#   1. one build of the whole workspace in the test profile: the `agentplane` binary
#      the SDK, the inspector and the integration tests drive, one test binary per
#      crate, and the benchmarks (no second feature set, no optimised build here);
#   2. the TypeScript SDK: generated types checked against the server's OpenAPI
#      document, then `node --test` against the real binary, and its packed size;
#      then the Python SDK the same way (sdks/python/scripts/test.sh: its models'
#      drift, mypy --strict, pytest, the wheel's size, the README's examples from
#      the wheel in a fresh virtual environment);
#   3. the web inspector: its committed build compared with a rebuild, then its tests
#      in headless chromium (screenshots in target/ui-screenshots) and its benchmark;
#   4. the benchmarks at smoke size: each checks what must hold at any size (no byte
#      lost, nothing run twice, nothing left running) and prints its figures; the
#      full runs, optimised, beside their targets, are `scripts/bench.sh`;
#   5. `cargo test --workspace`: per crate, the unit tests, then the one integration
#      binary, its tests in parallel: the HTTP contract and real programs on real PTYs,
#      the real agent CLIs from the npm registry against the scripted model server,
#      `agentplane up` on real folders and managed sandboxes under the real
#      bubblewrap, the cluster store on one real etcd and kube-apiserver per binary.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
step() { echo "== $1 (at $((SECONDS - started)) s)" >&2; }

scripts/install-test-deps.sh
if ! command -v cargo >/dev/null; then
  echo "cargo is missing: install Rust with rustup (https://rustup.rs)" >&2
  exit 1
fi

# Formatting first: it takes a second and fails before a long build does.
step "format"
cargo fmt --all --check

# etcd, kube-apiserver and kubectl for the cluster tests: KUBEBUILDER_ASSETS when
# set, else built on Debian and cached outside the checkout (several minutes once).
step "kube test assets"
KUBEBUILDER_ASSETS="$(scripts/kube-test-assets.sh)"
export KUBEBUILDER_ASSETS

# A whole run is not an edit-compile loop: incremental state would add gigabytes
# to target/ for nothing. Set CARGO_INCREMENTAL=1 to keep it.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
target_dir="${CARGO_TARGET_DIR:-target}"
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
echo "disk before the build: $(df -h --output=avail . | tail -1 | tr -d ' ') free"

step "build (test profile: the binary, every test binary, the benchmarks)"
cargo test --workspace --all-targets --locked --no-run
step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

export AGENTPLANE_BIN="$target_dir/debug/agentplane"

# The TypeScript SDK (sdks/typescript): its types regenerated from the binary's
# OpenAPI document and compared with the committed ones (drift fails here, as CRD
# drift does in the tests), then its tests with Node's runner against the real binary.
step "TypeScript SDK"
(
  cd sdks/typescript
  npm ci --no-audit --no-fund --loglevel=error
  npm run --silent check-generated
  npm test
)

# The Python SDK (sdks/python): the same checks with pinned Python tools, in a
# virtual environment under the target folder (sdks/python/scripts/test.sh says what).
step "Python SDK"
AGENTPLANE_PY_DIR="$target_dir/python-sdk" sdks/python/scripts/test.sh

# The web inspector (ui/): rebuilt from its pinned sources into a scratch folder and
# compared with the committed build the binary embeds (a stale ui/dist fails here),
# then its tests in Debian's chromium, headless, against the real binary, and its
# benchmark (which fails when a target is missed).
step "web inspector"
(
  cd ui
  npm ci --no-audit --no-fund --loglevel=error
  rebuilt="$(mktemp -d)"
  trap 'rm -rf "$rebuilt"' EXIT
  npm run --silent build -- --outDir "$rebuilt" --emptyOutDir --logLevel warn
  if ! diff -r dist "$rebuilt" >/dev/null; then
    echo "ui/dist is not what its sources build: run \`npm run build\` in ui/ and commit ui/dist" >&2
    diff -r dist "$rebuilt" | head -20 >&2 || true
    exit 1
  fi
  export UI_SCREENSHOTS="$target_dir/ui-screenshots"
  npm test
  npm run --silent bench
)

# The benchmarks at smoke size, built above (the dev profile: `cargo bench --profile
# dev` only runs them); their speed figures mean something in `scripts/bench.sh`.
step "benchmarks at smoke size"
scripts/bench.sh --smoke

step "cargo test"
cargo test --workspace --locked -- --test-threads=4
step "done"
echo "disk after the run: $(du -sh "$target_dir" | cut -f1) in $target_dir, $(df -h --output=avail . | tail -1 | tr -d ' ') free"
