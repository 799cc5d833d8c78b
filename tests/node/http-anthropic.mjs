// http-anthropic.mjs - the official `@anthropic-ai/sdk` against a real kvpool-http +
// kvpoold (run by tests/integration/test_http.c, which starts both).
//
// /v1/messages is rendered by kvpoold's CHAT request (ChatML in the fixture, --ignore-eos:
// every reply is max_tokens long): messages whole and streamed (the events in order),
// the usage split (input_tokens + cache_read_input_tokens + cache_creation_input_tokens =
// the prompt), a second turn read from the cache, cache_control as kvpoold's message
// breakpoints (only the prefix up to it written and read; kvpoold's counter),
// count_tokens against a real call,
// cache_control checks, priority, typed errors, models.
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { env, test, run, fetchWithBody, freshLongPrompt, kvpoolStatus, eventually }
	from './http-common.mjs';

const client = (key = env.keyA, opts = {}) =>
	new Anthropic({ baseURL: env.url, apiKey: key, maxRetries: 0, ...opts });

async function thrown(promise) {
	try {
		await promise;
	} catch (e) {
		return e;
	}
	assert.fail('the call did not fail');
}

const base = {
	model: env.model,
	max_tokens: 16,
	messages: [{ role: 'user', content: 'Hello' }],
};

const BLOCK = 16; // kvpoold's default cache block, the fixture's

// Anthropic's three parts of the prompt add up to what kvpoold counted.
function checkUsage(u) {
	assert.equal(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens,
		     u.kvpool.prompt_tokens, JSON.stringify(u));
	assert.equal(u.cache_read_input_tokens,
		     u.kvpool.cached_tokens + u.kvpool.cached_tokens_disk);
	assert.ok(u.cache_creation_input_tokens <= u.kvpool.cache_creation_tokens);
}

test('messages: shape, usage, stop_reason', async () => {
	const r = await client().messages.create({ ...base, max_tokens: 5, temperature: 0 });
	assert.equal(r.type, 'message');
	assert.match(r.id, /^msg_/);
	assert.equal(r.role, 'assistant');
	assert.equal(r.model, env.model);
	assert.equal(r.content.length, 1);
	assert.equal(r.content[0].type, 'text');
	// --ignore-eos: cut by max_tokens (test_http.c checks end_turn where turns end)
	assert.equal(r.stop_reason, 'max_tokens');
	assert.equal(r.stop_sequence, null);
	assert.equal(r.usage.output_tokens, 5);
	checkUsage(r.usage);
	assert.ok(r.request_id ?? r._request_id, 'no request-id header');
});

test('messages: a system prompt and stop_sequences', async () => {
	const req = { ...base, system: 'Be brief.', max_tokens: 24, temperature: 0 };
	const r = await client().messages.create(req);
	const text = r.content[0].text;
	// stop at a printable ASCII character greedy decoding says anyway (after the first:
	// an ASCII byte is never part of another character, so it occurs as itself; and
	// before the last, so that stopping there leaves tokens ungenerated)
	const chars = [...text];
	const at = chars.findIndex((ch, i) => i > 0 && i < chars.length - 1 && ch >= '!' && ch <= '~');
	assert.ok(at > 0, 'no printable character generated');
	const stop = chars[at];
	const s = await client().messages.create({ ...req, stop_sequences: [stop] });
	assert.equal(s.stop_reason, 'stop_sequence');
	assert.equal(s.stop_sequence, stop);
	assert.equal(s.content[0].text, text.slice(0, text.indexOf(stop)));
	// usage counts what kvpoold generated before the stop reached it: tokens come in
	// frames of several when the model outruns the reader, and the frame that holds
	// the stop may hold the rest (as the OpenAI test's completion_tokens <= max)
	assert.ok(s.usage.output_tokens >= [...s.content[0].text].length);
	assert.ok(s.usage.output_tokens <= 24);
});

