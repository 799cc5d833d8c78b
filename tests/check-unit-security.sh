#!/usr/bin/env bash
# check-unit-security.sh UNIT [SYSTEMD_ANALYZE] - the built kvpoold.service stays at an
# exposure level of 1.0 or less by `systemd-analyze security --offline=yes` (no running
# systemd needed).  Exit 77 (skip) only when systemd-analyze is absent or too old to
# judge a unit file offline (systemd < 250); tests/deps.sh installs Debian 12's.
#
# First, the sockets' groups (docs/daemon.md, "Status socket"): the status socket belongs
# to the operators' group kvpool-status, which the unit gives the daemon
# (SupplementaryGroups=) and the sysusers entry beside the unit creates; no client's
# group is it, and kvpool-http (a client) is not made a member of it.
set -euo pipefail
unit=$1
sa=${2:-systemd-analyze}
dir=$(dirname "$unit")
fail() {
	echo "FAIL: $*"
	exit 1
}
grep -q '^SupplementaryGroups=kvpool-status$' "$unit" ||
	fail "$unit: no SupplementaryGroups=kvpool-status (the status socket's group)"
grep -Eq '^Group=kvpool-status' "$unit" && fail "$unit: the daemon's own group is kvpool-status"
if [ -f "$dir/kvpool.conf" ]; then
	grep -q '^g kvpool-status ' "$dir/kvpool.conf" ||
		fail "$dir/kvpool.conf: does not create the group kvpool-status"
	grep -Eq '^m [^ ]+ kvpool-status' "$dir/kvpool.conf" &&
		fail "$dir/kvpool.conf: makes a member of kvpool-status"
fi
if [ -f "$dir/kvpool-http.conf" ]; then
	grep -Eq '^m [^ ]+ kvpool-status' "$dir/kvpool-http.conf" &&
		fail "$dir/kvpool-http.conf: a client (kvpool-http) in the operators' group"
fi
echo "unit-security: the status socket's group is kvpool-status, no client's"
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
