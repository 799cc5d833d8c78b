#!/usr/bin/env bash
# check-doc-refs.sh SRCDIR - every file or folder that README.md and docs/*.md name (in
# `code` spans or as link targets) exists in the repository: a path with a slash
# relative to the top, or to a folder of the tree (`kernels/kernels.h` on the compute
# page), a bare file name somewhere in the tree.  Absolute paths (installed
# locations), build directories (build*/) and URLs are not the repository's, so they
# are skipped.  A reference to notes kept outside the repository fails here.
set -euo pipefail
cd "$1"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	mapfile -t files < <(git ls-files)
else
	mapfile -t files < <(find . -type f -not -path './build*' | sed 's|^\./||')
fi
# Named in the docs but made elsewhere, by design: the demo model's temporary folder
# (made at run time) and the vocabulary file a user writes for kvpool-mkmodel.
not_ours=(demo.tmp/ vocab.json)
declare -A have=() base=()
for f in "${not_ours[@]}"; do
	have[$f]=1
	base[$f]=1
done
for f in "${files[@]}"; do
	have[$f]=1
	base[${f##*/}]=1
	t=$f
	while [[ $t == */* ]]; do # every tail: a path relative to any folder
		t=${t#*/}
		[[ $t == */* ]] && have[$t]=1
	done
	d=$f
	while [[ $d == */* ]]; do
		d=${d%/*}
		have[$d/]=1
		base[${d##*/}/]=1 # a folder named by its own name, e.g. in a table of tests/
	done
done
bad=0
for page in README.md docs/*.md; do
	dir=$(dirname "$page")
	# candidates: tokens with a known extension, or ending in a slash
	while IFS= read -r ref; do
		ref=${ref%%[.,;:)]}
		ref=${ref%%\`}
		case $ref in
			/*|build*|http*|*://*|*'*'*|*'<'*|*'{'*|.*) continue ;;
		esac
		if [[ $ref == *.c/.h ]]; then # "x.c/.h": both
			[[ -n ${base[${ref%/.h}]:-} && -n ${base[${ref%.c/.h}.h]:-} ]] && continue
		elif [[ $ref == */* && $ref != */ || $ref == */*/ ]]; then
			[[ -n ${have[$ref]:-} || -n ${have[$dir/$ref]:-} || -n ${have[include/$ref]:-} ]] &&
				continue
		elif [[ -n ${base[$ref]:-} ]]; then
			continue
		fi
		echo "FAIL: $page names '$ref', which is not in the repository"
		bad=1
	done < <({ grep -oE '`[A-Za-z0-9_][A-Za-z0-9_./-]*`' "$page" | tr -d '`'
		   grep -oE '\b[A-Z][A-Z_]+\.md\b' "$page" # ARCHITECTURE.md and the like, bare
		   grep -oE '\]\([^)#]+' "$page" | sed 's/^](//'; } |
		grep -E '(\.(md|c|h|sh|in|example|json|prom|mjs|map|txt)|/)$' | sort -u)
done
[ "$bad" = 0 ] || exit 1
echo "doc references: every file and folder named in README.md and docs/ exists"
