// http-openai.mjs - the official `openai` SDK against a real kvpool-http + kvpoold (run by
// tests/integration/test_http.c, which starts both; kvpoold runs with --ignore-eos, so
// every request generates exactly max_tokens, and renders chats with ChatML).
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { env, test, run, kvpoolGenerate, kvpoolStatus, eventually, fetchWithBody,
	 freshLongPrompt } from './http-common.mjs';

const client = (key = env.keyA, opts = {}) =>
	new OpenAI({ baseURL: `${env.url}/v1`, apiKey: key, maxRetries: 0, ...opts });

// The error a call throws (fails when it does not throw).
async function thrown(promise) {
	try {
		await promise;
	} catch (e) {
		return e;
	}
	assert.fail('the call did not fail');
}

test('non-streaming completion: shape and usage', async () => {
	const r = await client().completions.create({
		model: env.model, prompt: 'Hello, world', max_tokens: 8, temperature: 0,
	});
	assert.equal(r.object, 'text_completion');
	assert.match(r.id, /^cmpl-/);
	assert.equal(r.model, env.model);
	assert.equal(r.choices.length, 1);
	assert.equal(typeof r.choices[0].text, 'string');
	assert.equal(r.choices[0].finish_reason, 'length');
	assert.equal(r.usage.completion_tokens, 8);
	assert.ok(r.usage.prompt_tokens > 0);
	assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
	assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
	assert.equal(r.usage.kvpool.generated_tokens, 8);
	assert.equal(r.usage.kvpool.prompt_tokens, r.usage.prompt_tokens);
});

test('streaming completion: chunks, usage chunk, same text as non-streaming', async () => {
	const req = { model: env.model, prompt: 'Stream me', max_tokens: 12, temperature: 0 };
	const whole = await client().completions.create(req);
	const stream = await client().completions.create({
		...req, stream: true, stream_options: { include_usage: true },
	});
	let text = '', chunks = 0, usage = null, finish = null;
	for await (const c of stream) {
		assert.equal(c.object, 'text_completion');
		if (c.usage) {
			usage = c.usage;
			assert.equal(c.choices.length, 0);
			continue;
		}
		chunks++;
		text += c.choices[0].text;
		finish = c.choices[0].finish_reason ?? finish;
	}
	assert.ok(chunks >= 2, `only ${chunks} chunks`);
	assert.equal(text, whole.choices[0].text);
	assert.equal(finish, 'length');
	assert.equal(usage.completion_tokens, 12);
	assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
});

test('a repeated long prompt reports cached tokens', async () => {
	const prompt = freshLongPrompt('cache');
	const req = { model: env.model, prompt, max_tokens: 4, temperature: 0 };
	const first = await client().completions.create(req);
	const second = await client().completions.create(req);
	assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
	assert.ok(first.usage.kvpool.cache_creation_tokens > 0);
	// whole blocks of 16 tokens, never the last prompt token
	const want = Math.floor((second.usage.prompt_tokens - 1) / 16) * 16;
	assert.equal(second.usage.prompt_tokens_details.cached_tokens, want);
	assert.ok(want >= 512, `only ${want} cacheable tokens`);
	assert.equal(second.choices[0].text, first.choices[0].text);
	// streamed usage reports it too
	const s = await client().completions.create({
		...req, stream: true, stream_options: { include_usage: true },
	});
	let usage;
	for await (const c of s)
		usage = c.usage ?? usage;
	assert.equal(usage.prompt_tokens_details.cached_tokens, want);
});

test('tenants never share cached prefixes; cache_salt partitions further', async () => {
	const prompt = freshLongPrompt('tenant');
	const req = { model: env.model, prompt, max_tokens: 2, temperature: 0 };
	const a1 = await client(env.keyA).completions.create(req);
	const a2 = await client(env.keyA).completions.create(req);
	const b1 = await client(env.keyB).completions.create(req);
	const b2 = await client(env.keyB).completions.create(req);
	const s1 = await client(env.keyA).completions.create({ ...req, cache_salt: 'project-x' });
	assert.equal(a1.usage.prompt_tokens_details.cached_tokens, 0);
	assert.ok(a2.usage.prompt_tokens_details.cached_tokens > 0);
	assert.equal(b1.usage.prompt_tokens_details.cached_tokens, 0, 'bob read alice\'s cache');
	assert.ok(b2.usage.prompt_tokens_details.cached_tokens > 0);
	assert.equal(s1.usage.prompt_tokens_details.cached_tokens, 0, 'cache_salt did not partition');
	assert.equal(b1.choices[0].text, a1.choices[0].text);
});

