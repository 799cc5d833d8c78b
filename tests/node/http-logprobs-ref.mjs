// SPDX-License-Identifier: MIT
// http-logprobs-ref.mjs - one greedy completion with logprobs 5 through the official
// `openai` SDK, the prompt given as token ids (so no tokenizer stands between the two
// sides), written to $KVP_LOGPROBS_OUT as JSON {prompt, token_logprobs, top}: each step's
// logprob and its alternatives' logprobs, best first.  test_http_tools.c computes the
// same log-softmax from its own forward pass over the model file and compares.
import fs from 'node:fs';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { env, test, run } from './http-common.mjs';

const openai = new OpenAI({ baseURL: `${env.url}/v1`, apiKey: env.keyA, maxRetries: 0 });
const prompt = [11, 7, 250, 3, 99, 42, 5, 17, 64, 128];

test('completions: logprobs of a token-id prompt, for the reference', async () => {
	const r = await openai.completions.create({ model: env.model, prompt, max_tokens: 6,
		temperature: 0, logprobs: 5 });
	const lp = r.choices[0].logprobs;
	assert.ok(lp && lp.token_logprobs.length >= 1, JSON.stringify(r.choices[0]));
	const top = lp.top_logprobs.map((o) => Object.values(o).sort((a, b) => b - a));
	fs.writeFileSync(process.env.KVP_LOGPROBS_OUT,
		JSON.stringify({ prompt, token_logprobs: lp.token_logprobs, top }));
});

await run("logprobs reference");
