#!/bin/bash
# SPDX-License-Identifier: MIT
#
# cross-arm64.sh - build kvpool for aarch64 Linux and run its unit tests under qemu-user
#
#   bash tests/cross-arm64.sh [BUILD_DIR] [TEST...]
#
# TEST...: run only these unit tests (meson test names) and skip the greedy-token
# comparison; by default the whole 'cross' list below and the comparison.
#
# The host stays x86-64: the arm64 libraries the build links are NOT installed (multiarch
# -dev packages would upgrade host packages); their .debs are fetched with
# `apt-get download` and unpacked with dpkg-deb into BUILD_DIR/sysroot, which
# cross/aarch64-linux-gnu.ini points the compiler, the linker, pkg-config and the test
# wrapper (qemu-aarch64-static -cpu max -L sysroot) at.  Needs the cross compiler
# (gcc-aarch64-linux-gnu), qemu-user-static (both installed here when root) and an apt
# source with arm64 indexes (`dpkg --add-architecture arm64 && apt-get update`, done
# here when root).
#
# Runs the 'cross' test list: the unit tests that need no privileged kernel feature and
# nothing the emulator lacks (kernels against the scalar oracle for every table qemu's
# CPU runs, tokenizers, GGUF, the tiny model's greedy tokens against the x86 build's).
# Exit 77 (skipped) with the reason when the toolchain or a package cannot be had.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build-arm64}
[ $# -gt 0 ] && shift
mkdir -p "$build"
build=$(cd "$build" && pwd)
sysroot=$build/sysroot
debs=$build/debs
triplet=aarch64-linux-gnu

skip() {
	echo "cross-arm64: SKIP: $*" >&2
	exit 77
}

# the host's cross tools: installed when root (Debian 12: gcc 12, qemu-user 7.2)
if ! command -v $triplet-gcc >/dev/null || ! command -v qemu-aarch64-static >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "cross-arm64: installing gcc-$triplet qemu-user-static"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			gcc-$triplet qemu-user-static </dev/null >/dev/null ||
			skip "apt-get install gcc-$triplet qemu-user-static failed"
	fi
fi
for t in $triplet-gcc qemu-aarch64-static apt-get dpkg-deb pkg-config meson ninja; do
	command -v "$t" >/dev/null || skip "$t not found (apt-get install gcc-aarch64-linux-gnu qemu-user-static)"
done

# The -dev packages the build links (meson.build's dependency() calls) and everything
# they pull, the C library's headers and start files included (libc6-dev: the cross
# toolchain's own libc6-dev-arm64-cross need not be installed), so that the sysroot is
# one arm64 root the compiler (--sysroot), the linker and qemu (-L) all use.
dev_pkgs="libc6-dev liburing-dev libhwloc-dev libxxhash-dev libopenblas-pthread-dev libinih-dev
	libjansson-dev libpcre2-dev libcmocka-dev libhiredis-dev libmicrohttpd-dev"
# never unpacked: host tools, and the openblas variants other than pthread's
not_pkgs='^(libc-dev-bin|rpcsvc-proto|m4|debianutils|dpkg|tar|gcc-12-base|libopenblas0-(openmp|serial)|libopenblas-(openmp|serial)-dev|libopenblas-dev|libopenblas0)$'

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	[ "$(id -u)" = 0 ] || skip "no arm64 apt indexes (as root: dpkg --add-architecture arm64 && apt-get update)"
	dpkg --add-architecture arm64
	apt-get update -qq || skip "apt-get update failed after adding arm64"
fi
if ! apt-cache show libc6:arm64 >/dev/null 2>&1; then
	[ "$(id -u)" = 0 ] && apt-get update -qq || true
	apt-cache show libc6:arm64 >/dev/null 2>&1 || skip "no arm64 package indexes (apt-get update)"
fi

stamp=$sysroot/.kvp-sysroot
if [ ! -f "$stamp" ]; then
	# every arm64 package the -dev packages depend on, recursively
	pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances \
		$(for p in $dev_pkgs; do echo "$p:arm64"; done) 2>/dev/null |
		sed -n 's/^\([a-z0-9][a-z0-9.+-]*\):arm64$/\1/p' | sort -u |
		grep -Ev "$not_pkgs") || skip "apt-cache depends failed"
	for p in $dev_pkgs; do
		grep -qx "$p" <<<"$pkgs" || skip "no arm64 package $p in the apt indexes"
	done
	mkdir -p "$debs"
	for p in $pkgs; do
		ls "$debs/${p}_"*_arm64.deb >/dev/null 2>&1 && continue
		(cd "$debs" && apt-get download -qq "$p:arm64" >/dev/null 2>&1) ||
			skip "cannot download $p:arm64 (apt-get download)"
	done
	rm -rf "$sysroot.tmp"
	mkdir -p "$sysroot.tmp"
	for d in "$debs"/*_arm64.deb; do
		dpkg-deb -x "$d" "$sysroot.tmp"
	done
	# dpkg would have made these: the alternatives libopenblas is found through, and the
	# development symlinks some packages ship only as relative links to /lib
	lib=$sysroot.tmp/usr/lib/$triplet
	for so in libopenblas.so.0 libblas.so.3 liblapack.so.3; do
		[ -e "$lib/openblas-pthread/$so" ] && ln -sf "openblas-pthread/$so" "$lib/$so"
	done
	rm -rf "$sysroot"
	mv "$sysroot.tmp" "$sysroot"
	echo "$pkgs" >"$stamp"
fi

# the build (its sysroot named in a machine file read before the in-tree cross file)
printf "[constants]\nsysroot = '%s'\n" "$sysroot" >"$build/sysroot.ini"
if [ ! -f "$build/meson/build.ninja" ]; then
	meson setup --cross-file "$build/sysroot.ini" --cross-file "$src/cross/$triplet.ini" \
		"$build/meson" "$src" >"$build/setup.log" 2>&1 ||
		{ tail -20 "$build/setup.log"; echo "cross-arm64: meson setup failed" >&2; exit 1; }
fi
ninja -C "$build/meson" -j"${KVP_JOBS:-2}" >"$build/ninja.log" 2>&1 ||
	{ grep -E 'error|warning' "$build/ninja.log" | head -40; echo "cross-arm64: build failed" >&2; exit 1; }
if grep -q 'warning:' "$build/ninja.log"; then
	grep 'warning:' "$build/ninja.log" | head -20
	echo "cross-arm64: the cross build warns" >&2
	exit 1
fi

# The unit tests that run under qemu-user: no privileged kernel feature (hugetlb, NUMA
# binding, io_uring, which qemu-user does not emulate), no node oracle, nothing x86.
# The multiplier: qemu runs the kernels' tests some 10-40x slower than the machine.
# Not 'forward' (9 minutes under qemu, most of this pass): the greedy tokens below run
# the whole forward pass on every aarch64 table against the x86 build's.
cross_tests="util geom gguf kernels kvq kvq4 tokenizer bpe chat sample grammar
	models fwd-step gen draft convo threads proto"
# f32 projections over 16 rows: our kernel, not the sgemm-or-ours calibration
# (compute/linear.c), which times 2048 x 2048 x 256 products on each path per process:
# minutes under emulation, and the timing means nothing there.
export KVP_F32_GEMM=${KVP_F32_GEMM:-kvpool}
[ $# -gt 0 ] && cross_tests="$*"
rc=0
meson test -C "$build/meson" --no-rebuild --suite unit --num-processes "${KVP_JOBS:-2}" \
	-t "${KVP_CROSS_TIMEOUT_MULT:-20}" --print-errorlogs $cross_tests || rc=1
[ $# -gt 0 ] && exit $rc

# The tiny model's greedy tokens: the same from the aarch64 build (its best table, each
# other aarch64 table, and the best one on a CPU without dotprod) as from this
# machine's x86-64 build (KVP_X86_BUILD, or one built here).  Each run names the table
# it took (kvpool-run's "kernels NAME"), checked against the one expected: neondot on
# qemu's -cpu max (asimddp), neon on -cpu cortex-a57 (ARMv8.0: no dotprod).
x86=${KVP_X86_BUILD:-$build/x86}
if [ ! -x "$x86/compute/kvpool-run" ]; then
	[ -f "$x86/build.ninja" ] || meson setup -Dtests=false "$x86" "$src" >"$build/x86-setup.log" 2>&1 ||
		{ echo "cross-arm64: x86 meson setup failed" >&2; exit 1; }
	ninja -C "$x86" -j"${KVP_JOBS:-2}" compute/kvpool-run compute/kvpool-mkmodel >/dev/null ||
		{ echo "cross-arm64: x86 build failed" >&2; exit 1; }
fi
tokens() { sed -n 's/.*"tokens":\(\[[0-9,]*\]\).*/\1/p'; }
for pt in tiny:f32 tiny:f16 tiny:q8_0 tiny:q4_0 tinyq:q4_k tinyq:q6_k; do
	type=${pt#*:}
	m=$build/${pt%:*}-$type.gguf
	"$x86/compute/kvpool-mkmodel" -o "$m" --preset "${pt%:*}" --type "$type" >/dev/null
	want=$("$x86/compute/kvpool-run" -m "$m" -p "Hello, world" -n 24 --threads 2 --json 2>/dev/null | tokens)
	# CPU:KVP_ISA:the table expected
	for run in max::neondot max:neon:neon max:scalar:scalar cortex-a57::neon; do
		IFS=: read -r cpu isa table <<<"$run"
		got=$(KVP_ISA=$isa qemu-aarch64-static -cpu "$cpu" -L "$sysroot" \
			"$build/meson/compute/kvpool-run" -m "$m" -p "Hello, world" -n 24 \
			--threads 2 --json 2>"$build/run.err" | tokens)
		took=$(sed -n 's/.*; kernels \([a-z0-9]*\)$/\1/p' "$build/run.err")
		what="${pt%:*} $type -cpu $cpu ${isa:-best}"
		if [ "$took" != "$table" ]; then
			echo "cross-arm64: FAIL $what: kernels '$took', want $table" >&2
			rc=1
		elif [ -z "$want" ] || [ "$got" != "$want" ]; then
			echo "cross-arm64: FAIL $what: aarch64 $got, x86-64 $want" >&2
			rc=1
		else
			echo "cross-arm64: $what ($table): greedy tokens equal to x86-64's"
		fi
	done
done
exit $rc
