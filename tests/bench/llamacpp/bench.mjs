#!/usr/bin/env node
// SPDX-License-Identifier: MIT
//
// bench.mjs - llama.cpp's prefill and decode speed on a GGUF file, CPU only, as the
// same-run baseline of kvpool's engine (tests/bench/vs_llamacpp.sh runs both).
//
//   node bench.mjs FILE --threads T --prompt P --gen N --runs R [--batch B]
//                  [--decode-prompt D] [--flash-attn auto|on|off] [--no-warmup]
//   node bench.mjs --check
//
// llama.cpp is the prebuilt CPU build that node-llama-cpp ships (pinned in
// package-lock.json; `install.sh` installs it): ggml picks its CPU variant (zen4,
// haswell, ...) at run time; nothing is downloaded or compiled (build "never").
//
// Token ids, not text, so both engines see the same tokens: position i (from 0) holds
// id (i + 1) mod n_vocab; no BOS is added.  Each run, on a cleared sequence (nothing
// cached), measures
//   prefill: P ids evaluated without generating (batches of B tokens, one ubatch each),
//            tokens/s = P / wall time of that evaluation;
//   decode:  a D-id prompt (default 16) and its first greedy token, untimed, then N
//            greedy single-token steps (each: evaluate the last token, pick the next),
//            tokens/s = N / wall time of those steps (the first token is excluded);
//            the run's "tokens" are the N + 1 greedy ids, the first one included.
// One untimed warm-up (a prefill of min(P, B) ids and 4 steps) comes first, so the
// weights are resident and the buffers touched, as llama-bench does.  Medians over R.
//
// Checks printed with the figures: llama.cpp's own counters (llama_perf_context_print:
// "prompt eval" = batches of >1 token, "eval" = single-token steps) give rates that
// must agree with the wall-clock ones within the JavaScript overhead, and the process
// CPU time over wall time of each phase is ~T when T threads compute.
//
// --check loads the library only and prints what would run (llama.cpp release, CPU
// variant) as one JSON object.
//
// Output: one JSON object per run and a summary object ("summary": true) on stdout, a
// human line on stderr.  Exit status 0, 1 on failure, 2 on a usage error.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { basename } from "node:path";
import { readFileSync } from "node:fs";

const usage = `usage: node bench.mjs FILE --threads T --prompt P --gen N --runs R [--batch B]
                      [--decode-prompt D] [--flash-attn auto|on|off] [--no-warmup]
       node bench.mjs --check
  --threads T        compute threads for batches and single tokens alike (1..256)
  --prompt P         prefill length in token ids (1..65536)
  --gen N            decode steps timed, after the first generated token (1..65536)
  --runs R           runs; medians are printed (1..1000)
  --batch B          tokens per llama_decode call (n_batch = n_ubatch; default 512)
  --decode-prompt D  ids before the decode steps (2..65536, default 16)
  --flash-attn F     llama.cpp's flash attention: auto (its default), on, off
  --no-warmup        skip the untimed warm-up run
  --check            load llama.cpp without a model, print its release and CPU variant
`;

function die(code, msg) {
	process.stderr.write(msg.endsWith("\n") ? msg : msg + "\n");
	process.exit(code);
}

