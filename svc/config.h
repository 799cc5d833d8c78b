/* SPDX-License-Identifier: MIT */
/*
 * config.h - kvpoold's configuration: one immutable struct kvp_config built from
 * defaults, then the INI file (/etc/kvpool/kvpoold.conf unless --config names another),
 * then command-line flags, and validated once by kvp_config_check() before any socket
 * is bound.  docs/daemon.md lists every key; kvp_config_usage() prints the same table.
 *
 * Errors name the key and where it came from ("FILE:LINE: section.key: why" or
 * "--flag: why").  Sizes take K, M, G, T suffixes (powers of 1024).
 *
 * Thread: built on the main thread before any other starts; read-only afterwards.
 */
#ifndef KVP_SVC_CONFIG_H
#define KVP_SVC_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "svc/cachecfg.h"
#include "svc/domcfg.h"
#include "svc/engine/cachepol.h"

#define KVP_CONFIG_DEFAULT_PATH "/etc/kvpool/kvpoold.conf"
#define KVP_CONFIG_SOCK_MAX 108 /* sizeof(sun_path), NUL included */
#define KVP_CONFIG_NAME_MAX 64	/* group names */

enum kvp_huge_pages {
	KVP_HUGE_AUTO = 0, /* MFD_HUGETLB if reserved, else MADV_HUGEPAGE, else 4 KiB */
	KVP_HUGE_REQUIRE,  /* MFD_HUGETLB or fail */
	KVP_HUGE_OFF,	   /* 4 KiB pages only */
};

/**
 * struct kvp_config - everything kvpoold is told; immutable after kvp_config_check()
 *
 * [daemon]
 * @model_path:         GGUF model; "" serves the built-in demo model
 * @state_dir:          where the demo model is generated and kept
 * @threads:            compute threads; 0 = one per online CPU
 * @log_level:          syslog priority threshold (LOG_ERR .. LOG_DEBUG)
 * @drain_timeout_ms:   on SIGTERM, time running requests get to finish
 * @weights:            enum kvp_model_weights: KVP_MODEL_WEIGHTS_COPY (default: decode
 *                      reads the weights from huge pages, for a slower start) or
 *                      KVP_MODEL_WEIGHTS_MAP (used in place from the file mapping)
 * @chat_template:      chat template family for CHAT requests that name none ("" = the
 *                      one the model's tokenizer.chat_template is recognised as)
 * @request_log:        one info line per ended request (svc/reqlog.h)
 * @memory_guard:       refuse to start when pool + model exceed the memory available
 *                      (svc/memguard.h); off for operators who know better
 * [pool]
 * @memory_limit_bytes: the memory pools and model may take together, by the daemon's
 *                      own count: the guard's budget at start and for each new per-uid
 *                      domain, besides MemAvailable and the cgroup (0: none)
 * @pool_bytes:         size of the KV block pool
 * @block_tokens:       tokens per KV block
 * @huge_pages:         enum kvp_huge_pages
 * @kv_dtype:           enum kvp_dtype of stored K/V
 * @kv_window:          int4: tokens of each sequence kept at full precision
 * [server]
 * @socket_path, @status_path: Unix socket paths (status "" = no status socket)
 * @status_path_auto:   status_socket was not set: it is status.sock in the request
 *                      socket's directory (kvp_config_parse_args() resolves it)
 * @socket_group:       group owning the request socket ("" = the daemon's group)
 * @status_group:       group owning the status socket ("" = none: mode 0600; default
 *                      kvpool-status, see kvp_config_status_gid()); never @socket_group's
 * @status_operators:   group whose members are operators on the status socket (default
 *                      kvpool-status; "" or a missing default group: none), besides uid
 *                      0 and the daemon's own (svc/stats.h)
 * @max_frame_bytes, @max_conns, @max_reqs_per_conn, @outq_bytes: ipc/ limits
 * @max_conns_per_uid:  connections one uid may hold; 0: a quarter of max_conns
 * @idle_timeout_ms:    a connection with nothing in flight this long is closed; 0: never
 * [limits]
 * @max_refusals:       refused requests in a row that close a connection; 0: never
 * @max_prompt_tokens:  prompt tokens (or text bytes) in one request
 * @max_text_bytes:     text bytes in one request (a CHAT's messages together); 0: from the
 *                      vocabulary (kvp_daemon: 4 x max_prompt_tokens x its longest token)
 * @max_new_tokens:     generated tokens one request may ask for
 * @context_tokens:     prompt + max_new_tokens of one request at most; 0: the model's
 *                      context_length
 * [scheduler]
 * @max_running:        sequences decoded together (batch size bound)
 * @max_queued:         requests waiting for admission before BUSY is answered
 * @prefill_chunk_tokens: prefill token budget per engine step
 * @ignore_eos:         never stop at end-of-generation tokens: every request
 *                      generates max_new_tokens
 * @speculative:        greedy requests draft tokens from their own prompt and output and
 *                      verify them in the decode step (svc/engine/spec.c); requests may
 *                      turn it off
 * @speculative_draft_max: most tokens a request drafts in one step (compute/draft.h k_max)
 * @speculative_ngram:  longest suffix looked up for drafts (compute/draft.h ngram_max)
 * @test_eog_after:     tests only (0 = off): end every reply after this many tokens by
 *                      raising the end-of-generation ids' logits (svc/engine/engine.h)
 * @policy:             enum kvp_sched_policy: fair (default) or fifo (the first policy)
 * @step_target_ms:     fair: engine step time aimed at while sequences decode (0: auto)
 * @prefill_step_ms:    fair: longest prefill step while nobody decodes (0: auto)
 * @itl_budget_pct:     fair: a stream's gap between tokens while prompts prefill, % of
 *                      its gap alone (200)
 * @cost_call_us, @cost_token_us: fair: both set: the step-cost model given, not
 *                      measured (deterministic step plans: tests); 0: measured
 * @prefill_aging_ms:   fair: a prefill left out this long goes ahead of shorter ones
 * @admit_headroom_blocks: fair: blocks kept free for growth when admitting (0: 1%)
 * [tier]
 * @tier_path:          disk tier file ("" = no tier: memory only)
 * @tier_bytes:         its size
 * @tier_high_pct, @tier_low_pct: pool use (%) above which cold cached blocks are
 *                      written to the tier and freed, and down to which
 * [domains] (svc/domcfg.h; docs/daemon.md "Trust domains")
 * @domains_mode:       enum kvp_domains_mode: per-uid (default), groups, single
 * @domains_max:        per-uid: most domains (uids) at once; a further uid is refused
 * @domains_pool_bytes: per-uid: each domain's pool (0: pool.size)
 * @domains_tier_bytes: per-uid: each domain's disk tier file (0: tier.size)
 * @domains_idle_reclaim_ms: per-uid: a domain made on a HELLO and idle this long is
 *                      reclaimed (svc/reclaim.h; 0: never)
 * @n_domcfg, @domcfg:  groups: the [domain NAME] sections
 * [leases] (LEASE in docs/protocol.md)
 * @lease_max_per_conn: leases one connection may hold at once (0: LEASE refused)
 * @lease_max_ms:       longest lease lifetime; a LEASE asking 0 or more gets this
 * [remote]             the remote tier (svc/remotecfg.h, docs/remote.md)
 * @remote:             url, user, password_file, start_wait_ms; the tier's own keys as
 *                      text ("" = its default), checked by kvp_remote_config_set();
 *                      summary_period_s and host_id of the chain summaries
 *                      (svc/engine/routesum.h)
 * (flags only)
 * @foreground:         plain log lines for a terminal instead of <N> prefixes
 * @config_path:        the file that was read ("" when none)
 */
