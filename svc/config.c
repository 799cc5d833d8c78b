/* SPDX-License-Identifier: MIT */
/*
 * config.c - defaults, INI file (libinih), flags, validation (see config.h).
 *
 * One const table describes every key once: its section, name, flag, type, bounds and
 * help text.  The INI reader, the flag parser, --help, --check-config and the docs all
 * follow that table, so they cannot drift apart.
 *
 * The INI file itself is read by util/ini.h (shared with kvpool-http): line numbers, a
 * line too long is an error rather than two settings.
 *
 * Thread: main thread, before any other starts.
 */
#include "svc/config.h"

#include <errno.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <unistd.h>

#include "compute/draft.h"
#include "compute/model.h"
#include "kvpool/layout.h"
#include "kvpool/proto.h"
#include "util/log.h"
#include "svc/engine/engine.h"
#include "util/errmsg.h"
#include "util/ini.h"
#include "util/keytab.h"
#include "util/parse.h"

enum key_type {
	T_PATH,	   /* char[PATH_MAX] or char[SOCK_MAX]: size in .cap */
	T_NAME,	   /* short string: size in .cap */
	T_U32,	   /* [min, max] */
	T_SIZE,	   /* bytes with suffix, [min, max] */
	T_HUGE,	   /* auto|require|off */
	T_DTYPE,   /* f32|f16|bf16|int8|int4 */
	T_LEVEL,   /* log level */
	T_BOOL,	   /* yes/no, true/false, on/off, 1/0 */
	T_WEIGHTS, /* copy|map: enum kvp_model_weights */
	T_POLICY,  /* fair|fifo: enum kvp_sched_policy */
	T_DOMMODE, /* per-uid|groups|single: enum kvp_domains_mode */
	T_EVICT,   /* lru|lfu|priority: enum kvp_evict_policy */
};

struct key_def {
	const char *section;
	const char *key;
	const char *flag; /* long flag without "--", or NULL */
	enum key_type type;
	size_t off;
	size_t cap;	   /* strings: buffer size; sizes: 8 for a uint64_t field, else 4 */
	uint64_t min, max; /* numbers */
	const char *help;
};

/* Other names a flag answers to: kvpool-run's name for the same setting. */
static const struct {
	const char *alias, *flag;
} flag_aliases[] = {
	{ "kv-type", "kv-dtype" },
};

#define OFF(f) offsetof(struct kvp_config, f)
#define CAP(f) sizeof(((struct kvp_config *)0)->f)

