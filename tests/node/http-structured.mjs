// http-structured.mjs - response_format json_object / json_schema, logit_bias and the
// penalties through the official `openai` SDK against a real kvpool-http + kvpoold (run by
// tests/integration/test_http_structured.c; kvpoold stops at end of generation, and its
// tiny synthetic model writes noise: the grammar alone makes the text valid).  Every
// keyword kvpool's grammar supports is in a schema below, and every sampled answer that
// ended by itself is checked with ajv, an independent JSON Schema validator.
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { env, test, run } from './http-common.mjs';

const client = new OpenAI({ baseURL: `${env.url}/v1`, apiKey: env.keyA, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: env.url, apiKey: env.keyA, maxRetries: 0 });
const ajv = new Ajv({ strict: false });
const SEEDS = 8;

// One schema per group of keywords; together they use every keyword kvpool supports.
const schemas = {
	scalars: {
		type: 'object',
		properties: {
			s: { type: 'string', minLength: 2, maxLength: 6 },
			i: { type: 'integer' },
			n: { type: 'number' },
			b: { type: 'boolean' },
			z: { type: 'null' },
		},
		required: ['s', 'i', 'n', 'b', 'z'],
		additionalProperties: false,
	},
	enums: {
		type: 'object',
		properties: {
			color: { enum: ['red', 'green', 'blue'] },
			mixed: { enum: [1, 'one', null, true, 2.5] },
			fixed: { const: 'v1' },
			obj: { const: { a: [1, 2], b: null } },
		},
		required: ['color', 'mixed', 'fixed', 'obj'],
		additionalProperties: false,
	},
	arrays: {
		type: 'object',
		properties: {
			tags: { type: 'array', items: { type: 'string', maxLength: 3 }, minItems: 1, maxItems: 3 },
			none: { type: 'array', maxItems: 0 },
			nums: { type: 'array', items: { type: 'integer' }, minItems: 2, maxItems: 2 },
		},
		required: ['tags', 'nums'],
		additionalProperties: false,
	},
	anyof: {
		type: 'object',
		properties: {
			v: { anyOf: [{ type: 'integer' }, { type: 'string', maxLength: 4 },
				     { type: 'object', properties: { k: { type: 'boolean' } }, required: ['k'],
				       additionalProperties: false }] },
			opt: { type: ['string', 'null'], maxLength: 4 },
		},
		required: ['v', 'opt'],
		additionalProperties: false,
	},
	nested: {
		type: 'object',
		title: 'ignored annotation',
		description: 'annotations are ignored',
		properties: {
			person: {
				type: 'object',
				properties: {
					name: { type: 'string', maxLength: 8 },
					age: { type: 'integer' },
					pets: { type: 'array', maxItems: 2, items: {
						type: 'object', properties: { kind: { enum: ['cat', 'dog'] } },
						required: ['kind'], additionalProperties: false } },
				},
				required: ['name'],
				additionalProperties: false,
			},
		},
		required: ['person'],
		additionalProperties: false,
	},
	toplevel_array: { type: 'array', items: { type: 'integer' }, minItems: 1, maxItems: 4 },
};

async function sample(schema, seed, extra = {}) {
	return client.chat.completions.create({
		model: env.model,
		messages: [{ role: 'user', content: 'Answer in JSON.' }],
		response_format: { type: 'json_schema', json_schema: { name: 'out', schema, strict: true } },
		temperature: 1, seed, max_tokens: 400, ...extra,
	});
}

for (const [name, schema] of Object.entries(schemas)) {
	test(`json_schema "${name}": every seeded sample valid (ajv)`, async () => {
		const validate = ajv.compile(schema);
		let whole = 0;
		for (let seed = 1; seed <= SEEDS; seed++) {
			const r = await sample(schema, seed);
			const c = r.choices[0];
			if (c.finish_reason === 'length')
				continue; /* cut by max_tokens: a prefix of a valid value, not one */
			assert.equal(c.finish_reason, 'stop');
			whole++;
			let v;
			try {
				v = JSON.parse(c.message.content);
			} catch (e) {
				assert.fail(`seed ${seed}: not JSON: ${c.message.content}`);
			}
			assert.ok(validate(v), `seed ${seed}: ${JSON.stringify(validate.errors)}: ${c.message.content}`);
		}
		assert.ok(whole >= SEEDS / 2, `only ${whole} of ${SEEDS} ended by themselves`);
	});
}

test('json_schema streamed: the deltas join into a valid value', async () => {
	const schema = schemas.enums;
	const stream = await client.chat.completions.create({
		model: env.model, messages: [{ role: 'user', content: 'JSON please' }],
		response_format: { type: 'json_schema', json_schema: { name: 'e', schema } },
		temperature: 1, seed: 3, max_tokens: 400, stream: true,
	});
	let text = '', finish = null;
	for await (const c of stream) {
		text += c.choices[0]?.delta?.content ?? '';
		finish = c.choices[0]?.finish_reason ?? finish;
	}
	assert.equal(finish, 'stop');
	assert.ok(ajv.validate(schema, JSON.parse(text)), text);
});

