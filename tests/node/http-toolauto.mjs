// SPDX-License-Identifier: MIT
// http-toolauto.mjs - a call the model writes by itself, under tool_choice auto, through the
// official `openai` and `@anthropic-ai/sdk` SDKs against a real kvpool-http + kvpoold (run
// by tests/integration/test_http_tools.c on "qwen2call": Qwen2.5's template on Qwen's
// vocabulary, a model that after the generation prompt writes
// <tool_call>{"name":"now","arguments":{}}</tool_call> and ends its turn).  Nothing forces
// the call (no grammar): kvpool-http must read it out of the generated text, whole and
// streamed, as structured calls; and with the tool's name unknown to the request the same
// text is returned as text, never dropped.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { env, test, run } from './http-common.mjs';

const openai = new OpenAI({ baseURL: `${env.url}/v1`, apiKey: env.keyA, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: env.url, apiKey: env.keyA, maxRetries: 0 });
const messages = [{ role: 'user', content: 'What time is it?' }];
const now = { type: 'function', function: { name: 'now', description: 'the time',
	parameters: { type: 'object', properties: {} } } };
const other = { type: 'function', function: { name: 'later', description: 'not now',
	parameters: { type: 'object', properties: {} } } };
const written = '<tool_call>{"name":"now","arguments":{}}</tool_call>';

test('chat: auto, whole: the written call is a tool call', async () => {
	const r = await openai.chat.completions.create({ model: env.model, messages,
		tools: [now], max_tokens: 32 });
	const c = r.choices[0];
	assert.equal(c.finish_reason, 'tool_calls');
	assert.equal(c.message.tool_calls.length, 1);
	assert.equal(c.message.tool_calls[0].function.name, 'now');
	assert.deepEqual(JSON.parse(c.message.tool_calls[0].function.arguments), {});
	assert.ok(!c.message.content, `no text beside the call: ${c.message.content}`);
});

test('chat: auto, streamed: the deltas add up to the same call', async () => {
	const s = await openai.chat.completions.create({ model: env.model, messages,
		tools: [now], max_tokens: 32, stream: true });
	let name = '', args = '', finish = null, text = '';
	for await (const ch of s) {
		const d = ch.choices[0]?.delta;
		for (const tc of d?.tool_calls ?? []) {
			name += tc.function?.name ?? '';
			args += tc.function?.arguments ?? '';
		}
		text += d?.content ?? '';
		finish = ch.choices[0]?.finish_reason ?? finish;
	}
	assert.equal(name, 'now');
	assert.deepEqual(JSON.parse(args), {});
	assert.equal(finish, 'tool_calls');
	assert.equal(text, '');
});

test('chat: a call of a tool the request does not have is returned as text', async () => {
	const r = await openai.chat.completions.create({ model: env.model, messages,
		tools: [other], max_tokens: 32 });
	const c = r.choices[0];
	assert.equal(c.finish_reason, 'stop');
	assert.ok(!c.message.tool_calls?.length);
	assert.equal(c.message.content, written);
});

test('messages: auto, whole and streamed: a tool_use block', async () => {
	const req = { model: env.model, max_tokens: 32, messages,
		tools: [{ name: 'now', description: 'the time', input_schema: { type: 'object' } }] };
	const r = await anthropic.messages.create(req);
	assert.equal(r.stop_reason, 'tool_use');
	const uses = r.content.filter((b) => b.type === 'tool_use');
	assert.equal(uses.length, 1);
	assert.equal(uses[0].name, 'now');
	assert.deepEqual(uses[0].input, {});
	const f = await anthropic.messages.stream(req).finalMessage();
	assert.equal(f.stop_reason, 'tool_use');
	assert.deepEqual(f.content.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input]),
		[['now', {}]]);
});

await run('toolauto (qwen2call)');
