/* SPDX-License-Identifier: MIT */
/*
 * kvpd.c - the kvpoold fixture of the integration tests (see kvpd.h).
 *
 * The daemon is the built binary, run as systemd would: $NOTIFY_SOCKET names a datagram
 * socket of ours and "ready" means READY=1 arrived there, so the tests also check the
 * sd_notify path.  Its stderr goes to a log file in the temporary directory.
 */
#include "tests/integration/kvpd.h"

#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compute/gguf.h"
#include "compute/mkmodel.h"
#include "compute/mkvocab.h"
#include "kvpool/kvpool.h"
#include "tests/lib/testlib.h"

int kvpd_init(struct kvpd *d)
{
	int r;

	memset(d, 0, sizeof(*d));
	d->notify_fd = -1;
	r = kvp_test_tmpdir(d->dir, sizeof(d->dir));
	if (r < 0)
		return r;
	snprintf(d->sock, sizeof(d->sock), "%s/kvpool.sock", d->dir);
	snprintf(d->status, sizeof(d->status), "%s/status.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/kvpoold.log", d->dir);
	snprintf(d->notify, sizeof(d->notify), "%s/notify.sock", d->dir);
	return 0;
}

int kvpd_model(struct kvpd *d, const char *preset, char *path, size_t cap)
{
	struct kvp_mkmodel_opts o;
	int r;

	r = kvp_mkmodel_preset(&o, preset);
	if (r < 0)
		return r;
	snprintf(path, cap, "%s/%s.gguf", d->dir, preset);
	return kvp_mkmodel_write(path, &o, NULL, 0);
}

static int vocab_model(const char *dir, const char *name, const char *vocab_fam,
		       const char *tmpl_file, bool untied)
{
	struct kvp_mkmodel_vocab *v = NULL;
	struct kvp_mkmodel_opts o;
	char path[512], err[512] = "", *tmpl = NULL;
	int r;

	snprintf(path, sizeof(path), "%s/%s/vocab.json", dir, vocab_fam);
	r = kvp_mkmodel_vocab_load(&v, path, err, sizeof(err));
	if (r) {
		fprintf(stderr, "%s: %s\n", path, err);
		return r;
	}
	kvp_mkmodel_preset(&o, "tiny");
	o.n_embd = 16;
	o.n_heads = 2;
	o.n_kv_heads = 1;
	o.n_ff = 32;
	o.n_layers = 1;
	o.vocab = v;
	o.name = name;
	/*
	 * f16: a row's result then does not depend on the rows computed beside it
	 * (docs/compute.md, "Accuracy"), so a seeded sample over these 128k-151k-token
	 * vocabularies is the same however the prompt was chunked or cached; f32's rounding
	 * moves with the chunking (the step budget's, which the load moves) and, the
	 * probabilities being near-uniform, so can a sampled token.  The untied ones stay
	 * f32: kvpd_chain_model() rewrites their f32 output matrix.
	 */
	if (!untied)
		o.type = (uint32_t)kvp_mkmodel_type_parse("f16");
	if (!strcmp(vocab_fam, "llama3")) {
		o.rope_base = 500000.0f;
		o.rope_freqs = (struct kvp_mkmodel_rope_freqs){ 8.0f, 1.0f, 4.0f, 8192 };
	} else if (!strcmp(vocab_fam, "qwen2")) {
		o.arch = "qwen2";
		o.rope_base = 1000000.0f;
		o.tied = 1;
	}
	if (untied)
		o.tied = 0;
	if (tmpl_file) {
		snprintf(path, sizeof(path), "%s/tests/data/templates/%s", getenv("KVP_SOURCE_DIR"),
			 tmpl_file);
		tmpl = kvp_test_read_file(path, NULL);
		if (!tmpl) {
			fprintf(stderr, "%s: cannot read it\n", path);
			kvp_mkmodel_vocab_free(v);
			return -ENOENT;
		}
		o.chat_template = tmpl;
	}
	snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
	r = kvp_mkmodel_write(path, &o, err, sizeof(err));
	if (r)
		fprintf(stderr, "%s: %s\n", path, err);
	kvp_mkmodel_vocab_free(v);
	free(tmpl);
	return r;
}

