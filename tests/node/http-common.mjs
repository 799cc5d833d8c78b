// http-common.mjs - what the SDK scripts against kvpool-http share: the environment the
// C integration test (tests/integration/test_http.c) sets, a tiny test runner, kvpool CLI
// calls, and the kvpoold status counters.
import { execFileSync } from 'node:child_process';

export const env = {
	url: process.env.KVP_HTTP_URL,	      // http://127.0.0.1:PORT
	keyA: process.env.KVP_HTTP_KEY_A,     // tenant "alice"
	keyB: process.env.KVP_HTTP_KEY_B,     // tenant "bob"
	cli: process.env.KVP_CLI,	      // the built kvpool program
	socket: process.env.KVP_SOCKET,	      // kvpoold's request socket
	status: process.env.KVP_STATUS_SOCKET, // kvpoold's status socket
	model: process.env.KVP_MODEL,	      // the model kvpoold serves
	maxBody: Number(process.env.KVP_MAX_BODY), // kvpool-http's max_body_bytes
};
for (const [k, v] of Object.entries(env))
	if (v === undefined || Number.isNaN(v))
		throw new Error(`missing environment for ${k} (run through meson test)`);

const tests = [];
export function test(name, fn) {
	tests.push([name, fn]);
}

// Run every test, in order; print one line each; exit 1 if any failed.
export async function run(title) {
	let failed = 0;
	for (const [name, fn] of tests) {
		const t0 = Date.now();
		try {
			await fn();
			console.log(`ok   ${title}: ${name} (${Date.now() - t0} ms)`);
		} catch (e) {
			failed++;
			console.log(`FAIL ${title}: ${name}: ${e?.stack ?? e}`);
		}
	}
	console.log(`${title}: ${tests.length - failed} of ${tests.length} passed`);
	process.exit(failed ? 1 : 0);
}

// `kvpool generate --json` for the same greedy request, straight through the socket.
export function kvpoolGenerate(args) {
	const out = execFileSync(env.cli, ['--socket', env.socket, 'generate', ...args, '--json']);
	return JSON.parse(out.toString());
}

// kvpoold's status report (JSON).
export function kvpoolStatus() {
	const out = execFileSync(env.cli, ['--status-socket', env.status, 'status', '--json']);
	return JSON.parse(out.toString());
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Poll @pred (every 50 ms, up to @ms); true once it held.
export async function eventually(pred, ms = 10000) {
	const end = Date.now() + ms;
	while (Date.now() < end) {
		if (await pred())
			return true;
		await sleep(50);
	}
	return false;
}

// A fetch that sends @body instead of what the SDK built (for malformed requests).
export function fetchWithBody(body) {
	return (url, init) => fetch(url, { ...init, body });
}

// A long prompt nobody sent before (so the first request of it is a miss).
export function freshLongPrompt(tag, bytes = 700) {
	const unit = `${tag} ${Date.now()} ${Math.random()} the quick brown fox jumps over the lazy dog; `;
	return unit.repeat(Math.ceil(bytes / unit.length)).slice(0, bytes);
}
