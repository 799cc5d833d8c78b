// http-anthropic.mjs - the official `@anthropic-ai/sdk` against a real kvpool-http +
// kvpoold (run by tests/integration/test_http.c, which starts both).
//
// /v1/messages renders a conversation with the model's chat template, which needs
// kvpoold's CHAT request (branch 'proto', not in this build): until it lands the endpoint
// checks the whole request (cache_control included) and answers 501.  When CHAT lands,
// the 501 tests below flip: they then have to check a real message, its streamed events
// (message_start .. message_stop) and the usage (input_tokens, cache_read_input_tokens,
// cache_creation_input_tokens, output_tokens).
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { env, test, run, fetchWithBody } from './http-common.mjs';

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

test('messages answer 501 (NotImplementedError) until kvpoold has CHAT', async () => {
	let e = await thrown(client().messages.create(base));
	assert.ok(e instanceof Anthropic.NotImplementedError, `${e}`);
	assert.equal(e.status, 501);
	assert.equal(e.type, 'api_error');
	assert.match(e.message, /CHAT/);
	assert.ok(e.requestID, 'no request-id header');
	e = await thrown(client().messages.create({ ...base, stream: true }));
	assert.ok(e instanceof Anthropic.NotImplementedError, `${e}`);
	e = await thrown(client().messages.stream(base).finalMessage());
	assert.equal(e.status, 501);
});

test('cache_control is parsed and checked (ephemeral, ttl 5m|1h, at most 4, 1h before 5m)', async () => {
	const cc = (ttl) => ({ type: 'ephemeral', ...(ttl ? { ttl } : {}) });
	const block = (text, c) => ({ type: 'text', text, ...(c ? { cache_control: c } : {}) });
	// valid: system and message breakpoints, 1h before 5m: reaches the 501
	let e = await thrown(client().messages.create({
		...base,
		system: [block('You are terse.', cc('1h'))],
		messages: [{ role: 'user', content: [block('Long context', cc('5m')), block('Q', cc())] }],
	}));
	assert.equal(e.status, 501, `${e}`);
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
	const { max_tokens, ...noMax } = base;
	e = await thrown(client().messages.create(noMax));
	assert.ok(e instanceof Anthropic.BadRequestError, `${e}`);
	assert.match(e.message, /max_tokens/);
});

test('models: list', async () => {
	const list = await client().models.list();
	const ids = [];
	for await (const m of list)
		ids.push(m.id);
	assert.deepEqual(ids, [env.model, 'gpt-kvpool']);
});

await run('anthropic');
