// SPDX-License-Identifier: MIT
// chat-oracle.mjs - the reference side of tests/unit/test_chat.c.
//
//   node chat-oracle.mjs TEMPLATE_DIR OUT
//
// Renders every real chat template in TEMPLATE_DIR (files FAMILY.MODEL.jinja, the
// tokenizer.chat_template strings of published models) with @huggingface/jinja - the
// renderer transformers.js uses, with transformers' trim_blocks/lstrip_blocks - for a
// set of conversations, with and without a system turn, each with and without
// add_generation_prompt; and conversations with tools, tool calls and tool results.
// OUT gets one line per case:
//   FILE GEN BOS EOS N ROLE:HEX ... [tools:HEX] = ok:HEX   ("= error" when it raises)
// with every string as UTF-8 hex ("-" for an empty one).  ROLE "call" is a tool call of
// the assistant message before it, its HEX "NAME\nARGUMENTS-JSON"; the template gets it
// in that message's tool_calls with the arguments parsed (an object, as transformers
// and vLLM hand them to templates); "tool" is a tool result; tools:HEX is the JSON text
// of the tools array, given to the template parsed.  A call's or result's id follows as
// ROLE:HEX:IDHEX (the call's id, the result's tool_call_id), absent when not given.
import fs from 'node:fs';
import path from 'node:path';
import { Template } from '@huggingface/jinja';

const [dir, out] = process.argv.slice(2);
if (!dir || !out) {
	console.error('usage: node chat-oracle.mjs TEMPLATE_DIR OUT');
	process.exit(2);
}

// The special tokens each family's vocabulary names bos_token / eos_token.
const specials = {
	llama3: ['<|begin_of_text|>', '<|eot_id|>'],
	'llama3.1': ['<|begin_of_text|>', '<|eot_id|>'],
	'llama3.2': ['<|begin_of_text|>', '<|eot_id|>'],
	chatml: ['', '<|im_end|>'],
	qwen3: ['', '<|im_end|>'],
	llama2: ['<s>', '</s>'],
	mistral: ['<s>', '</s>'],
	'mistral-v3': ['<s>', '</s>'],
	'mistral-nemo': ['<s>', '</s>'],
	phi3: ['<s>', '<|endoftext|>'],
	gemma: ['<bos>', '<eos>'],
	zephyr: ['<s>', '</s>'],
	deepseek: ['<\uff5cbegin\u2581of\u2581sentence\uff5c>', '<\uff5cend\u2581of\u2581sentence\uff5c>'],
};

const m = (role, content) => ({ role, content });
const conversations = [
	[m('user', 'Hello')],
	[m('system', 'You are a helpful assistant'), m('user', 'Hello')],
	[m('user', 'Hi'), m('assistant', 'Hello! How can I help?'), m('user', 'Tell me a joke.')],
	[m('system', '  Be brief.  '), m('user', "  What's 2+2?\n"), m('assistant', '\t4 '),
		m('user', 'Thanks')],
	[m('system', 'Ты полезный ассистент 🤖'), m('user', '日本語で答えて'), m('assistant', 'はい'),
		m('user', '<|eot_id|> and [INST] are text here\n\nok')],
	[m('system', ''), m('user', 'Hi')],
	[m('user', 'one'), m('user', 'two')],
	[m('assistant', 'I start.'), m('user', 'Fine')],
	[m('system', 'S'), m('user', 'a'), m('assistant', 'b'), m('user', 'c'), m('assistant', 'd'),
		m('user', 'e')],
	// reasoning in assistant turns: Qwen3 cuts it from history and keeps it after the
	// last query; other templates take it as text
	[m('user', 'Q'), m('assistant', '<think>\nplan\n</think>\n\nA'), m('user', 'Q2')],
	[m('user', 'Q'), m('assistant', 'x<think>\n\nr1\n</think>\n\n\nA1</think>\nA2')],
	[m('user', 'Q'), m('assistant', 'plain answer')],
	[m('user', '<tool_response>\nr\n</tool_response>'), m('assistant', '<think>t</think>A')],
];

// Tools as clients send them: OpenAI's shape, with what tojson must write exactly
// (nested schemas, non-ASCII, escapes, numbers JavaScript prints its own way).
const weather = String.raw`{"type": "function", "function": {"name": "get_weather",
 "description": "Current weather in a city \u2014 \"quoted\", tab\t, slash \/ and \\ end",
 "parameters": {"type": "object", "properties": {"city": {"type": "string",
 "description": "Città, 都市"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
 "days": {"type": "integer", "minimum": 1.0, "maximum": 1e1, "default": -0}},
 "required": ["city"], "additionalProperties": false}}}`;
const clock = String.raw`{"type":"function","function":{"name":"now","description":"","parameters":
 {"type":"object","properties":{},"required":[]},"x":[0.000001,1e-7,1e21,123456789012345678901234,
 2.5E+3,true,null,"\u0001\u001f\ud83d\ude00"]}}`;
// a "return" member (Mistral's templates leave it out), strings with what a raw '"' +
// val + '"' keeps as it is
const ret = String.raw`{"type": "function", "function": {"name": "sum", "description":
 "a \"b\" \\ c\nd \ud83d\ude00", "return": {"type": "number"}, "parameters": {"type": "object",
 "properties": {"a": {"type": "number"}}}, "strict": true}}`;
const toolSets = { one: `[${weather}]`, two: `[${weather},\n ${clock}]`, none: '[]',
	ret: `[${ret}, ${weather}]` };
