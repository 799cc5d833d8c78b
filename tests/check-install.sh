#!/usr/bin/env bash
# check-install.sh MESON BUILDDIR PREFIX UNITDIR SYSUSERSDIR SYSCONFDIR CC - `meson install`
# into a DESTDIR puts everything where the prefix (or systemd's pkg-config variables
# below it) says: the programs (each answering --version), the unit (ExecStart pointing
# at the installed kvpoold), the sysusers entry, the example configuration, the headers
# (which compile as C11 and stop C99 with an #error naming C11) and kvpool.pc.
set -euo pipefail
meson=$1 build=$2 prefix=$3 unitdir=$4 sysusersdir=$5 sysconfdir=$6
read -ra cc <<<"$7" # the compiler command, split at spaces ("ccache cc" through ccache)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

DESTDIR= "$meson" install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" \
	>"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "meson install"; }
root=$tmp/root
case $sysconfdir in /*) ;; *) sysconfdir=$prefix/$sysconfdir ;; esac

for p in sbin/kvpoold sbin/kvpool-http bin/kvpool bin/kvpool-run bin/kvpool-mkmodel; do
	[ -x "$root$prefix/$p" ] || fail "$prefix/$p not installed"
	LD_LIBRARY_PATH="$root$prefix/lib:$root$prefix/lib/x86_64-linux-gnu" \
		"$root$prefix/$p" --version | grep -Eq '^kvpool[a-z-]* [0-9]' ||
		fail "$p --version"
done
unit=$root$unitdir/kvpoold.service
[ -f "$unit" ] || fail "unit not in $unitdir"
grep -qx "ExecStart=$prefix/sbin/kvpoold" "$unit" || fail "ExecStart of $unit"
[ -f "$root$sysusersdir/kvpool.conf" ] || fail "sysusers entry not in $sysusersdir"
grep -q '^u kvpool ' "$root$sysusersdir/kvpool.conf" || fail "sysusers entry content"
[ -f "$root$sysconfdir/kvpool/kvpoold.conf.example" ] || fail "example config not in $sysconfdir/kvpool"
[ -f "$root$prefix/share/doc/kvpool/kvpoold.conf.example" ] || fail "example config not in the docs"
pc=$(find "$root$prefix" -name kvpool.pc | head -1)
[ -n "$pc" ] || fail "kvpool.pc not installed"
inc=$root$prefix/include
printf '#include <kvpool/kvpool.h>\nint main(void) { return 0; }\n' >"$tmp/use.c"
"${cc[@]}" -std=c11 -Wall -Werror -I"$inc" -c "$tmp/use.c" -o "$tmp/use.o" || fail "headers with -std=c11"
if "${cc[@]}" -std=c99 -I"$inc" -c "$tmp/use.c" -o "$tmp/use.o" 2>"$tmp/c99.log"; then
	fail "headers compiled with -std=c99"
fi
grep -q 'need C11' "$tmp/c99.log" || fail "no C11 message for -std=c99"
# with any prefix, nothing lands outside it (unless an option said otherwise)
outside=$(cd "$root" && find . -type f | sed 's|^\.||' | grep -v "^$prefix/" || true)
if [ -n "$outside" ] && [[ $unitdir == $prefix/* ]] && [[ $sysusersdir == $prefix/* ]] &&
	[[ $sysconfdir == $prefix/* ]]; then
	fail "installed outside $prefix: $outside"
fi
echo "install into DESTDIR: programs, unit ($unitdir), sysusers ($sysusersdir), example config, headers, kvpool.pc"
