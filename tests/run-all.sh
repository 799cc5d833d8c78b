#!/usr/bin/env bash
# run-all.sh - install, build and run the whole test suite twice:
#   1. plain build, -Werror, with 2 MiB huge pages reserved: the MFD_HUGETLB path;
#   2. AddressSanitizer + UndefinedBehaviorSanitizer build with no huge pages reserved:
#      the fallback path (the pool must work, and say so); with fault injection
#      (util/fault.h), so tests/unit/test_fault.c's sweep runs under the leak checker;
#   3. the aarch64 cross build and its unit tests under qemu-user (tests/cross-arm64.sh:
#      the NEON tables against the scalar oracle, greedy tokens equal to pass 1's build),
#      skipped with the reason when the cross compiler or the arm64 packages cannot be had.
# The machine's nr_hugepages is restored on exit.  Needs root (apt-get, sysctl).
# Benchmarks are not run here: `meson test -C build --benchmark`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/deps.sh

HP_WANT=${KVP_TEST_HUGEPAGES:-600}	# 1.2 GiB of 2 MiB pages for the huge-page pass
hp_file=/proc/sys/vm/nr_hugepages
hp_orig=$(cat $hp_file)
restore() { echo "$hp_orig" > $hp_file 2>/dev/null || true; }
trap restore EXIT

set_hugepages() {
	echo "$1" > $hp_file 2>/dev/null || true
	echo "huge pages: asked for $1, reserved $(cat $hp_file)"
}

run_pass() { # name builddir hugepages meson-args...
	local name=$1 dir=$2 hp=$3
	shift 3
	echo "=== $name ==="
	if [ -d "$dir" ]; then
		meson setup --reconfigure "$dir" "$@" >/dev/null
	else
		meson setup "$dir" "$@" >/dev/null
	fi
	ninja -C "$dir"
	set_hugepages "$hp"
	meson test -C "$dir" --print-errorlogs --num-processes 2
}

run_pass "plain build, huge pages reserved" build-ci "$HP_WANT" -Dwerror=true
run_pass "ASan+UBSan build, no huge pages, fault injection" build-ci-san 0 -Dwerror=true \
	-Db_sanitize=address,undefined -Db_lundef=false -Dfault_injection=true
echo "=== aarch64 cross build, unit tests under qemu-user ==="
arm_rc=0
KVP_X86_BUILD=$PWD/build-ci bash tests/cross-arm64.sh build-ci-arm64 || arm_rc=$?
if [ $arm_rc = 77 ]; then
	echo "aarch64 pass skipped (reason above)"
elif [ $arm_rc != 0 ]; then
	exit $arm_rc
fi
echo "all passes green"
