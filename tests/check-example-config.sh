#!/usr/bin/env bash
# check-example-config.sh KVPOOLD EXAMPLE - the shipped example configuration must parse,
# name every key the daemon knows (uncommented), and show exactly the defaults, as its
# header promises: compare `--check-config` of the example with that of an empty file.
set -euo pipefail
kvpoold=$1
example=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$kvpoold" --check-config --config "$example" | grep -v '^;' >"$tmp/example"
"$kvpoold" --check-config --config /dev/null | grep -v '^;' >"$tmp/defaults"
if ! diff -u "$tmp/defaults" "$tmp/example"; then
	echo "FAIL: $example does not show the defaults (diff above: - default, + example)"
	exit 1
fi
missing=0
while IFS= read -r key; do
	if ! grep -Eq "^${key} =" "$example"; then
		echo "FAIL: $example lacks key '$key'"
		missing=1
	fi
done < <(sed -n 's/^\([a-z_]*\) =.*/\1/p' "$tmp/defaults")
[ "$missing" = 0 ] || exit 1
echo "example config: $(grep -c ' =' "$tmp/defaults") keys, all present with their defaults"
