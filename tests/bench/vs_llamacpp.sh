#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# vs_llamacpp.sh - kvpool's engine against llama.cpp on the same GGUF files: same
# thread count, same token ids, same prompt length and step count; prefill and decode
# tokens/s of each and the ratio kvpool / llama.cpp.  Medians of R rounds; each round
# runs kvpool and then llama.cpp (A B A B ...), so noise on this shared machine hits
# both.  Printed with the figures: the CPU model, the 1-minute load average and the CPU
# regime (kvp-cpu-regime) before and after, kvpool's kernel table (KVP_ISA= forces
# one) and the llama.cpp CPU variant ggml picked for this CPU.  Both engines' first K
# greedy ids after the same prompt are compared and the agreement reported (not
# asserted: synthetic weights have near ties that rounding order decides).
#
#   tests/bench/vs_llamacpp.sh [options] [FILE.gguf ...]
#
# Refuses (exit 77, "skipped") when the 1-minute load average is above --max-load
# (default 1.0): on 2 vCPUs shared with other work, two-thread figures measure the
# other work, and llama.cpp's spinning thread pool suffers far more than kvpool's
# (measured at load 22: 0.26 decode tok/s, 1/25 of kvpool's).  --force runs anyway.
#
# Without files: kvpool-mkmodel writes preset KVP_BENCH_PRESET (default 1b) in each
# type of KVP_BENCH_TYPES (comma-separated, default q4_k_m,q8_0,q4_0,f16), one at a
# time, into a temporary directory (or --dir, where they are kept and reused).
#
# What each side measures (token ids, no BOS: position i holds (i + 1) mod n_vocab):
#   prefill  P ids from an empty context in batches of B tokens.  kvpool: kvpool-run
#            --tokens P ids -n 1 --chunk B, its prefill_tok_s (the chunks and the last
#            position's logits).  llama.cpp: bench.mjs, P ids evaluated without
#            generating, n_batch = n_ubatch = B.
#   decode   N greedy single-token steps after a D-id prompt and its first token.
#            kvpool: kvpool-run --tokens D ids -n N+1 --ignore-eos, its decode_tok_s
#            (N forward steps and their greedy picks).  llama.cpp: bench.mjs, N
#            evaluate-and-pick steps.
# The llama.cpp figure in the ratio is llama.cpp's own timer (llama_perf_context, the
# C side only); bench.mjs's wall clock around the node binding is printed beside it.
# kvpool-run starts a process per figure (the model opened each time, not timed); the
# llama.cpp process runs one untimed warm-up first.  K/V: f16 on both sides (llama.cpp's
# default cache type; --kv-type changes kvpool's).
#
# Needs llama.cpp installed: bash tests/bench/llamacpp/install.sh.  Without it, or on a
# busy machine, the script exits 77 (meson: skipped).  Exit 0, 1 on a failure, 2 on a
# usage error.
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
lcpp=$src/tests/bench/llamacpp
build=${KVP_BUILD_DIR:-$src/build}
threads=2
prompt=512
gen=128
runs=5
batch=512
dprompt=16
weights=map
kv=f16
dir=""
json=0
agree=16
max_load=${KVP_BENCH_MAX_LOAD:-1.0}
force=0

usage() {
	cat <<EOF
usage: tests/bench/vs_llamacpp.sh [options] [FILE.gguf ...]
  -B, --build DIR      kvpool build directory (default: \$KVP_BUILD_DIR or $src/build)
  -t, --threads T      threads on both sides (default 2)
  -p, --prompt P       prefill length in token ids (default 512)
  -n, --gen N          decode steps timed (default 128)
  -r, --runs R         rounds; medians are printed (default 5)
  -b, --batch B        prefill batch: kvpool --chunk, llama.cpp n_batch/n_ubatch (default 512)
  -d, --decode-prompt D  ids before the decode steps (default 16)
  -w, --weights W      kvpool's weights: map, copy or both (default map)
      --kv-type T      kvpool's K/V type: f16 (default, as llama.cpp's cache), f32, bf16
      --dir DIR        write the synthetic files here and keep them (reused if present)
  -k, --agree K        greedy ids compared between the engines (default 16, at most N+1)
      --max-load L     refuse when the 1-minute load average is above L (default
                       \$KVP_BENCH_MAX_LOAD or 1.0)
      --force          run even when the machine is busy
      --json           print one JSON object per file and phase instead of the table
  -h, --help           this text
Without files: preset \${KVP_BENCH_PRESET:-1b} in types \${KVP_BENCH_TYPES:-q4_k_m,q8_0,q4_0,f16}.
Needs llama.cpp: bash tests/bench/llamacpp/install.sh (exit 77 without it).
Exit 0, 1 on a failure, 2 on a usage error, 77 when skipped (not installed, busy).
EOF
}

