#!/usr/bin/env bash
# check-unit-security.sh UNIT [SYSTEMD_ANALYZE] - the built kvpoold.service stays at an
# exposure level of 1.0 or less by `systemd-analyze security --offline=yes` (no running
# systemd needed).  Exit 77 (skip) only when systemd-analyze is absent or too old to
# judge a unit file offline (systemd < 250); tests/deps.sh installs Debian 12's.
set -euo pipefail
unit=$1
sa=${2:-systemd-analyze}
if ! command -v "$sa" >/dev/null 2>&1; then
	echo "unit-security: $sa not found (bash tests/deps.sh installs systemd); skipped"
	exit 77
fi
if ! "$sa" security --help 2>/dev/null | grep -q -- '--offline'; then
	echo "unit-security: $sa cannot judge unit files offline (systemd < 250); skipped"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$unit" "$tmp/kvpoold.service"
set +e
"$sa" security --offline=yes --threshold=10 --no-pager "$tmp/kvpoold.service" >"$tmp/out" 2>&1
rc=$?
set -e
grep -a 'Overall exposure level' "$tmp/out" || { cat "$tmp/out"; exit 1; }
if [ $rc -ne 0 ]; then
	grep -a '✗' "$tmp/out" || true
	echo "FAIL: exposure above 1.0 (the lines marked above add to it)"
	exit 1
fi