static const struct key_def keys[] = {
	{ "daemon", "model", "model", T_PATH, OFF(model_path), CAP(model_path), 0, 0,
	  "GGUF model file; empty: the built-in demo model" },
	{ "daemon", "state_dir", "state-dir", T_PATH, OFF(state_dir), CAP(state_dir), 0, 0,
	  "directory for the generated demo model" },
	{ "daemon", "threads", "threads", T_U32, OFF(threads), 0, 0, 1024,
	  "compute threads; 0: one per online CPU" },
	{ "daemon", "log_level", "log-level", T_LEVEL, OFF(log_level), 0, 0, 0,
	  "emerg|alert|crit|err|warning|notice|info|debug" },
	{ "daemon", "drain_timeout_ms", "drain-timeout-ms", T_U32, OFF(drain_timeout_ms), 0, 0,
	  3600000, "on SIGTERM, time running requests get to finish before they are cancelled" },
	{ "daemon", "weights", "weights", T_WEIGHTS, OFF(weights), 0, 0, 0,
	  "copy: copied at start into huge-page memory: faster decode, no extra memory, but a\n"
	  "slower start (docs/daemon.md has figures), the right trade for a\n"
	  "long-running daemon; map: used in place from the file, the fastest start" },
	{ "daemon", "chat_template", "chat-template", T_NAME, OFF(chat_template),
	  CAP(chat_template), 0, 0,
	  "chat template family for CHAT requests naming none (llama3, chatml, llama2, ...);\n"
	  "empty: recognised from the model's tokenizer.chat_template" },
	{ "daemon", "request_log", "request-log", T_BOOL, OFF(request_log), 0, 0, 0,
	  "log one info line (key=value) per ended request" },
	{ "daemon", "memory_guard", "memory-guard", T_BOOL, OFF(memory_guard), 0, 0, 0,
	  "refuse to start when pool + model exceed MemAvailable or the cgroup's memory\n"
	  "limit (no: start anyway, e.g. when swap or overcommit is intended), and a new\n"
	  "per-uid domain whose pool does not fit what is left (its HELLO gets BUSY)" },
	{ "daemon", "memory_limit", "memory-limit", T_SIZE, OFF(memory_limit_bytes),
	  CAP(memory_limit_bytes), 0, 1ull << 50,
	  "memory guard: a budget of the daemon's own for the model and every domain's pool\n"
	  "(outside reserved huge pages), checked at start and for each new per-uid domain;\n"
	  "0: none (MemAvailable and the cgroup's limit only)" },
	{ "pool", "size", "pool-size", T_SIZE, OFF(pool_bytes), CAP(pool_bytes), 1ull << 20,
	  1ull << 40, "KV block pool size (K, M, G, T suffixes)" },
	{ "pool", "block_size", "block-size", T_U32, OFF(block_tokens), 0, 1, 1024,
	  "tokens per KV block (a power of two)" },
	{ "pool", "huge_pages", "huge-pages", T_HUGE, OFF(huge_pages), 0, 0, 0,
	  "auto: 2 MiB pages if reserved, else THP, else 4 KiB; require: fail without; off" },
	{ "pool", "kv_dtype", "kv-dtype", T_DTYPE, OFF(kv_dtype), 0, 0, 0,
	  "element type of stored K/V: f32|f16|bf16|int8|int4 (--kv-type, kvpool-run's name,\n"
	  "is an alias)" },
	{ "pool", "kv_window", "kv-window", T_U32, OFF(kv_window), 0, 0, KVP_KV_WINDOW_MAX,
	  "int4: the residual window, the most recent tokens of each sequence kept at full\n"
	  "precision (KIVI's R); a block is quantized when it slides out" },
	{ "server", "socket", "socket", T_PATH, OFF(socket_path), CAP(socket_path), 0, 0,
	  "request socket" },
	{ "server", "status_socket", "status-socket", T_PATH, OFF(status_path), CAP(status_path), 0,
	  0, "status socket; default: status.sock next to the request socket; empty: none" },
	{ "server", "socket_group", "socket-group", T_NAME, OFF(socket_group), CAP(socket_group), 0,
	  0, "group owning the request socket (mode 0660); empty: the daemon's" },
	{ "server", "status_group", "status-group", T_NAME, OFF(status_group), CAP(status_group), 0,
	  0,
	  "group owning the status socket (operators; never socket_group's); empty: owner only" },
	{ "server", "status_operators", "status-operators", T_NAME, OFF(status_operators),
	  CAP(status_operators), 0, 0,
	  "group whose members see every domain on the status socket and may run its commands "
	  "(besides root and the daemon's user); empty: none" },
	{ "server", "max_frame_bytes", "max-frame-bytes", T_SIZE, OFF(max_frame_bytes),
	  CAP(max_frame_bytes), 4096, 64ull << 20, "largest frame accepted, header included" },
	{ "server", "max_conns", "max-conns", T_U32, OFF(max_conns), 0, 1, 65536,
	  "connections at once" },
	{ "server", "max_reqs_per_conn", "max-reqs-per-conn", T_U32, OFF(max_reqs_per_conn), 0, 1,
	  4096, "requests in flight per connection" },
	{ "server", "outq_bytes", "outq-bytes", T_SIZE, OFF(outq_bytes), CAP(outq_bytes), 4096,
	  1ull << 30, "unsent output a connection may queue before it is dropped" },
	{ "server", "max_conns_per_uid", "max-conns-per-uid", T_U32, OFF(max_conns_per_uid), 0, 0,
	  65536, "connections one user (uid) may hold; 0: a quarter of max_conns" },
	{ "server", "max_refusals", "max-refusals", T_U32, OFF(max_refusals), 0, 0, 1u << 20,
	  "close a connection after this many refused requests in a row (INVALID, LIMIT,\n"
	  "NOSPACE, DENIED, with no request served between); 0: never" },
	{ "server", "idle_timeout_ms", "idle-timeout-ms", T_U32, OFF(idle_timeout_ms), 0, 0,
	  86400000, "close a connection idle this long with nothing in flight; 0: never" },
	{ "limits", "max_prompt_tokens", "max-prompt-tokens", T_U32, OFF(max_prompt_tokens), 0, 1,
	  1u << 20, "prompt tokens (or text bytes) in one request" },
	{ "limits", "max_text_bytes", "max-text-bytes", T_SIZE, OFF(max_text_bytes),
	  CAP(max_text_bytes), 0, 64ull << 20,
	  "text bytes in one request (a CHAT's messages together), refused before anything\n"
	  "renders or tokenizes them; 0: 4 x max_prompt_tokens x the vocabulary's longest\n"
	  "token, more than any text that can fit" },
	{ "limits", "max_new_tokens", "max-new-tokens", T_U32, OFF(max_new_tokens), 0, 1, 1u << 20,
	  "tokens one request may generate" },
	{ "limits", "context_tokens", "context-tokens", T_U32, OFF(context_tokens), 0, 0, 16u << 20,
	  "longest sequence (prompt + max_new_tokens) one request may ask for; 0: the\n"
	  "model's context_length (a larger value runs positions the model was not trained on)" },
	{ "scheduler", "max_running", "max-running", T_U32, OFF(max_running), 0, 1, 4096,
	  "sequences decoded together" },
	{ "scheduler", "max_queued", "max-queued", T_U32, OFF(max_queued), 0, 1, 1u << 20,
	  "requests waiting for admission before new ones are refused (BUSY)" },
	{ "scheduler", "ignore_eos", "ignore-eos", T_BOOL, OFF(ignore_eos), 0, 0, 0,
	  "generate max_new_tokens every time, never stopping at an end-of-generation token\n"
	  "(load tests)" },
	{ "scheduler", "speculative", "speculative", T_BOOL, OFF(speculative), 0, 0, 0,
	  "greedy requests draft tokens from their own prompt and output (prompt lookup) and\n"
	  "verify them as extra rows of the decode step (fair policy; output unchanged);\n"
	  "a request may turn it off, or on for sampling; off, nothing drafts" },
	{ "scheduler", "speculative_draft_max", "speculative-draft-max", T_U32,
	  OFF(speculative_draft_max), 0, 1, KVP_DRAFT_K_MAX,
	  "most tokens one request drafts in a step (fewer as its acceptance rate falls,\n"
	  "and as the step's time budget allows)" },
	{ "scheduler", "speculative_ngram", "speculative-ngram", T_U32, OFF(speculative_ngram), 0,
	  1, KVP_DRAFT_NGRAM_MAX,
	  "longest suffix of a request's tokens looked up for drafts (down to 1 token)" },
	{ "scheduler", "test_eog_after", "test-eog-after", T_U32, OFF(test_eog_after), 0, 0,
	  1u << 20,
	  "TESTS ONLY, 0 = off: end every reply after N tokens by raising the model's\n"
	  "end-of-generation ids (synthetic-weight models never end a turn by themselves)" },
	{ "scheduler", "prefill_chunk_tokens", "prefill-chunk", T_U32, OFF(prefill_chunk_tokens), 0,
	  1, 1u << 16,
	  "most prefill tokens computed per engine step (fair: a cap next to the step's time\n"
	  "budget, in the same forward call as the decode rows; fifo: between decode steps)" },
	{ "scheduler", "policy", "sched-policy", T_POLICY, OFF(policy), 0, 0, 0,
	  "fair: blocks on demand with preemption, short prompts first, steps sized by time,\n"
	  "priorities; fifo: the first policy (worst-case reservation, arrival order, fixed\n"
	  "chunks), kept for comparison" },
	{ "scheduler", "itl_budget_pct", "itl-budget-pct", T_U32, OFF(itl_budget_pct), 0, 110, 1000,
	  "fair: how long a running stream's gap between tokens may grow while prompts\n"
	  "prefill, % of its gap alone (its batch's decode step, as measured): each step's\n"
	  "prompt tokens are what fits in it at the model's measured cost" },
	{ "scheduler", "step_target_ms", "step-target-ms", T_U32, OFF(step_target_ms), 0, 0, 10000,
	  "fair: engine step time aimed at while requests generate, instead of\n"
	  "itl_budget_pct (0)" },
	{ "scheduler", "prefill_step_ms", "prefill-step-ms", T_U32, OFF(prefill_step_ms), 0, 0,
	  60000,
	  "fair: longest prefill step while nothing generates (a request arriving then waits\n"
	  "for it); 0: the chunk whose own work is 4 fixed costs of a forward call (at least\n"
	  "itl_budget_pct of a decode step), as measured" },
	{ "scheduler", "cost_call_us", "cost-call-us", T_U32, OFF(cost_call_us), 0, 0, 10000000,
	  "fair, with cost_token_us: the fixed cost of a forward call the step plans count\n"
	  "with, instead of measuring it (0); given figures are not adapted, so the plans\n"
	  "depend on the requests alone (tests)" },
	{ "scheduler", "cost_token_us", "cost-token-us", T_U32, OFF(cost_token_us), 0, 0, 10000000,
	  "fair, with cost_call_us: the cost of a token (a row) in a forward call" },
	{ "scheduler", "prefill_aging_ms", "prefill-aging-ms", T_U32, OFF(prefill_aging_ms), 0, 1,
	  600000,
	  "fair: a prompt left without a prefill chunk this long goes ahead of shorter ones" },
	{ "scheduler", "admit_headroom_blocks", "admit-headroom", T_U32, OFF(admit_headroom_blocks),
	  0, 0, 1u << 30,
	  "fair: blocks left free for running requests to grow into when admitting; 0: 1% of the\n"
	  "pool" },
	{ "tier", "path", "tier-path", T_PATH, OFF(tier_path), CAP(tier_path), 0, 0,
	  "disk tier file (cold KV blocks, kept across restarts); empty: memory only" },
	{ "tier", "size", "tier-size", T_SIZE, OFF(tier_bytes), CAP(tier_bytes), 1ull << 20,
	  1ull << 50, "disk tier file size, preallocated (K, M, G, T suffixes)" },
	{ "tier", "high_watermark", "tier-high-watermark", T_U32, OFF(tier_high_pct), 0, 1, 100,
	  "pool use (% of blocks) above which cold cached blocks are written to the tier and\n"
	  "freed" },
	{ "tier", "low_watermark", "tier-low-watermark", T_U32, OFF(tier_low_pct), 0, 0, 99,
	  "pool use (% of blocks) the offloader frees down to" },
	{ "domains", "mode", "domains-mode", T_DOMMODE, OFF(domains_mode), 0, 0, 0,
	  "how peers (SO_PEERCRED) are sorted into trust domains, each with its own pool,\n"
	  "index and tier: per-uid: every uid its own, made on its first HELLO; groups: the\n"
	  "[domain NAME] sections (a peer in none is refused); single: one for everybody" },
	{ "domains", "max", "domains-max", T_U32, OFF(domains_max), 0, 1, 64,
	  "per-uid: most domains at once (a HELLO from one more uid is refused BUSY)" },
	{ "domains", "pool_size", "domains-pool-size", T_SIZE, OFF(domains_pool_bytes),
	  CAP(domains_pool_bytes), 0, 1ull << 40,
	  "per-uid: each domain's pool (memory use is up to domains.max times this);\n"
	  "0: pool.size" },
	{ "domains", "tier_size", "domains-tier-size", T_SIZE, OFF(domains_tier_bytes),
	  CAP(domains_tier_bytes), 0, 1ull << 50,
	  "per-uid: each domain's disk tier file (tier.path.DOMAIN); 0: tier.size" },
	{ "domains", "idle_reclaim_ms", "domains-idle-reclaim-ms", T_U32,
	  OFF(domains_idle_reclaim_ms), 0, 0, 7u * 86400000u,
	  "per-uid: reclaim a domain made on a HELLO once idle this long (no connection, no\n"
	  "request, lease, pin or live TTL): its pool, index and slot are freed, its tier\n"
	  "file is kept for its uid's return; 0: never" },
	{ "leases", "max_per_conn", "lease-max-per-conn", T_U32, OFF(lease_max_per_conn), 0, 0,
	  4096, "leases (zero-copy reads of cached blocks) one connection may hold; 0: none" },
	{ "leases", "max_ms", "lease-max-ms", T_U32, OFF(lease_max_ms), 0, 1, 86400000,
	  "longest lease lifetime; its blocks are released after it at the latest" },
	{ "cache", "ttl_default_s", "cache-ttl", T_U32, OFF(cache.ttl_default_s), 0, 0, 7 * 86400,
	  "TTL (s) of the blocks a request publishes or hits when it names none: inside it a\n"
	  "block is evicted only when nothing outside a TTL is left" },
	{ "cache", "ttl_max_s", "cache-ttl-max", T_U32, OFF(cache.ttl_max_s), 0, 0, 7 * 86400,
	  "longest TTL (s) a request may ask for; longer asks are cut to it" },
	{ "cache", "min_tokens", "cache-min-tokens", T_U32, OFF(cache.min_tokens), 0, 0, 1u << 24,
	  "prompts shorter than this are neither looked up nor published (0: no minimum)" },
	{ "cache", "pin_allowed", "cache-pin-allowed", T_BOOL, OFF(cache.pin_allowed), 0, 0, 0,
	  "accept `kvpool pin`, `unpin` and `flush` (operators' commands)" },
	{ "cache", "pin_max", "cache-pin-max", T_SIZE, OFF(cache.pin_max_bytes),
	  CAP(cache.pin_max_bytes), 0, 1ull << 50,
	  "most K/V bytes pinned at once (0: a quarter of the pool)" },
	{ "cache", "eviction", "cache-eviction", T_EVICT, OFF(cache.eviction), 0, 0, 0,
	  "which unreferenced cached block goes first: lru (least recently used), lfu (fewest\n"
	  "hits, then lru), priority (lowest retention priority, then lru)" },
	{ "cache", "retain_default", "cache-retain", T_U32, OFF(cache.retain_default), 0, 0, 100,
	  "retention priority (0..100) of requests that name none (eviction = priority)" },
	{ "cache", "cost_write_pct", "cache-cost-write", T_U32, OFF(cache.cost_write_pct), 0, 0,
	  100000,
	  "status cost view: a token written to the cache costs this % of an uncached one" },
	{ "cache", "cost_read_pct", "cache-cost-read", T_U32, OFF(cache.cost_read_pct), 0, 0,
	  100000, "status cost view: a token read from the cache costs this % of an uncached one" },
	/*
	 * [remote]: the remote tier (docs/remote.md).  The tier's own keys are kept as text
	 * and handed to kvp_remote_config_set() one to one (svc/remotecfg.c), which checks
	 * them ("" = the tier's default, named in the help); --check-config does too.
	 */
	{ "remote", "url", "remote", T_NAME, OFF(remote.url), CAP(remote.url), 0, 0,
	  "Redis/Valkey store shared by several hosts: redis://HOST[:PORT] or unix:/PATH;\n"
	  "empty: no remote tier (no TLS: docs/remote.md)" },
	{ "remote", "user", "remote-user", T_NAME, OFF(remote.user), CAP(remote.user), 0, 0,
	  "ACL user of this host's trust domain; empty: the store's default user" },
	{ "remote", "password_file", "remote-password-file", T_PATH, OFF(remote.password_file),
	  CAP(remote.password_file), 0, 0,
	  "file holding that user's password (one line; mode 0600 or 0400); empty: no AUTH" },
	{ "remote", "start_wait_ms", NULL, T_U32, OFF(remote.start_wait_ms), 0, 0, 60000,
	  "at start, wait this long for the store's first answer (logged either way; the\n"
	  "daemon serves local-only until the store answers)" },
	{ "remote", "ttl_s", NULL, T_NAME, OFF(remote.ttl_s), CAP(remote.ttl_s), 0, 0,
	  "expiry of every block written, seconds; empty: 3600" },
	{ "remote", "publish", "remote-publish", T_NAME, OFF(remote.publish), CAP(remote.publish),
	  0, 0,
	  "all: every full block when created; selective: blocks hit a second time or about\n"
	  "to be evicted; off: read only; empty: all" },
	{ "remote", "connect_timeout_ms", NULL, T_NAME, OFF(remote.connect_timeout_ms),
	  CAP(remote.connect_timeout_ms), 0, 0, "a connection attempt gives up; empty: 100" },
	{ "remote", "op_timeout_ms", NULL, T_NAME, OFF(remote.op_timeout_ms),
	  CAP(remote.op_timeout_ms), 0, 0,
	  "a connection owing replies that receives nothing this long is dead; empty: 250" },
	{ "remote", "fetch_timeout_ms", NULL, T_NAME, OFF(remote.fetch_timeout_ms),
	  CAP(remote.fetch_timeout_ms), 0, 0,
	  "deadline of a whole fetch (a request waits at most this long); empty: 1000" },
	{ "remote", "max_fetch_blocks", NULL, T_NAME, OFF(remote.max_fetch_blocks),
	  CAP(remote.max_fetch_blocks), 0, 0, "blocks one fetch may look for; empty: 256" },
	{ "remote", "queue_blocks", NULL, T_NAME, OFF(remote.queue_blocks),
	  CAP(remote.queue_blocks), 0, 0,
	  "publishes in the tier's queue (more wait in the engine's backlog); empty: 32" },
	{ "remote", "fetch_queue", NULL, T_NAME, OFF(remote.fetch_queue), CAP(remote.fetch_queue),
	  0, 0, "fetches queued before new ones are refused (computed); empty: 8" },
	{ "remote", "breaker_errors", NULL, T_NAME, OFF(remote.breaker_errors),
	  CAP(remote.breaker_errors), 0, 0,
	  "consecutive connection errors that turn the tier off; empty: 3" },
	{ "remote", "breaker_probe_ms", NULL, T_NAME, OFF(remote.breaker_probe_ms),
	  CAP(remote.breaker_probe_ms), 0, 0, "first probe after the tier turned off; empty: 250" },
	{ "remote", "breaker_probe_max_ms", NULL, T_NAME, OFF(remote.breaker_probe_max_ms),
	  CAP(remote.breaker_probe_max_ms), 0, 0, "probes back off up to this; empty: 5000" },
	{ "remote", "bandwidth_mbps", NULL, T_NAME, OFF(remote.bandwidth_mbps),
	  CAP(remote.bandwidth_mbps), 0, 0,
	  "transfer rate (MB/s) assumed until the first fetch measured one; empty: 1000" },
	{ "remote", "allow_plaintext", NULL, T_NAME, OFF(remote.allow_plaintext),
	  CAP(remote.allow_plaintext), 0, 0,
	  "1: allow a store that is not on loopback, in clear (there is no TLS); empty: 0" },
	{ "remote", "summary_period_s", NULL, T_U32, OFF(remote.summary_period_s), 0, 0, 86400,
	  "publish each domain's chain summary (routing) this often, seconds; it lives\n"
	  "three periods in the store; 0: never" },
	{ "remote", "host_id", NULL, T_NAME, OFF(remote.host_id), CAP(remote.host_id), 0, 0,
	  "this host in summary keys kvp1:DOMAIN:r:HOST (1..64 of A-Za-z0-9_.-);\n"
	  "empty: the host name" },
};