struct kvp_config {
	char model_path[PATH_MAX];
	char state_dir[PATH_MAX];
	uint32_t threads;
	int log_level;
	uint32_t drain_timeout_ms;
	uint32_t weights;
	char chat_template[KVP_CONFIG_NAME_MAX];
	bool request_log;
	bool memory_guard;
	uint64_t memory_limit_bytes;

	uint64_t pool_bytes;
	uint32_t block_tokens;
	uint32_t huge_pages;
	uint32_t kv_dtype;
	uint32_t kv_window;

	char socket_path[KVP_CONFIG_SOCK_MAX];
	char status_path[KVP_CONFIG_SOCK_MAX];
	bool status_path_auto;
	char socket_group[KVP_CONFIG_NAME_MAX];
	char status_group[KVP_CONFIG_NAME_MAX];
	char status_operators[KVP_CONFIG_NAME_MAX];
	uint32_t max_frame_bytes;
	uint32_t max_conns;
	uint32_t max_reqs_per_conn;
	uint64_t outq_bytes;
	uint32_t max_conns_per_uid;
	uint32_t idle_timeout_ms;
	uint32_t max_refusals;

	uint32_t max_prompt_tokens;
	uint32_t max_text_bytes;
	uint32_t max_new_tokens;
	uint32_t context_tokens;

	uint32_t max_running;
	uint32_t max_queued;
	uint32_t prefill_chunk_tokens;
	bool ignore_eos;
	bool speculative;
	uint32_t speculative_draft_max;
	uint32_t speculative_ngram;
	uint32_t test_eog_after;
	uint32_t policy;
	uint32_t step_target_ms;
	uint32_t prefill_step_ms;
	uint32_t itl_budget_pct;
	uint32_t cost_call_us;
	uint32_t cost_token_us;
	uint32_t prefill_aging_ms;
	uint32_t admit_headroom_blocks;

	char tier_path[PATH_MAX];
	uint64_t tier_bytes;
	uint32_t tier_high_pct;
	uint32_t tier_low_pct;

	uint32_t domains_mode;
	uint32_t domains_max;
	uint64_t domains_pool_bytes;
	uint64_t domains_tier_bytes;
	uint32_t domains_idle_reclaim_ms;
	uint32_t n_domcfg;
	struct kvp_domcfg domcfg[KVP_DOMCFG_MAX];

	uint32_t lease_max_per_conn;
	uint32_t lease_max_ms;
	struct kvp_cache_policy cache;

	bool foreground;
	char config_path[PATH_MAX];