int kvpd_vocab_model(const char *dir, const char *name, const char *vocab_fam,
		     const char *tmpl_file)
{
	return vocab_model(dir, name, vocab_fam, tmpl_file, false);
}

int kvpd_vocab_model_untied(const char *dir, const char *name, const char *vocab_fam,
			    const char *tmpl_file)
{
	return vocab_model(dir, name, vocab_fam, tmpl_file, true);
}

/* The id of @piece in the vocabulary @path, or -1. */
static int64_t piece_id(const struct kvp_mkmodel_vocab *v, const char *piece)
{
	for (uint32_t i = 0; i < v->n_tokens; i++)
		if (!strcmp(v->tokens[i], piece))
			return i;
	return -1;
}

int kvpd_chain_model(const char *dir, const char *name, const char *vocab_fam,
		     const char *tmpl_file, const char *const (*pairs)[2], size_t n)
{
	struct kvp_mkmodel_vocab *v = NULL;
	const struct kvp_gguf_tensor *t;
	struct kvp_gguf *g = NULL;
	char path[512], err[256] = "";
	int64_t from[16], to[16];
	uint8_t *buf = NULL;
	uint32_t n_embd;
	size_t len;
	int r;

	if (n > 16)
		return -EINVAL;
	snprintf(path, sizeof(path), "%s/%s/vocab.json", dir, vocab_fam);
	r = kvp_mkmodel_vocab_load(&v, path, err, sizeof(err));
	if (r)
		return r;
	for (size_t k = 0; k < n; k++) {
		from[k] = piece_id(v, pairs[k][0]);
		to[k] = piece_id(v, pairs[k][1]);
		if (from[k] < 0 || to[k] < 0) {
			fprintf(stderr, "chain model: '%s' or '%s' is no token of %s\n",
				pairs[k][0], pairs[k][1], vocab_fam);
			kvp_mkmodel_vocab_free(v);
			return -ENOENT;
		}
	}
	kvp_mkmodel_vocab_free(v);
	r = vocab_model(dir, name, vocab_fam, tmpl_file, true);
	if (r)
		return r;
	snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
	buf = (uint8_t *)kvp_test_read_file(path, &len);
	if (!buf)
		return -errno;
	r = kvp_gguf_parse(&g, buf, len, err, sizeof(err));
	if (r)
		goto out;
	r = -EBADMSG;
	for (uint64_t i = 0; i < g->n_tensors; i++) { /* every layer adds nothing */
		const struct kvp_gguf_tensor *u = &g->tensors[i];
		struct kvp_gguf_str s = u->name;

		if ((s.len > 18 && !memcmp(s.p + s.len - 18, "attn_output.weight", 18)) ||
		    (s.len > 15 && !memcmp(s.p + s.len - 15, "ffn_down.weight", 15))) {
			if (u->type != KVP_GGML_F32)
				goto out;
			memset((uint8_t *)u->data, 0, u->n_bytes);
		}
	}
	t = kvp_gguf_tensor(g, "token_embd.weight");
	if (!t || t->type != KVP_GGML_F32)
		goto out;
	n_embd = (uint32_t)t->ne[0];
	if (n < 1 || n > n_embd)
		goto out;
	memset((uint8_t *)t->data, 0, t->n_bytes);
	for (size_t k = 0; k < n; k++)
		((float *)t->data)[(uint64_t)from[k] * n_embd + k] = 1.0f;
	t = kvp_gguf_tensor(g, "output.weight");
	if (!t || t->type != KVP_GGML_F32 || t->ne[0] != n_embd)
		goto out;
	for (size_t k = 0; k < n; k++)
		((float *)t->data)[(uint64_t)to[k] * n_embd + k] = 10.0f;
	t = kvp_gguf_tensor(g, "output_norm.weight");
	if (!t || t->type != KVP_GGML_F32)
		goto out;
	for (uint64_t i = 0; i < t->n_elems; i++)
		((float *)t->data)[i] = 1.0f;
	{
		FILE *f = fopen(path, "wb");

		r = f && fwrite(buf, 1, len, f) == len ? 0 : -EIO;
		if (f && fclose(f))
			r = -EIO;
	}
out:
	if (r)
		fprintf(stderr, "chain model %s: %s\n", path, *err ? err : "unexpected tensors");
	kvp_gguf_close(g);
	free(buf);
	return r;
}