#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

static const char *const huge_names[] = {
	[KVP_HUGE_AUTO] = "auto",
	[KVP_HUGE_REQUIRE] = "require",
	[KVP_HUGE_OFF] = "off",
};
static const char *const dtype_names[] = {
	[KVP_DTYPE_F32] = "f32",   [KVP_DTYPE_F16] = "f16",   [KVP_DTYPE_BF16] = "bf16",
	[KVP_DTYPE_INT8] = "int8", [KVP_DTYPE_INT4] = "int4",
};
static_assert(sizeof(dtype_names) / sizeof(dtype_names[0]) == KVP_DTYPE__COUNT, "all dtypes");
static const char *const weights_names[] = {
	[KVP_MODEL_WEIGHTS_MAP] = "map",
	[KVP_MODEL_WEIGHTS_COPY] = "copy",
};
static const char *const policy_names[] = {
	[KVP_SCHED_FAIR] = "fair",
	[KVP_SCHED_FIFO] = "fifo",
};
static const char *const evict_names[] = {
	[KVP_EVICT_LRU] = "lru",
	[KVP_EVICT_LFU] = "lfu",
	[KVP_EVICT_PRIORITY] = "priority",
};
static_assert(sizeof(evict_names) / sizeof(evict_names[0]) == KVP_EVICT__COUNT, "all policies");

