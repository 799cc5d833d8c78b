#!/usr/bin/env bash
# check-format.sh SRCDIR [CLANG_FORMAT] - every tracked .c/.h file is formatted as
# .clang-format says (the code as written: docs/architecture.md, Conventions), checked
# with clang-format-14 (the version in Debian 12; other versions format differently).
# A file that differs is named with the first lines of its diff; `clang-format-14 -i
# FILE` fixes it.  Exit status: 0 clean, 1 a file differs, 77 no clang-format-14 (skip).
set -euo pipefail
src=$1
cf=${2:-clang-format-14}
cd "$src"

# Known exceptions (none now): a file listed here is not checked; an entry that is
# already formatted is an error, so the list can only shrink.
KNOWN_UNFORMATTED=(
)

if ! command -v "$cf" >/dev/null 2>&1; then
	echo "check-format: $cf not found (bash tests/deps.sh installs it); skipped"
	exit 77
fi
if ! "$cf" --version | grep -q 'version 14\.'; then
	echo "check-format: $cf is not clang-format 14: $("$cf" --version)"
	exit 1
fi

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	mapfile -t files < <(git ls-files '*.c' '*.h')
else	# a tarball: every source below the top, build directories left out
	mapfile -t files < <(find . -name '*.[ch]' -not -path './build*' -not -path '*/node_modules/*' | sed 's|^\./||' | sort)
fi

declare -A known=() tracked=()
for f in "${KNOWN_UNFORMATTED[@]}"; do
	known[$f]=1
done
for f in "${files[@]}"; do
	tracked[$f]=1
done

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

bad=0
for f in "${KNOWN_UNFORMATTED[@]}"; do
	if [ -z "${tracked[$f]:-}" ]; then
		echo "check-format: $f is gone: remove it from KNOWN_UNFORMATTED"
		bad=1
	fi
done
# One clang-format process for every file (--dry-run names each that differs): one
# process per file took over a minute on a loaded 2-CPU machine, near the test's timeout.
present=()
for f in "${files[@]}"; do
	[ -f "$f" ] && present+=("$f")	# deleted in the working tree, not yet in the index
done
checked=${#present[@]}
declare -A differs=()
batch_ok=1
if [ "$checked" -gt 0 ]; then
	if "$cf" --style=file --dry-run --Werror --ferror-limit=1 "${present[@]}" \
		>/dev/null 2>"$tmp"; then
		:
	else
		while IFS= read -r f; do
			differs[$f]=1
		done < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' \
			"$tmp" | sort -u)
		# failed for another reason (a file it cannot read): compare every file below
		[ ${#differs[@]} -eq 0 ] && batch_ok=0
	fi
fi
for f in "${present[@]}"; do
	if [ $batch_ok -eq 1 ] && [ -z "${differs[$f]:-}" ]; then
		if [ -n "${known[$f]:-}" ]; then
			echo "check-format: $f is formatted now: remove it from KNOWN_UNFORMATTED"
			bad=1
		fi
		continue
	fi
	"$cf" --style=file "$f" >"$tmp"
	if cmp -s "$f" "$tmp"; then
		if [ -n "${known[$f]:-}" ]; then
			echo "check-format: $f is formatted now: remove it from KNOWN_UNFORMATTED"
			bad=1
		fi
		continue
	fi
	[ -n "${known[$f]:-}" ] && continue
	echo "check-format: $f differs from $cf --style=file:"
	diff -u "$f" "$tmp" | head -20 || true
	bad=1
done
echo "check-format: $checked files checked, ${#KNOWN_UNFORMATTED[@]} known exceptions"
exit $bad
