// SPDX-License-Identifier: MIT
// http-tools.mjs - tools through the official `openai` and `@anthropic-ai/sdk` SDKs
// against a real kvpool-http + kvpoold serving a model with a real chat template (run by
// tests/integration/test_http_tools.c, once per family in KVP_FAMILY).  The synthetic
// model writes noise, so the first step forces the call (tool_choice named / required,
// Anthropic tool / any): the grammar makes it a valid call of the tool, whose arguments
// must then parse and follow the parameters' schema (max_tokens 512 is above the longest
// text the grammar allows here: ~60 tokens of value, 20 whitespace bytes at most in each
// of its dozen gaps).  The second step sends the call
// and its result back and gets an answer; its prompt extends the first one's, so part
// of it is read from the cache.  A family whose template has no tools is refused with
// a 400 naming the template.  On Mistral's templates (v0.3, Nemo, on the Llama 2
// vocabulary) a conversation with a call and its result, sent through kvpool-http, is
// also tokenized as the published template renders it under @huggingface/jinja.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { Template } from '@huggingface/jinja';
import { env, test, run } from './http-common.mjs';

const family = process.env.KVP_FAMILY;
const openai = new OpenAI({ baseURL: `${env.url}/v1`, apiKey: env.keyA, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: env.url, apiKey: env.keyA, maxRetries: 0 });

const weather = {
	type: 'object',
	properties: {
		city: { type: 'string', minLength: 1, maxLength: 8 },
		unit: { enum: ['celsius', 'fahrenheit'] },
	},
	required: ['city', 'unit'],
	additionalProperties: false,
};
const oaTools = [
	{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
		parameters: weather } },
	{ type: 'function', function: { name: 'get_time', description: 'The time in a city',
		parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 8 } },
			required: ['city'], additionalProperties: false } } },
];
const question = [{ role: 'system', content: 'You answer with the tools.' },
	{ role: 'user', content: 'What is the weather in Paris?' }];

function checkWeatherArgs(args) {
	assert.equal(typeof args.city, 'string');
	// JSON Schema's lengths count code points (as the grammar does), not UTF-16 units
	const len = [...args.city].length;
	assert.ok(len >= 1 && len <= 8, JSON.stringify(args));
	assert.ok(['celsius', 'fahrenheit'].includes(args.unit), JSON.stringify(args));
	assert.deepEqual(Object.keys(args), ['city', 'unit']);
}