void kvp_config_defaults(struct kvp_config *c)
{
	memset(c, 0, sizeof(*c));
	strcpy(c->state_dir, "/var/lib/kvpool");
	c->threads = 0;
	c->log_level = LOG_INFO;
	c->drain_timeout_ms = 10000;
	/* a long-running daemon pays the copy once at start for faster decode ever after
	 * (docs/compute.md measures both); compute/'s own default stays "map" */
	c->weights = KVP_MODEL_WEIGHTS_COPY;
	c->request_log = true;
	c->memory_guard = true;
	c->pool_bytes = 1ull << 30;
	c->block_tokens = 16;
	c->huge_pages = KVP_HUGE_AUTO;
	c->kv_dtype = KVP_DTYPE_F16; /* as llama.cpp's cache: half of f32's bytes per token */
	c->kv_window = KVP_KV_WINDOW_DEFAULT;
	strcpy(c->socket_path, "/run/kvpool/kvpool.sock");
	strcpy(c->status_path, "/run/kvpool/status.sock");
	c->status_path_auto = true;
	strcpy(c->status_group, KVP_STATUS_GROUP_DEFAULT);
	strcpy(c->status_operators, KVP_STATUS_GROUP_DEFAULT);
	c->max_frame_bytes = 1u << 20;
	c->max_conns = 256;
	c->max_reqs_per_conn = 16;
	c->outq_bytes = 4u << 20;
	c->idle_timeout_ms = 300000;
	c->max_refusals = 16;
	c->max_prompt_tokens = 16384;
	c->max_new_tokens = 4096;
	c->max_running = 64;
	c->max_queued = 1024;
	c->prefill_chunk_tokens = 256;
	c->policy = KVP_SCHED_FAIR;
	c->itl_budget_pct = 200;
	c->speculative = true; /* bench-spec-daemon, Zen 5: >= 0.97x (docs/compute.md) */
	c->speculative_draft_max = KVP_DRAFT_K_DEFAULT;
	c->speculative_ngram = 4;
	c->prefill_aging_ms = 250;
	c->tier_bytes = 16ull << 30;
	c->tier_high_pct = 90;
	c->tier_low_pct = 75;
	c->domains_mode = KVP_DOMAINS_PER_UID;
	c->domains_max = 8;
	c->domains_idle_reclaim_ms = 600000;
	c->lease_max_per_conn = 16;
	c->lease_max_ms = 60000;
	kvp_cache_policy_defaults(&c->cache);
	c->remote.start_wait_ms = 1000;
	c->remote.summary_period_s = 30;
}