test('messages streamed: events in order, the same message as whole', async () => {
	const req = { ...base, messages: [{ role: 'user', content: 'Stream a message' }],
		      max_tokens: 10, temperature: 0 };
	const whole = await client().messages.create(req);
	const stream = await client().messages.create({ ...req, stream: true });
	const kinds = [];
	let text = '', start = null, delta = null;
	for await (const ev of stream) {
		if (kinds.at(-1) !== ev.type || ev.type !== 'content_block_delta')
			kinds.push(ev.type);
		if (ev.type === 'message_start')
			start = ev.message;
		if (ev.type === 'content_block_start')
			assert.deepEqual(ev.content_block, { type: 'text', text: '' });
		if (ev.type === 'content_block_delta') {
			assert.equal(ev.delta.type, 'text_delta');
			text += ev.delta.text;
		}
		if (ev.type === 'message_delta')
			delta = ev;
	}
	assert.deepEqual(kinds, ['message_start', 'content_block_start', 'content_block_delta',
				 'content_block_stop', 'message_delta', 'message_stop']);
	assert.match(start.id, /^msg_/);
	assert.equal(start.role, 'assistant');
	assert.equal(text, whole.content[0].text);
	assert.equal(delta.delta.stop_reason, 'max_tokens');
	assert.equal(delta.usage.output_tokens, 10);
	checkUsage(delta.usage);
	assert.equal(delta.usage.kvpool.prompt_tokens, whole.usage.kvpool.prompt_tokens);
	// the SDK's helper assembles the same message
	const fin = await client().messages.stream(req).finalMessage();
	assert.equal(fin.content[0].text, whole.content[0].text);
	assert.equal(fin.stop_reason, 'max_tokens');
	assert.equal(fin.usage.output_tokens, 10);
});

test('multi-turn: the second turn reads the first from the cache', async () => {
	// no cache_control: anthropic_cache = auto publishes every full block of the prompt
	const system = [{ type: 'text', text: freshLongPrompt('messages system', 600) }];
	const q1 = { role: 'user', content: 'First question?' };
	const t1 = await client().messages.create({ ...base, system, messages: [q1],
						    max_tokens: 8, temperature: 0 });
	checkUsage(t1.usage);
	const p1 = t1.usage.kvpool.prompt_tokens;
	assert.ok(t1.usage.cache_read_input_tokens <= BLOCK, `${t1.usage.cache_read_input_tokens}`);
	assert.ok(t1.usage.cache_creation_input_tokens > 0); // written for the next turn
	const t2 = await client().messages.create({
		...base, system, max_tokens: 8, temperature: 0,
		messages: [q1, { role: 'assistant', content: t1.content[0].text },
			   { role: 'user', content: 'And a second one?' }],
	});
	checkUsage(t2.usage);
	const read = t2.usage.cache_read_input_tokens;
	assert.ok(read >= Math.floor(p1 / BLOCK) * BLOCK, `read ${read} of turn 1's ${p1}`);
	// the new turn's tokens are counted past what it read: every full block written, the
	// tail short of a block (none when the prompt ends on a block boundary) as input
	assert.ok(t2.usage.kvpool.prompt_tokens > read);
	assert.ok(t2.usage.input_tokens < BLOCK, `${t2.usage.input_tokens}`);
	assert.equal(t2.usage.input_tokens + t2.usage.cache_creation_input_tokens,
		     t2.usage.kvpool.prompt_tokens - read);
});

// POST @body to @path with tenant A's key; the JSON answer.
async function post(path, body) {
	const res = await fetch(`${env.url}${path}`, {
		method: 'POST', body: JSON.stringify(body),
		headers: { Authorization: `Bearer ${env.keyA}`, 'Content-Type': 'application/json' },
	});
	const j = await res.json();
	assert.equal(res.status, 200, JSON.stringify(j));
	return j;
}

// kvpoold's count of tokens published to the cache, once it has moved past @old (or now).
async function published(old = -1) {
	let n = old;
	await eventually(() => (n = kvpoolStatus().usage.cache_creation_tokens) !== old, 3000);
	return n;
}

test('streamed: message_start carries the prompt\'s usage, cached tokens included', async () => {
	// the usage kvpoold sends with the first token: what message_start reports must add
	// up to the prompt and equal the final usage's input parts (the SDK's finalMessage
	// usage is message_delta's); a repeat of the same prompt reads it from the cache
	const system = [{ type: 'text', text: freshLongPrompt('message_start usage', 600) }];
	const req = { ...base, system, max_tokens: 4, temperature: 0, stream: true };
	for (const round of [0, 1]) {
		let start = null, delta = null;
		for await (const ev of await client().messages.create(req)) {
			if (ev.type === 'message_start')
				start = ev.message.usage;
			if (ev.type === 'message_delta')
				delta = ev.usage;
		}
		const sum = start.input_tokens + start.cache_read_input_tokens +
			    start.cache_creation_input_tokens;
		assert.equal(sum, delta.kvpool.prompt_tokens, JSON.stringify(start));
		assert.equal(start.cache_read_input_tokens, delta.cache_read_input_tokens);
		assert.equal(start.cache_creation_input_tokens, delta.cache_creation_input_tokens);
		assert.equal(start.output_tokens, 0);
		if (round === 0)
			assert.ok(start.cache_creation_input_tokens > 0, JSON.stringify(start));
		else
			assert.ok(start.cache_read_input_tokens >= Math.floor((sum - 1) / BLOCK) * BLOCK,
				  JSON.stringify(start));
	}
});