if (family === 'llama3') {
	test('a template without tools refuses them by name (OpenAI and Anthropic)', async () => {
		await assert.rejects(openai.chat.completions.create({ model: env.model,
			messages: question, tools: oaTools, max_tokens: 4 }),
		(e) => e.status === 400 && /chat template \(llama3\) does not support tools/.test(e.message));
		await assert.rejects(anthropic.messages.create({ model: env.model, max_tokens: 4,
			messages: [{ role: 'user', content: 'hi' }],
			tools: [{ name: 'get_weather', input_schema: weather }] }),
		(e) => e.status === 400 && /does not support tools/.test(e.message));
	});
} else {
	for (const stream of [false, true]) {
		test(`OpenAI: call, result, answer (${stream ? 'streamed' : 'whole'})`, async () => {
			const first = {
				model: env.model, messages: question, tools: oaTools, max_tokens: 512,
				tool_choice: stream ? 'required' : { type: 'function', function: { name: 'get_weather' } },
			};
			let msg, finish;
			if (stream) { // the SDK's stream helper puts the tool_calls deltas together
				const s = openai.chat.completions.stream({ ...first, stream: true });
				const done = await s.finalChatCompletion();
				msg = done.choices[0].message;
				finish = done.choices[0].finish_reason;
			} else {
				const r = await openai.chat.completions.create(first);
				msg = r.choices[0].message;
				finish = r.choices[0].finish_reason;
			}
			assert.equal(finish, 'tool_calls');
			assert.equal(msg.tool_calls.length, 1);
			const call = msg.tool_calls[0];
			assert.equal(call.type, 'function');
			assert.match(call.id, /^call_/);
			assert.ok(['get_weather', 'get_time'].includes(call.function.name));
			if (call.function.name === 'get_weather' || !stream)
				checkWeatherArgs(JSON.parse(call.function.arguments));
			else
				assert.equal(typeof JSON.parse(call.function.arguments).city, 'string');

			const second = {
				model: env.model, tools: oaTools, max_tokens: 6, tool_choice: 'auto',
				messages: [...question, { role: 'assistant', content: null, tool_calls: [call] },
					{ role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' }],
			};
			let usage, answer;
			if (stream) {
				const chunks = await openai.chat.completions.create({ ...second, stream: true,
					stream_options: { include_usage: true } });
				answer = '';
				for await (const c of chunks) {
					if (c.usage)
						usage = c.usage;
					if (c.choices[0]?.delta?.content)
						answer += c.choices[0].delta.content;
					if (c.choices[0]?.finish_reason)
						assert.notEqual(c.choices[0].finish_reason, 'tool_calls');
				}
			} else {
				const r = await openai.chat.completions.create(second);
				usage = r.usage;
				answer = r.choices[0].message.content;
				assert.notEqual(r.choices[0].finish_reason, 'tool_calls');
			}
			assert.equal(typeof answer, 'string');
			assert.ok(usage.prompt_tokens > 0);
			assert.ok(usage.prompt_tokens_details.cached_tokens > 0,
				`the second step read nothing from the cache: ${JSON.stringify(usage)}`);
		});

		test(`Anthropic: tool_use, tool_result, answer (${stream ? 'streamed' : 'whole'})`, async () => {
			const tools = oaTools.map((t) => ({ name: t.function.name,
				description: t.function.description, input_schema: t.function.parameters }));
			const first = {
				model: env.model, max_tokens: 512, system: 'You answer with the tools.',
				messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools,
				tool_choice: stream ? { type: 'tool', name: 'get_weather' } : { type: 'any' },
			};
			// the SDK's stream helper puts input_json_delta together into the block's input
			const m = stream ? await anthropic.messages.stream(first).finalMessage() :
				await anthropic.messages.create(first);
			assert.equal(m.stop_reason, 'tool_use');
			const uses = m.content.filter((b) => b.type === 'tool_use');
			assert.equal(uses.length, 1);
			assert.match(uses[0].id, /^toolu_/);
			if (uses[0].name === 'get_weather')
				checkWeatherArgs(uses[0].input);
			else
				assert.equal(typeof uses[0].input.city, 'string');

			const second = {
				...first, max_tokens: 6, tool_choice: { type: 'auto' },
				messages: [...first.messages, { role: 'assistant', content: m.content },
					{ role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id,
						content: '21 degrees' }] }],
			};
			const a = stream ? await anthropic.messages.stream(second).finalMessage() :
				await anthropic.messages.create(second);
			assert.notEqual(a.stop_reason, 'tool_use');
			assert.equal(a.content[0].type, 'text');
			assert.ok(a.usage.cache_read_input_tokens > 0,
				`the second step read nothing from the cache: ${JSON.stringify(a.usage)}`);
		});
	}

	test('a forced call streams its arguments as written: OpenAI deltas, Anthropic ' +
		'input_json_delta, joined the whole answer\'s', async () => {
		const req = { model: env.model, messages: question, tools: oaTools, max_tokens: 512,
			temperature: 0, tool_choice: { type: 'function', function: { name: 'get_weather' } } };
		const whole = (await openai.chat.completions.create(req)).choices[0].message.tool_calls[0];
		const pieces = [];
		let head;
		for await (const c of await openai.chat.completions.create({ ...req, stream: true })) {
			for (const d of c.choices[0]?.delta?.tool_calls ?? []) {
				assert.equal(d.index, 0);
				if (d.id) {
					assert.equal(head, undefined, 'one head');
					head = d;
				}
				if (d.function?.arguments)
					pieces.push(d.function.arguments);
			}
		}
		assert.equal(head.function.name, 'get_weather');
		assert.match(head.id, /^call_/);
		assert.equal(head.function.arguments, '');
		assert.ok(pieces.length > 1, `the arguments came in ${pieces.length} piece(s)`);
		assert.equal(pieces.join(''), whole.function.arguments);
		checkWeatherArgs(JSON.parse(pieces.join('')));

		const tools = oaTools.map((t) => ({ name: t.function.name,
			description: t.function.description, input_schema: t.function.parameters }));
		const areq = { model: env.model, max_tokens: 512, temperature: 0, tools,
			messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
			tool_choice: { type: 'tool', name: 'get_weather' } };
		const a = await anthropic.messages.create(areq);
		const s = anthropic.messages.stream(areq);
		const partial = [];
		s.on('streamEvent', (ev) => {
			if (ev.type === 'content_block_delta' && ev.delta.type === 'input_json_delta')
				partial.push(ev.delta.partial_json);
		});
		const m = await s.finalMessage();
		assert.ok(partial.length > 1, `the input came in ${partial.length} piece(s)`);
		assert.deepEqual(JSON.parse(partial.join('')), a.content[0].input);
		assert.deepEqual(m.content[0].input, a.content[0].input);
		checkWeatherArgs(m.content[0].input);
	});

	for (const stream of [false, true]) {
		test(`the SDKs' tool runners run the tool on the call (${stream ? 'streamed' : 'whole'}): ` +
			'OpenAI runTools, Anthropic toolRunner; the next step on their history', async () => {
			const ran = [];
			const run = (args) => { ran.push(args); return '{"temperature": 21}'; };
			const runner = openai.chat.completions.runTools({ model: env.model, messages: question,
				max_tokens: 512, stream, tool_choice: { type: 'function', function: { name: 'get_weather' } },
				tools: oaTools.map((t) => ({ type: 'function', function: { ...t.function,
					parse: JSON.parse, function: run } })) });
			await runner.done();
			assert.equal(ran.length, 1); // a named choice: the runner stops after its call
			checkWeatherArgs(ran[0]);
			const hist = runner.messages;
			assert.equal(hist.at(-1).role, 'tool');
			assert.equal(hist.at(-1).tool_call_id, hist.at(-2).tool_calls[0].id);
			const r = await openai.chat.completions.create({ model: env.model, tools: oaTools,
				messages: hist, max_tokens: 6 });
			assert.notEqual(r.choices[0].finish_reason, 'tool_calls');
			assert.ok(r.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(r.usage));

			const aran = [];
			const tools = oaTools.map((t) => ({ name: t.function.name,
				description: t.function.description, input_schema: t.function.parameters,
				parse: (x) => x, run: (input) => { aran.push(input); return '21 degrees'; } }));
			const ar = anthropic.beta.messages.toolRunner({ model: env.model, max_tokens: 512,
				system: 'You answer with the tools.', stream, max_iterations: 1, tools,
				messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
				tool_choice: { type: 'tool', name: 'get_weather' } });
			const last = await ar.runUntilDone();
			assert.equal(last.stop_reason, 'tool_use');
			assert.equal(aran.length, 1);
			checkWeatherArgs(aran[0]);
			const msgs = ar.params.messages;
			const result = msgs.at(-1).content.find((b) => b.type === 'tool_result');
			assert.equal(result.tool_use_id, last.content.find((b) => b.type === 'tool_use').id);
			const a = await anthropic.messages.create({ model: env.model, max_tokens: 6,
				system: 'You answer with the tools.', tools: tools.map(({ parse, run, ...t }) => t),
				messages: msgs });
			assert.notEqual(a.stop_reason, 'tool_use');
			assert.ok(a.usage.cache_read_input_tokens > 0, JSON.stringify(a.usage));
		});
	}

	test('tool_choice none: the tools are in the prompt, the answer is text', async () => {
		const r = await openai.chat.completions.create({ model: env.model, messages: question,
			tools: oaTools, tool_choice: 'none', max_tokens: 4 });
		assert.notEqual(r.choices[0].finish_reason, 'tool_calls');
		assert.equal(r.choices[0].message.tool_calls, undefined);
		const plain = await openai.chat.completions.create({ model: env.model,
			messages: question, max_tokens: 4 });
		assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens + 50,
			'the tools are rendered into the prompt');
	});
}

