#!/usr/bin/env bash
# The test command: every tier, nothing hidden.
#   1. unit tests (ring buffer, events, auth, signal names, client URLs);
#   2. the HTTP contract and real programs (bash, vim, sh, cat, seq) on real PTYs
#      and pipes, through the real server on a loopback port;
#   3. the `agentplane` binary: the daemon's SIGTERM, the `proc` verbs,
#      `proc attach` typed into inside tmux, `agentplane up` on real files (git
#      checkout, kill -9, sessions) and the resource verbs;
#   4. a short run of the PTY throughput benchmark, for its zero-loss check
#      (its speed figures need the full run: see the README), and the `up`
#      benchmark, which fails if a process is missing or runs twice.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh
if ! command -v cargo >/dev/null; then
  echo "cargo is missing: install Rust with rustup (https://rustup.rs)" >&2
  exit 1
fi

AGENTPLANE_BENCH_MIB=16 cargo bench --locked -p agentplane --bench pty_throughput
cargo bench --locked -p agentplane --bench up_converge
cargo test --locked --workspace
