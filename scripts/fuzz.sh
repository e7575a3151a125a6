#!/usr/bin/env bash
# Fuzz the on-device graph executor (templates/common/src/graph.c, graph_params.c) and the
# RPC server (templates/common/src/rpc_server.c) with libFuzzer, under ASan and UBSan.
#
# Usage: scripts/fuzz.sh [SECONDS]      build all harnesses, fuzz each for SECONDS (default 600)
#        scripts/fuzz.sh --build-only   only build them (into $FUZZ_BUILD/bin)
#
# Harnesses: fuzz_graph_json, fuzz_params (graph executor) and fuzz_rpc (RPC server, built
# with small MTVG_RPC_* limits so they are reached, and with the posix platform's timer
# wrapped by the harness' virtual clock; see tests/fuzz/fuzz_rpc.c).
#
# Environment:
#   FUZZ_BUILD   build and scratch directory (default /tmp/mtvg-fuzz)
#   CC           a clang with libFuzzer (default clang)
#   FUZZ_CFLAGS  extra compiler flags, e.g. "-DMTVG_GRAPH_MAX_NODES=32 -DMTVG_GRAPH_MAX_ENTRIES=32"
#   FUZZ_ARGS    extra libFuzzer flags, e.g. "-use_value_profile=1 -only_ascii=1"
#
# The committed seeds (tests/fuzz/corpus/<kind>/) are copied into $FUZZ_BUILD/corpus/<harness>/,
# which keeps growing across runs; the committed corpus is never modified. Crash inputs go to
# $FUZZ_BUILD/artifacts/<harness>/ and the full logs to $FUZZ_BUILD/<harness>.log. Replay one:
#   $FUZZ_BUILD/bin/<harness> CRASH_FILE
# Exits 1 if any harness crashed (or failed to build).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FUZZ_BUILD:-/tmp/mtvg-fuzz}"
cc="${CC:-clang}"
seconds=600
build_only=0
case "${1:-}" in
  --build-only) build_only=1 ;;
  "") ;;
  *[!0-9]*) echo "usage: $0 [SECONDS | --build-only]" >&2; exit 2 ;;
  *) seconds="$1" ;;
esac

common="$root/templates/common"
graph_sources=("$common/src/graph.c" "$common/src/graph_params.c" "$common/src/workspace.c")
rpc_sources=("$common/src/rpc_server.c" "$common/src/workspace.c"
             "$common/platform/posix/platform.c" "$common/platform/posix/direct_client.c")
rpc_flags=(-DMTVG_RPC_POOL_BYTES=4096u -DMTVG_RPC_MAX_ALLOCS=8u -DMTVG_RPC_MAX_ARGS=12u
           -DMTVG_RPC_MAX_NDIM=4u -DMTVG_RPC_MAX_TIMERS=2u -DMTVG_RPC_MAX_REPEAT=8u
           -DMTVG_RPC_MAX_NUMBER=4096u -DMTVG_RPC_STRING_BYTES=64u
           -Wl,--wrap=mtvg_timer_ticks -Wl,--wrap=mtvg_timer_hz -Wl,--wrap=mtvg_timer_align)
flags=(-std=c99 -Wall -Wextra -Werror -O1 -g -fno-omit-frame-pointer
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -I "$common/include" -I "$root/tests/fuzz")
# shellcheck disable=SC2206  # both are lists of flags on purpose
extra=(${FUZZ_CFLAGS:-})
# shellcheck disable=SC2206
fuzz_args=(${FUZZ_ARGS:-})

harnesses=(fuzz_graph_json fuzz_params fuzz_rpc)
declare -A seeds=([fuzz_graph_json]=graph_json [fuzz_params]=params [fuzz_rpc]=rpc)
declare -A dicts=([fuzz_graph_json]=graph_json.dict [fuzz_params]=params.dict
                  [fuzz_rpc]=rpc.dict)

mkdir -p "$build/bin"
for h in "${harnesses[@]}"; do
  if [[ $h == fuzz_rpc ]]; then
    sources=("${rpc_sources[@]}")
    own_flags=("${rpc_flags[@]}")
  else
    sources=("${graph_sources[@]}")
    own_flags=()
  fi
  "$cc" "${flags[@]}" "${own_flags[@]}" "${extra[@]}" "$root/tests/fuzz/$h.c" "${sources[@]}" \
    -o "$build/bin/$h"
done
echo "built ${harnesses[*]} in $build/bin"
if [[ $build_only == 1 ]]; then
  exit 0
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
crashed=0
for h in "${harnesses[@]}"; do
  corpus="$build/corpus/$h"
  artifacts="$build/artifacts/$h"
  log="$build/$h.log"
  mkdir -p "$corpus" "$artifacts"
  for seed in "$root/tests/fuzz/corpus/${seeds[$h]}/"*; do
    [[ -e "$corpus/${seed##*/}" ]] || cp "$seed" "$corpus/"
  done
  before=$(find "$artifacts" -type f | wc -l)
  status=0
  "$build/bin/$h" -max_total_time="$seconds" -max_len=65536 -timeout=25 \
    -dict="$root/tests/fuzz/${dicts[$h]}" -artifact_prefix="$artifacts/" \
    -print_final_stats=1 "${fuzz_args[@]}" "$corpus" >"$log" 2>&1 || status=$?
  found=$(( $(find "$artifacts" -type f | wc -l) - before ))
  runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)
  stats=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -n 1 || true)
  if [[ $status != 0 && $found == 0 ]]; then
    found=1 # a crash libFuzzer could not save (e.g. in start-up)
  fi
  printf '%s: %s runs in %ss, %s, crashes %d/%s (exit %d, log %s)\n' "$h" "${runs:-?}" \
    "$seconds" "${stats:-no coverage line}" "$found" "${runs:-?}" "$status" "$log"
  if [[ $found != 0 ]]; then
    crashed=1
    find "$artifacts" -type f -newer "$build/bin/$h" -printf '  crash input: %p\n'
    grep -m 3 -E 'ERROR: |runtime error|fuzz oracle failed' "$log" | sed 's/^/  /' || true
  fi
done
exit "$crashed"