// Mistral's templates want 9-character call ids; the others take none
const call = (name, args, id = 'aB3dE5gH7') => ['call', `${name}\n${args}`, id];
const res = (content, id = 'aB3dE5gH7') => ({ role: 'tool', content, tool_call_id: id });
const toolConvs = [
	['one', [m('user', "What's the weather in Paris?")]],
	['two', [m('system', ' Use tools. '), m('user', '  Weather in Rome and the time? ')]],
	['one', [m('system', 'S'), m('user', 'Paris?'), m('assistant', ''),
		call('get_weather', '{"city": "Paris", "unit":"celsius","days":2.0}'),
		res('{"temp": 21, "sky": "clear"}')]],
	['one', [m('user', 'Paris?'), m('assistant', ''),
		call('get_weather', '{ "city" : "Par\\"is\\u00e9" }', 'Zz9Zz9Zz9'),
		res('21 °C\nclear', 'Zz9Zz9Zz9'), m('assistant', 'It is 21 °C.'), m('user', 'And Rome?')]],
	['two', [m('user', 'Both?'), m('assistant', 'Let me check.'),
		call('get_weather', '{"city": "Rome"}', 'call00001'), call('now', '{}', 'call00002'),
		res('sunny', 'call00001'), res('12:00', 'call00002'), m('assistant', 'Sunny, noon.')]],
	['none', [m('user', 'Hi')]],
	[null, [m('user', 'Paris?'), m('assistant', ''), call('get_weather', '{"city": "Paris"}'),
		res('rain')]],
	['one', [m('system', 'Only a system turn')]],
	['one', [m('tool', 'first'), m('user', 'then')]],
	['ret', [m('system', 'S'), m('user', 'Add.'), m('assistant', 'ok'), m('user', 'Again.')]],
	// ids Mistral's templates refuse: too long, missing
	['one', [m('user', 'Paris?'), m('assistant', ''), call('get_weather', '{}', 'call_abc_0'),
		res('rain', 'call_abc_0')]],
	['one', [m('user', 'Paris?'), m('assistant', ''), call('get_weather', '{}', null),
		m('tool', 'rain')]],
	['one', [m('user', 'Paris?'), m('assistant', ''), call('get_weather', '{}'), m('tool', 'rain')]],
	// a call then a user turn: the tools go before the last user message
	['one', [m('system', 'S'), m('user', 'Paris?'), m('assistant', 'x'),
		call('get_weather', '{"city": "Paris"}', 'ééééééééé'), res('rain', 'ééééééééé'),
		m('assistant', 'Rain.'), m('user', 'And Rome?')]],
];

// [role, content] entries (calls flat, as on the wire) -> the template's messages
function templateMessages(conv) {
	const out = [];
	for (const x of conv) {
		if (Array.isArray(x)) {
			const [name, ...rest] = x[1].split('\n');
			const last = out[out.length - 1];
			const c = { type: 'function',
				function: { name, arguments: JSON.parse(rest.join('\n')) } };
			if (x[2] !== null)
				c.id = x[2];
			last.tool_calls = last.tool_calls || [];
			last.tool_calls.push(c);
		} else {
			out.push({ ...x });
		}
	}
	return out;
}

// FAMILY.MODEL.jinja; a dotted family (llama3.1, llama3.2) keeps its version.
const family_of = (file) => file.split('.').slice(0, /^llama3\.[0-9]\./.test(file) ? 2 : 1).join('.');
const hex = (s) => (s.length ? Buffer.from(s, 'utf8').toString('hex') : '-');
const lines = [];
for (const file of fs.readdirSync(dir).filter((f) => f.endsWith('.jinja')).sort()) {
	const family = family_of(file);
	const [bos, eos] = specials[family];
	const tmpl = new Template(fs.readFileSync(path.join(dir, file), 'utf8'));
	for (const conv of conversations) {
		for (const gen of [true, false]) {
			let result;
			try {
				result = 'ok:' + hex(tmpl.render({
					messages: conv, bos_token: bos, eos_token: eos,
					add_generation_prompt: gen, date_string: '26 Jul 2024',
				}));
			} catch (e) {
				result = 'error';
			}
			const msgs = conv.map((x) => `${x.role}:${hex(x.content)}`).join(' ');
			lines.push(`${file} ${gen ? 1 : 0} ${hex(bos)} ${hex(eos)} ${conv.length} ${msgs} = ${result}`);
		}
	}
}
for (const file of fs.readdirSync(dir).filter((f) => f.endsWith('.jinja')).sort()) {
	const family = family_of(file);
	const [bos, eos] = specials[family];
	const tmpl = new Template(fs.readFileSync(path.join(dir, file), 'utf8'));
	for (const [set, conv] of toolConvs) {
		for (const gen of [true, false]) {
			const ctx = { messages: templateMessages(conv), bos_token: bos, eos_token: eos,
				add_generation_prompt: gen, date_string: '26 Jul 2024' };
			let result;
			if (set)
				ctx.tools = JSON.parse(toolSets[set]);
			try {
				result = 'ok:' + hex(tmpl.render(ctx));
			} catch (e) {
				result = 'error';
			}
			const id = (v) => (v === null || v === undefined ? '' : `:${hex(v)}`);
			const msgs = conv.map((x) => (Array.isArray(x) ? `${x[0]}:${hex(x[1])}${id(x[2])}` :
				`${x.role}:${hex(x.content)}${id(x.tool_call_id)}`)).join(' ');
			const tools = set ? ` tools:${hex(toolSets[set])}` : '';
			lines.push(`${file} ${gen ? 1 : 0} ${hex(bos)} ${hex(eos)} ${conv.length} ${msgs}${tools} = ${result}`);
		}
	}
}
fs.writeFileSync(out, lines.join('\n') + '\n');
console.log(`chat-oracle: ${lines.length} cases`);