static const struct key_def *find_key(const char *section, const char *key)
{
	size_t i;

	for (i = 0; i < N_KEYS; i++)
		if (!strcmp(keys[i].section, section) && !strcmp(keys[i].key, key))
			return &keys[i];
	return NULL;
}

/* How util/keytab.h reads and shows @k's values (T_DOMMODE is this file's own). */
static struct kvp_key value_type(const struct key_def *k)
{
	struct kvp_key t = { .min = k->min, .max = k->max, .cap = k->cap };

	switch (k->type) {
	case T_PATH:
	case T_NAME:
		t.type = KVP_KEY_STR;
		break;
	case T_U32:
		t.type = KVP_KEY_U32;
		break;
	case T_SIZE:
		t.type = KVP_KEY_SIZE;
		break;
	case T_BOOL:
		t.type = KVP_KEY_BOOL;
		break;
	case T_LEVEL:
		t.type = KVP_KEY_LEVEL;
		break;
	case T_HUGE:
		t = (struct kvp_key){ KVP_KEY_ENUM, .names = huge_names, .n_names = 3 };
		break;
	case T_DTYPE:
		t = (struct kvp_key){ KVP_KEY_ENUM, .names = dtype_names,
				      .n_names = KVP_DTYPE__COUNT };
		break;
	case T_WEIGHTS:
		/* index 0 (KVP_MODEL_WEIGHTS_DEFAULT) has no name: never stored */
		t = (struct kvp_key){ KVP_KEY_ENUM, .names = weights_names, .n_names = 3,
				      .words = "copy, map" };
		break;
	case T_POLICY:
		t = (struct kvp_key){ KVP_KEY_ENUM, .names = policy_names, .n_names = 2 };
		break;
	case T_EVICT:
		t = (struct kvp_key){ KVP_KEY_ENUM, .names = evict_names,
				      .n_names = KVP_EVICT__COUNT };
		break;
	case T_DOMMODE:
		break;
	}
	return t;
}

/* Parse @value as @k's type into @field; on error write "why" (without the key) to @err. */
static int apply_field(char *field, const struct key_def *k, const char *value, char *err,
		       size_t cap)
{
	struct kvp_key t = value_type(k);
	uint32_t e;

	if (k->type != T_DOMMODE)
		return kvp_key_parse(&t, field, value, err, cap);
	if (kvp_domains_mode_parse(value, &e) < 0) {
		kvp_errmsg(err, cap, "'%s' is not one of per-uid, groups, single", value);
		return -EINVAL;
	}
	*(uint32_t *)field = e;
	return 0;
}

/* Apply @value to @k of @c; on error write "why" (without the key name) to @err. */
static int apply(struct kvp_config *c, const struct key_def *k, const char *value, char *err,
		 size_t cap)
{
	if (k->off == OFF(status_path))
		c->status_path_auto = false; /* set: no longer derived from server.socket */
	return apply_field((char *)c + k->off, k, value, err, cap);
}

/* The [cache] key @key, when it is one: its field lies inside struct kvp_cache_policy. */
static const struct key_def *find_cache_key(const char *key)
{
	const struct key_def *k = find_key("cache", key);

	if (!k || k->off < OFF(cache) || k->off >= OFF(cache) + CAP(cache))
		return NULL;
	return k;
}

int kvp_config_cache_key(struct kvp_cache_policy *p, const char *key, const char *value, char *err,
			 size_t cap)
{
	const struct key_def *k = find_cache_key(key);

	if (!k)
		return -ENOENT;
	/* the same parser and bounds as [cache] itself: one definition of each key */
	return apply_field((char *)p + (k->off - OFF(cache)), k, value, err, cap);
}

