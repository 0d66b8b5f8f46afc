#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer, ASan, UBSan) and runs each
# for DURATION seconds (default 60) from the committed seed corpus. Any
# finding fails: a crash, a sanitizer report, a leak, or a failed check of
# the targets (fd counts, round trips, driver objects: they abort()). So do
# a seed corpus of another wire version than the library's
# (scripts/check_fuzz_corpus.py), and fewer than FUZZ_MIN_COV coverage
# counters in the targets together (libFuzzer's "Loaded 1 modules (N inline
# 8-bit counters)"; the targets' own code alone has about 190): then the
# library's code is not instrumented. The coverage the seeds reach
# ("INITED cov: N ft: M") is printed too.
#   fuzz/run.sh [DURATION]
#   FUZZ_BUILD_DIR  build folder (default: build-fuzz)
#   FUZZ_MIN_COV    least coverage counters of both targets together (default 2000)
#   CC / CXX        clang and clang++ (default: clang, else clang-14)
# Needs clang, libclang-rt-14-dev (or the compiler-rt of that clang),
# cmake, Open MPI's headers and the CUDA headers (as the rest of the build).
set -euo pipefail
dur=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/env.sh"
pick() { for c in "$@"; do command -v "$c" >/dev/null && { echo "$c"; return; }; done; }
cc=${CC:-$(pick clang clang-14)}
cxx=${CXX:-$(pick clang++ clang++-14)}
if [ -z "$cc" ] || [ -z "$cxx" ]; then
  echo "fuzz/run.sh: clang not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
min_cov=${FUZZ_MIN_COV:-2000}
total_counters=0
python3 "$root/scripts/check_fuzz_corpus.py"
CC=$cc CXX=$cxx cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVMMIPC_FUZZ=ON -DVMMIPC_WERROR=ON \
  -DVMMIPC_BUILD_TESTS=OFF -DVMMIPC_BUILD_BENCHMARKS=OFF -DVMMIPC_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target fuzz_desc fuzz_frame

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in desc frame; do
  work=$(mktemp -d)  # new inputs and findings go here, never into the committed corpus
  echo "== fuzz_$t for ${dur}s"
  if "$build/fuzz/fuzz_$t" -max_total_time="$dur" -print_final_stats=1 -artifact_prefix="$work/" \
      "$work" "$root/fuzz/corpus/$t" >"$work/log" 2>&1; then
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$work/log"
    counters=$(sed -nE 's/.*Loaded [0-9]+ modules? +\(([0-9]+) inline 8-bit counters\).*/\1/p' "$work/log" | head -n1)
    inited=$(grep -m1 -E 'INITED cov: [0-9]+' "$work/log" || true)
    cov=$(sed -nE 's/.*INITED cov: ([0-9]+) ft: ([0-9]+).*/\1/p' <<<"$inited")
    ft=$(sed -nE 's/.*INITED cov: ([0-9]+) ft: ([0-9]+).*/\2/p' <<<"$inited")
    echo "fuzz_$t coverage: ${counters:-?} counters instrumented; the seeds reach cov ${cov:-?} ft ${ft:-?} (INITED)"
    total_counters=$((total_counters + ${counters:-0}))
    rm -rf "$work"
  else
    tail -n 60 "$work/log"
    echo "fuzz_$t FAILED: log and reproducer in $work" >&2
    status=1
  fi
done
echo "coverage counters of both targets: $total_counters (at least $min_cov wanted)"
if [ "$total_counters" -lt "$min_cov" ]; then
  echo "fuzz/run.sh FAILED: $total_counters coverage counters < $min_cov: are the library's sources instrumented? (fuzz/CMakeLists.txt)" >&2
  status=1
fi
exit $status
