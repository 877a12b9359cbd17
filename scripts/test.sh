#!/usr/bin/env bash
# The test command: every tier, nothing hidden.
#   0. `cargo fmt --all --check`: the tree is formatted by rustfmt (rustfmt.toml), never by hand;
#   1. unit tests (ring buffer, events, auth, signal names, client URLs);
#   2. the HTTP contract and real programs (bash, vim, sh, cat, seq) on real PTYs
#      and pipes, through the real server on a loopback port;
#   3. the real agent CLIs (claude, codex, opencode, pi, gemini, amp), installed by
#      the node agent from the npm registry, pinned, into target/tmp/agents (once
#      per build, shared by every test binary; npm's own cache in ~/.npm keeps the
#      tarballs between runs), driven against the scripted model server on
#      127.0.0.1; the converters on recorded transcripts; the installer;
#   4. the `agentplane` binary: the daemon's SIGTERM, the `proc` verbs,
#      `proc attach` typed into inside tmux, `agentplane up` on real files (git
#      checkout, kill -9, sessions) and the resource verbs;
#   5. the cluster store on a real etcd and kube-apiserver (provisioned below, once
#      per machine): the controller, registration, manifests/ and the CLI verbs;
#   6. the TypeScript SDK: generated types checked against the server's OpenAPI
#      document, then `node --test` against the real binary (terminals, sessions,
#      resume across dropped connections, errors, start/dispose), and its packed size;
#   7. the web inspector: its committed build compared with a rebuild, then its
#      tests in headless chromium (screenshots in target/ui-screenshots) and its
#      benchmark (long sessions, streaming, terminal rate, bundle size);
#   8. a short run of the PTY throughput benchmark, for its zero-loss check
#      (its speed figures need the full run: see the README), the `up`
#      benchmark, which fails if a process is missing or runs twice, and the
#      managed-sandbox benchmark (cold start, warm-pool claim, idle RSS).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh
if ! command -v cargo >/dev/null; then
  echo "cargo is missing: install Rust with rustup (https://rustup.rs)" >&2
  exit 1
fi

# etcd, kube-apiserver and kubectl for the cluster tests: KUBEBUILDER_ASSETS when
# set, else built on Debian and cached outside the checkout (several minutes once).
# Formatting first: it takes a second and fails before a long build does.
cargo fmt --all --check

KUBEBUILDER_ASSETS="$(scripts/kube-test-assets.sh)"
export KUBEBUILDER_ASSETS

# A whole run is not an edit-compile loop: incremental state would add gigabytes
# to target/ for nothing. Set CARGO_INCREMENTAL=1 to keep it.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
target_dir="${CARGO_TARGET_DIR:-target}"
echo "disk before the build: $(df -h --output=avail . | tail -1 | tr -d ' ') free"

# The TypeScript SDK (sdks/typescript): its types regenerated from the binary's
# OpenAPI document and compared with the committed ones (drift fails here, as CRD
# drift does below), then its tests with Node's runner against the real binary.
cargo build --locked -p agentplane
(
  cd sdks/typescript
  npm ci --no-audit --no-fund --loglevel=error
  export AGENTPLANE_BIN="$PWD/../../$target_dir/debug/agentplane"
  case "$target_dir" in /*) AGENTPLANE_BIN="$target_dir/debug/agentplane" ;; esac
  npm run --silent check-generated
  npm test
)

# The web inspector (ui/): rebuilt from its pinned sources into a scratch folder and
# compared with the committed build the binary embeds (a stale ui/dist fails here),
# then its tests in Debian's chromium, headless, against the real binary, and its
# benchmark (which fails when a target is missed).
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
  export AGENTPLANE_BIN="$PWD/../$target_dir/debug/agentplane"
  case "$target_dir" in /*) AGENTPLANE_BIN="$target_dir/debug/agentplane" ;; esac
  export UI_SCREENSHOTS="$PWD/../$target_dir/ui-screenshots"
  npm test
  npm run --silent bench
)

AGENTPLANE_BENCH_MIB=16 cargo bench --locked -p agentplane --bench pty_throughput
AGENTPLANE_BENCH_FS_MIB=256 cargo bench --locked -p agentplane --bench fs_throughput
cargo bench --locked -p agentplane --bench up_converge
cargo bench --locked -p agentplane --bench kube_converge
cargo bench --locked -p agentplane --bench sandboxes
cargo test --locked --workspace
echo "disk after the run: $(du -sh "$target_dir" | cut -f1) in $target_dir, $(df -h --output=avail . | tail -1 | tr -d ' ') free"
