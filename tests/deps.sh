#!/usr/bin/env bash
# deps.sh - install what kvpool needs to build and test, from Debian 12's packages.
# Run as root (apt-get).  Quiet when everything is already there.
set -euo pipefail

pkgs=(gcc pkg-config meson ninja-build git
      liburing-dev libhwloc-dev libopenblas-dev libxxhash-dev libcmocka-dev libinih-dev
      fio e2fsprogs)

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