int kvp_config_set(struct kvp_config *c, const char *section, const char *key, const char *value,
		   char *err, size_t cap)
{
	const struct key_def *k = find_key(section, key);
	const char *dom = kvp_domcfg_section(section);
	char why[256];
	int r;

	if (dom) {
		r = kvp_domcfg_set(c->domcfg, &c->n_domcfg, dom, key, value, why, sizeof(why));
		if (r < 0)
			kvp_errmsg(err, cap, "%s.%s: %s", section, key, why);
		return r;
	}
	if (!k) {
		kvp_errmsg(err, cap, "%s%s%s: unknown key", section, *section ? "." : "", key);
		return -ENOENT;
	}
	r = apply(c, k, value, why, sizeof(why));
	if (r < 0)
		kvp_errmsg(err, cap, "%s.%s: %s", section, key, why);
	return r;
}

/* One file's parse: which keys it has set, so a second setting is an error. */
struct load_ctx {
	struct kvp_config *c;
	unsigned char seen[N_KEYS];
};

static int load_key(void *user, const char *section, const char *name, const char *value, char *err,
		    size_t cap)
{
	struct load_ctx *x = user;
	const struct key_def *k = find_key(section, name);
	const char *dom = kvp_domcfg_section(section);
	char why[256];

	if (dom) {
		if (kvp_domcfg_set(x->c->domcfg, &x->c->n_domcfg, dom, name, value, why,
				   sizeof(why)) < 0) {
			kvp_errmsg(err, cap, "%s.%s: %s", section, name, why);
			return -EINVAL;
		}
		return 0;
	}
	if (!k) {
		if (!*section)
			kvp_errmsg(err, cap, "%s: key outside any [section]", name);
		else
			kvp_errmsg(err, cap, "%s.%s: unknown key", section, name);
		return -EINVAL;
	}
	if (x->seen[k - keys]++) {
		kvp_errmsg(err, cap, "%s.%s: set twice", section, name);
		return -EINVAL;
	}
	if (apply(x->c, k, value, why, sizeof(why)) < 0) {
		kvp_errmsg(err, cap, "%s.%s: %s", section, name, why);
		return -EINVAL;
	}
	return 0;
}

int kvp_config_load_file(struct kvp_config *c, const char *path, bool must_exist, char *err,
			 size_t cap)
{
	struct load_ctx x = { .c = c };
	int r;

	r = kvp_ini_load(path, "[section] or key = value", load_key, &x, err, cap);
	if (r == -ENOENT && !must_exist)
		return 0;
	if (r == 0)
		snprintf(c->config_path, sizeof(c->config_path), "%s", path);
	return r;
}

static const struct key_def *find_flag(const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < sizeof(flag_aliases) / sizeof(flag_aliases[0]); i++) {
		if (strlen(flag_aliases[i].alias) == len &&
		    !strncmp(flag_aliases[i].alias, name, len)) {
			name = flag_aliases[i].flag;
			len = strlen(name);
			break;
		}
	}
	for (i = 0; i < N_KEYS; i++)
		if (keys[i].flag && strlen(keys[i].flag) == len &&
		    !strncmp(keys[i].flag, name, len))
			return &keys[i];
	return NULL;
}

/*
 * Split argv[*i] into flag name and value ("--x=v" or "--x v"); advances *i past a
 * separate value.  Returns -EINVAL when the value is missing.
 */
static int flag_value(int argc, char *const *argv, int *i, const char *eq, const char **value)
{
	if (eq) {
		*value = eq + 1;
		return 0;
	}
	if (*i + 1 >= argc)
		return -EINVAL;
	*value = argv[++*i];
	return 0;
}

static bool is_flag(const char *arg, const char *name, size_t len)
{
	return strlen(name) == len && !strncmp(arg, name, len);
}

static int group_named(const char *name, gid_t *gid)
{
	struct group gr;
	struct group *res = NULL;
	char buf[4096];

	if (getgrnam_r(name, &gr, buf, sizeof(buf), &res) || !res)
		return -ENOENT;
	*gid = res->gr_gid;
	return 0;
}

/* May this process give a file to group @gid (chown(2) without capabilities)? */
static bool group_is_ours(gid_t gid)
{
	gid_t groups[256];
	int n;

	if (geteuid() == 0 || getegid() == gid)
		return true;
	n = getgroups(256, groups);
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			return true;
	return false;
}

int kvp_config_status_gid(const struct kvp_config *c, gid_t *gid)
{
	bool dflt = !strcmp(c->status_group, KVP_STATUS_GROUP_DEFAULT);

	if (!*c->status_group)
		return 0;
	if (group_named(c->status_group, gid) < 0)
		return dflt ? -ENOENT : -EINVAL;
	if (dflt && !group_is_ours(*gid))
		return -EPERM;
	return 1;
}

int kvp_config_socket_gid(const struct kvp_config *c, gid_t *gid)
{
	if (!*c->socket_group) {
		*gid = getegid();
		return 0;
	}
	return group_named(c->socket_group, gid) < 0 ? -EINVAL : 0;
}

uint32_t kvp_config_conns_per_uid(const struct kvp_config *c)
{
	if (c->max_conns_per_uid)
		return c->max_conns_per_uid;
	return c->max_conns >= 4 ? c->max_conns / 4 : 1;
}

/*
 * An unset status socket lives next to the request socket, so `--socket DIR/x.sock`
 * alone moves both, and `kvpool --socket` finds the status socket the same way.
 */
static int resolve_status_path(struct kvp_config *c, char *err, size_t cap)
{
	const char *slash = strrchr(c->socket_path, '/');
	int n;

	if (!c->status_path_auto)
		return 0;
	n = snprintf(c->status_path, sizeof(c->status_path), "%.*sstatus.sock",
		     slash ? (int)(slash - c->socket_path + 1) : 0, c->socket_path);
	if (n >= (int)sizeof(c->status_path)) {
		kvp_errmsg(err, cap,
			   "server.status_socket: status.sock next to %s is longer than %zu "
			   "bytes; set server.status_socket",
			   c->socket_path, sizeof(c->status_path) - 1);
		return -EINVAL;
	}
	return 0;
}

