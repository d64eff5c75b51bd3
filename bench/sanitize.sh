#!/usr/bin/env bash
# The C scanner of the hot path under AddressSanitizer and UBSan (issue 22): a copy of the
# tree gets the extension built with -fsanitize=address,undefined (no recovery), the asan
# runtime is preloaded into Python, and the hot path's C-facing tests run there: the
# C-vs-RE2 oracle (tests/test_hotpath_native.py), the declared lines' op tables and the
# malformed-program fuzzer (tests/test_periodic_spec.py), the planted triggers
# (tests/test_hotpath_triggers.py), the byte-mutation differential fuzzer over real lines
# (tests/test_hotpath_fuzz.py), the bulk-vs-per-line oracle (tests/test_hotpath_oracle.py,
# not the slow ones) and the declared shapes of every era, plain and prefixed
# (tests/test_periodic_shapes.py), the metrics-table rows inside and outside their block
# (tests/test_metrics_table_bulk.py), and the trace pre-scan (_tracescan.c) against the
# text reader on real and broken traces (tests/test_traces_native.py and
# tests/test_trace_agreement.py). Any sanitizer report fails it (the runtimes abort; the log
# is searched for reports as well).
#
#   bench/sanitize.sh [pytest args ...]      e.g.  bench/sanitize.sh -x -k fuzz
#
# Needs gcc (or CC=clang) with its asan/ubsan runtimes: Debian's libasan8 and libubsan1,
# which come with gcc-12 (.ci/run installs them when missing).
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,17s/^# \{0,1\}//p' "$0"
  exit 0
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CC="${CC:-gcc}"
ASAN="$("$CC" -print-file-name=libasan.so)"
UBSAN="$("$CC" -print-file-name=libubsan.so)"
if [ ! -e "$ASAN" ] || [ ! -e "$UBSAN" ]; then
  echo "sanitize: $CC has no asan/ubsan runtime (apt-get install libasan8 libubsan1)" >&2
  exit 2
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/tree"
# tracked and new files, not ignored ones (no built .so, no caches)
(cd "$ROOT" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$WORK/tree")
# tests read ../shared next to the tree (tests/conftest.py)
if [ -d "$ROOT/../shared" ]; then ln -s "$(cd "$ROOT/../shared" && pwd)" "$WORK/shared"; fi
cd "$WORK/tree"
FLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
CC="$CC" CFLAGS="$FLAGS" LDFLAGS="-fsanitize=address,undefined" \
  python setup.py -q build_ext --inplace --force >"$WORK/build.log" 2>&1 \
  || { cat "$WORK/build.log" >&2; exit 1; }
SO="$(ls diag/ingest/hotpath/_cscan*.so)"
if ! nm -D "$SO" | grep -q __asan_report; then
  echo "sanitize: $SO was not built with AddressSanitizer" >&2
  exit 1
fi
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export GRAPHDIAG_REQUIRE_NATIVE=1
set +e
LD_PRELOAD="$ASAN:$UBSAN" python -m pytest -q -p no:cacheprovider -m "not slow" \
  tests/test_hotpath_native.py tests/test_periodic_spec.py tests/test_hotpath_triggers.py \
  tests/test_hotpath_fuzz.py tests/test_hotpath_oracle.py tests/test_periodic_shapes.py \
  tests/test_metrics_table_bulk.py tests/test_traces_native.py tests/test_trace_agreement.py \
  "$@" 2>&1 | tee "$WORK/run.log"
status=${PIPESTATUS[0]}
set -e
if grep -qE "ERROR: AddressSanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer" \
  "$WORK/run.log"; then
  echo "sanitize: a sanitizer report (above)" >&2
  exit 1
fi
exit "$status"
