#!/usr/bin/env bash
# deps.sh - install what kvpool needs to build and test, from Debian 12's packages.
# Run as root (apt-get).  Quiet when everything is already there.
set -euo pipefail

pkgs=(gcc pkg-config meson ninja-build git
      liburing-dev libhwloc-dev libopenblas-dev libxxhash-dev libcmocka-dev libinih-dev
      libpcre2-dev libjansson-dev libmicrohttpd-dev clang-format-14 fio e2fsprogs)

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
if [ ! -f "$node_dir/node_modules/.package-lock.json" ] ||
   [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules/.package-lock.json" ]; then
	echo "deps: npm ci in tests/node"
	npm ci --prefix "$node_dir" --no-audit --no-fund --loglevel=error </dev/null
fi
