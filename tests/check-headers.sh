#!/usr/bin/env bash
# check-headers.sh - every project header compiles alone (docs/architecture.md).
#
# Usage: check-headers.sh SRCDIR CC [CFLAGS...]
#        check-headers.sh --selftest SRCDIR CC [CFLAGS...]
# CC is the compiler command as one argument, split at spaces ("ccache cc" when meson
# runs the compiler through ccache).
#
# Each header under util/ shm/ compute/ ipc/ svc/ include/ tests/lib/ tests/unit/
# tests/integration/ tests/bench/ is compiled as its own translation unit (#include "it"
# twice, so a missing include guard fails too) with the project's flags.  The installed
# headers (include/kvpool/) are also compiled as a client would: strict C11 with
# -pedantic-errors and only -Iinclude, so they can reach neither a private header nor a
# GNU extension.
#
# The headers are found at run time, so a header added later is checked without anyone
# editing a list.  Every failing header is reported, with the compiler's first lines.
#
# --selftest proves the check can fail: it runs the same compile on a header that uses
# uint32_t without <stdint.h> and on one without a guard, and fails unless both are
# rejected (and a correct header accepted).
set -u

selftest=0
if [ "${1:-}" = --selftest ]; then
	selftest=1
	shift
fi
if [ $# -lt 2 ]; then
	echo "usage: $0 [--selftest] SRCDIR CC [CFLAGS...]" >&2
	exit 2
fi
src=$1
read -ra cc <<<"$2"
shift 2
cflags=("$@")

work=$(mktemp -d "${TMPDIR:-/tmp}/kvp-headers.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

# compile_alone HEADER(absolute) [extra args...]: 0 when it compiles alone, else the
# compiler's output is left in $work/err
compile_alone() {
	local h=$1
	shift
	printf '#include "%s"\n#include "%s"\n' "$h" "$h" > "$work/tu.c"
	"${cc[@]}" "$@" -fsyntax-only -x c "$work/tu.c" > "$work/err" 2>&1
}

project_args=("${cflags[@]}" -I "$src" -I "$src/include")
client_args=(-std=c11 -pedantic-errors -Wall -Wextra -Werror -I "$src/include")

if [ $selftest = 1 ]; then
	mkdir -p "$work/t"
	printf '#ifndef T_OK_H\n#define T_OK_H\n#include <stdint.h>\nstruct t_ok { uint32_t x; };\n#endif\n' \
		> "$work/t/ok.h"
	printf '#ifndef T_NOINC_H\n#define T_NOINC_H\nstruct t_noinc { uint32_t x; };\n#endif\n' \
		> "$work/t/noinc.h"
	printf '#include <stdint.h>\nstruct t_noguard { uint32_t x; };\n' > "$work/t/noguard.h"
	fail=0
	compile_alone "$work/t/ok.h" "${project_args[@]}" ||
		{ echo "selftest: a correct header was rejected:"; cat "$work/err"; fail=1; }
	compile_alone "$work/t/noinc.h" "${project_args[@]}" &&
		{ echo "selftest: a header missing <stdint.h> was accepted"; fail=1; }
	compile_alone "$work/t/noguard.h" "${project_args[@]}" &&
		{ echo "selftest: a header without an include guard was accepted"; fail=1; }
	[ $fail = 0 ] && echo "selftest: the header check rejects a missing include and a missing guard"
	exit $fail
fi

n=0
bad=0
for dir in util shm compute ipc svc include tests/lib tests/unit tests/integration tests/bench; do
	[ -d "$src/$dir" ] || continue
	while IFS= read -r h; do
		rel=${h#"$src"/}
		n=$((n + 1))
		if ! compile_alone "$h" "${project_args[@]}"; then
			echo "FAIL $rel does not compile alone:"
			head -n 8 "$work/err" | sed 's/^/    /'
			bad=$((bad + 1))
			continue
		fi
		case $rel in
		include/*)
			if ! compile_alone "$h" "${client_args[@]}"; then
				echo "FAIL $rel (installed) does not compile alone as strict C11 with only -Iinclude:"
				head -n 8 "$work/err" | sed 's/^/    /'
				bad=$((bad + 1))
			fi
			;;
		esac
	done < <(find "$src/$dir" -name node_modules -prune -o -name '*.h' -type f -print | LC_ALL=C sort)
done

if [ $n = 0 ]; then
	echo "no headers found under $src" >&2
	exit 1
fi
echo "$((n - bad)) of $n headers compile alone"
[ $bad = 0 ]
