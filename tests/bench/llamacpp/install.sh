#!/usr/bin/env bash
# install.sh - install llama.cpp for tests/bench/vs_llamacpp.sh: node-llama-cpp and its
# prebuilt Linux x86-64 CPU libraries (ggml picks a CPU variant at run time), at the
# versions package-lock.json pins, into node_modules here (~85 MB, git-ignored).  Not
# part of tests/deps.sh: only that benchmark needs it.
#
# Nothing is compiled or downloaded besides the npm packages: --ignore-scripts skips
# node-llama-cpp's postinstall (which may fetch and build llama.cpp), --omit=optional
# skips its GPU builds (CUDA, Vulkan: hundreds of MB) and the other platforms'; the
# one package used is a direct dependency here.  The "overrides" in package.json pin
# the platform packages that have no 3.22.1 release (macOS, Windows, riscv64) to
# 3.21.1 so the lock file lists them and `npm ci` accepts it; they are never installed.
#
# Idempotent and quiet when installed; reads no stdin.  Exit 0, or 1 on failure.
set -euo pipefail

dir=$(cd "$(dirname "$0")" && pwd)
stamp=$dir/node_modules/.package-lock.json

if [ -f "$stamp" ] && [ ! "$dir/package-lock.json" -nt "$stamp" ] &&
   [ -d "$dir/node_modules/@node-llama-cpp/linux-x64" ]; then
	exit 0
fi
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
	echo "llamacpp/install.sh: the pinned prebuilt llama.cpp is for Linux x86-64, not $(uname -s)-$(uname -m)" >&2
	exit 1
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
	echo "llamacpp/install.sh: node and npm are needed (bash tests/deps.sh installs them)" >&2
	exit 1
fi
echo "llamacpp: npm ci in tests/bench/llamacpp"
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --prefix "$dir" --omit=optional --ignore-scripts \
	--no-audit --no-fund --loglevel=error </dev/null
# the prebuilt library loads on this CPU (no model); if not, the next call installs again
if ! node "$dir/bench.mjs" --check </dev/null; then
	rm -f "$stamp"
	echo "llamacpp/install.sh: the installed llama.cpp does not load" >&2
	exit 1
fi