int kvpd_model_mid(struct kvpd *d, uint32_t n_ctx)
{
	struct kvp_mkmodel_opts o;

	kvp_mkmodel_preset(&o, "tiny");
	o.name = "kvpool-mid";
	o.n_embd = 512;
	o.n_layers = 4;
	o.n_heads = 8;
	o.n_kv_heads = 4;
	o.n_ff = 1536;
	o.n_ctx = n_ctx;
	snprintf(d->model, sizeof(d->model), "%s/mid.gguf", d->dir);
	return kvp_mkmodel_write(d->model, &o, NULL, 0);
}

/*
 * A copy of the daemon's binary in @d->dir for a daemon that drops root: the build tree
 * may sit under a directory only root can enter (a fresh clone in mktemp -d, mode 0700).
 * kvpoold links no library of the build tree, so the copy runs as the original.
 */
static int copy_binary(struct kvpd *d, char *bin, size_t cap)
{
	char dst[sizeof(d->dir) + 16], buf[1 << 16];
	int in, out, r = 0;
	ssize_t n;

	snprintf(dst, sizeof(dst), "%s/kvpoold", d->dir);
	in = open(bin, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	if (out < 0) {
		r = -errno;
		close(in);
		return r;
	}
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n) {
			r = -EIO;
			break;
		}
	if (n < 0)
		r = -errno;
	close(in);
	if (close(out) < 0 && !r)
		r = -errno;
	if (!r && (size_t)snprintf(bin, cap, "%s", dst) >= cap)
		r = -ENAMETOOLONG;
	return r;
}

