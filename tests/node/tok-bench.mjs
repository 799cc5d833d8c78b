// SPDX-License-Identifier: MIT
// tok-bench.mjs - the same-run baseline of tests/bench/bench_tokenize.c: encode one text
// file with the npm reference tokenizer (raw text, no BOS) RUNS times after a warm-up and
// print "TOKENS MEDIAN_MS".
//   node tok-bench.mjs llama3|llama2 FILE RUNS
import fs from 'node:fs';
import llama3 from 'llama3-tokenizer-js';
import llama2 from 'llama-tokenizer-js';

const [family, file, runsArg] = process.argv.slice(2);
const text = fs.readFileSync(file, 'utf8');
const runs = Number(runsArg ?? 9);
const enc = family === 'llama3'
	? () => llama3.encode(text, { bos: false, eos: false, specialTokenRegex: /(?!)/g })
	: () => llama2.encode(text, false, true);
let n = enc().length;	// warm-up (JIT, caches)
const ms = [];
for (let i = 0; i < runs; i++) {
	const t0 = performance.now();
	n = enc().length;
	ms.push(performance.now() - t0);
}
ms.sort((a, b) => a - b);
console.log(`${n} ${ms[Math.floor(runs / 2)].toFixed(3)}`);
