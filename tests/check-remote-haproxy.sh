#!/usr/bin/env bash
# check-remote-haproxy.sh SRCDIR - the routing example of docs/remote.md is a
# configuration HAProxy accepts (haproxy -c).  Exit 77 (skip) without haproxy.
set -euo pipefail
if ! command -v haproxy >/dev/null 2>&1; then
	echo "check-remote-haproxy: haproxy not found (bash tests/deps.sh installs it); skipped"
	exit 77
fi
haproxy -c -f "$1/docs/examples/haproxy-kvpool.cfg"
