#!/usr/bin/env bash
# demo.sh - README command 1: build kvpool, start kvpoold on the built-in demo model,
# send a long prompt, then a second one sharing most of it, and show both usages and
# how much sooner the second one's first token came (its prefix came from the cache).
#
# Fresh Debian 12, as root: installs the packages it needs (tests/deps.sh), builds into
# build-demo/, keeps the generated demo model in build-demo/state/ (made once, ~420 MB,
# reused by later runs), runs the daemon in the foreground on temporary sockets, and
# stops it with SIGTERM at the end.  Nothing is installed system-wide besides packages.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "installing build dependencies (Debian packages)"
bash tests/deps.sh

say "building (meson + ninja into build-demo/)"
if [ -d build-demo ]; then
	meson setup --reconfigure build-demo >/dev/null
else
	meson setup build-demo >/dev/null
fi
ninja -C build-demo svc/kvpoold ipc/kvpool

run=$(mktemp -d /tmp/kvpool-demo.XXXXXX)
state="$PWD/build-demo/state"
mkdir -p "$state"
sock="$run/kvpool.sock"
status="$run/status.sock"
log="$run/kvpoold.log"
kvpool=(build-demo/ipc/kvpool --socket "$sock" --status-socket "$status")
pid=

cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$run"
}
trap cleanup EXIT

say "starting kvpoold (foreground, temporary sockets in $run)"
# --config /dev/null: the demo ignores any /etc/kvpool/kvpoold.conf on this machine
build-demo/svc/kvpoold --foreground --config /dev/null --socket "$sock" \
	--status-socket "$status" --state-dir "$state" --pool-size 1G >"$log" 2>&1 &
pid=$!
tail -n +1 -f "$log" --pid "$pid" | sed -u 's/^/    kvpoold| /' &
tailer=$!
for _ in $(seq 1 600); do
	if "${kvpool[@]}" status >/dev/null 2>&1; then
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		wait "$pid" || true
		echo "kvpoold exited before it was ready; its log is above" >&2
		exit 1
	fi
	sleep 0.5
done
"${kvpool[@]}" status >/dev/null

# A long prompt: the demo model's vocabulary is byte-level, so ~1 token per byte.
base="kvpool keeps the keys and values of every prompt it has seen in a shared pool of \
blocks. A later request that starts with the same tokens reads those blocks instead of \
computing them again, so only the part that differs costs time. "
prompt1=""
for i in $(seq 1 4); do
	prompt1+="$base(Paragraph $i of the system prompt.) "
done
prompt2="$prompt1 Question: what does the cache remember?"
prompt1+=" Question: how long does the first token take?"

field() { # field NAME JSON -> the number after "NAME":
	sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" <<<"$2"
}
show() { # show TITLE JSON
	local j=$2
	printf '%s\n' "$1"
	# random synthetic weights over a byte vocabulary: its text is noise by design, so
	# the ids are shown rather than the bytes
	printf '    generated token ids: %s\n' \
		"$(sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p' <<<"$j" | tr ',' ' ')"
	printf '    (the demo model is synthetic: seeded random weights, so its tokens are noise;\n'
	printf '     what matters here is the usage below)\n' 
	for f in prompt_tokens cached_tokens cache_creation_tokens recomputed_tokens \
		generated_tokens queue_ms ttft_ms prefill_ms decode_ms; do
		printf '    %-22s %s\n' "$f" "$(field "$f" "$j")"
	done
}

# gen TITLE PROMPT OUTVAR: one request, with a progress line while it computes (a cold
# prefill of the demo model takes seconds on a small machine)
gen() {
	local out="$run/gen.json" t0=$SECONDS bg
	"${kvpool[@]}" generate -p "$2" -n 24 --json >"$out" &
	bg=$!
	while kill -0 "$bg" 2>/dev/null; do
		# a terminal gets one line rewritten; a log a line every 2 s
		if [ -t 1 ]; then
			printf '\r    %s: computing, %d s so far...' "$1" $((SECONDS - t0))
		elif (((SECONDS - t0) % 2 == 1)); then
			printf '    %s: computing, %d s so far...\n' "$1" $((SECONDS - t0))
		fi
		sleep 1
	done
	[ -t 1 ] && printf '\r'
	printf '    %s: done in %d s.                \n' "$1" $((SECONDS - t0))
	wait "$bg"
	printf -v "$3" '%s' "$(cat "$out")"
}

sleep 0.2
say "request 1: a ${#prompt1}-byte prompt, nothing cached yet"
gen "request 1" "$prompt1" j1
show "usage of request 1:" "$j1"

say "request 2: shares all but its last sentence with request 1"
gen "request 2" "$prompt2" j2
show "usage of request 2:" "$j2"

t1=$(field ttft_ms "$j1")
t2=$(field ttft_ms "$j2")
c2=$(field cached_tokens "$j2")
p2=$(field prompt_tokens "$j2")
say "result"
awk -v t1="$t1" -v t2="$t2" -v c="$c2" -v p="$p2" 'BEGIN {
	printf "    request 2 read %d of its %d prompt tokens from the cache (%.1f%%);\n", c, p, 100 * c / p
	printf "    time to first token: %.1f ms -> %.1f ms (%.1fx sooner)\n", t1, t2, t1 / t2
}'
st=$("${kvpool[@]}" status --json)
awk -v kind="$(sed -n 's/.*"page_kind":"\([^"]*\)".*/\1/p' <<<"$st")" \
	-v cached="$(field blocks_cached "$st")" -v rate="$(field token_hit_rate "$st")" 'BEGIN {
	printf "    pool: page kind %s, %d blocks cached; prefix hit rate %.1f%% of prompt tokens\n",
		kind, cached, 100 * rate
}'
say "kvpool status (the summary an operator sees)"
"${kvpool[@]}" status | sed 's/^/    /' 

say "stopping kvpoold (SIGTERM)"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
wait "$tailer" 2>/dev/null || true
echo "kvpoold exited with status $rc"
exit "$rc"