test('tokens equal `kvpool generate` for the same greedy request', async () => {
	const prompt = 'Tokens equal: the same request, two ways.';
	const r = await client().completions.create({
		model: env.model, prompt, max_tokens: 16, temperature: 0, return_token_ids: true,
	});
	const direct = kvpoolGenerate(['-p', prompt, '-n', '16']);
	assert.deepEqual(r.choices[0].token_ids, direct.tokens);
	assert.equal(r.usage.prompt_tokens, direct.usage.prompt_tokens);
	// a prompt of token ids, streamed, with the ids of every chunk
	const ids = [1, 72, 101, 108, 108, 111];
	const s = await client().completions.create({
		model: env.model, prompt: ids, max_tokens: 16, temperature: 0, stream: true,
		return_token_ids: true,
	});
	const got = [];
	for await (const c of s)
		got.push(...(c.choices[0]?.token_ids ?? []));
	assert.deepEqual(got, kvpoolGenerate(['--tokens', ids.join(','), '-n', '16']).tokens);
});

// A stop string of @n printable bytes the model generated one after the other, after its
// first token (byte-level vocab: id = byte + 3, one byte a token), so it is valid UTF-8,
// really occurs, and for n > 1 starts in one token and ends in another: the text ends
// before it, whole and streamed.
async function stopCase(n) {
	const req = { model: env.model, prompt: 'Stop here', max_tokens: 48, temperature: 0 };
	const full = await client().completions.create({ ...req, return_token_ids: true });
	const ids = full.choices[0].token_ids;
	const pr = (id) => id !== undefined && id - 3 >= 0x21 && id - 3 <= 0x7e;
	const at = ids.findIndex((id, i) => i > 0 && ids.slice(i, i + n).filter(pr).length === n);
	assert.ok(at > 0, `no ${n} printable bytes generated in a row`);
	const stop = String.fromCharCode(...ids.slice(at, at + n).map((id) => id - 3));
	const cut = full.choices[0].text.indexOf(stop);
	assert.ok(cut >= 0);
	const r = await client().completions.create({ ...req, stop: [stop, 'never-appears'] });
	assert.equal(r.choices[0].finish_reason, 'stop');
	assert.equal(r.choices[0].text, full.choices[0].text.slice(0, cut));
	assert.ok(r.usage.completion_tokens <= 48);
	const s = await client().completions.create({ ...req, stop, stream: true });
	let text = '', finish;
	for await (const c of s) {
		text += c.choices[0].text;
		finish = c.choices[0].finish_reason ?? finish;
	}
	assert.equal(text, r.choices[0].text);
	assert.equal(finish, 'stop');
}

test('stop strings end the text before them, streamed or not', () => stopCase(1));
test('a stop string across a token boundary ends the text before it, streamed or not', () =>
	stopCase(2));