die_usage() {
	echo "vs_llamacpp.sh: $1" >&2
	exit 2
}

int_opt() { # NAME VALUE MIN MAX
	[[ $2 =~ ^[0-9]+$ ]] && (($2 >= $3 && $2 <= $4)) ||
		die_usage "$1: want an integer in [$3, $4], got '$2'"
}

files=()
while (($#)); do
	case $1 in
	-h | --help) usage; exit 0 ;;
	-B | --build) build=${2:?}; shift ;;
	-t | --threads) int_opt "$1" "${2-}" 1 256; threads=$2; shift ;;
	-p | --prompt) int_opt "$1" "${2-}" 1 4096; prompt=$2; shift ;;
	-n | --gen) int_opt "$1" "${2-}" 1 65536; gen=$2; shift ;;
	-r | --runs) int_opt "$1" "${2-}" 1 1000; runs=$2; shift ;;
	-b | --batch) int_opt "$1" "${2-}" 1 4096; batch=$2; shift ;;
	-d | --decode-prompt) int_opt "$1" "${2-}" 2 4096; dprompt=$2; shift ;;
	-w | --weights)
		case ${2-} in
		map | copy) weights=$2 ;;
		both) weights="map copy" ;;
		*) die_usage "$1: want map, copy or both, got '${2-}'" ;;
		esac
		shift ;;
	--kv-type)
		case ${2-} in f16 | f32 | bf16) kv=$2 ;; *) die_usage "--kv-type: want f16, f32 or bf16, got '${2-}'" ;; esac
		shift ;;
	--dir) dir=${2:?}; shift ;;
	-k | --agree) int_opt "$1" "${2-}" 1 65537; agree=$2; shift ;;
	--max-load)
		[[ ${2-} =~ ^[0-9]+(\.[0-9]+)?$ ]] || die_usage "--max-load: want a number, got '${2-}'"
		max_load=$2; shift ;;
	--force) force=1 ;;
	--json) json=1 ;;
	--) shift; files+=("$@"); break ;;
	-*) die_usage "unknown option '$1' (--help lists them)" ;;
	*) files+=("$1") ;;
	esac
	shift
done

if [ ! -f "$lcpp/node_modules/node-llama-cpp/package.json" ] ||
   [ ! -d "$lcpp/node_modules/@node-llama-cpp/linux-x64" ]; then
	echo "vs-llamacpp: skipped: llama.cpp is not installed (bash tests/bench/llamacpp/install.sh)" >&2
	exit 77
fi
run_bin=$build/compute/kvpool-run
mk_bin=$build/compute/kvpool-mkmodel
regime_bin=$build/tests/bench/kvp-cpu-regime
for b in "$run_bin" "$mk_bin"; do
	[ -x "$b" ] || { echo "vs_llamacpp.sh: $b not built (ninja -C $build)" >&2; exit 1; }
done
for f in "${files[@]}"; do
	[ -r "$f" ] || { echo "vs_llamacpp.sh: cannot read '$f'" >&2; exit 1; }
done

load1() { cut -d' ' -f1 /proc/loadavg; }
load_before=$(load1)
if awk -v l="$load_before" -v m="$max_load" 'BEGIN { exit !(l > m) }'; then
	if ((!force)); then
		echo "vs-llamacpp: skipped: the machine is busy: 1-minute load average $load_before >" \
			"$max_load (--max-load); two-thread figures would measure the other work." \
			"Rerun when idle, or pass --force to measure anyway." >&2
		exit 77
	fi
	echo "# WARNING: 1-minute load average $load_before > $max_load: --force given, the figures include other work" >&2
fi

cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
cpu_fm=$(awk -F': ' '/^cpu family/ { f = $2 } /^model[[:space:]]*:/ { m = $2 } END { print "family " f ", model " m }' /proc/cpuinfo)
cpu_line="${cpu_model:-unknown CPU} ($cpu_fm), $(nproc) online CPUs"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvp-vs-llamacpp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
records=$tmp/records.jsonl
context=$tmp/context.txt
: >"$records"
: >"$context"

regime() {
	if [ -x "$regime_bin" ]; then
		echo "$("$regime_bin" 300) [$1; load average $(load1)]"
	else
		echo "cpu regime: not measured ($regime_bin not built) [$1; load average $(load1)]"
	fi
}

# ids "0..n-1" -> "1,2,...": position i holds (i + 1) mod n_vocab
ids() { # COUNT N_VOCAB
	local i s=""
	for ((i = 0; i < $1; i++)); do s+="${s:+,}$(((i + 1) % $2))"; done
	echo "$s"
}

# one key of the "timings" object of kvpool-run --json (or a top-level key)
jget() { # JSON KEY
	node -e 'const j = JSON.parse(process.argv[1]); const v = j.timings?.[process.argv[2]] ?? j[process.argv[2]];
		if (v === undefined) process.exit(1); console.log(v)' "$1" "$2"
}

