// SPDX-License-Identifier: MIT
// tok-oracle.mjs - the reference side of tests/unit/test_tokenizer_oracle.c.
//
//   node tok-oracle.mjs llama3|llama2 OUTDIR [N_RANDOM] [SEED]
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
// special-token look-alikes.  It leaves out U+FEFF, U+0085 and U+180E, the characters
// where JavaScript's \s differs from Unicode White_Space (what the reference tokenizers
// and kvpool use), and characters newer than Unicode 14 (PCRE2 10.42's tables).
import fs from 'node:fs';
import path from 'node:path';
import llama3 from 'llama3-tokenizer-js';
import llama2 from 'llama-tokenizer-js';

const [family, outdir, nArg, seedArg] = process.argv.slice(2);
if (!['llama3', 'llama2'].includes(family) || !outdir) {
	console.error('usage: node tok-oracle.mjs llama3|llama2 OUTDIR [N_RANDOM] [SEED]');
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

if (family === 'llama3') {
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
fs.writeFileSync(path.join(outdir, 'cases.txt'), lines.join('\n') + '\n');
console.log(`tok-oracle: ${family}: ${corpus.length} strings, ${lines.length} cases`);
