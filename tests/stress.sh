#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# stress.sh - the whole test suite N times in a row while a load generator keeps every
# core busy, to find tests that can fail on a correct program (timing, ordering, a
# sampled algorithm).  Any test that fails once is a defect: fix the test or the code.
#
#   bash tests/stress.sh [-n RUNS] [--san] [--load K] [--timeout-multiplier M]
#
#   -n RUNS                 rounds of the whole suite (default 5)
#   --san                   the ASan+UBSan build instead of the plain one, with fault
#                           injection (-Dfault_injection=true): test_fault's sweep runs
#                           KVP_FAULT_ROUNDS times a round (default 20: its long form)
#   --load K                busy processes beside the suite (default: one per core)
#   --timeout-multiplier M  meson's per-test timeouts times M (default 3: a test that
#                           needs longer than that under load is reported, not hidden)
#
# Builds into build-stress (or build-stress-san), installs nothing beyond tests/deps.sh,
# leaves nr_hugepages as it found it (the huge-page tests skip when none are reserved,
# as in the suite's second pass).  Prints one line per round and a final
# "stress: P of N rounds passed under load K"; exit 0 only when every round passed.
# Each round's log: build-stress*/meson-logs/testlog-round-R.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=5
san=0
load=$(nproc)
mult=3
while [ $# -gt 0 ]; do
	case $1 in
	-n) runs=$2; shift 2 ;;
	--san) san=1; shift ;;
	--load) load=$2; shift 2 ;;
	--timeout-multiplier) mult=$2; shift 2 ;;
	-h | --help) sed -n '4,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "stress.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
	esac
done
case $runs$load$mult in *[!0-9]*) echo "stress.sh: -n, --load and --timeout-multiplier take whole numbers" >&2; exit 2 ;; esac
[ "$runs" -ge 1 ] || { echo "stress.sh: -n must be at least 1" >&2; exit 2; }

bash tests/deps.sh
dir=build-stress
args=(-Dwerror=true)
if [ $san = 1 ]; then
	dir=build-stress-san
	args+=(-Db_sanitize=address,undefined -Db_lundef=false -Dfault_injection=true)
	export KVP_FAULT_ROUNDS=${KVP_FAULT_ROUNDS:-20}
fi
if [ -d $dir ]; then
	meson setup --reconfigure $dir "${args[@]}" >/dev/null
else
	meson setup $dir "${args[@]}" >/dev/null
fi
ninja -C $dir >/dev/null

# The load: K processes that never sleep.  Killed on any exit.
pids=()
stop_load() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap stop_load EXIT
for ((i = 0; i < load; i++)); do
	(while :; do :; done) &
	pids+=($!)
done

passed=0
for ((r = 1; r <= runs; r++)); do
	t0=$(date +%s)
	if meson test -C $dir --num-processes 2 --timeout-multiplier "$mult" \
		--print-errorlogs >"$dir/meson-logs/stress-round-$r.out" 2>&1; then
		passed=$((passed + 1))
		res=passed
	else
		res="FAILED: $(grep -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|ERROR)' \
			"$dir/meson-logs/stress-round-$r.out" | sed 's/  */ /g' | tr '\n' ';')"
	fi
	cp "$dir/meson-logs/testlog.txt" "$dir/meson-logs/testlog-round-$r.txt"
	echo "stress: round $r of $runs $res ($(($(date +%s) - t0)) s, load $(cut -d' ' -f1 /proc/loadavg))"
done
echo "stress: $passed of $runs rounds passed under load $load"
[ $passed -eq "$runs" ]