test('cache_control on the system message: only its prefix is written, then read', async () => {
	const S = freshLongPrompt('breakpoint system', 600);
	const system = [{ type: 'text', text: S,
			  cache_control: { type: 'ephemeral', ttl: '1h' } }];
	// where the system message's turn ends in the prompt: the fixture's template is
	// ChatML, whose first turn is this text after the vocabulary's BOS
	const sysEnd = (await post('/tokenize', {
		model: env.model, prompt: `<|im_start|>system\n${S}<|im_end|>\n`,
	})).count;
	const covered = Math.floor(sysEnd / BLOCK) * BLOCK; // the breakpoint's full blocks
	const q1 = { role: 'user',
		     content: 'A first question, long enough to fill two blocks of its own?' };
	const before = await published();
	const t1 = await client().messages.create({ ...base, system, messages: [q1],
						    max_tokens: 8, temperature: 0 });
	checkUsage(t1.usage);
	const p1 = t1.usage.kvpool.prompt_tokens;
	assert.ok(Math.floor(p1 / BLOCK) * BLOCK >= covered + 2 * BLOCK, `${p1} vs ${sysEnd}`);
	// a ChatML system turn's first block may be cached by anyone's: at most one read
	const read1 = t1.usage.cache_read_input_tokens;
	assert.ok(read1 <= BLOCK, `${read1}`);
	// written: the blocks up to the breakpoint, nothing of the user turn nor the reply
	assert.equal(t1.usage.cache_creation_input_tokens, covered - read1, JSON.stringify(t1.usage));
	assert.equal(t1.usage.kvpool.cache_creation_tokens, covered - read1);
	assert.equal(await published(before) - before, covered - read1); // kvpoold's counter
	// a later turn of the same conversation (same system, the reply, another question):
	// without the breakpoint it would read turn 1's whole prompt; it reads the system's
	const t2 = await client().messages.create({
		...base, system, max_tokens: 8, temperature: 0,
		messages: [q1, { role: 'assistant', content: t1.content[0].text },
			   { role: 'user', content: 'And a second one?' }],
	});
	checkUsage(t2.usage);
	assert.equal(t2.usage.cache_read_input_tokens, covered, JSON.stringify(t2.usage));
	assert.equal(t2.usage.cache_creation_input_tokens, 0);
	assert.equal(t2.usage.kvpool.cache_creation_tokens, 0);
	// the same without cache_control (auto mode): every full block read and written
	const t3 = await client().messages.create({
		...base, system: S, max_tokens: 8, temperature: 0,
		messages: [q1, { role: 'assistant', content: t1.content[0].text },
			   { role: 'user', content: 'And a second one?' }],
	});
	checkUsage(t3.usage);
	assert.equal(t3.usage.cache_read_input_tokens, covered);
	assert.ok(t3.usage.cache_creation_input_tokens >= 2 * BLOCK, JSON.stringify(t3.usage));
});

test('count_tokens: the prompt tokens a messages call reports', async () => {
	const system = 'You count tokens.';
	const messages = [{ role: 'user', content: 'How many tokens is this?' },
			  { role: 'assistant', content: 'Let me see.' },
			  { role: 'user', content: [{ type: 'text', text: 'Count them all: naïve ☕' }] }];
	const n = await client().messages.countTokens({ model: env.model, system, messages });
	assert.equal(typeof n.input_tokens, 'number');
	const r = await client().messages.create({ ...base, system, messages, max_tokens: 1 });
	const u = r.usage;
	assert.equal(n.input_tokens,
		     u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens);
	// more text, more tokens; counting needs no max_tokens but checks the rest
	const more = await client().messages.countTokens({
		model: env.model, system, messages: [...messages, { role: 'assistant', content: 'x' }],
	});
	assert.ok(more.input_tokens > n.input_tokens);
	let e = await thrown(client().messages.countTokens({ model: env.model, messages: [] }));
	assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
	e = await thrown(client().messages.countTokens({ model: 'nope', messages }));
	assert.ok(e instanceof Anthropic.NotFoundError, `${e}`);
	e = await thrown(client('sk-not-a-key-at-all').messages.countTokens({ model: env.model,
									   messages }));
	assert.ok(e instanceof Anthropic.AuthenticationError, `${e}`);
});

