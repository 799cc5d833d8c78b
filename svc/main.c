/* SPDX-License-Identifier: MIT */
/*
 * main.c - kvpoold: argv -> config -> kvp_daemon_new -> run -> free.
 *
 * Exit status: 0 clean stop (also --help, --version, a passing --check-config, and a
 * SIGTERM/SIGINT received while starting),
 * 1 usage, configuration or startup failure (logged with the flag, key, file or
 * resource at fault).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc/config.h"
#include "svc/daemon.h"
#include "svc/domain.h"
#include "svc/remotecfg.h"
#include "util/fault.h"
#include "util/log.h"

#ifndef KVP_VERSION
#define KVP_VERSION "unknown"
#endif

/* [remote] as the tier will take it (URL, keys, password files), without starting it. */
static int check_remote(const struct kvp_config *cfg, char *err, size_t cap)
{
	static struct kvp_remote_config rc;
	struct kvp_domains doms;
	int r;

	kvp_domains_init_default(&doms);
	/* groups: the sections' names, so each domain's own remote user and file are checked */
	if (cfg->domains_mode == KVP_DOMAINS_GROUPS && cfg->n_domcfg) {
		doms.n_domains = cfg->n_domcfg;
		for (uint32_t i = 0; i < cfg->n_domcfg; i++)
			snprintf(doms.dom[i].name, sizeof(doms.dom[i].name), "%s",
				 cfg->domcfg[i].name);
	}
	r = kvp_remotecfg_build(&rc, cfg, &doms, err, cap);
	memset(&rc, 0, sizeof(rc)); /* passwords */
	return r;
}

int main(int argc, char **argv)
{
	static struct kvp_config cfg; /* 12 KiB of paths: keep it off the stack */
	enum kvp_config_action act;
	struct kvp_daemon *d = NULL;
	char err[1024];
	int r;

	r = kvp_config_parse_args(&cfg, argc, argv, &act, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "kvpoold: config: %s\n", err);
		return 1;
	}
	switch (act) {
	case KVP_CONFIG_HELP:
		kvp_config_usage(stdout);
		return 0;
	case KVP_CONFIG_VERSION:
		printf("kvpoold %s\n", KVP_VERSION);
		return 0;
	case KVP_CONFIG_CHECK:
		r = kvp_config_check(&cfg, err, sizeof(err));
		if (r >= 0)
			r = check_remote(&cfg, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "kvpoold: config: %s\n", err);
			return 1;
		}
		kvp_config_print(&cfg, stdout);
		return 0;
	case KVP_CONFIG_RUN:
		break;
	}
	/* before any thread starts: the one global setting */
	kvp_log_init(cfg.log_level, !cfg.foreground);
	r = kvp_config_check(&cfg, err, sizeof(err));
	if (r < 0) {
		kvp_log(LOG_ERR, "config: %s", err);
		return 1;
	}
#ifdef KVP_FAULT_INJECTION
	/* a fault-injection build (never a release): $KVP_FAULT as the unit tests take it */
	if (getenv("KVP_FAULT")) {
		if (kvp_fault_arm_env() < 0) {
			kvp_log(LOG_ERR, "KVP_FAULT=%s: not SITE:NTH:COUNT:HOW,... (util/fault.h)",
				getenv("KVP_FAULT"));
			return 1;
		}
		kvp_log(LOG_WARNING, "fault injection armed: KVP_FAULT=%s", getenv("KVP_FAULT"));
	}
#endif
	r = kvp_daemon_new(&d, &cfg);
	if (r < 0)
		return r == -ECANCELED ? 0 : 1; /* SIGTERM while starting is a clean stop */
	r = kvp_daemon_run(d);
	kvp_daemon_free(d);
	return r < 0 ? 1 : 0;
}
