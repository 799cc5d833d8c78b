// SPDX-License-Identifier: MIT
// chat-oracle.mjs - the reference side of tests/unit/test_chat.c.
//
//   node chat-oracle.mjs TEMPLATE_DIR OUT
//
// Renders every real chat template in TEMPLATE_DIR (files FAMILY.MODEL.jinja, the
// tokenizer.chat_template strings of published models) with @huggingface/jinja - the
// renderer transformers.js uses, with transformers' trim_blocks/lstrip_blocks - for a
// set of conversations, with and without a system turn, each with and without
// add_generation_prompt.  OUT gets one line per case:
//   FILE GEN BOS EOS N ROLE:HEX ... = ok:HEX      (or "= error" when the template raises)
// with every string as UTF-8 hex ("-" for an empty one).
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
	'llama3.2': ['<|begin_of_text|>', '<|eot_id|>'],
	chatml: ['', '<|im_end|>'],
	llama2: ['<s>', '</s>'],
	mistral: ['<s>', '</s>'],
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
];

const hex = (s) => (s.length ? Buffer.from(s, 'utf8').toString('hex') : '-');
const lines = [];
for (const file of fs.readdirSync(dir).filter((f) => f.endsWith('.jinja')).sort()) {
	const family = file.split('.').slice(0, file.startsWith('llama3.2') ? 2 : 1).join('.');
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
fs.writeFileSync(out, lines.join('\n') + '\n');
console.log(`chat-oracle: ${lines.length} cases`);