int kvpd_start(struct kvpd *d, double timeout_s, const char *const *args)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char bin[512];
	const char *argv[64];
	int argc = 0;
	double t_end;
	int r;

	r = kvp_test_build_path(bin, sizeof(bin), "svc/kvpoold");
	if (r == 0 && d->run_uid)
		r = copy_binary(d, bin, sizeof(bin));
	if (r < 0)
		return r;
	if (d->notify_fd >= 0)
		close(d->notify_fd); /* a restart gets a fresh notify socket */
	d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (d->notify_fd < 0)
		return -errno;
	unlink(d->notify);
	if (strlen(d->notify) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	memcpy(a.sun_path, d->notify, strlen(d->notify) + 1);
	if (bind(d->notify_fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return -errno;
	argv[argc++] = bin;
	argv[argc++] = "--foreground";
	/* never the machine's /etc/kvpool/kvpoold.conf: an empty file instead */
	argv[argc++] = "--config";
	argv[argc++] = "/dev/null";
	argv[argc++] = "--socket";
	argv[argc++] = d->sock;
	argv[argc++] = "--status-socket";
	argv[argc++] = d->status;
	argv[argc++] = "--state-dir";
	argv[argc++] = d->dir;
	/*
	 * the synthetic models say context_length 1024 and the tests' prompts and
	 * generations were written without that limit: past it here, unless a test's own
	 * --context-tokens (later on the line) says otherwise (0: the model's)
	 */
	argv[argc++] = "--context-tokens";
	argv[argc++] = "65536";
	while (args && *args && argc < 62)
		argv[argc++] = *args++;
	argv[argc] = NULL;

	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0600);

		/* a test killed by its timeout must not leave a daemon behind */
		prctl(PR_SET_PDEATHSIG, SIGKILL);

		if (fd >= 0) {
			dup2(fd, STDERR_FILENO);
			dup2(fd, STDOUT_FILENO);
		}
		if (*d->cgroup) {
			char procs[600];
			FILE *cg;

			snprintf(procs, sizeof(procs), "%s/cgroup.procs", d->cgroup);
			cg = fopen(procs, "w");
			if (!cg || fprintf(cg, "0\n") < 0 || fclose(cg) != 0)
				_exit(126);
		}
		if (d->run_uid) {
			/* its directory and notify socket become its own, then it drops root */
			if (chown(d->dir, d->run_uid, (gid_t)d->run_uid) < 0 ||
			    chown(d->notify, d->run_uid, (gid_t)d->run_uid) < 0 ||
			    setgroups(0, NULL) < 0 || setgid((gid_t)d->run_uid) < 0 ||
			    setuid(d->run_uid) < 0)
				_exit(125);
		}
		setenv("NOTIFY_SOCKET", d->notify, 1);
		if (d->watchdog_usec) {
			char v[32];

			snprintf(v, sizeof(v), "%lu", d->watchdog_usec);
			setenv("WATCHDOG_USEC", v, 1);
		}
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	t_end = kvp_test_now_s() + timeout_s;
	while (kvp_test_now_s() < t_end) {
		struct pollfd p = { .fd = d->notify_fd, .events = POLLIN };
		char msg[512];
		ssize_t n;
		int st;

		if (poll(&p, 1, 50) > 0) {
			n = recv(d->notify_fd, msg, sizeof(msg) - 1, 0);
			if (n > 0) {
				msg[n] = '\0';
				if (strstr(msg, "READY=1"))
					return 0;
			}
		}
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->exit_status = st;
			d->pid = 0;
			return -ECHILD;
		}
	}
	return -ETIMEDOUT;
}

int kvpd_wait(struct kvpd *d, double timeout_s)
{
	double t_end = kvp_test_now_s() + timeout_s;
	int st;

	if (!d->pid)
		return 0;
	while (kvp_test_now_s() < t_end) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->exit_status = st;
			d->pid = 0;
			return 0;
		}
		usleep(5000);
	}
	return -ETIMEDOUT;
}

int kvpd_stop(struct kvpd *d)
{
	if (!d->pid)
		return d->exit_status;
	kill(d->pid, SIGTERM);
	if (kvpd_wait(d, 30) < 0) {
		kill(d->pid, SIGKILL);
		kvpd_wait(d, 10);
	}
	return d->exit_status;
}

void kvpd_cleanup(struct kvpd *d)
{
	kvpd_stop(d);
	if (d->notify_fd >= 0)
		close(d->notify_fd);
	d->notify_fd = -1;
	if (*d->dir)
		kvp_test_rmtree(d->dir);
}

int kvpd_setup(struct kvpd *d, const char *preset, const char *const *args)
{
	const char *argv[60] = { "--model", d->model };
	int n = 2;

	while (args && *args && n < 59)
		argv[n++] = *args++;
	argv[n] = NULL;
	if (kvpd_init(d) < 0)
		return -1;
	if (kvpd_model(d, preset, d->model, sizeof(d->model)) < 0 || kvpd_start(d, 60, argv) < 0) {
		kvpd_dump_log(d);
		kvpd_cleanup(d);
		return -1;
	}
	return 0;
}

int kvpd_teardown(void **state)
{
	struct kvpd *d = *state; /* the fixture's first member */

	kvpd_cleanup(d);
	free(d);
	return 0;
}

struct jsonq *kvpd_status(struct kvpd *d)
{
	struct jsonq *j;
	char *text = NULL;
	size_t len = 0;

	if (kvp_client_status(d->status, "json", &text, &len) < 0)
		return NULL;
	j = jsonq_parse(text, len);
	free(text);
	return j;
}