function parseArgs(argv) {
	const o = { batch: 512, decodePrompt: 16, flashAttn: "auto", warmup: true };
	const ints = {
		"--threads": ["threads", 1, 256],
		"--prompt": ["prompt", 1, 65536],
		"--gen": ["gen", 1, 65536],
		"--runs": ["runs", 1, 1000],
		"--batch": ["batch", 1, 65536],
		"--decode-prompt": ["decodePrompt", 2, 65536],
	};
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		if (a === "-h" || a === "--help") {
			process.stdout.write(usage);
			process.exit(0);
		} else if (a in ints) {
			const [key, lo, hi] = ints[a];
			const v = argv[++i];
			if (v === undefined || !/^[0-9]+$/.test(v) || +v < lo || +v > hi)
				die(2, `bench.mjs: ${a}: want an integer in [${lo}, ${hi}], got '${v ?? ""}'`);
			o[key] = +v;
		} else if (a === "--flash-attn") {
			const v = argv[++i];
			if (!["auto", "on", "off"].includes(v))
				die(2, `bench.mjs: --flash-attn: want auto, on or off, got '${v ?? ""}'`);
			o.flashAttn = v;
		} else if (a === "--check") {
			o.check = true;
		} else if (a === "--no-warmup") {
			o.warmup = false;
		} else if (a.startsWith("-")) {
			die(2, `bench.mjs: unknown option '${a}'\n${usage}`);
		} else if (o.file === undefined) {
			o.file = a;
		} else {
			die(2, `bench.mjs: more than one model file ('${o.file}', '${a}')`);
		}
	}
	if (o.check)
		return o;
	if (o.file === undefined)
		die(2, `bench.mjs: no model file\n${usage}`);
	for (const k of ["threads", "prompt", "gen", "runs"])
		if (o[k] === undefined)
			die(2, `bench.mjs: --${k} is required\n${usage}`);
	return o;
}