test('json_object: answers that end are JSON objects', async () => {
	let whole = 0;
	for (let seed = 1; seed <= SEEDS; seed++) {
		const r = await client.chat.completions.create({
			model: env.model, messages: [{ role: 'user', content: 'an object' }],
			response_format: { type: 'json_object' }, temperature: 1, seed, max_tokens: 300,
		});
		const c = r.choices[0];
		if (c.finish_reason !== 'stop')
			continue;
		whole++;
		const v = JSON.parse(c.message.content);
		assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), c.message.content);
	}
	assert.ok(whole >= 1);
});

test('completions take response_format too (vLLM)', async () => {
	const schema = schemas.scalars;
	const r = await client.completions.create({
		model: env.model, prompt: '{', temperature: 1, seed: 5, max_tokens: 400,
		response_format: { type: 'json_schema', json_schema: { name: 's', schema } },
	});
	assert.equal(r.choices[0].finish_reason, 'stop');
	assert.ok(ajv.validate(schema, JSON.parse(r.choices[0].text)), r.choices[0].text);
});

test('a keyword kvpool cannot enforce: 400 naming it', async () => {
	for (const [kw, schema] of [['pattern', { type: 'string', pattern: '^a' }],
				    ['$ref', { $ref: '#/$defs/x' }],
				    ['minimum', { type: 'integer', minimum: 1 }],
				    ['format', { type: 'string', format: 'date-time' }]]) {
		let err;
		try {
			await sample(schema, 1);
		} catch (e) {
			err = e;
		}
		assert.ok(err, `${kw}: accepted`);
		assert.equal(err.status, 400);
		assert.ok(err.message.includes(`"${kw}"`), err.message);
		assert.equal(err.param, 'response_format');
	}
});

test('Anthropic output_config.format json_schema: every seeded sample valid (ajv), ' +
	'whole, streamed and through messages.parse()', async () => {
	for (const [name, schema] of Object.entries(schemas)) {
		const validate = ajv.compile(schema);
		let whole = 0;
		for (let seed = 1; seed <= 4; seed++) {
			const req = { model: env.model, max_tokens: 400, temperature: 1, seed,
				messages: [{ role: 'user', content: 'JSON please' }],
				output_config: { format: { type: 'json_schema', schema } } };
			const m = await anthropic.messages.create(req);
			if (m.stop_reason === 'max_tokens')
				continue; /* a cut prefix */
			assert.equal(m.stop_reason, 'end_turn');
			whole++;
			const text = m.content[0].text;
			assert.ok(validate(JSON.parse(text)), `${name} seed ${seed}: ${text}`);
			const s = await anthropic.messages.stream(req).finalMessage();
			assert.equal(s.content[0].text, text);
			const p = await anthropic.messages.parse(req);
			assert.deepEqual(p.parsed_output, JSON.parse(text));
		}
		assert.ok(whole >= 2, `${name}: only ${whole} of 4 ended by themselves`);
	}
});

test('Anthropic output_config: a keyword kvpool cannot enforce, a bad format or effort: ' +
	'400 naming it; effort alone is accepted', async () => {
	const req = { model: env.model, max_tokens: 4, messages: [{ role: 'user', content: 'x' }] };
	for (const [what, oc] of [['pattern', { format: { type: 'json_schema',
		schema: { type: 'string', pattern: '^a' } } }],
	['output_config.format.type', { format: { type: 'xml' } }],
	['output_config.format.schema', { format: { type: 'json_schema' } }],
	['output_config.effort', { effort: 'huge' }]]) {
		await assert.rejects(anthropic.messages.create({ ...req, output_config: oc }),
			(e) => e.status === 400 && e.error?.error?.type === 'invalid_request_error' &&
				e.error.error.message.includes(what), what);
	}
	const r = await anthropic.messages.create({ ...req, output_config: { effort: 'low' } });
	assert.equal(r.type, 'message');
});

test('logit_bias -100 bans a token; penalties change a greedy answer', async () => {
	const req = { model: env.model, prompt: 'abcabc', max_tokens: 12, temperature: 0 };
	const plain = await client.completions.create({ ...req, logit_bias: {} });
	const ids = await client.completions.create({ ...req, return_token_ids: true });
	const first = ids.choices[0].token_ids?.[0];
	assert.equal(typeof first, 'number', JSON.stringify(ids.choices[0]));
	const banned = await client.completions.create({ ...req, return_token_ids: true,
							 logit_bias: { [first]: -100 } });
	assert.ok(!banned.choices[0].token_ids.includes(first));
	// greedy over 48 tokens repeats some id; a penalty of 2 on what was written changes it
	const long = { ...req, max_tokens: 48, return_token_ids: true };
	const rep = await client.completions.create(long);
	const t = rep.choices[0].token_ids;
	assert.ok(new Set(t).size < t.length, `no id repeats in ${t}`);
	const pen = await client.completions.create({ ...long, presence_penalty: 2,
						      frequency_penalty: 2 });
	assert.notDeepEqual(pen.choices[0].token_ids, t);
	let err;
	try {
		await client.completions.create({ ...req, logit_bias: { 99999999: 5 } });
	} catch (e) {
		err = e;
	}
	assert.equal(err?.status, 400);
	assert.equal(err.param, 'logit_bias');
	try {
		await client.completions.create({ ...req, frequency_penalty: 3 });
		assert.fail('frequency_penalty 3 accepted');
	} catch (e) {
		assert.equal(e.status, 400);
	}
});

await run('http-structured');