double kvpd_status_num(struct kvpd *d, const char *path, double dflt)
{
	struct jsonq *j = kvpd_status(d);
	double v = j ? jsonq_num(j, path, dflt) : dflt;

	jsonq_free(j);
	return v;
}

static int gen_collect(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t tl)
{
	struct kvpd_gen *o = arg;

	(void)text, (void)tl;
	for (uint32_t i = 0; i < n && o->n < KVPD_GEN_MAX; i++)
		o->ids[o->n++] = t[i];
	return 0;
}

int kvpd_generate(const char *sock, const int32_t *prompt, uint32_t n, uint32_t max_new,
		  bool no_cache, struct kvpd_gen *o)
{
	struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = n };
	struct kvp_client_params p;
	struct kvp_client *k = NULL;
	int r;

	memset(o, 0, sizeof(*o));
	kvp_client_params_init(&p);
	p.max_new_tokens = max_new;
	p.no_cache = no_cache;
	r = kvp_client_connect(&k, sock);
	if (!r)
		r = kvp_client_generate(k, &pr, &p, gen_collect, o, &o->u);
	kvp_client_close(k);
	o->rc = r;
	return r;
}

bool kvpd_log_has(struct kvpd *d, const char *needle)
{
	/* the whole log: a debug-level one outgrows any fixed buffer */
	char *text = kvp_test_read_file(d->log, NULL);
	bool found = text && strstr(text, needle);

	free(text);
	return found;
}

void kvpd_dump_log(struct kvpd *d)
{
	char buf[4096];
	size_t n;
	FILE *f = fopen(d->log, "r");

	if (!f)
		return;
	fprintf(stderr, "---- kvpoold log ----\n");
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stderr);
	fclose(f);
}

int kvpd_offline(const char *model, const int32_t *prompt, uint32_t n_prompt, uint32_t n_gen,
		 bool ignore_eos, int32_t *out, uint32_t *n_out)
{
	/* the daemon's default K/V type (kvpool-run's own is f32) */
	return kvpd_offline_kv(model, "f16", prompt, n_prompt, n_gen, ignore_eos, out, n_out);
}

