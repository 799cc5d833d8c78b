#!/usr/bin/env bash
# run.sh - fuzz every harness of tests/fuzz/ (or those named) for SECONDS each with
# libFuzzer under ASan+UBSan, and print per harness its executions, coverage, corpus
# growth and crashes.  The slow suite of the fuzzers: never run by the test command
# (which replays the committed corpora instead).  Needs clang (Debian's clang-14).
#
#   bash tests/fuzz/run.sh SECONDS [TARGET...]      e.g. bash tests/fuzz/run.sh 300 proto
#
# Builds build-fuzz/ (CC=clang, -Dfuzz=true) the first time.  New inputs libFuzzer keeps
# go to build-fuzz/fuzz-work/TARGET/ (the committed seeds are read, never written); a
# crash or leak leaves its input in build-fuzz/fuzz-work/TARGET-crash-*: fix the defect,
# then copy the input into tests/fuzz/corpus/TARGET/ so the replay test keeps it fixed.
# Environment: KVP_FUZZ_MERGE=1 afterwards merges what a run found into the committed corpus
# (minimised with -merge=1: only inputs that add coverage).
# Exit: 0 when no harness crashed, 1 otherwise, 2 for usage.
set -euo pipefail
cd "$(dirname "$0")/../.."

secs=${1:-}
[[ $secs =~ ^[0-9]+$ ]] || { echo "usage: $0 SECONDS [TARGET...]" >&2; exit 2; }
shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	targets=($(sed -n "s/^\t\['\([a-z-]*\)', files('fuzz_.*/\1/p" tests/fuzz/meson.build))
fi

command -v clang >/dev/null || { echo "run.sh: clang missing (apt-get install clang)" >&2; exit 2; }
dir=build-fuzz
if [ ! -d $dir ]; then
	CC=clang meson setup $dir -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
		-Dbuildtype=debugoptimized >/dev/null
fi
ninja -C $dir -j2 $(printf 'tests/fuzz/fuzz-%s ' "${targets[@]}") >/dev/null

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
bad=0
printf '%-10s %12s %8s %8s %7s %7s  %s\n' target executions exec/s cov ft corpus crashes
for t in "${targets[@]}"; do
	work=$dir/fuzz-work/$t
	seeds=tests/fuzz/corpus/$t
	mkdir -p "$work"
	log=$dir/fuzz-work/$t.log
	rm -f "$dir/fuzz-work/$t-crash-"* "$dir/fuzz-work/$t-leak-"* "$dir/fuzz-work/$t-timeout-"* \
		"$dir/fuzz-work/$t-oom-"*
	set +e
	"$dir/tests/fuzz/fuzz-$t" -max_total_time="$secs" -print_final_stats=1 -timeout=10 \
		-rss_limit_mb=2048 -max_len=65536 \
		-artifact_prefix="$dir/fuzz-work/$t-" "$work" "$seeds" >"$log" 2>&1
	set -e
	execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
	rate=$(awk '/stat::average_exec_per_sec/ {print $2}' "$log")
	last=$(grep -hE '^#[0-9]+.*cov: ' "$log" | tail -1)
	cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
	ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
	ncorp=$(ls "$work" | wc -l)
	crashes=$(ls "$dir/fuzz-work/" | grep -cE "^$t-(crash|leak|timeout|oom)-" || true)
	printf '%-10s %12s %8s %8s %7s %7s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" \
		"$ncorp" "$crashes"
	if [ "$crashes" -gt 0 ]; then
		bad=1
		ls "$dir/fuzz-work/" | grep -E "^$t-(crash|leak|timeout|oom)-" | sed 's/^/    /'
		grep -m1 -E 'ERROR: |runtime error|SUMMARY' "$log" | sed 's/^/    /' || true
	fi
	if [ "${KVP_FUZZ_MERGE:-0}" = 1 ]; then
		"$dir/tests/fuzz/fuzz-$t" -merge=1 "$seeds" "$work" >/dev/null 2>&1 || true
	fi
done
exit $bad
