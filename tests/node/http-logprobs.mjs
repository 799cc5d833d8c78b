// SPDX-License-Identifier: MIT
// http-logprobs.mjs - OpenAI's logprobs / top_logprobs (chat) and logprobs (completions),
// and n > 1, through the official `openai` SDK against a real kvpool-http + kvpoold on a
// real vocabulary (run by tests/integration/test_http_tools.c).  Every entry: a token
// whose bytes are its text, a log-probability <= 0 equal to its own entry among the
// alternatives, the alternatives sorted; whole and streamed agree (greedy); the limits
// refused with a 400 naming the field.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { env, test, run, kvpoolStatus, eventually, freshLongPrompt } from './http-common.mjs';

const family = process.env.KVP_FAMILY;
const openai = new OpenAI({ baseURL: `${env.url}/v1`, apiKey: env.keyA, maxRetries: 0 });
const messages = [{ role: 'system', content: 'You are terse.' },
	{ role: 'user', content: 'Name three colours.' }];

// Whole and streamed are two requests: the second reads the prompt's K/V from the cache
// and computes only what follows, on other row shapes, so its log-probabilities may
// differ in the last bits (test_forward bounds such differences at 1e-4); tokens, bytes
// and order must be the same.
const TOL = 1e-4;

function near(a, b, what) {
	assert.ok(Math.abs(a - b) <= TOL, `${what}: ${a} vs ${b}`);
}

function sameChatEntries(got, want) {
	assert.equal(got.length, want.length);
	got.forEach((g, i) => {
		const w = want[i];
		assert.equal(g.token, w.token);
		assert.deepEqual(g.bytes, w.bytes);
		near(g.logprob, w.logprob, `entry ${i}`);
		assert.equal(g.top_logprobs.length, w.top_logprobs.length);
		g.top_logprobs.forEach((t, j) => {
			assert.equal(t.token, w.top_logprobs[j].token);
			near(t.logprob, w.top_logprobs[j].logprob, `entry ${i} alternative ${j}`);
		});
	});
}

function sameBytes(a, b) {
	return a.length === b.length && a.every((x, i) => x === b[i]);
}