test('errors arrive as typed errors', async () => {
	// bad JSON (the SDK always sends good JSON: a fetch that spoils the body)
	let e = await thrown(client(env.keyA, { fetch: fetchWithBody('{"model": bad') })
		.completions.create({ model: env.model, prompt: 'x' }));
	assert.ok(e instanceof OpenAI.BadRequestError, `${e}`);
	assert.equal(e.status, 400);
	assert.equal(e.type, 'invalid_request_error');
	assert.match(e.message, /not valid JSON/);
	// unknown model
	e = await thrown(client().completions.create({ model: 'no-such-model', prompt: 'x' }));
	assert.ok(e instanceof OpenAI.NotFoundError, `${e}`);
	assert.equal(e.code, 'model_not_found');
	assert.equal(e.param, 'model');
	// too large
	e = await thrown(client().completions.create({
		model: env.model, prompt: 'x'.repeat(env.maxBody + 1),
	}));
	assert.ok(e instanceof OpenAI.APIError, `${e}`);
	assert.equal(e.status, 413);
	assert.equal(e.code, 'request_too_large');
	// bad key, and no key
	e = await thrown(client('sk-not-a-key-at-all').completions.create({ model: env.model, prompt: 'x' }));
	assert.ok(e instanceof OpenAI.AuthenticationError, `${e}`);
	assert.equal(e.code, 'invalid_api_key');
	e = await thrown(client().models.list({ headers: { Authorization: null } }));
	assert.ok(e instanceof OpenAI.AuthenticationError, `${e}`);
	// what kvpool cannot do is refused, not ignored
	e = await thrown(client().completions.create({ model: env.model, prompt: 'x', n: 17 }));
	assert.ok(e instanceof OpenAI.BadRequestError, `${e}`);
	assert.equal(e.param, 'n');
	e = await thrown(client().completions.create({ model: env.model, prompt: 'x', logprobs: 21 }));
	assert.ok(e instanceof OpenAI.BadRequestError, `${e}`);
	assert.equal(e.param, 'logprobs');
	e = await thrown(client().completions.create({ model: env.model, prompt: 'x', max_tokens: 1e7 }));
	assert.ok(e instanceof OpenAI.BadRequestError, `${e}`);
	e = await thrown(client().completions.create({ model: env.model, prompt: 'x', temperature: -1 }));
	assert.ok(e instanceof OpenAI.BadRequestError, `${e}`);
	assert.equal(e.param, 'temperature');
	// a streamed request's error comes before the stream starts, with its status
	e = await thrown(client().completions.create({ model: 'nope', prompt: 'x', stream: true }));
	assert.ok(e instanceof OpenAI.NotFoundError, `${e}`);
});

const BLOCK = 16; // kvpoold's default cache block, the fixture's

test('chat completion: shape, usage, finish_reason', async () => {
	const r = await client().chat.completions.create({
		model: env.model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 6,
		temperature: 0,
	});
	assert.equal(r.object, 'chat.completion');
	assert.match(r.id, /^chatcmpl-/);
	assert.equal(r.model, env.model);
	assert.equal(r.choices.length, 1);
	assert.equal(r.choices[0].message.role, 'assistant');
	assert.equal(typeof r.choices[0].message.content, 'string');
	// kvpoold runs with --ignore-eos here: the reply is cut by max_tokens
	// (test_http.c's end-of-generation test checks "stop" on a daemon that ends turns)
	assert.equal(r.choices[0].finish_reason, 'length');
	assert.equal(r.usage.completion_tokens, 6);
	assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 6);
	// the chat template (ChatML here) wraps the message: more tokens than 'Hello' alone
	const tok = await post('/tokenize', { prompt: 'Hello' });
	assert.ok(r.usage.prompt_tokens > tok.count + 10, `${r.usage.prompt_tokens}`);
	assert.equal(r.usage.kvpool.prompt_tokens, r.usage.prompt_tokens);
});

test('multi-turn chat: the second turn reads the first from the cache', async () => {
	const system = freshLongPrompt('chat system', 600);
	const msgs = [{ role: 'system', content: system },
		      { role: 'user', content: 'First question?' }];
	const t1 = await client().chat.completions.create({
		model: env.model, messages: msgs, max_tokens: 8, temperature: 0,
	});
	const p1 = t1.usage.prompt_tokens;
	// a fresh system prompt: at most the template's first block is shared with others
	assert.ok(t1.usage.prompt_tokens_details.cached_tokens <= BLOCK,
		  `${t1.usage.prompt_tokens_details.cached_tokens}`);
	const t2 = await client().chat.completions.create({
		model: env.model, max_tokens: 8, temperature: 0,
		messages: [...msgs, { role: 'assistant', content: t1.choices[0].message.content },
			   { role: 'user', content: 'And a second one?' }],
	});
	const cached = t2.usage.prompt_tokens_details.cached_tokens;
	// turn 1's prompt is a prefix of turn 2's, so every full block of it is found again
	assert.ok(t2.usage.prompt_tokens > p1);
	assert.ok(cached >= Math.floor(p1 / BLOCK) * BLOCK, `cached ${cached} of turn 1's ${p1}`);
	assert.ok(cached < t2.usage.prompt_tokens);
	assert.equal(t2.usage.kvpool.cached_tokens + t2.usage.kvpool.cached_tokens_disk, cached);
});

