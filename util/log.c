/* SPDX-License-Identifier: MIT */
/*
 * log.c - stderr logger with sd-daemon priority prefixes (see log.h).
 *
 * Invariant: every call writes at most one line with one write(2), so journald and a
 * terminal see whole lines whatever thread logs.  Any thread may log; the two settings
 * below are written only by kvp_log_init() before threads start.
 */
#include "util/log.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static int log_max_prio = LOG_INFO;
static bool log_prefix = true;
static const char *log_name = "kvpoold";

static const char *const level_names[] = {
	[LOG_EMERG] = "emerg", [LOG_ALERT] = "alert",	  [LOG_CRIT] = "crit",
	[LOG_ERR] = "err",     [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
	[LOG_INFO] = "info",   [LOG_DEBUG] = "debug",
};
static_assert(sizeof(level_names) / sizeof(level_names[0]) == LOG_DEBUG + 1, "one per level");

void kvp_log_init(int max_prio, bool prefix)
{
	if (max_prio < LOG_EMERG)
		max_prio = LOG_EMERG;
	if (max_prio > LOG_DEBUG)
		max_prio = LOG_DEBUG;
	log_max_prio = max_prio;
	log_prefix = prefix;
}

void kvp_log_set_name(const char *name)
{
	log_name = name;
}

bool kvp_log_enabled(int prio)
{
	return prio <= log_max_prio;
}

void kvp_log(int prio, const char *fmt, ...)
{
	int saved_errno = errno;
	char line[1024];
	size_t len;
	va_list ap;
	int n;

	if (!kvp_log_enabled(prio))
		return;
	if (log_prefix)
		n = snprintf(line, sizeof(line), "<%d>", prio & LOG_PRIMASK);
	else
		n = snprintf(line, sizeof(line), "%s: %s%s", log_name,
			     prio <= LOG_WARNING ? level_names[prio & LOG_PRIMASK] : "",
			     prio <= LOG_WARNING ? ": " : "");
	len = n > 0 ? (size_t)n : 0;
	va_start(ap, fmt);
	n = vsnprintf(line + len, sizeof(line) - len - 1, fmt, ap);
	va_end(ap);
	if (n > 0)
		len += (size_t)n < sizeof(line) - len - 1 ? (size_t)n : sizeof(line) - len - 2;
	line[len++] = '\n';
	/* a lost log line is not worth failing for; journald may be restarting */
	(void)!write(STDERR_FILENO, line, len);
	errno = saved_errno;
}

int kvp_log_level_parse(const char *s, int *prio)
{
	int i;

	if (s[0] >= '0' && s[0] <= '7' && s[1] == '\0') {
		*prio = s[0] - '0';
		return 0;
	}
	for (i = 0; i <= LOG_DEBUG; i++) {
		if (!strcasecmp(s, level_names[i])) {
			*prio = i;
			return 0;
		}
	}
	if (!strcasecmp(s, "error")) {
		*prio = LOG_ERR;
		return 0;
	}
	if (!strcasecmp(s, "warn")) {
		*prio = LOG_WARNING;
		return 0;
	}
	return -EINVAL;
}

const char *kvp_log_level_name(int prio)
{
	if (prio < 0 || prio > LOG_DEBUG)
		return "?";
	return level_names[prio];
}