// One chat entry: {token, logprob, bytes, top_logprobs[k]}, as OpenAI's.
function checkChatEntry(e, k, greedy) {
	assert.equal(typeof e.token, 'string');
	assert.ok(Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
	assert.equal(typeof e.logprob, 'number');
	assert.ok(e.logprob <= 0, `logprob ${e.logprob}`);
	if (e.bytes.length && Buffer.from(e.bytes).toString('utf8').indexOf('\ufffd') < 0)
		assert.equal(e.token, Buffer.from(e.bytes).toString('utf8'));
	assert.equal(e.top_logprobs.length, k);
	for (let i = 0; i < e.top_logprobs.length; i++) {
		const t = e.top_logprobs[i];
		assert.equal(typeof t.token, 'string');
		assert.ok(t.logprob <= 0);
		assert.ok(Array.isArray(t.bytes));
		if (i)
			assert.ok(t.logprob <= e.top_logprobs[i - 1].logprob, 'alternatives sorted');
	}
	const own = e.top_logprobs.find((t) => sameBytes(t.bytes, e.bytes));
	if (own)
		assert.equal(own.logprob, e.logprob, `token ${JSON.stringify(e.token)}`);
	if (greedy && k) {
		// the greedy token is the most likely one (ties: the lowest id, kvpoold's order)
		assert.ok(own, `greedy token ${JSON.stringify(e.token)} among the alternatives`);
		assert.equal(e.logprob, e.top_logprobs[0].logprob);
	}
}

test('chat: logprobs and top_logprobs, whole and streamed (the same entries)', async () => {
	const req = { model: env.model, messages, max_tokens: 12, temperature: 0,
		logprobs: true, top_logprobs: 5 };
	const r = await openai.chat.completions.create(req);
	const c = r.choices[0];
	assert.ok(c.logprobs && Array.isArray(c.logprobs.content), JSON.stringify(c));
	assert.equal(c.logprobs.content.length, r.usage.completion_tokens);
	for (const e of c.logprobs.content)
		checkChatEntry(e, 5, true);
	// the entries' bytes spell the answer (an end-of-turn token last, as its text)
	const spelled = Buffer.concat(c.logprobs.content.map((e) => Buffer.from(e.bytes))).toString();
	assert.ok(spelled.startsWith(c.message.content), `${spelled} / ${c.message.content}`);

	const s = await openai.chat.completions.create({ ...req, stream: true });
	const got = [];
	let text = '';
	for await (const ch of s) {
		const d = ch.choices[0];
		text += d?.delta?.content ?? '';
		if (d?.logprobs?.content)
			got.push(...d.logprobs.content);
	}
	assert.equal(text, c.message.content);
	sameChatEntries(got, c.logprobs.content);

	// logprobs without top_logprobs: the entries, no alternatives; without logprobs: null
	const p = await openai.chat.completions.create({ ...req, top_logprobs: undefined });
	for (const e of p.choices[0].logprobs.content)
		checkChatEntry(e, 0, false);
	const q = await openai.chat.completions.create({ model: env.model, messages, max_tokens: 4 });
	assert.equal(q.choices[0].logprobs, null);
});

test('chat: sampled tokens (temperature 1) still carry their own logprob', async () => {
	const r = await openai.chat.completions.create({ model: env.model, messages, max_tokens: 16,
		temperature: 1, seed: 7, logprobs: true, top_logprobs: 20 });
	assert.equal(r.choices[0].logprobs.content.length, r.usage.completion_tokens);
	for (const e of r.choices[0].logprobs.content)
		checkChatEntry(e, 20, false);
});

test('completions: logprobs N (tokens, token_logprobs, top_logprobs, text_offset)', async () => {
	const req = { model: env.model, prompt: 'The colours are', max_tokens: 10, temperature: 0,
		logprobs: 3 };
	const r = await openai.completions.create(req);
	const lp = r.choices[0].logprobs;
	const n = r.usage.completion_tokens;
	assert.equal(lp.tokens.length, n);
	assert.equal(lp.token_logprobs.length, n);
	assert.equal(lp.top_logprobs.length, n);
	assert.equal(lp.text_offset.length, n);
	let off = 0;
	for (let i = 0; i < n; i++) {
		const top = Object.entries(lp.top_logprobs[i]);
		assert.ok(lp.token_logprobs[i] <= 0);
		assert.ok(top.length >= 1 && top.length <= 4, JSON.stringify(top));
		// greedy: the token is the most likely of its alternatives, with its own logprob
		assert.equal(lp.top_logprobs[i][lp.tokens[i]], lp.token_logprobs[i]);
		assert.equal(Math.max(...top.map(([, v]) => v)), lp.token_logprobs[i]);
		// byte offsets into the text: a token that is part of a character shows as
		// U+FFFD, so only whole-character tokens give their length here
		if (i === 0)
			assert.equal(lp.text_offset[i], 0);
		else if (!lp.tokens[i - 1].includes('\ufffd'))
			assert.equal(lp.text_offset[i], off);
		else
			assert.ok(lp.text_offset[i] > lp.text_offset[i - 1]); // its bytes are at least one
		off = lp.text_offset[i] + Buffer.byteLength(lp.tokens[i]);
	}
	// the tokens spell the text (this shape has no bytes: only when every token is whole
	// characters), and the offsets end where the text's bytes do
	if (!lp.tokens.some((t) => t.includes('\ufffd')))
		assert.ok(lp.tokens.join('').startsWith(r.choices[0].text));
	assert.ok(off >= Buffer.byteLength(r.choices[0].text.replace(/\ufffd/g, '')));

	const s = await openai.completions.create({ ...req, stream: true });
	const got = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
	for await (const ch of s)
		for (const k of Object.keys(got))
			got[k].push(...(ch.choices[0]?.logprobs?.[k] ?? []));
	assert.deepEqual(got.tokens, lp.tokens);
	assert.deepEqual(got.text_offset, lp.text_offset);
	assert.equal(got.token_logprobs.length, lp.token_logprobs.length);
	got.token_logprobs.forEach((x, i) => near(x, lp.token_logprobs[i], `token ${i}`));
	assert.equal(got.top_logprobs.length, lp.top_logprobs.length);
	got.top_logprobs.forEach((t, i) => {
		assert.deepEqual(Object.keys(t), Object.keys(lp.top_logprobs[i]));
		for (const k of Object.keys(t))
			near(t[k], lp.top_logprobs[i][k], `token ${i} alternative ${JSON.stringify(k)}`);
	});

	// logprobs 0: the sampled token alone
	const z = await openai.completions.create({ ...req, logprobs: 0 });
	for (const d of z.choices[0].logprobs.top_logprobs)
		assert.equal(Object.keys(d).length, 1);
});

// kvpoold's prompt positions computed so far (the status report), once it has moved on
// from @old (the counters are updated as the step ends, the answer may come first)
async function prefillAfter(old, want) {
	let now = old;
	await eventually(() => (now = kvpoolStatus().scheduler.prefill_tokens) - old >= want, 3000);
	return now;
}

for (const api of ['chat', 'completions']) {
	// a fresh prompt unless @extra names one
	const create = (extra) => api === 'chat' ?
		openai.chat.completions.create({ model: env.model, max_tokens: 10,
			messages: [{ role: 'user', content: freshLongPrompt('n', 200) }], ...extra }) :
		openai.completions.create({ model: env.model, max_tokens: 10,
			prompt: freshLongPrompt('n', 200), ...extra });
	const textOf = (c) => api === 'chat' ? c.message.content : c.text;

	test(`${api}: n = 3 at temperature 1: three choices, each the request alone with seed + i`,
		async () => {
			const before = kvpoolStatus().scheduler.prefill_tokens;
			const body = { temperature: 1, seed: 40, logprobs: api === 'chat' ? true : 0 };
			const fixed = api === 'chat' ?
				{ messages: [{ role: 'user', content: freshLongPrompt('n3', 200) }] } :
				{ prompt: freshLongPrompt('n3', 200) };
			const r = await create({ ...body, ...fixed, n: 3 });
			assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
			// the prompt computed once: kvpoold's prefill counter moved by one prompt
			const computed = r.usage.prompt_tokens - r.usage.prompt_tokens_details.cached_tokens;
			const after = await prefillAfter(before, computed);
			assert.equal(after - before, computed);
			// completion tokens summed over the choices (each one's logprobs count them)
			const counts = r.choices.map((c) => api === 'chat' ?
				c.logprobs.content.length : c.logprobs.tokens.length);
			assert.equal(r.usage.completion_tokens, counts.reduce((a, b) => a + b));
			for (let i = 0; i < 3; i++) {
				const one = await create({ ...body, ...fixed, seed: 40 + i });
				assert.equal(one.choices.length, 1);
				assert.equal(textOf(r.choices[i]), textOf(one.choices[0]), `choice ${i}`);
				assert.equal(one.usage.prompt_tokens, r.usage.prompt_tokens);
			}
			assert.ok(new Set(r.choices.map(textOf)).size > 1, 'seeds differ: answers differ');

			// streamed: every chunk names its choice; each choice's text the same
			const s = await create({ ...body, ...fixed, n: 3, stream: true,
				stream_options: { include_usage: true } });
			const texts = ['', '', ''];
			let usage = null, finishes = 0;
			for await (const ch of s) {
				if (ch.usage)
					usage = ch.usage;
				for (const c of ch.choices) {
					texts[c.index] += (api === 'chat' ? c.delta?.content : c.text) ?? '';
					finishes += c.finish_reason ? 1 : 0;
				}
			}
			assert.deepEqual(texts, r.choices.map(textOf));
			assert.equal(finishes, 3);
			assert.equal(usage.completion_tokens, r.usage.completion_tokens);
			assert.equal(usage.prompt_tokens, r.usage.prompt_tokens);
		});

	test(`${api}: n = 3 greedy: three identical choices`, async () => {
		const r = await create({ temperature: 0, n: 3 });
		assert.equal(r.choices.length, 3);
		assert.equal(new Set(r.choices.map(textOf)).size, 1);
		assert.deepEqual(r.choices.map((c) => c.finish_reason),
			Array(3).fill(r.choices[0].finish_reason));
	});
}

test('bad values: 400 naming the field', async () => {
	const bad = [
		[{ messages, logprobs: true, top_logprobs: 21 }, /top_logprobs: 21 is out of range \[0, 20\]/],
		[{ messages, top_logprobs: 2 }, /top_logprobs: requires logprobs to be true/],
		[{ messages, logprobs: false, top_logprobs: 2 }, /requires logprobs/],
		[{ messages, n: 0 }, /n: 0 is out of range \[1, 128\]/],
		[{ messages, n: 129 }, /n: 129 is out of range \[1, 128\]/],
		[{ messages, n: 17 }, /n: 17 is above 16, the most choices kvpoold samples/],
	];
	for (const [body, re] of bad)
		await assert.rejects(openai.chat.completions.create({ model: env.model, max_tokens: 2, ...body }),
			(e) => e.status === 400 && re.test(e.message), JSON.stringify(body));
	await assert.rejects(openai.completions.create({ model: env.model, prompt: 'x', max_tokens: 2,
		logprobs: 21 }), (e) => e.status === 400 && /logprobs: 21 is out of range/.test(e.message));
});

await run(`logprobs (${family})`);