test('streaming chat: role first, content deltas, finish, usage, same text as whole', async () => {
	const req = { model: env.model, messages: [{ role: 'user', content: 'Stream a chat' }],
		      max_tokens: 10, temperature: 0 };
	const whole = await client().chat.completions.create(req);
	const stream = await client().chat.completions.create({
		...req, stream: true, stream_options: { include_usage: true },
	});
	const seen = [];
	let text = '', usage = null;
	for await (const c of stream) {
		assert.equal(c.object, 'chat.completion.chunk');
		assert.match(c.id, /^chatcmpl-/);
		if (c.usage) {
			assert.equal(c.choices.length, 0);
			usage = c.usage;
			seen.push('usage');
			continue;
		}
		const ch = c.choices[0];
		if (ch.delta.role) {
			assert.equal(ch.delta.role, 'assistant');
			seen.push('role');
		} else if (ch.finish_reason) {
			assert.equal(ch.finish_reason, 'length');
			seen.push('finish');
		} else {
			text += ch.delta.content;
			if (seen.at(-1) !== 'content')
				seen.push('content');
		}
	}
	assert.deepEqual(seen, ['role', 'content', 'finish', 'usage']);
	assert.equal(text, whole.choices[0].message.content);
	assert.equal(usage.completion_tokens, 10);
	assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
});

// The synthetic vocabulary is <unk>, <s>, </s>, then the 256 byte tokens: each
// logprobs entry names exactly its id's byte, in the whole answer and streamed.
test('logprobs name each id by its piece (the byte vocabulary)', async () => {
	const req = { model: env.model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 12,
		temperature: 0, logprobs: true, top_logprobs: 4, return_token_ids: true };
	const r = await client().chat.completions.create(req);
	const ids = r.choices[0].token_ids;
	const content = r.choices[0].logprobs.content;
	assert.equal(content.length, ids.length);
	for (let i = 0; i < ids.length; i++) {
		if (ids[i] >= 3)
			assert.deepEqual(content[i].bytes, [ids[i] - 3]);
		assert.equal(content[i].top_logprobs.length, 4);
		assert.equal(content[i].logprob, content[i].top_logprobs[0].logprob);
		for (const t of content[i].top_logprobs)
			assert.ok(t.bytes.length === 1 || t.token === '<unk>' || t.token === '<s>' ||
				t.token === '</s>', JSON.stringify(t));
	}
	const s = await client().chat.completions.create({ ...req, stream: true });
	const got = [];
	for await (const ch of s)
		got.push(...(ch.choices[0]?.logprobs?.content ?? []));
	assert.deepEqual(got, content);
});

test('chat completions check their body', async () => {
	const req = { model: env.model, messages: [{ role: 'user', content: 'Hello' }] };
	let e = await thrown(client().chat.completions.create({ ...req, messages: [] }));
	assert.ok(e instanceof OpenAI.BadRequestError, `${e}`);
	e = await thrown(client().chat.completions.create({ ...req, n: 0 }));
	assert.ok(e instanceof OpenAI.BadRequestError, `${e}`);
	e = await thrown(client().chat.completions.create({
		...req, tools: [{ type: 'function', function: { name: 'f' } }],
	}));
	assert.ok(e instanceof OpenAI.BadRequestError, `${e}`);
	// the fixture's template is ChatML by name, which has no tools: refused, not dropped
	assert.match(e.message, /chat template \(chatml\) does not support tools/);
	e = await thrown(client().chat.completions.create({ ...req, stream: true, model: 'nope' }));
	assert.ok(e instanceof OpenAI.NotFoundError, `${e}`);
	// a field kvpool cannot honour is refused, naming it; its neutral value is accepted
	for (const [param, v] of [['audio', { voice: 'alloy', format: 'mp3' }],
		['prediction', { type: 'content', content: 'x' }], ['moderation', { mode: 'on' }]]) {
		e = await thrown(client().chat.completions.create({ ...req, max_tokens: 1, [param]: v }));
		assert.ok(e instanceof OpenAI.BadRequestError, `${param}: ${e}`);
		assert.equal(e.param, param);
		assert.equal(e.code, 'unsupported_parameter');
		const r = await client().chat.completions.create({ ...req, max_tokens: 1, [param]: null });
		assert.equal(r.object, 'chat.completion');
	}
});

