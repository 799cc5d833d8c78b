#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# vs_llamacpp.sh - kvpool's engine against llama.cpp's own benchmark (llama-bench) on the
# same GGUF files: same thread count, prompt length, batch, decode steps, decode depth and
# K/V type; prefill and decode tokens/s of each, the ratio kvpool / llama.cpp, and each
# figure against the same run's rooflines (decode as a fraction of the read bandwidth,
# prefill as a fraction of the register peak of the instructions the kernel table
# computes with).  Medians of R rounds; each round runs kvpool and then llama.cpp
# (A B A B ...), so noise on this shared machine hits both.
#
#   tests/bench/vs_llamacpp.sh --llama-bench PATH [--llama-bench-avx2 PATH] [options] [FILE.gguf ...]
#
# llama.cpp is not part of kvpool and this script builds nothing: PATH names the
# llama-bench binary of a native build of llama.cpp made outside the repo (cmake, Release,
# GGML_NATIVE=ON, the CPU backend only), or that build's directory (PATH/bin/llama-bench).
# Two variants, each run when its build is given:
#   native  kvpool's best kernel table (or KVP_ISA=) against --llama-bench (or
#           $KVP_LLAMACPP_BIN);
#   avx2    kvpool with KVP_ISA=avx2 against --llama-bench-avx2 (or
#           $KVP_LLAMACPP_AVX2_BIN): a llama.cpp built with GGML_NATIVE=OFF, AVX2, FMA and
#           F16C on and every AVX-512 option off, so both sides' AVX2 code is compared on
#           a machine that has more.
# Without a build (neither given, or not found) the script exits 77 (meson: skipped).
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
# What each side measures:
#   prefill  P tokens from an empty context in batches of B.  kvpool: kvpool-run --tokens
#            (P ids, no BOS: position i holds (i + 1) mod n_vocab) --chunk B, its
#            prefill_tok_s (the chunks and the last position's logits).  llama.cpp:
#            llama-bench -p P -n 0 -b B -ub B (random ids, llama.cpp's own timer; one
#            untimed warm-up run first).
#   decode   N single-token steps after D positions.  kvpool: kvpool-run with D ids and
#            -n N+1 --ignore-eos, its decode_tok_s (N forward steps and their greedy
#            picks); when D = P (the default) the prefill run's own decode.  llama.cpp:
#            llama-bench -p 0 -n N -d D (the depth prefilled untimed, N steps timed).
#   K/V      --kv-type (f16 by default) on both sides: kvpool --kv-type, llama-bench
#            -ctk/-ctv.  llama.cpp's flash-attention setting is its default (printed).
# kvpool-run starts a process per figure (the model opened each time, not timed; with
# the default --weights map the file mapping's page faults fall inside the first timing).
#
# The rooflines (tests/bench/kvp-roofline, measured before and after the rounds, the
# higher of the two used): read bandwidth (T threads summing a 1 GiB buffer) and the
# register peaks of each table (peak.h).  decode roof = tok/s x bytes a step reads
# (weights + K/V so far) / read bandwidth; prefill roof = tok/s x operations per token
# / the peak of the kernel table's instruction for the file's type (int8 dot for the
# integer types, f32 FMA for f16/f32, vdpbf16ps for bf16 where the table has it).  Both
# engines' figures are divided by the same ceiling: the variant's table on this CPU.
#
# Exit 0, 1 on a failure, 2 on a usage error, 77 when skipped.
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
build=${KVP_BUILD_DIR:-$src/build}
threads=2
prompt=512
gen=128
runs=3
batch=512
depth=""
weights=map
kv=f16
dir=""
json=0
json_file=""
max_load=${KVP_BENCH_MAX_LOAD:-1.0}
force=0
lb_native=${KVP_LLAMACPP_BIN:-}
lb_avx2=${KVP_LLAMACPP_AVX2_BIN:-}