	struct {
		char url[300];
		char user[33];
		char password_file[PATH_MAX];
		uint32_t start_wait_ms;
		char ttl_s[16];
		char publish[16];
		char connect_timeout_ms[16];
		char op_timeout_ms[16];
		char fetch_timeout_ms[16];
		char max_fetch_blocks[16];
		char queue_blocks[16];
		char fetch_queue[16];
		char breaker_errors[16];
		char breaker_probe_ms[16];
		char breaker_probe_max_ms[16];
		char bandwidth_mbps[16];
		char allow_plaintext[16];
		uint32_t summary_period_s;
		char host_id[65];
	} remote;
};

/* What main() should do after kvp_config_parse_args(). */
enum kvp_config_action {
	KVP_CONFIG_RUN = 0, /* start the daemon */
	KVP_CONFIG_HELP,    /* --help: print kvp_config_usage() and exit 0 */
	KVP_CONFIG_VERSION, /* --version */
	KVP_CONFIG_CHECK,   /* --check-config: validate, print the result, exit */
};

/* Fill @c with the documented defaults. */
void kvp_config_defaults(struct kvp_config *c);

/* max_conns_per_uid as the daemon applies it (0 resolved to a quarter of max_conns). */
uint32_t kvp_config_conns_per_uid(const struct kvp_config *c);

/*
 * server.status_group's and server.status_operators' default: the operators' group, never
 * the clients' (docs/daemon.md).
 */
#define KVP_STATUS_GROUP_DEFAULT "kvpool-status"

/**
 * kvp_config_status_gid() - the group the status socket is given (mode 0660)
 * @gid: out; set when 1 is returned
 *
 * The default group (KVP_STATUS_GROUP_DEFAULT) is used when it exists and this process
 * may give a file to it (root, or a member: the unit's SupplementaryGroups=); without it
 * the socket is the daemon's user's alone (mode 0600), as with status_group = "".
 * Return: 1 (@gid set); 0 for "" (owner only); -ENOENT or -EPERM: the default group is
 * missing, or not one of ours (owner only, to be logged); -EINVAL: a group named in the
 * configuration that does not exist.
 */
int kvp_config_status_gid(const struct kvp_config *c, gid_t *gid);

/*
 * The request socket's group: server.socket_group's, or this process's own (the group a
 * socket left as it is has).  Return: 0 (@gid set), or -EINVAL (no such group).
 */
int kvp_config_socket_gid(const struct kvp_config *c, gid_t *gid);

/**
 * kvp_config_set() - set one key from its text form
 * @c:        config to change
 * @section:  INI section ("daemon", "pool", "server", "limits", "scheduler", "tier",
 *            "remote")
 * @key:      key inside @section
 * @value:    text value (sizes with K/M/G/T suffixes, booleans yes/no/true/false/1/0)
 * @err:      out; "section.key: why" when the key is unknown or the value bad
 * Return: 0, -ENOENT for an unknown key, -EINVAL for a bad value.
 */
int kvp_config_set(struct kvp_config *c, const char *section, const char *key, const char *value,
		   char *err, size_t cap);

/**
 * kvp_config_load_file() - apply an INI file on top of @c
 * @path:       file to read
 * @must_exist: false lets a missing file pass silently (the default path)
 * @err:        out; "PATH:LINE: section.key: why" (or "PATH: why")
 * Return: 0 (also for a missing optional file), -ENOENT for a missing required file,
 * -EINVAL for a syntax error, unknown key, duplicate key or bad value, other -errno.
 */
int kvp_config_load_file(struct kvp_config *c, const char *path, bool must_exist, char *err,
			 size_t cap);

/**
 * kvp_config_parse_args() - defaults, then the config file, then flags
 * @argv: argv[0] is skipped; "--flag VALUE" and "--flag=VALUE" both work
 * @act:  out; what main() should do
 * @err:  out; message naming the flag, file line or key
 * Return: 0 or -errno (-EINVAL for usage errors).  @c is complete on 0 but not
 * yet checked: call kvp_config_check().
 */
int kvp_config_parse_args(struct kvp_config *c, int argc, char *const *argv,
			  enum kvp_config_action *act, char *err, size_t cap);

/**
 * kvp_config_check() - cross-field validation, once, before any socket is bound
 *
 * Checks ranges that depend on each other, that paths fit, that named groups exist.
 * Does not look at the model (its limits are applied when it loads).
 * Return: 0, or -EINVAL with @err naming the key.
 */
int kvp_config_check(const struct kvp_config *c, char *err, size_t cap);

/*
 * kvp_config_get() - @section.@key of @c as text (as --check-config prints it)
 * Return: 0, or -ENOENT for an unknown key.
 */
int kvp_config_get(const struct kvp_config *c, const char *section, const char *key, char *buf,
		   size_t cap);

/* --help text, generated from the key table, with the defaults. */
void kvp_config_usage(FILE *f);

/* Print @c as an INI file that kvp_config_load_file() reads back to the same config. */
void kvp_config_print(const struct kvp_config *c, FILE *f);

#endif /* KVP_SVC_CONFIG_H */