int kvpd_offline_kv(const char *model, const char *kv_dtype, const int32_t *prompt,
		    uint32_t n_prompt, uint32_t n_gen, bool ignore_eos, int32_t *out,
		    uint32_t *n_out)
{
	char bin[512];
	char ngen[16];
	char *toks;
	size_t cap = (size_t)n_prompt * 12 + 16;
	size_t off = 0;
	struct jsonq *j;
	const struct jsonq *arr, *e;
	char *text;
	size_t len = 0;
	size_t tcap = 1 << 20;
	int pipefd[2];
	pid_t pid;
	int st;
	uint32_t i;

	if (kvp_test_build_path(bin, sizeof(bin), "compute/kvpool-run") < 0)
		return -ENAMETOOLONG;
	toks = malloc(cap);
	text = malloc(tcap);
	if (!toks || !text || pipe(pipefd) < 0) {
		free(toks);
		free(text);
		return -ENOMEM;
	}
	for (i = 0; i < n_prompt; i++)
		off += (size_t)snprintf(toks + off, cap - off, "%s%d", i ? "," : "", prompt[i]);
	snprintf(ngen, sizeof(ngen), "%u", n_gen);
	pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], STDOUT_FILENO);
		close(pipefd[0]);
		close(pipefd[1]);
		execl(bin, bin, "-m", model, "--tokens", toks, "-n", ngen, "--json", "--kv-dtype",
		      kv_dtype, ignore_eos ? "--ignore-eos" : (char *)NULL, (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	for (;;) {
		ssize_t n = read(pipefd[0], text + len, tcap - 1 - len);

		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(pipefd[0]);
	waitpid(pid, &st, 0);
	free(toks);
	text[len] = '\0';
	j = jsonq_parse(text, len);
	free(text);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !j) {
		jsonq_free(j);
		return -EIO;
	}
	arr = jsonq_get(j, "tokens");
	*n_out = 0;
	for (e = arr ? arr->child : NULL; e && *n_out < n_gen; e = e->next)
		out[(*n_out)++] = (int32_t)e->num;
	jsonq_free(j);
	return arr ? 0 : -EIO;
}

/* Whether @dir is a cgroup v1 memory directory (else v2). */
static bool memcg_v1(const char *dir)
{
	char path[600];

	snprintf(path, sizeof(path), "%s/memory.limit_in_bytes", dir);
	return access(path, F_OK) == 0;
}

/* The number after @key in file @name of @dir (lines "key value"), or @dflt. */
static uint64_t memcg_field(const char *dir, const char *name, const char *key, uint64_t dflt)
{
	char path[600], line[256], k[64];
	unsigned long long v;
	uint64_t out = dflt;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%63s %llu", k, &v) == 2 && !strcmp(k, key))
			out = v;
	if (f)
		fclose(f);
	return out;
}

int kvpd_memcg_limit(const char *dir, uint64_t limit)
{
	char path[600];
	FILE *f;
	int r;

	snprintf(path, sizeof(path), "%s/%s", dir,
		 memcg_v1(dir) ? "memory.limit_in_bytes" : "memory.max");
	f = fopen(path, "w");
	if (!f)
		return -errno;
	if (limit == UINT64_MAX)
		r = fprintf(f, memcg_v1(dir) ? "-1\n" : "max\n");
	else
		r = fprintf(f, "%llu\n", (unsigned long long)limit);
	if (fclose(f) != 0 || r < 0)
		return -EINVAL;
	return 0;
}

uint64_t kvpd_memcg_usage(const char *dir)
{
	char path[600];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir,
		 memcg_v1(dir) ? "memory.usage_in_bytes" : "memory.current");
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

uint64_t kvpd_memcg_oom_kills(const char *dir)
{
	if (memcg_v1(dir))
		return memcg_field(dir, "memory.oom_control", "oom_kill", UINT64_MAX);
	return memcg_field(dir, "memory.events", "oom_kill", UINT64_MAX);
}

/* v1 under this process's memory cgroup, else v2 at the root of the unified hierarchy */
int kvpd_memcg_make(char *dir, size_t cap, uint64_t limit)
{
	char self[512] = "", line[1024], path[1200];
	FILE *f = fopen("/proc/self/cgroup", "r");
	const char *v2_roots[] = { "/sys/fs/cgroup", "/sys/fs/cgroup/unified" };

	while (f && fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

		if (c2 && strstr(c1, "memory") && strstr(c1, "memory") < c2) {
			c2[1 + strcspn(c2 + 1, "\n")] = '\0';
			snprintf(self, sizeof(self), "%s", c2 + 1);
		}
	}
	if (f)
		fclose(f);
	if (*self) {
		snprintf(dir, cap, "/sys/fs/cgroup/memory%s/kvptest-%d",
			 strcmp(self, "/") ? self : "", (int)getpid());
		if (mkdir(dir, 0755) == 0) {
			if (kvpd_memcg_limit(dir, limit) == 0)
				return 0;
			rmdir(dir);
		}
	}
	for (size_t i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/cgroup.controllers", v2_roots[i]);
		f = fopen(path, "r");
		if (!f)
			continue;
		line[0] = '\0';
		(void)!fgets(line, sizeof(line), f);
		fclose(f);
		if (!strstr(line, "memory"))
			continue;
		snprintf(path, sizeof(path), "%s/cgroup.subtree_control", v2_roots[i]);
		f = fopen(path, "w");
		if (f) {
			fputs("+memory\n", f);
			fclose(f);
		}
		snprintf(dir, cap, "%s/kvptest-%d", v2_roots[i], (int)getpid());
		if (mkdir(dir, 0755) < 0)
			continue;
		if (kvpd_memcg_limit(dir, limit) == 0)
			return 0;
		rmdir(dir);
	}
	return -1;
}