const median = (xs) => {
	const s = [...xs].sort((a, b) => a - b), m = s.length >> 1;
	return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const round = (x, d = 2) => (Number.isFinite(x) ? +x.toFixed(d) : null);
const ids = (n, nVocab) => Array.from({ length: n }, (_, i) => (i + 1) % nVocab);

// llama.cpp's log lines arrive through the logger; keep the ones we read.
const perfLines = [];
let cpuVariant = null;
let perfWaiter = null;
function logger(level, message) {
	const m = /loaded CPU backend from .*libggml-cpu-([A-Za-z0-9_]+)\.so/.exec(message);
	if (m)
		cpuVariant = m[1];
	if (message.includes("llama_perf_context_print")) {
		perfLines.push(message);
		if (message.includes("graphs reused") && perfWaiter)
			perfWaiter();
		return;
	}
	// node-llama-cpp's load-time text round trip differs on kvpool-mkmodel's byte-only
	// vocabulary (llama.cpp's SentencePiece rules escape spaces as U+2581); this
	// benchmark feeds ids, so the warning says nothing about it.
	if (message.includes("to tokenize text and then detokenize it"))
		return;
	if (level === LlamaLogLevel.warn || level === LlamaLogLevel.error ||
	    level === LlamaLogLevel.fatal)
		process.stderr.write(`llama.cpp: ${message.trimEnd()}\n`);
}

// llama.cpp's counters since the last call (node-llama-cpp's printTimings prints and
// then resets them): {pMs, pTokens} of batches of >1 token, {eMs, eRuns} of
// single-token steps.  llama.cpp prints at least "1 tokens" / "1 runs" when there were
// none, with 0 ms.
async function perfCounters(ctx) {
	perfLines.length = 0;
	const done = new Promise((resolve) => {
		perfWaiter = resolve;
		setTimeout(resolve, 2000);
	});
	await ctx.printTimings();
	await done;
	perfWaiter = null;
	const c = { pMs: NaN, pTokens: NaN, eMs: NaN, eRuns: NaN };
	for (const l of perfLines) {
		let m = /prompt eval time =\s*([0-9.]+) ms \/\s*([0-9]+) tokens/.exec(l);
		if (m) {
			c.pMs = +m[1];
			c.pTokens = +m[2];
			continue;
		}
		m = /\beval time =\s*([0-9.]+) ms \/\s*([0-9]+) runs/.exec(l);
		if (m) {
			c.eMs = +m[1];
			c.eRuns = +m[2];
		}
	}
	return c;
}

const cpuSeconds = () => {
	const u = process.cpuUsage();
	return (u.user + u.system) / 1e6;
};
const nowSeconds = () => performance.now() / 1e3;

async function prefill(seq, tokens) {
	await seq.clearHistory();
	const c0 = cpuSeconds(), t0 = nowSeconds();
	await seq.evaluateWithoutGeneratingNewTokens(tokens);
	const t = nowSeconds() - t0, c = cpuSeconds() - c0;
	if (seq.nextTokenIndex !== tokens.length)
		throw new Error(`prefill: sequence holds ${seq.nextTokenIndex} tokens, not ${tokens.length}`);
	return { s: t, cpu: c };
}

async function decode(seq, prompt, steps) {
	await seq.clearHistory();
	// greedy; every token kept (an end-of-generation token does not stop the loop)
	const it = seq.evaluate(prompt, { temperature: 0, yieldEogToken: true });
	try {
		let r = await it.next(); // the prompt and the first token: not timed
		const tokens = [r.value];
		const c0 = cpuSeconds(), t0 = nowSeconds();
		for (let i = 0; i < steps && !r.done; i++) {
			r = await it.next();
			tokens.push(r.value);
		}
		const t = nowSeconds() - t0, c = cpuSeconds() - c0;
		if (r.done)
			throw new Error("decode: the generator ended early");
		if (seq.nextTokenIndex !== prompt.length + steps)
			throw new Error(`decode: sequence holds ${seq.nextTokenIndex} tokens, not ${prompt.length + steps}`);
		// the greedy ids, the first one included: steps + 1 of them
		return { s: t, cpu: c, tokens: tokens.map(Number) };
	} finally {
		await it.return();
	}
}

function nVocabOf(model) {
	const md = model.fileInfo.metadata;
	const toks = md?.tokenizer?.ggml?.tokens;
	if (Array.isArray(toks) && toks.length)
		return toks.length;
	const arch = md?.general?.architecture;
	const v = arch && md[arch]?.vocab_size;
	if (v)
		return Number(v);
	throw new Error("cannot find the vocabulary size in the file's metadata");
}

function packageVersion(name) {
	try {
		const url = new URL(`node_modules/${name}/package.json`, import.meta.url);
		return JSON.parse(readFileSync(url, "utf8")).version;
	} catch {
		return null;
	}
}

async function main() {
	const o = parseArgs(process.argv.slice(2));
	const llama = await getLlama({
		gpu: false, // CPU only
		build: "never", // the prebuilt binaries or an error, never a compile
		skipDownload: true,
		usePrebuiltBinaries: true,
		progressLogs: false,
		maxThreads: 0, // no cap: the context's thread count is used as given
		logLevel: LlamaLogLevel.log, // log: the CPU variant loaded; info: llama_perf_context_print
		logger,
	});
	if (llama.gpu !== false)
		throw new Error(`llama.cpp runs on '${llama.gpu}', not the CPU`);
	const build = {
		engine: "llama.cpp",
		llama_cpp: llama.llamaCppRelease?.release ?? null,
		node_llama_cpp: packageVersion("node-llama-cpp"),
	};
	if (o.check) {
		// the backend's load line comes through the logger asynchronously
		for (let i = 0; i < 50 && cpuVariant === null; i++)
			await new Promise((resolve) => setTimeout(resolve, 10));
		process.stdout.write(JSON.stringify({ ...build, check: true, cpu_variant: cpuVariant,
			build_type: llama.buildType }) + "\n");
		await llama.dispose();
		return;
	}
	const model = await llama.loadModel({ modelPath: o.file, gpuLayers: 0 });
	const nVocab = nVocabOf(model);
	const batch = Math.min(o.batch, o.prompt);
	// room for the prefill and for the decode prompt + first token + steps
	const need = Math.max(o.prompt, o.decodePrompt + 1 + o.gen);
	const ctx = await model.createContext({
		contextSize: Math.ceil(need / 256) * 256,
		batchSize: batch,
		threads: o.threads,
		flashAttention: o.flashAttn === "auto" ? "auto" : o.flashAttn === "on",
		performanceTracking: true,
	});
	const seq = ctx.getSequence();
	const pIds = ids(o.prompt, nVocab), dIds = ids(o.decodePrompt, nVocab);

	if (o.warmup) {
		await prefill(seq, pIds.slice(0, batch));
		await decode(seq, dIds, 4);
	}
	if (ctx.currentThreads !== o.threads)
		throw new Error(`llama.cpp uses ${ctx.currentThreads} threads, not ${o.threads}`);

	const info = {
		...build,
		file: o.file,
		threads: o.threads,
		prompt: o.prompt,
		gen: o.gen,
		decode_prompt: o.decodePrompt,
		batch,
		ids: "position i holds (i + 1) mod n_vocab, no BOS",
		n_vocab: nVocab,
		flash_attn: o.flashAttn,
		cpu_variant: cpuVariant,
	};
	const runs = [];
	await perfCounters(ctx); // reset after the warm-up
	for (let r = 0; r < o.runs; r++) {
		const p = await prefill(seq, pIds);
		const lp = await perfCounters(ctx);
		const d = await decode(seq, dIds, o.gen);
		const ld = await perfCounters(ctx);
		// llama.cpp's own timing of what was timed here: the prefill's batches (P
		// tokens), the decode steps (N single-token evals; the D-id prompt is a batch)
		if (lp.pTokens !== o.prompt || ld.eRuns !== o.gen)
			throw new Error(`llama.cpp counted ${lp.pTokens} prefill tokens and ` +
					`${ld.eRuns} decode steps, not ${o.prompt} and ${o.gen}`);
		const run = {
			engine: "llama.cpp",
			run: r + 1,
			prefill_tok_s: round(o.prompt / p.s),
			decode_tok_s: round(o.gen / d.s),
			prefill_ms: round(p.s * 1e3, 3),
			decode_ms: round(d.s * 1e3, 3),
			llama_prefill_tok_s: round(lp.pTokens / (lp.pMs / 1e3)),
			llama_decode_tok_s: round(ld.eRuns / (ld.eMs / 1e3)),
			prefill_cpu_per_wall: round(p.cpu / p.s),
			decode_cpu_per_wall: round(d.cpu / d.s),
			tokens: d.tokens,
		};
		runs.push(run);
		process.stdout.write(JSON.stringify(run) + "\n");
	}
	const med = (k) => round(median(runs.map((r) => r[k])));
	const sum = {
		...info,
		summary: true,
		runs: o.runs,
		prefill_tok_s: med("prefill_tok_s"),
		decode_tok_s: med("decode_tok_s"),
		llama_prefill_tok_s: med("llama_prefill_tok_s"),
		llama_decode_tok_s: med("llama_decode_tok_s"),
		prefill_cpu_per_wall: med("prefill_cpu_per_wall"),
		decode_cpu_per_wall: med("decode_cpu_per_wall"),
	};
	process.stdout.write(JSON.stringify(sum) + "\n");
	process.stderr.write(
		`llama.cpp ${basename(o.file)}: prefill ${sum.prefill_tok_s} tok/s (P=${o.prompt}, ` +
		`B=${batch}), decode ${sum.decode_tok_s} tok/s (N=${o.gen} after ${o.decodePrompt}); ` +
		`llama.cpp's own counters ${sum.llama_prefill_tok_s} / ${sum.llama_decode_tok_s}; ` +
		`cpu/wall ${sum.prefill_cpu_per_wall} / ${sum.decode_cpu_per_wall} at ${o.threads} ` +
		`threads; ${cpuVariant ?? "?"} CPU variant; medians of ${o.runs}\n`);
	await ctx.dispose();
	await model.dispose();
	await llama.dispose();
}

main().catch((e) => die(1, `bench.mjs: ${e?.message ?? e}`));
