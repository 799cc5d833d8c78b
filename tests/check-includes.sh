#!/usr/bin/env bash
# check-includes.sh - the include arrows of docs/architecture.md hold: every project
# #include "dir/..." in a folder names only a folder that folder may use.
#
# Usage: check-includes.sh SRCDIR
#        check-includes.sh --selftest
#
#	util/        util/ only (it uses nothing of kvpool's own)
#	include/     kvpool/ only (the installed headers)
#	shm/         shm/ util/ kvpool/
#	compute/     compute/ util/ kvpool/ and shm/geom.h (the block geometry)
#	ipc/         ipc/ shm/ util/ kvpool/ (ipc/http and ipc/client too: never svc/), and
#	             compute/grammar.h (kvpool-http compiles a schema on arrival, so a
#	             refusal is a 400 before any frame is sent; grammar.c uses util/ only)
#	svc/engine/  svc/engine/ shm/ compute/ util/ kvpool/ (the engine library: no svc/,
#	             no ipc/)
#	svc/         anything, except: svc/domcfg.[ch] never svc/config.h (config.h includes
#	             domcfg.h; domcfg.c takes the [cache] keys from svc/cachecfg.h)
#
# Every .c, .h and .inc file under those folders is read, so a file added later is
# checked without anyone editing a list.  Every offending line is reported.
# --selftest proves the check can fail: a tree with ipc/ including svc/, svc/engine/
# including ipc/ and svc/domcfg.c including svc/config.h must be rejected, and a tree
# obeying the rules accepted.
set -u

# allowed DIR: the prefixes (folder/ or exact header path) a file under DIR may include
allowed() {
	case $1 in
	util) echo "util/" ;;
	include) echo "kvpool/" ;;
	shm) echo "shm/ util/ kvpool/" ;;
	compute) echo "compute/ util/ kvpool/ shm/geom.h" ;;
	ipc) echo "ipc/ shm/ util/ kvpool/ compute/grammar.h" ;;
	svc/engine) echo "svc/engine/ shm/ compute/ util/ kvpool/" ;;
	esac
}

# check SRCDIR: 0 when every arrow holds, else each offending line printed
check() {
	local src=$1 bad=0 n=0 dir f line inc ok a
	for dir in util include shm compute ipc svc/engine; do
		[ -d "$src/$dir" ] || continue
		while IFS= read -r f; do
			n=$((n + 1))
			while IFS= read -r line; do
				inc=${line#*\"}
				inc=${inc%%\"*}
				case $inc in
				*/*) ;;
				*) continue ;; # same folder ("avx2.inc")
				esac
				ok=0
				for a in $(allowed "$dir"); do
					case $a in
					*/) [[ $inc == "$a"* ]] && ok=1 ;;
					*) [[ $inc == "$a" ]] && ok=1 ;;
					esac
				done
				if [ $ok = 0 ]; then
					echo "FAIL ${f#"$src"/}: #include \"$inc\" (a $dir/ file may use: $(allowed "$dir"))"
					bad=$((bad + 1))
				fi
			done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f")
		done < <(find "$src/$dir" -name node_modules -prune -o -type f \
			\( -name '*.c' -o -name '*.h' -o -name '*.inc' \) -print | LC_ALL=C sort)
	done
	# one-way pairs inside a folder: FILE never includes HEADER
	for pair in "svc/domcfg.c svc/config.h" "svc/domcfg.h svc/config.h"; do
		set -- $pair
		[ -f "$src/$1" ] || continue
		if grep -Eq "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"$2\"" "$src/$1"; then
			echo "FAIL $1: #include \"$2\" (config.h includes domcfg.h: one way only)"
			bad=$((bad + 1))
		fi
	done
	if [ $n = 0 ]; then
		echo "no sources found under $src" >&2
		return 1
	fi
	[ $bad = 0 ] && echo "the include arrows hold in $n files"
	[ $bad = 0 ]
}

if [ "${1:-}" = --selftest ]; then
	work=$(mktemp -d "${TMPDIR:-/tmp}/kvp-includes.XXXXXX") || exit 1
	trap 'rm -rf "$work"' EXIT
	mkdir -p "$work/good/ipc/http" "$work/good/svc/engine" "$work/bad/ipc/http" \
		"$work/bad/svc/engine"
	printf '#include <stdio.h>\n#include "util/log.h"\n#include "ipc/conn.h"\n' \
		> "$work/good/ipc/http/a.c"
	printf '#include "compute/model.h"\n#include "svc/engine/engine.h"\n' \
		> "$work/good/svc/engine/b.c"
	printf '#include "svc/log.h"\n' > "$work/bad/ipc/http/a.c"
	printf '#include "ipc/server.h"\n' > "$work/bad/svc/engine/b.c"
	printf '#include "svc/config.h"\n' > "$work/bad/svc/domcfg.c"
	fail=0
	check "$work/good" > "$work/out" ||
		{ echo "selftest: a tree obeying the arrows was rejected:"; cat "$work/out"; fail=1; }
	check "$work/bad" > "$work/out"
	if [ "$(grep -c '^FAIL' "$work/out")" != 3 ]; then
		echo "selftest: the three forbidden includes were not all rejected:"
		cat "$work/out"
		fail=1
	fi
	[ $fail = 0 ] && echo "selftest: the include check rejects ipc/ -> svc/, svc/engine/ -> ipc/, domcfg -> config"
	exit $fail
fi

if [ $# -ne 1 ]; then
	echo "usage: $0 [--selftest] SRCDIR" >&2
	exit 2
fi
check "$1"