kvpool_run() { # FILE WEIGHTS IDS N -> the JSON line; stderr to $tmp/kvpool.err
	"$run_bin" -m "$1" --weights "$2" --tokens "$3" -n "$4" --threads "$threads" \
		--chunk "$batch" --kv-type "$kv" --ignore-eos --json 2>"$tmp/kvpool.err" ||
		{ echo "vs_llamacpp.sh: kvpool-run failed on $1:" >&2; cat "$tmp/kvpool.err" >&2; return 1; }
}

record() { # FILE ENGINE PHASE TOK_S [WALL_TOK_S]
	printf '{"file":"%s","engine":"%s","phase":"%s","tok_s":%s,"wall_tok_s":%s}\n' \
		"$1" "$2" "$3" "$4" "${5:-null}" >>"$records"
}

# the first K greedy ids of both engines after the same prompt: the line for the report
agreement() { # NAME KVPOOL_RUN_JSON LLAMA_RUN_JSON
	node -e 'const [name, k, d, kj, lj] = process.argv.slice(1);
		const a = JSON.parse(kj).tokens.slice(0, +k), b = JSON.parse(lj).tokens.slice(0, +k);
		let lead = 0;
		while (lead < a.length && a[lead] === b[lead]) lead++;
		const same = a.filter((x, i) => x === b[i]).length;
		console.log(`agreement ${name}: first ${a.length} greedy ids after the ${d}-id prompt: ` +
			(lead === a.length ? "all equal" :
			 `equal up to position ${lead}, ${same} of ${a.length} positions equal`) +
			`\n  kvpool    ${a.join(",")}\n  llama.cpp ${b.join(",")}`)' \
		"$1" "$((agree < gen + 1 ? agree : gen + 1))" "$dprompt" "$2" "$3"
}

bench_file() { # FILE
	local f=$1 name n_vocab w r out lj pids dids kvp_tokens="" kern
	name=$(basename "$f")
	# the model's vocabulary size (kvpool-run's load report) and a first read of the file
	kvpool_run "$f" map 1 1 >/dev/null
	n_vocab=$(sed -n 's/.* vocab \([0-9][0-9]*\),.*/\1/p' "$tmp/kvpool.err" | head -1)
	[ -n "$n_vocab" ] || { echo "vs_llamacpp.sh: no vocabulary size in kvpool-run's report" >&2; return 1; }
	kern=$(sed -n 's/.*; kernels \([A-Za-z0-9_]*\).*/\1/p' "$tmp/kvpool.err" | head -1)
	echo "$name: kvpool: kernel table ${kern:-?}${KVP_ISA:+ (KVP_ISA=$KVP_ISA)}; model $(sed -n 's/^kvpool-run: model //p' "$tmp/kvpool.err" | head -1)" >>"$context"
	pids=$(ids "$prompt" "$n_vocab")
	dids=$(ids "$dprompt" "$n_vocab")
	for ((r = 1; r <= runs; r++)); do
		echo "# $name round $r/$runs: load average $(load1)" >&2
		for w in $weights; do
			out=$(kvpool_run "$f" "$w" "$pids" 1)
			[ "$(jget "$out" prompt_tokens)" = "$prompt" ] ||
				{ echo "vs_llamacpp.sh: kvpool-run prefilled other than $prompt tokens" >&2; return 1; }
			record "$name" "kvpool-$w" prefill "$(jget "$out" prefill_tok_s)"
			out=$(kvpool_run "$f" "$w" "$dids" $((gen + 1)))
			[ "$(jget "$out" generated_tokens)" = $((gen + 1)) ] ||
				{ echo "vs_llamacpp.sh: kvpool-run did not run $gen decode steps" >&2; return 1; }
			record "$name" "kvpool-$w" decode "$(jget "$out" decode_tok_s)"
			[ -n "$kvp_tokens" ] || kvp_tokens=$out
		done
		out=$(node "$lcpp/bench.mjs" "$f" --threads "$threads" --prompt "$prompt" --gen "$gen" \
			--runs 1 --batch "$batch" --decode-prompt "$dprompt" 2>"$tmp/llama.err") ||
			{ echo "vs_llamacpp.sh: llama.cpp failed on $f:" >&2; cat "$tmp/llama.err" >&2; return 1; }
		lj=$(grep '"summary":true' <<<"$out")
		grep -v '^llama.cpp [^:]*: prefill' "$tmp/llama.err" >&2 || true
		if ((r == 1)); then
			echo "$name: llama.cpp: $(node -e 'const j = JSON.parse(process.argv[1]);
				console.log(`${j.llama_cpp} (node-llama-cpp ${j.node_llama_cpp}), ${j.cpu_variant} CPU variant, flash attention ${j.flash_attn}, cpu/wall ${j.prefill_cpu_per_wall} / ${j.decode_cpu_per_wall} (round 1)`)' "$lj")" >>"$context"
			agreement "$name" "$kvp_tokens" "$(grep '"run":1,' <<<"$out")" >>"$context"
		fi
		record "$name" llama.cpp prefill "$(jget "$lj" llama_prefill_tok_s)" "$(jget "$lj" prefill_tok_s)"
		record "$name" llama.cpp decode "$(jget "$lj" llama_decode_tok_s)" "$(jget "$lj" decode_tok_s)"
	done
}