usage() {
	cat <<EOF
usage: tests/bench/vs_llamacpp.sh --llama-bench PATH [--llama-bench-avx2 PATH] [options] [FILE.gguf ...]
  kvpool against llama.cpp's llama-bench on the same files, same run, alternating rounds.
  llama.cpp is not built by this script or by kvpool: PATH is the llama-bench binary of
  a native build of llama.cpp made from source outside this tree (cmake, Release,
  GGML_NATIVE=ON, CPU backend only), or that build directory (PATH/bin/llama-bench).

      --llama-bench PATH       the native llama.cpp build (default: \$KVP_LLAMACPP_BIN);
                               kvpool runs with its best kernel table (or \$KVP_ISA)
      --llama-bench-avx2 PATH  a llama.cpp build with GGML_NATIVE=OFF, AVX2/FMA/F16C on
                               and every AVX-512 option off (default:
                               \$KVP_LLAMACPP_AVX2_BIN); kvpool runs with KVP_ISA=avx2
  -B, --build DIR      kvpool build directory (default: \$KVP_BUILD_DIR or $src/build)
  -t, --threads T      threads on both sides (default 2)
  -p, --prompt P       prefill length in tokens (default 512)
  -n, --gen N          decode steps timed (default 128)
  -d, --depth D        positions in the context before the decode steps (default: P)
  -r, --runs R         rounds; medians are printed (default 3)
  -b, --batch B        prefill batch: kvpool --chunk, llama-bench -b/-ub (default 512)
  -w, --weights W      kvpool's weights: map, copy or both (default map)
      --kv-type T      K/V type on both sides: f16 (default), f32, bf16
      --dir DIR        write the synthetic files here and keep them (reused if present)
      --max-load L     refuse when the 1-minute load average is above L (default
                       \$KVP_BENCH_MAX_LOAD or 1.0)
      --force          run even when the machine is busy (the figures say so)
      --json           print one JSON object per file, variant and phase instead of the table
      --json-file FILE also write those objects to FILE (the table still printed)
  -h, --help           this text
Without files: preset \${KVP_BENCH_PRESET:-1b} in types \${KVP_BENCH_TYPES:-q4_k_m,q8_0,q4_0,f16}.
Exit 0, 1 on a failure, 2 on a usage error, 77 when skipped (no llama.cpp build given or
found, machine busy).
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

str_opt() { # NAME VALUE
	[ -n "$2" ] || die_usage "$1: wants a value"
}

files=()
while (($#)); do
	case $1 in
	-h | --help) usage; exit 0 ;;
	--llama-bench) str_opt "$1" "${2-}"; lb_native=$2; shift ;;
	--llama-bench-avx2) str_opt "$1" "${2-}"; lb_avx2=$2; shift ;;
	-B | --build) str_opt "$1" "${2-}"; build=$2; shift ;;
	-t | --threads) int_opt "$1" "${2-}" 1 64; threads=$2; shift ;;
	-p | --prompt) int_opt "$1" "${2-}" 1 4096; prompt=$2; shift ;;
	-n | --gen) int_opt "$1" "${2-}" 1 65536; gen=$2; shift ;;
	-d | --depth | --decode-prompt) int_opt "$1" "${2-}" 1 8192; depth=$2; shift ;;
	-r | --runs) int_opt "$1" "${2-}" 1 1000; runs=$2; shift ;;
	-b | --batch) int_opt "$1" "${2-}" 1 4096; batch=$2; shift ;;
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
	--dir) str_opt "$1" "${2-}"; dir=$2; shift ;;
	--max-load)
		[[ ${2-} =~ ^[0-9]+(\.[0-9]+)?$ ]] || die_usage "--max-load: want a number, got '${2-}'"
		max_load=$2; shift ;;
	--force) force=1 ;;
	--json) json=1 ;;
	--json-file) str_opt "$1" "${2-}"; json_file=$2; shift ;;
	--) shift; files+=("$@"); break ;;
	-*) die_usage "unknown option '$1' (--help lists them)" ;;
	*) files+=("$1") ;;
	esac
	shift
done
depth=${depth:-$prompt}

