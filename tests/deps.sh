#!/usr/bin/env bash
# deps.sh - install what kvpool needs to build and test, from Debian 12's packages.
# Run as root (apt-get).  Quiet when everything is already there.
set -euo pipefail

pkgs=(gcc pkg-config meson ninja-build git
      liburing-dev libhwloc-dev libopenblas-dev libxxhash-dev libcmocka-dev libinih-dev
      libpcre2-dev libjansson-dev libmicrohttpd-dev clang-format-14 fio e2fsprogs
      prometheus systemd)	# promtool checks the metrics; systemd-analyze the unit

# The remote tier: hiredis to build, Redis 7.0 (redis-server, redis-benchmark) for its
# tests and benchmark, which start their own server in a temporary directory; haproxy to
# check the routing example's configuration (haproxy -c).
pkgs+=(libhiredis-dev redis-server redis-tools haproxy)

# The tokenizer and chat-template oracles run on Node (the base image has it; Debian's
# nodejs/npm otherwise).
command -v node >/dev/null && command -v npm >/dev/null || pkgs+=(nodejs npm)

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
fi

# npm packages of the oracle tests and of kvpool-http's SDK tests (openai,
# @anthropic-ai/sdk); tests/node/package-lock.json pins them
node_dir=$(cd "$(dirname "$0")" && pwd)/node
# (npm ls fails when any pinned package is missing or at another version)
if ! npm ls --prefix "$node_dir" --all >/dev/null 2>&1; then
	echo "deps: npm ci in tests/node"
	npm ci --prefix "$node_dir" --no-audit --no-fund --loglevel=error </dev/null
fi
