#!/usr/bin/env bash
# The benchmarks (cli/benches), each measuring its figures beside a floor or a peer
# measured in the same run, and printing each with its target.
#
#   scripts/bench.sh            full size, optimised (the release profile, with
#                               overflow checks as shipped); a missed target is
#                               printed as MISSED, and fails the run with BENCH_STRICT=1
#
# Each benchmark prints its detail as it goes; at the end one table gathers every
# headline figure with its peer or floor measured in the same run and its target.
#   scripts/bench.sh --smoke    the test command's run: small sizes, the test profile's
#                               build (no optimised build), for what must hold at any
#                               size (no byte lost, nothing run twice, nothing left
#                               running); its speed figures are printed, not judged
#   scripts/bench.sh NAME...    only these (pty_throughput fs_throughput egress_proxy
#                               up_converge kube_converge sandboxes binary_size)
#
# binary_size builds what the README's `cargo install` builds (the release profile,
# in target/install or $AGENTPLANE_INSTALL_TARGET) and reports its size; at smoke size
# it is skipped (that build takes a quarter of an hour on two cores).
#
# The cluster benchmark needs KUBEBUILDER_ASSETS (scripts/kube-test-assets.sh prints
# it); the sandbox benchmark needs bubblewrap.
set -euo pipefail
cd "$(dirname "$0")/.."

smoke=0
names=()
for arg in "$@"; do
  case "$arg" in
    --smoke) smoke=1 ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) names+=("$arg") ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=(pty_throughput fs_throughput egress_proxy up_converge kube_converge sandboxes binary_size)

if [ -z "${KUBEBUILDER_ASSETS:-}" ]; then
  KUBEBUILDER_ASSETS="$(scripts/kube-test-assets.sh)"
  export KUBEBUILDER_ASSETS
fi

if [ "$smoke" = 1 ]; then
  # Sizes where each still exercises its whole path (several chunks, several saves,
  # a pool refill) in seconds on an unoptimised build.
  export AGENTPLANE_BENCH_MIB="${AGENTPLANE_BENCH_MIB:-8}"
  export AGENTPLANE_BENCH_FS_MIB="${AGENTPLANE_BENCH_FS_MIB:-32}"
  export AGENTPLANE_BENCH_PROXY_MIB="${AGENTPLANE_BENCH_PROXY_MIB:-8}"
  export AGENTPLANE_BENCH_SAVES="${AGENTPLANE_BENCH_SAVES:-20}"
  export AGENTPLANE_BENCH_FILES="${AGENTPLANE_BENCH_FILES:-100}"
  export AGENTPLANE_BENCH_PROCESSES="${AGENTPLANE_BENCH_PROCESSES:-100}"
  export AGENTPLANE_BENCH_SANDBOXES="${AGENTPLANE_BENCH_SANDBOXES:-4}"
  export AGENTPLANE_BENCH_SUSPENDED="${AGENTPLANE_BENCH_SUSPENDED:-4}"
  export AGENTPLANE_BENCH_SMOKE=1
  profile=(--profile dev)
  echo "benchmarks at smoke size, unoptimised: what each checks (bytes, runs, leftovers) fails the run;" \
    "its speed figures and their MET/MISSED are not meaningful here (scripts/bench.sh for those)" >&2
else
  profile=()
fi

report="$(mktemp)"
trap 'rm -f "$report"' EXIT
export AGENTPLANE_BENCH_REPORT="$report"

failed=()
for name in "${names[@]}"; do
  [ "$name" = binary_size ] && [ "$smoke" = 1 ] && continue
  echo "== bench $name" >&2
  if [ "$name" = binary_size ]; then
    # A target directory of its own: the benchmarks' profile writes target/release too,
    # and each would relink over the other (with LTO, minutes each time).
    install_target="${AGENTPLANE_INSTALL_TARGET:-target/install}"
    started=$SECONDS
    if CARGO_TARGET_DIR="$install_target" cargo build --locked --release -p agentplane --bins; then
      echo "release build: $((SECONDS - started)) s" >&2
      bytes=$(stat -c %s "$install_target/release/agentplane")
      mb=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }')
      verdict=$(awk -v b="$bytes" 'BEGIN { print (b < 40e6 ? "MET" : "MISSED") }')
      printf 'binary_size\trelease binary (cargo install), symbols kept\t%s MB\t-\t< 40 MB\t%s\n' "$mb" "$verdict" >>"$report"
      # Installed beside it: the node agent alone, which each sandbox runs.
      bytes=$(stat -c %s "$install_target/release/agentplane-node-agent")
      mb=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }')
      printf 'binary_size\tbeside it, agentplane-node-agent\t%s MB\t-\t-\t\n' "$mb" >>"$report"
    else
      failed+=("$name")
    fi
    continue
  fi
  if ! cargo bench --locked -p agentplane "${profile[@]}" --bench "$name"; then
    failed+=("$name")
  fi
done

# The one table: benchmark, figure, value, peer or floor, target, verdict.
echo
echo "agentplane benchmarks ($( [ "$smoke" = 1 ] && echo "smoke size, unoptimised: speed not judged" || echo "full size, optimised" ); $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ))"
awk -F '\t' '
  { for (i = 1; i <= 6; i++) { cell[NR, i] = $i; if (length($i) > width[i]) width[i] = length($i) } }
  END {
    split("benchmark figure value peer/floor target verdict", head, " ")
    for (i = 1; i <= 6; i++) if (length(head[i]) > width[i]) width[i] = length(head[i])
    line = ""; for (i = 1; i <= 6; i++) line = line sprintf("%-" width[i] "s  ", head[i]); print line
    for (r = 1; r <= NR; r++) { line = ""; for (i = 1; i <= 6; i++) line = line sprintf("%-" width[i] "s  ", cell[r, i]); print line }
  }' "$report"
if grep -q $'\tFAILED$' "$report"; then
  failed+=("(a figure that must hold)")
fi
if [ "${BENCH_STRICT:-0}" = 1 ] && grep -q $'\tMISSED$' "$report"; then
  failed+=("(a target missed, BENCH_STRICT=1)")
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "benchmarks that failed: ${failed[*]}" >&2
  exit 1
fi