int kvp_config_parse_args(struct kvp_config *c, int argc, char *const *argv,
			  enum kvp_config_action *act, char *err, size_t cap)
{
	const char *config = NULL;
	const char *value = NULL;
	char why[256];
	int i;
	int r;

	*act = KVP_CONFIG_RUN;
	kvp_config_defaults(c);

	/* pass 1: --config, --help and syntax, so the file is read before flags apply */
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *name = a + 2;
		const char *eq = strchr(a, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			*act = KVP_CONFIG_HELP;
			return 0;
		}
		if (!strcmp(a, "--version")) {
			*act = KVP_CONFIG_VERSION;
			return 0;
		}
		if (a[0] != '-' || a[1] != '-') {
			kvp_errmsg(err, cap, "%s: unexpected argument (try --help)", a);
			return -EINVAL;
		}
		if (is_flag(name, "foreground", len) || is_flag(name, "check-config", len)) {
			if (eq) {
				kvp_errmsg(err, cap, "--%.*s takes no value", (int)len, name);
				return -EINVAL;
			}
			continue;
		}
		if (!is_flag(name, "config", len) && !is_flag(name, "set", len) &&
		    !find_flag(name, len)) {
			kvp_errmsg(err, cap, "--%.*s: unknown flag (try --help)", (int)len, name);
			return -EINVAL;
		}
		if (find_flag(name, len) && find_flag(name, len)->type == T_BOOL && !eq)
			continue; /* a bare boolean flag means yes */
		if (flag_value(argc, argv, &i, eq, &value) < 0) {
			kvp_errmsg(err, cap, "--%.*s: needs a value", (int)len, name);
			return -EINVAL;
		}
		if (is_flag(name, "config", len))
			config = value;
	}

	if (config && !*config) {
		kvp_errmsg(err, cap, "--config: empty path");
		return -EINVAL;
	}
	r = kvp_config_load_file(c, config ? config : KVP_CONFIG_DEFAULT_PATH, config != NULL, err,
				 cap);
	if (r < 0)
		return r;

	/* pass 2: flags override the file, in order */
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *name = a + 2;
		const char *eq = strchr(a, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		const struct key_def *k;

		if (is_flag(name, "foreground", len)) {
			c->foreground = true;
			continue;
		}
		if (is_flag(name, "check-config", len)) {
			*act = KVP_CONFIG_CHECK;
			continue;
		}
		k = find_flag(name, len);
		if (k && k->type == T_BOOL && !eq) {
			*(bool *)((char *)c + k->off) = true;
			continue;
		}
		flag_value(argc, argv, &i, eq, &value);
		if (is_flag(name, "config", len))
			continue;
		if (is_flag(name, "set", len)) {
			/* --set section.key=value: any key, for keys without a flag */
			char sk[128];
			const char *dot = strchr(value, '.');
			const char *veq = strchr(value, '=');

			if (!dot || !veq || dot > veq || (size_t)(veq - value) >= sizeof(sk)) {
				kvp_errmsg(err, cap, "--set %s: want SECTION.KEY=VALUE", value);
				return -EINVAL;
			}
			memcpy(sk, value, (size_t)(veq - value));
			sk[veq - value] = '\0';
			sk[dot - value] = '\0';
			r = kvp_config_set(c, sk, sk + (dot - value) + 1, veq + 1, why,
					   sizeof(why));
			if (r < 0) {
				kvp_errmsg(err, cap, "--set: %s", why);
				return -EINVAL;
			}
			continue;
		}
		k = find_flag(name, len);
		r = apply(c, k, value, why, sizeof(why));
		if (r < 0) {
			kvp_errmsg(err, cap, "--%s: %s", k->flag, why);
			return r;
		}
	}
	return resolve_status_path(c, err, cap);
}

static int check_group(const char *name, const char *key, char *err, size_t cap)
{
	gid_t gid;

	if (!*name || group_named(name, &gid) == 0)
		return 0;
	kvp_errmsg(err, cap, "server.%s: no group named '%s'", key, name);
	return -EINVAL;
}

/*
 * The status socket answers every domain's figures to an operator and takes operator
 * commands: a group of its own, never the request socket's, whose members are the clients.
 */
static int check_status_group(const struct kvp_config *c, char *err, size_t cap)
{
	gid_t sg, rg;
	int r = kvp_config_status_gid(c, &sg);

	if (r == -EINVAL) {
		kvp_errmsg(err, cap, "server.status_group: no group named '%s'", c->status_group);
		return -EINVAL;
	}
	if (r != 1 || !*c->status_path || kvp_config_socket_gid(c, &rg) < 0 || sg != rg)
		return 0;
	kvp_errmsg(err, cap,
		   "server.status_group: '%s' is also the request socket's group (%s), so every "
		   "client could reach the status socket; give it a group of its own (%s, the "
		   "default) or \"\" (the daemon's user only)",
		   c->status_group, *c->socket_group ? c->socket_group : "the daemon's own",
		   KVP_STATUS_GROUP_DEFAULT);
	return -EINVAL;
}

/* [domain NAME] sections only with domains.mode = groups, and at least one there. */
static int check_domains(const struct kvp_config *c, char *err, size_t cap)
{
	if (c->domains_mode == KVP_DOMAINS_GROUPS && !c->n_domcfg) {
		kvp_errmsg(err, cap,
			   "domains.mode: groups needs at least one [domain NAME] section "
			   "(users = ..., groups = ...)");
		return -EINVAL;
	}
	if (c->domains_mode != KVP_DOMAINS_GROUPS && c->n_domcfg) {
		kvp_errmsg(err, cap,
			   "domain %s: [domain NAME] sections are used only with "
			   "domains.mode = groups (it is %s)",
			   c->domcfg[0].name, kvp_domains_mode_name(c->domains_mode));
		return -EINVAL;
	}
	if (kvp_domcfg_check(c->domcfg, c->n_domcfg, err, cap) < 0)
		return -EINVAL;
	return kvp_domcfg_check_cache(c->domcfg, c->n_domcfg, &c->cache, err, cap);
}