test('priority (vLLM\'s field) is checked and bounded', async () => {
	const r = await client().messages.create({ ...base, max_tokens: 2, priority: -10 });
	assert.equal(r.usage.output_tokens, 2);
	const e = await thrown(client().messages.create({ ...base, priority: 4000 }));
	assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
	assert.match(e.message, /priority/);
});

test('cache_control is parsed and checked (ephemeral, ttl 5m|1h, at most 4, 1h before 5m)', async () => {
	const cc = (ttl) => ({ type: 'ephemeral', ...(ttl ? { ttl } : {}) });
	const block = (text, c) => ({ type: 'text', text, ...(c ? { cache_control: c } : {}) });
	// valid: system and message breakpoints, 1h before 5m: answered (kvpoold has no
	// breakpoints or TTLs yet: the prefix cache is used as for any request)
	const r = await client().messages.create({
		...base,
		system: [block('You are terse.', cc('1h'))],
		messages: [{ role: 'user', content: [block('Long context', cc('5m')), block('Q', cc())] }],
	});
	assert.equal(r.type, 'message');
	checkUsage(r.usage);
	let e;
	// a ttl other than 5m and 1h
	e = await thrown(client().messages.create({
		...base, messages: [{ role: 'user', content: [block('x', cc('2h'))] }],
	}));
	assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
	assert.equal(e.type, 'invalid_request_error');
	assert.match(e.message, /ttl/);
	// a type other than ephemeral
	e = await thrown(client().messages.create({
		...base, messages: [{ role: 'user', content: [block('x', { type: 'forever' })] }],
	}));
	assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
	// five breakpoints
	e = await thrown(client().messages.create({
		...base,
		messages: [{ role: 'user', content: [1, 2, 3, 4, 5].map((i) => block(`b${i}`, cc())) }],
	}));
	assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
	assert.match(e.message, /maximum of 4/);
	// 1h after 5m
	e = await thrown(client().messages.create({
		...base,
		system: [block('s', cc('5m'))],
		messages: [{ role: 'user', content: [block('x', cc('1h'))] }],
	}));
	assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
});

test('errors arrive as typed errors', async () => {
	let e = await thrown(client(env.keyA, { fetch: fetchWithBody('{"model": bad') })
		.messages.create(base));
	assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
	assert.equal(e.type, 'invalid_request_error');
	assert.match(e.message, /not valid JSON/);
	e = await thrown(client().messages.create({ ...base, model: 'no-such-model' }));
	assert.ok(e instanceof Anthropic.NotFoundError, `${e}`);
	assert.equal(e.type, 'not_found_error');
	e = await thrown(client().messages.create({
		...base, messages: [{ role: 'user', content: 'x'.repeat(env.maxBody + 1) }],
	}));
	assert.ok(e instanceof Anthropic.ContentTooLargeError, `${e}`);
	assert.equal(e.status, 413);
	assert.equal(e.type, 'request_too_large');
	e = await thrown(client('sk-not-a-key-at-all').messages.create(base));
	assert.ok(e instanceof Anthropic.AuthenticationError, `${e}`);
	assert.equal(e.type, 'authentication_error');
	// what kvpool cannot do is refused, not ignored
	e = await thrown(client().messages.create({
		...base, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }],
	}));
	assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
	e = await thrown(client().messages.create({
		...base, tools: [{ name: 'f', input_schema: { type: 'object' } }],
	}));
	assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
	assert.match(e.message, /does not support tools/);
	const { max_tokens, ...noMax } = base;
	e = await thrown(client().messages.create(noMax));
	assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
	assert.match(e.message, /max_tokens/);
});

test('the model\'s context length is enforced, in Anthropic\'s words', async () => {
	// the fixture's kvpoold: --context-tokens 8192 (test_http.c); a token a byte (tinyq)
	const messages = [{ role: 'user', content: freshLongPrompt('actx', 8150) }];
	const e = await thrown(client().messages.create({ ...base, messages, max_tokens: 100 }));
	assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
	assert.equal(e.error.error.type, 'invalid_request_error');
	assert.match(e.error.error.message, /^input length and `max_tokens` exceed context limit: \d+ \+ 100 > 8192, decrease input length or `max_tokens` and try again$/);
	const s = await thrown(client().messages.create({ ...base, messages, max_tokens: 100, stream: true }));
	assert.ok(s instanceof Anthropic.BadRequestError, `${s}`);
});

test('models: list', async () => {
	const list = await client().models.list();
	const ids = [];
	for await (const m of list)
		ids.push(m.id);
	assert.deepEqual(ids, [env.model, 'gpt-kvpool']);
});

await run('anthropic');