# a llama-bench binary, or a build directory holding bin/llama-bench
llama_bench_path() { # PATH -> the binary, or nothing
	local p
	for p in "$1" "$1/bin/llama-bench" "$1/llama-bench"; do
		if [ -f "$p" ] && [ -x "$p" ]; then
			echo "$p"
			return
		fi
	done
}

variants=()
declare -A lbin=() visa=() described=()
for v in native avx2; do
	if [ $v = native ]; then
		p=$lb_native opt="--llama-bench or \$KVP_LLAMACPP_BIN" isa=""
	else
		p=$lb_avx2 opt="--llama-bench-avx2 or \$KVP_LLAMACPP_AVX2_BIN" isa=avx2
	fi
	[ -n "$p" ] || continue
	b=$(llama_bench_path "$p")
	if [ -z "$b" ]; then
		echo "vs-llamacpp: skipped: no llama-bench at '$p' ($opt: a llama.cpp build's" \
			"llama-bench binary or its build directory)" >&2
		exit 77
	fi
	variants+=("$v")
	lbin[$v]=$b
	visa[$v]=$isa # native: the caller's KVP_ISA, if any, else the CPU's best table
done
if ((${#variants[@]} == 0)); then
	echo "vs-llamacpp: skipped: no llama.cpp build given (--llama-bench PATH or" \
		"\$KVP_LLAMACPP_BIN: llama-bench of a native cmake Release build of llama.cpp)" >&2
	exit 77
fi
if [[ " ${variants[*]} " == *" avx2 "* ]] && ! grep -qw avx2 /proc/cpuinfo; then
	echo "vs-llamacpp: skipped: --llama-bench-avx2 given on a CPU without AVX2" >&2
	exit 77
fi

run_bin=$build/compute/kvpool-run
mk_bin=$build/compute/kvpool-mkmodel
regime_bin=$build/tests/bench/kvp-cpu-regime
roof_bin=$build/tests/bench/kvp-roofline
for b in "$run_bin" "$mk_bin" "$roof_bin"; do
	[ -x "$b" ] || { echo "vs_llamacpp.sh: $b not built (ninja -C $build)" >&2; exit 1; }
done
for f in "${files[@]}"; do
	[ -r "$f" ] || { echo "vs_llamacpp.sh: cannot read '$f'" >&2; exit 1; }
done
command -v node >/dev/null || { echo "vs_llamacpp.sh: needs node (bash tests/deps.sh)" >&2; exit 1; }

load1() { cut -d' ' -f1 /proc/loadavg; }
load_before=$(load1)
forced=""
if awk -v l="$load_before" -v m="$max_load" 'BEGIN { exit !(l > m) }'; then
	if ((!force)); then
		echo "vs-llamacpp: skipped: the machine is busy: 1-minute load average $load_before >" \
			"$max_load (--max-load); two-thread figures would measure the other work." \
			"Rerun when idle, or pass --force to measure anyway." >&2
		exit 77
	fi
	forced="WARNING: 1-minute load average $load_before > $max_load at the start: --force given, the figures include other work"
	echo "# $forced" >&2
fi

cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
cpu_fm=$(awk -F': ' '/^cpu family/ { f = $2 } /^model[[:space:]]*:/ { m = $2 } END { print "family " f ", model " m }' /proc/cpuinfo)
cpu_line="${cpu_model:-unknown CPU} ($cpu_fm), $(nproc) online CPUs"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvp-vs-llamacpp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
records=$tmp/records.jsonl
context=$tmp/context.txt
costs=$tmp/costs.jsonl
loads=$tmp/loads.txt
: >"$records"
: >"$context"
: >"$costs"
: >"$loads"

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

# one key of a JSON object: KEY, or timings.KEY of kvpool-run --json
# (kvpool-run: --speculative off, so decode is one token per step as llama-bench's)
jget() { # JSON KEY
	node -e 'const j = JSON.parse(process.argv[1]); const v = j.timings?.[process.argv[2]] ?? j[process.argv[2]];
		if (v === undefined) process.exit(1); console.log(v)' "$1" "$2"
}

kvpool_run() { # VARIANT FILE WEIGHTS IDS N -> the JSON line; stderr to $tmp/kvpool.err
	local isa=${visa[$1]-}
	env ${isa:+KVP_ISA=$isa} "$run_bin" -m "$2" --weights "$3" --tokens "$4" \
		-n "$5" --threads "$threads" --chunk "$batch" --kv-type "$kv" --ignore-eos --json \
		--speculative off \
		2>"$tmp/kvpool.err" ||
		{ echo "vs_llamacpp.sh: kvpool-run ($1) failed on $2:" >&2; cat "$tmp/kvpool.err" >&2; return 1; }
}

# llama-bench, one test: the JSON line of it; stderr to $tmp/llama.err
llama_bench() { # VARIANT FILE ARGS...
	local v=$1 f=$2 out
	shift 2
	out=$("${lbin[$v]}" -m "$f" -t "$threads" -ctk "$kv" -ctv "$kv" -r 1 -o jsonl "$@" \
		2>"$tmp/llama.err") && out=$(grep '^{' <<<"$out" | tail -1) && [ -n "$out" ] ||
		{ echo "vs_llamacpp.sh: llama-bench ($v) failed on $f:" >&2; cat "$tmp/llama.err" >&2; return 1; }
	echo "$out"
}

record() { # FILE VARIANT ENGINE PHASE TOK_S
	printf '{"file":"%s","variant":"%s","engine":"%s","phase":"%s","tok_s":%s}\n' \
		"$1" "$2" "$3" "$4" "$5" >>"$records"
}

# what the llama.cpp build is: llama-bench's own fields, its system_info line (from
# llama-completion beside it, when built), the GGML options of its CMake cache
llama_describe() { # VARIANT FILE BENCH_JSON
	local v=$1 b=${lbin[$1]} d cache si=""
	d=$(dirname "$b")
	echo "llama.cpp $v: $b: $(node -e 'const j = JSON.parse(process.argv[1]);
		console.log(`build ${j.build_commit} (${j.build_number}), backends ${j.backends}, cpu_info "${j.cpu_info}", flash_attn ${j.flash_attn}, load ${j.load_mode ?? "mmap"}, n_batch ${j.n_batch}, n_ubatch ${j.n_ubatch}`)' "$3")"
	if [ -x "$d/llama-completion" ]; then
		si=$("$d/llama-completion" -m "$2" -p a -n 1 -t "$threads" -no-cnv --no-warmup \
			</dev/null 2>&1 | grep -m1 'system_info:' | sed 's/^.*system_info: //') || true
	fi
	echo "llama.cpp $v: system_info: ${si:-not printed (no llama-completion beside llama-bench)}"
	for cache in "$d/../CMakeCache.txt" "$d/CMakeCache.txt"; do
		if [ -f "$cache" ]; then
			echo "llama.cpp $v: cmake: $(sed -n 's/^\(CMAKE_BUILD_TYPE\|GGML_[A-Z0-9_]*\):[A-Z]*=\(.*\)$/\1=\2/p' "$cache" |
				grep -E '^(CMAKE_BUILD_TYPE|GGML_(NATIVE|AVX[A-Z0-9_]*|FMA|F16C|BMI2|SSE42|AMX[A-Z_]*|BLAS|LLAMAFILE|OPENMP|CPU_REPACK))=' |
				tr '\n' ' ' | sed 's/ $//')"
			break
		fi
	done
}

bench_file() { # FILE
	local f=$1 name n_vocab v w r out pids dids kern
	name=$(basename "$f" .gguf)
	# the model's vocabulary size (kvpool-run's load report) and a first read of the file
	kvpool_run native "$f" map 1 1 >/dev/null
	n_vocab=$(sed -n 's/.* vocab \([0-9][0-9]*\),.*/\1/p' "$tmp/kvpool.err" | head -1)
	[ -n "$n_vocab" ] || { echo "vs_llamacpp.sh: no vocabulary size in kvpool-run's report" >&2; return 1; }
	echo "$name: model $(sed -n 's/^kvpool-run: model //p' "$tmp/kvpool.err" | head -1)" >>"$context"
	out=$("$roof_bin" model "$f" "$prompt" "$depth" "$gen") ||
		{ echo "vs_llamacpp.sh: kvp-roofline model failed on $f" >&2; return 1; }
	node -e 'console.log(JSON.stringify({ file: process.argv[1], ...JSON.parse(process.argv[2]) }))' \
		"$name" "$out" >>"$costs"
	for v in "${variants[@]}"; do
		kvpool_run "$v" "$f" map 1 1 >/dev/null
		kern=$(sed -n 's/.*; kernels \([A-Za-z0-9_]*\).*/\1/p' "$tmp/kvpool.err" | head -1)
		echo "{\"file\":\"$name\",\"variant\":\"$v\",\"table\":\"${kern:-?}\"}" >>"$costs"
	done
	pids=$(ids "$prompt" "$n_vocab")
	dids=$(ids "$depth" "$n_vocab")
	for ((r = 1; r <= runs; r++)); do
		echo "# $name round $r/$runs: load average $(load1)" >&2
		load1 >>"$loads"
		for v in "${variants[@]}"; do
			for w in $weights; do
				if ((depth == prompt)); then
					out=$(kvpool_run "$v" "$f" "$w" "$pids" $((gen + 1)))
				else
					out=$(kvpool_run "$v" "$f" "$w" "$pids" 1)
				fi
				[ "$(jget "$out" prompt_tokens)" = "$prompt" ] ||
					{ echo "vs_llamacpp.sh: kvpool-run prefilled other than $prompt tokens" >&2; return 1; }
				record "$name" "$v" "kvpool-$w" prefill "$(jget "$out" prefill_tok_s)"
				((depth == prompt)) || out=$(kvpool_run "$v" "$f" "$w" "$dids" $((gen + 1)))
				[ "$(jget "$out" generated_tokens)" = $((gen + 1)) ] ||
					{ echo "vs_llamacpp.sh: kvpool-run did not run $gen decode steps" >&2; return 1; }
				record "$name" "$v" "kvpool-$w" decode "$(jget "$out" decode_tok_s)"
			done
			out=$(llama_bench "$v" "$f" -p "$prompt" -n 0 -b "$batch" -ub "$batch")
			[ "$(jget "$out" n_prompt)" = "$prompt" ] ||
				{ echo "vs_llamacpp.sh: llama-bench ran other than pp$prompt" >&2; return 1; }
			record "$name" "$v" llama.cpp prefill "$(jget "$out" avg_ts)"
			if [ -z "${described[$v]-}" ]; then
				llama_describe "$v" "$f" "$out" >>"$context"
				described[$v]=1
			fi
			out=$(llama_bench "$v" "$f" -p 0 -n "$gen" -d "$depth")
			[ "$(jget "$out" n_gen)" = "$gen" ] && [ "$(jget "$out" n_depth)" = "$depth" ] ||
				{ echo "vs_llamacpp.sh: llama-bench ran other than tg$gen @ d$depth" >&2; return 1; }
			record "$name" "$v" llama.cpp decode "$(jget "$out" avg_ts)"
		done
	done
}

roofline() { # WHEN -> the JSON line
	"$roof_bin" machine "$threads" ||
		{ echo "vs_llamacpp.sh: kvp-roofline machine failed" >&2; return 1; }
}

echo "# kvpool vs llama.cpp (${variants[*]}): $threads threads, prefill P=$prompt (batch $((batch < prompt ? batch : prompt))), decode N=$gen at depth $depth, K/V $kv, medians of $runs rounds" >&2
echo "# cpu: $cpu_line" >&2
regime_before=$(regime before)
echo "# $regime_before" >&2
roof_before=$(roofline)
echo "# rooflines before: $roof_before" >&2

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
roof_after=$(roofline)
echo "# rooflines after: $roof_after" >&2
regime_after=$(regime after)
echo "# $regime_after" >&2
loads_line="1-minute load average at the start $load_before, at the rounds' starts $(sort -n "$loads" | head -1)-$(sort -n "$loads" | tail -1), at the end $(load1)"

# medians per file, variant, engine and phase; the table (or JSON) on stdout
node - "$records" "$costs" "$context" "$json" "$json_file" "$weights" "$cpu_line" "$regime_before" \
	"$regime_after" "$roof_before" "$roof_after" "$loads_line" "$forced" "$threads" "$prompt" \
	"$gen" "$depth" "$runs" "$batch" "$kv" <<'EOF'
const fs = require("fs");
const [recFile, costFile, ctxFile, asJson, jsonFile, weights, cpu, regimeBefore, regimeAfter, roofBefore,
	roofAfter, loads, forced, ...nums] = process.argv.slice(2);
const [threads, prompt, gen, depth, runs, batch] = nums.slice(0, 6).map(Number);
const kv = nums[6];
const lines = (f) => fs.readFileSync(f, "utf8").split("\n").filter(Boolean);
const recs = lines(recFile).map((l) => JSON.parse(l));
const costs = lines(costFile).map((l) => JSON.parse(l));
const context = lines(ctxFile);
const median = (xs) => {
	const s = [...xs].sort((a, b) => a - b), m = s.length >> 1;
	return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
// the ceilings: the higher of the two measurements (before and after the rounds)
const rb = JSON.parse(roofBefore), ra = JSON.parse(roofAfter);
const roof = { read_gbps: Math.max(rb.read_gbps, ra.read_gbps) };
for (const isa of ["avx2", "avx512"]) {
	if (!rb[isa] || !ra[isa]) continue;
	roof[isa] = {};
	for (const k of Object.keys(rb[isa]))
		roof[isa][k] = typeof rb[isa][k] === "number" ? Math.max(rb[isa][k], ra[isa][k]) : rb[isa][k];
}
const files = [...new Set(recs.map((r) => r.file))];
const variants = [...new Set(recs.map((r) => r.variant))];
const engines = weights.split(" ").map((w) => `kvpool-${w}`);
const llamaName = { native: "native", avx2: "avx2-only" };
// the peak a prefill of kernel table @table on a file bound by @ceiling is judged against
const peakOf = (table, ceiling) => {
	const p = roof[table];
	if (!p) return null;
	if (ceiling === "int8") return { v: p.int8, name: `int8 ${p.int8_insn}` };
	if (ceiling === "bf16" && p.bf16 > 0) return { v: p.bf16, name: "bf16 vdpbf16ps zmm" };
	return { v: p.f32, name: `f32 ${p.f32_insn}` };
};
const rows = [];
for (const file of files) {
	const cost = costs.find((c) => c.file === file && c.prefill_ops_per_token);
	for (const variant of variants) {
		const table = costs.find((c) => c.file === file && c.variant === variant)?.table ?? "?";
		for (const phase of ["prefill", "decode"]) {
			const pick = (engine) => recs.filter((r) => r.file === file && r.variant === variant &&
				r.phase === phase && r.engine === engine).map((r) => r.tok_s);
			const l = pick("llama.cpp");
			const ceil = phase === "decode" ?
				{ v: roof.read_gbps * 1e9, name: `read ${roof.read_gbps.toFixed(1)} GB/s` } :
				peakOf(table, cost.ceiling);
			const per = phase === "decode" ? cost.decode_bytes_per_step : cost.prefill_ops_per_token;
			const scale = phase === "decode" ? 1 : 1e9;
			const frac = (t) => (ceil && ceil.v > 0 ? (t * per) / (ceil.v * scale) : null);
			const row = { file, variant, phase, kvpool_table: table, llama_cpp_build: llamaName[variant],
				runs: l.length, llama_cpp: median(l), llama_cpp_roof: frac(median(l)),
				ceiling: ceil ? (phase === "decode" ? ceil.name :
					`${ceil.name} ${ceil.v.toFixed(0)} GOP/s`) : "-",
				per_token: per, per_token_unit: phase === "decode" ? "bytes/step" : "ops/token" };
			for (const e of engines) {
				const k = pick(e);
				row[e] = median(k);
				// the median of the per-round ratios, as the rounds pair the two engines
				row[`${e}_ratio`] = median(k.map((x, i) => x / l[i]));
				row[`${e}_roof`] = frac(row[e]);
			}
			rows.push(row);
		}
	}
}
const meta = { meta: true, date: new Date().toISOString(), cpu, threads, prompt, batch, gen, depth,
	kv_type: kv, runs, loads, forced: forced || null, regime_before: regimeBefore,
	regime_after: regimeAfter, roofline_before: rb, roofline_after: ra, context };
const asLines = [meta, ...rows].map((r) => JSON.stringify(r)).join("\n") + "\n";
if (jsonFile) fs.writeFileSync(jsonFile, asLines);
if (asJson === "1") {
	process.stdout.write(asLines);
	process.exit(0);
}
const f1 = (x) => (x == null ? "-" : x >= 100 ? x.toFixed(1) : x.toFixed(2));
const f3 = (x) => (x == null ? "-" : x.toFixed(2));
console.log(`# kvpool vs llama.cpp (llama-bench), ${meta.date.slice(0, 16).replace("T", " ")} UTC`);
console.log(`# cpu: ${cpu}`);
console.log(`# ${threads} threads; prefill ${prompt} tokens (batch ${Math.min(batch, prompt)}) from an empty context; ` +
	`decode ${gen} steps at depth ${depth}; K/V ${kv} both; medians of ${runs} rounds (kvpool, llama.cpp alternating)`);
if (forced) console.log(`# ${forced}`);
console.log(`# ${loads}`);
console.log(`# ${regimeBefore}`);
console.log(`# ${regimeAfter}`);
console.log(`# rooflines (higher of before/after): read ${roof.read_gbps.toFixed(1)} GB/s` +
	["avx512", "avx2"].filter((i) => roof[i]).map((i) =>
		`; ${i}: f32 ${roof[i].f32.toFixed(0)} GFLOP/s (${roof[i].f32_insn}), int8 ${roof[i].int8.toFixed(0)} GOP/s (${roof[i].int8_insn})` +
		(roof[i].bf16 > 0 ? `, bf16 ${roof[i].bf16.toFixed(0)}` : "")).join(""));
for (const c of context) console.log(`# ${c}`);
for (const c of costs.filter((c) => c.prefill_ops_per_token))
	console.log(`# ${c.file}: ${(c.prefill_ops_per_token / 1e9).toFixed(2)} GOP per prefill token, ` +
		`${(c.decode_bytes_per_step / 1e6).toFixed(1)} MB per decode step (weights ${(c.weight_bytes / 1e6).toFixed(1)} MB + K/V); ` +
		`prefill bound by the ${c.ceiling} peak`);
console.log("# roof: prefill = tok/s x ops/token / the peak named; decode = tok/s x bytes/step / read bandwidth");
const head = ["file", "variant", "phase", ...engines.map((e) => `${e} tok/s`), "llama.cpp tok/s",
	...engines.map((e) => `${e.replace("kvpool-", "")}/llama`), ...engines.map((e) => `${e} roof`),
	"llama.cpp roof", "ceiling"];
const out = rows.map((r) => [r.file, `${r.kvpool_table} vs ${r.llama_cpp_build}`, r.phase,
	...engines.map((e) => f1(r[e])), f1(r.llama_cpp), ...engines.map((e) => r[`${e}_ratio`].toFixed(3)),
	...engines.map((e) => f3(r[`${e}_roof`])), f3(r.llama_cpp_roof), r.ceiling]);
const w = head.map((h, i) => Math.max(h.length, ...out.map((l) => l[i].length)));
const left = (i) => i < 3 || i === head.length - 1;
for (const l of [head, ...out])
	console.log(l.map((c, i) => (left(i) ? c.padEnd(w[i]) : c.padStart(w[i]))).join("  ").trimEnd());
EOF