int kvp_config_check(const struct kvp_config *c, char *err, size_t cap)
{
	uint64_t hdr = 24 + sizeof(struct kvp_generate); /* frame header + GENERATE payload */

	if (!*c->socket_path) {
		kvp_errmsg(err, cap, "server.socket: must not be empty");
		return -EINVAL;
	}
	if (*c->status_path && !strcmp(c->status_path, c->socket_path)) {
		kvp_errmsg(err, cap, "server.status_socket: same path as server.socket");
		return -EINVAL;
	}
	if (!*c->model_path && !*c->state_dir) {
		kvp_errmsg(err, cap,
			   "daemon.state_dir: needed for the demo model when daemon.model "
			   "is empty");
		return -EINVAL;
	}
	if (c->block_tokens & (c->block_tokens - 1)) {
		kvp_errmsg(err, cap, "pool.block_size: %u is not a power of two", c->block_tokens);
		return -EINVAL;
	}
	/* a GENERATE of max_prompt_tokens ids must fit in one frame */
	if (hdr + 4ull * c->max_prompt_tokens > c->max_frame_bytes) {
		kvp_errmsg(err, cap,
			   "server.max_frame_bytes: %u cannot carry limits.max_prompt_tokens "
			   "= %u (needs %llu)",
			   c->max_frame_bytes, c->max_prompt_tokens,
			   (unsigned long long)(hdr + 4ull * c->max_prompt_tokens));
		return -EINVAL;
	}
	if (c->outq_bytes < c->max_frame_bytes) {
		kvp_errmsg(err, cap, "server.outq_bytes: smaller than server.max_frame_bytes");
		return -EINVAL;
	}
	if (c->max_running > c->max_conns * (uint64_t)c->max_reqs_per_conn) {
		kvp_errmsg(err, cap,
			   "scheduler.max_running: %u exceeds max_conns x max_reqs_per_conn",
			   c->max_running);
		return -EINVAL;
	}
	if (c->cache.ttl_default_s > c->cache.ttl_max_s) {
		kvp_errmsg(err, cap, "cache.ttl_default_s: %u is above cache.ttl_max_s = %u",
			   c->cache.ttl_default_s, c->cache.ttl_max_s);
		return -EINVAL;
	}
	if (c->tier_low_pct >= c->tier_high_pct) {
		kvp_errmsg(err, cap,
			   "tier.low_watermark: %u%% is not below tier.high_watermark %u%%",
			   c->tier_low_pct, c->tier_high_pct);
		return -EINVAL;
	}
	if (check_group(c->socket_group, "socket_group", err, cap) < 0 ||
	    check_status_group(c, err, cap) < 0)
		return -EINVAL;
	/* the default operators' group may be missing: then root and the daemon's user only */
	if (strcmp(c->status_operators, KVP_STATUS_GROUP_DEFAULT) &&
	    check_group(c->status_operators, "status_operators", err, cap) < 0)
		return -EINVAL;
	return check_domains(c, err, cap);
}

static void field_text(const char *field, const struct key_def *k, char *buf, size_t cap)
{
	struct kvp_key t = value_type(k);

	if (k->type == T_DOMMODE)
		snprintf(buf, cap, "%s", kvp_domains_mode_name(*(const uint32_t *)field));
	else
		kvp_key_text(&t, field, buf, cap);
}

static void value_text(const struct kvp_config *c, const struct key_def *k, char *buf, size_t cap)
{
	field_text((const char *)c + k->off, k, buf, cap);
}

int kvp_config_cache_text(const struct kvp_cache_policy *p, const char *key, char *buf, size_t cap)
{
	const struct key_def *k = find_cache_key(key);

	if (!k)
		return -ENOENT;
	field_text((const char *)p + (k->off - OFF(cache)), k, buf, cap);
	return 0;
}

int kvp_config_get(const struct kvp_config *c, const char *section, const char *key, char *buf,
		   size_t cap)
{
	const struct key_def *k = find_key(section, key);

	if (!k)
		return -ENOENT;
	value_text(c, k, buf, cap);
	return 0;
}

void kvp_config_usage(FILE *f)
{
	struct kvp_config d;
	char def[PATH_MAX];
	char flag[64];
	size_t i;

	kvp_config_defaults(&d);
	fprintf(f,
		"usage: kvpoold [--config FILE] [--FLAG VALUE ...] [--set SECTION.KEY=VALUE ...]\n"
		"\n"
		"kvpoold serves LLM generation with a shared prefix (KV) cache over a Unix socket.\n"
		"It stays in the foreground (systemd runs it as Type=notify) and logs to stderr.\n"
		"Settings come from the defaults, then the INI file (" KVP_CONFIG_DEFAULT_PATH
		" if it\nexists, or --config FILE, which must exist), then flags, in that order.\n"
		"\n"
		"  --config FILE         read FILE instead of " KVP_CONFIG_DEFAULT_PATH "\n"
		"  --set S.K=V           set key K of section [S] (any key below)\n"
		"  --foreground          log plain lines for a terminal (no <N> journald prefixes)\n"
		"  --check-config        validate, print the effective config as INI, exit\n"
		"  --help, --version\n"
		"\n"
		"  flag                  [section] key              default\n");
	for (i = 0; i < N_KEYS; i++) {
		value_text(&d, &keys[i], def, sizeof(def));
		snprintf(flag, sizeof(flag), "--%s", keys[i].flag ? keys[i].flag : "set");
		fprintf(f, "  %-21s [%s] %-*s %s\n", flag, keys[i].section,
			(int)(24 - strlen(keys[i].section)), keys[i].key, *def ? def : "\"\"");
		/* a help text of several lines: each indented under the flag */
		for (const char *h = keys[i].help; *h;) {
			size_t n = strcspn(h, "\n");

			fprintf(f, "      %.*s\n", (int)n, h);
			h += n + (h[n] == '\n');
		}
	}
}

void kvp_config_print(const struct kvp_config *c, FILE *f)
{
	const char *section = "";
	char val[PATH_MAX];
	size_t i;

	if (*c->config_path)
		fprintf(f, "; read from %s\n", c->config_path);
	for (i = 0; i < N_KEYS; i++) {
		if (strcmp(section, keys[i].section)) {
			section = keys[i].section;
			fprintf(f, "%s[%s]\n", i ? "\n" : "", section);
		}
		value_text(c, &keys[i], val, sizeof(val));
		fprintf(f, "%s = %s\n", keys[i].key, val);
	}
	kvp_domcfg_print(c->domcfg, c->n_domcfg, &c->cache, f);
}