test('priority (vLLM\'s field) is checked and bounded', async () => {
	const req = { model: env.model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 };
	for (const priority of [-1000, -3, 0, 7, 1000]) {
		const r = await client().chat.completions.create({ ...req, priority });
		assert.equal(r.usage.completion_tokens, 2);
	}
	const c = await client().completions.create({ model: env.model, prompt: 'x', max_tokens: 1,
						      priority: 5 });
	assert.equal(c.usage.completion_tokens, 1);
	for (const priority of [1001, -1001, 1.5, 'high']) {
		const e = await thrown(client().chat.completions.create({ ...req, priority }));
		assert.ok(e instanceof OpenAI.BadRequestError, `${priority}: ${e}`);
		assert.equal(e.param, 'priority');
	}
});

// POST @path with a JSON body as tenant A; the parsed answer (fails on a non-200).
async function post(path, body, status = 200) {
	const res = await fetch(`${env.url}${path}`, {
		method: 'POST', body: JSON.stringify(body),
		headers: { Authorization: `Bearer ${env.keyA}`, 'Content-Type': 'application/json' },
	});
	const j = await res.json();
	assert.equal(res.status, status, JSON.stringify(j));
	return j;
}

test('tokenize and detokenize: a round trip, and the counts generation reports', async () => {
	const text = 'Tokenize me, please: naïve café ☕';
	const t = await post('/tokenize', { model: env.model, prompt: text });
	assert.equal(t.count, t.tokens.length);
	assert.ok(t.max_model_len > 0);
	const d = await post('/detokenize', { model: env.model, tokens: t.tokens });
	assert.equal(d.prompt, text);
	// the same count a completion of that prompt reports
	const c = await client().completions.create({ model: env.model, prompt: text, max_tokens: 1 });
	assert.equal(c.usage.prompt_tokens, t.count);
	// a body with stream: true (copied from a streamed call) still gets one JSON answer
	assert.deepEqual(await post('/tokenize', { prompt: text, stream: true }), t);
	// add_special_tokens: false leaves the BOS out
	const nb = await post('/tokenize', { prompt: text, add_special_tokens: false });
	assert.equal(nb.count, t.count - 1);
	assert.deepEqual(nb.tokens, t.tokens.slice(1));
	// the chat form counts what a chat completion of those messages is given
	const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: text }];
	const ct = await post('/tokenize', { model: env.model, messages });
	const cc = await client().chat.completions.create({ model: env.model, messages, max_tokens: 1 });
	assert.equal(ct.count, cc.usage.prompt_tokens);
	// checks: ids against the vocabulary, text only, a known model
	let e = await post('/detokenize', { tokens: [1, 1e9] }, 400);
	assert.equal(e.error.param, 'tokens');
	e = await post('/tokenize', { prompt: [1, 2, 3] }, 400);
	assert.equal(e.error.param, 'prompt');
	e = await post('/tokenize', { model: 'nope', prompt: 'x' }, 404);
	assert.equal(e.error.code, 'model_not_found');
});