// Mistral v0.3 / Nemo: the call ids the template writes, through kvpool-http
const mistralTemplates = { 'mistral-v3': 'mistral-v3.mistral-7b-instruct-v0.3.jinja',
	'mistral-nemo': 'mistral-nemo.mistral-nemo-instruct-2407.jinja' };
if (mistralTemplates[family]) {
	test('Mistral: a call and its result through kvpool-http give the ids of the template ' +
		'rendered by @huggingface/jinja ([AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS], ' +
		'call ids)', async () => {
		const here = path.dirname(fileURLToPath(import.meta.url));
		const src = fs.readFileSync(path.join(here, '..', 'data', 'templates',
			mistralTemplates[family]), 'utf8');
		const args = '{"city": "Paris", "unit": "celsius"}';
		const msgs = [...question,
			{ role: 'assistant', content: null, tool_calls: [{ id: 'aB3dE5gH7', type: 'function',
				function: { name: 'get_weather', arguments: args } }] },
			{ role: 'tool', tool_call_id: 'aB3dE5gH7', content: '{"temperature": 21}' },
			{ role: 'assistant', content: 'It is 21.' },
			{ role: 'user', content: 'And the time there?' }];
		const res = await fetch(`${env.url}/tokenize`, { method: 'POST',
			headers: { Authorization: `Bearer ${env.keyA}`, 'Content-Type': 'application/json' },
			body: JSON.stringify({ model: env.model, messages: msgs, tools: oaTools }) });
		const got = await res.json();
		assert.equal(res.status, 200, JSON.stringify(got));
		// the template gets the arguments parsed, as transformers and vLLM give them
		const tm = msgs.map((m) => (m.tool_calls ? { ...m, tool_calls: m.tool_calls.map((c) =>
			({ ...c, function: { ...c.function, arguments: JSON.parse(c.function.arguments) } })) } : m));
		const text = new Template(src).render({ messages: tm, tools: oaTools, bos_token: '<s>',
			eos_token: '</s>', add_generation_prompt: true });
		assert.ok(text.includes('[TOOL_CALLS]') && text.includes('"call_id": "aB3dE5gH7"'));
		const want = JSON.parse(execFileSync(env.cli, ['--socket', env.socket, 'tokenize',
			'--parse-special', '--no-bos', '--json', '-p', text])).tokens;
		assert.deepEqual(got.tokens, want);

		// an id of another length is refused by the template: kvpool-http sends 9 characters
		const other = JSON.parse(JSON.stringify(msgs));
		other[2].tool_calls[0].id = other[3].tool_call_id = 'call_xyz_0';
		const r2 = await fetch(`${env.url}/tokenize`, { method: 'POST',
			headers: { Authorization: `Bearer ${env.keyA}`, 'Content-Type': 'application/json' },
			body: JSON.stringify({ model: env.model, messages: other, tools: oaTools }) });
		assert.equal(r2.status, 200, await r2.text());
	});
}

await run(`tools (${family})`);