echo "# kvpool vs llama.cpp: $threads threads, prefill P=$prompt (batch $((batch < prompt ? batch : prompt))), decode N=$gen after a $dprompt-id prompt, kvpool K/V $kv, medians of $runs rounds" >&2
echo "# cpu: $cpu_line" >&2
regime_before=$(regime before)
echo "# $regime_before" >&2

if ((${#files[@]})); then
	for f in "${files[@]}"; do
		bench_file "$f"
	done
else
	preset=${KVP_BENCH_PRESET:-1b}
	IFS=, read -r -a types <<<"${KVP_BENCH_TYPES:-q4_k_m,q8_0,q4_0,f16}"
	mdir=${dir:-$tmp}
	mkdir -p "$mdir"
	for t in "${types[@]}"; do
		f=$mdir/$preset-$t.gguf
		if [ ! -f "$f" ]; then
			"$mk_bin" --preset "$preset" --type "$t" -o "$f" >&2
		fi
		bench_file "$f"
		[ -n "$dir" ] || rm -f "$f"
	done
fi
regime_after=$(regime after)
echo "# $regime_after" >&2

# what ran and where, then the medians (table or JSON) on stdout
if ((!json)); then
	echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); cpu: $cpu_line"
	echo "# $threads threads; prefill P=$prompt (batch $((batch < prompt ? batch : prompt))); decode N=$gen after a $dprompt-id prompt; kvpool K/V $kv; medians of $runs rounds (kvpool, llama.cpp alternating)"
	echo "# $regime_before"
	echo "# $regime_after"
	sed 's/^/# /' "$context"
fi

# medians per file, engine and phase; the table (or JSON) on stdout
node - "$records" "$json" "$weights" "$context" "$cpu_line" "$regime_before" "$regime_after" \
	"$threads" "$prompt" "$gen" "$runs" <<'EOF'
const fs = require("fs");
const [recFile, asJson, weights, ctxFile, cpu, regimeBefore, regimeAfter, ...nums] = process.argv.slice(2);
const [threads, prompt, gen, runs] = nums.map(Number);
const recs = fs.readFileSync(recFile, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
const median = (xs) => {
	const s = [...xs].sort((a, b) => a - b), m = s.length >> 1;
	return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const files = [...new Set(recs.map((r) => r.file))];
const engines = weights.split(" ").map((w) => `kvpool-${w}`);
const f2 = (x) => (x == null ? "-" : x >= 100 ? x.toFixed(1) : x.toFixed(2));
const rows = [];
for (const file of files)
	for (const phase of ["prefill", "decode"]) {
		const pick = (engine, key = "tok_s") =>
			recs.filter((r) => r.file === file && r.phase === phase && r.engine === engine).map((r) => r[key]);
		const l = pick("llama.cpp"), lw = pick("llama.cpp", "wall_tok_s");
		const row = { file, phase, runs: l.length, llama_cpp: median(l), llama_cpp_wall: median(lw) };
		for (const e of engines) {
			const k = pick(e);
			row[e] = median(k);
			// the median of the per-round ratios, as the rounds pair the two engines
			row[`${e}_ratio`] = median(k.map((x, i) => x / l[i]));
		}
		rows.push(row);
	}
if (asJson === "1") {
	console.log(JSON.stringify({ meta: true, date: new Date().toISOString(), cpu, threads, prompt,
		gen, runs, regime_before: regimeBefore, regime_after: regimeAfter,
		context: fs.readFileSync(ctxFile, "utf8").trimEnd().split("\n") }));
	for (const r of rows) console.log(JSON.stringify(r));
	process.exit(0);
}
const head = ["file", "phase", ...engines.map((e) => `${e} tok/s`), "llama.cpp tok/s",
	...engines.map((e) => `${e.replace("kvpool-", "")}/llama.cpp`), "llama.cpp (node wall)"];
const lines = rows.map((r) => [r.file, r.phase, ...engines.map((e) => f2(r[e])), f2(r.llama_cpp),
	...engines.map((e) => r[`${e}_ratio`].toFixed(3)), f2(r.llama_cpp_wall)]);
const w = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
for (const l of [head, ...lines])
	console.log(l.map((c, i) => (i < 2 ? c.padEnd(w[i]) : c.padStart(w[i]))).join("  "));
EOF