test('a disconnected stream cancels its request in kvpoold', async () => {
	const before = kvpoolStatus();
	const ctl = new AbortController();
	const stream = await client().completions.create({
		model: env.model, prompt: 'A long answer, cut short', max_tokens: 4000, temperature: 0,
		stream: true,
	}, { signal: ctl.signal });
	let chunks = 0;
	try {
		for await (const c of stream) {
			if (++chunks === 2)
				ctl.abort();
		}
	} catch (e) {
		assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', `${e}`);
	}
	const ok = await eventually(() => {
		const s = kvpoolStatus().scheduler;
		return s.requests_cancelled > before.scheduler.requests_cancelled &&
		       s.cancels_received > before.scheduler.cancels_received;
	});
	assert.ok(ok, 'kvpoold never saw the cancel');
	const after = kvpoolStatus();
	const generated = after.usage.generated_tokens - before.usage.generated_tokens;
	assert.ok(generated < 4000, `the cancelled request still generated ${generated} tokens`);
	const metrics = await (await fetch(`${env.url}/metrics`, {
		headers: { Authorization: `Bearer ${env.keyA}` },
	})).text();
	assert.match(metrics, /kvpool_http_client_disconnects_total [1-9]/);
	assert.match(metrics, /kvpool_sched_cancels_received_total [1-9]/); // kvpoold's own, appended
});

test('the model\'s context length is enforced: prompt + max_tokens, in OpenAI\'s words', async () => {
	// the fixture's kvpoold: --context-tokens 8192 (test_http.c); a token a byte (tinyq)
	const tok = await post('/tokenize', { prompt: 'x' });
	const ctx = tok.max_model_len;
	assert.equal(ctx, 8192);
	const prompt = freshLongPrompt('ctx', ctx - 24);
	let e = await thrown(client().completions.create({ model: env.model, prompt, max_tokens: 100 }));
	assert.ok(e instanceof OpenAI.BadRequestError, `${e}`);
	assert.equal(e.code, 'context_length_exceeded');
	assert.equal(e.param, 'prompt');
	const m = e.message.match(/This model's maximum context length is 8192 tokens\. However, you requested (\d+) tokens \((\d+) in the prompt, 100 in the completion\)\. Please reduce the length of the prompt or completion\.$/);
	assert.ok(m, e.message);
	assert.equal(Number(m[1]), Number(m[2]) + 100);
	assert.ok(Number(m[2]) >= ctx - 24);
	const messages = [{ role: 'user', content: prompt }];
	e = await thrown(client().chat.completions.create({ model: env.model, messages, max_tokens: 100 }));
	assert.ok(e instanceof OpenAI.BadRequestError, `${e}`);
	assert.equal(e.code, 'context_length_exceeded');
	assert.equal(e.param, 'messages');
	assert.match(e.message, /maximum context length is 8192 tokens.* in the messages, 100 in the completion/);
	// streamed: the same 400 before the stream starts
	e = await thrown(client().chat.completions.create({ model: env.model, messages, max_tokens: 100, stream: true }));
	assert.ok(e instanceof OpenAI.BadRequestError, `${e}`);
	assert.equal(e.code, 'context_length_exceeded');
	// no max_tokens: the reply may use what the context leaves (--ignore-eos: all of it)
	const short = [{ role: 'user', content: freshLongPrompt('fit', ctx - 120) }];
	const r = await client().chat.completions.create({ model: env.model, messages: short });
	assert.equal(r.usage.prompt_tokens + r.usage.completion_tokens, ctx);
	assert.equal(r.choices[0].finish_reason, 'length');
	// a prompt that fills the context leaves nothing even then
	e = await thrown(client().chat.completions.create({
		model: env.model, messages: [{ role: 'user', content: freshLongPrompt('full', ctx + 10) }],
	}));
	assert.equal(e.code, 'context_length_exceeded');
});

test('models: list and retrieve', async () => {
	const list = await client().models.list();
	assert.deepEqual(list.data.map((m) => m.id), [env.model, 'gpt-kvpool']);
	const m = await client().models.retrieve(env.model);
	assert.equal(m.id, env.model);
	assert.equal(m.owned_by, 'kvpool');
	const e = await thrown(client().models.retrieve('nope'));
	assert.ok(e instanceof OpenAI.NotFoundError, `${e}`);
	// an alias is accepted as the model
	const r = await client().completions.create({ model: 'gpt-kvpool', prompt: 'x', max_tokens: 1 });
	assert.equal(r.model, 'gpt-kvpool');
});

await run('openai');
