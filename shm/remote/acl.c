/* SPDX-License-Identifier: MIT */
/*
 * acl.c - ACL SETUSER lines per trust domain (see acl.h).
 */
#include "shm/remote/acl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "shm/remote/codec.h"

static int emit(char *buf, size_t cap, int n)
{
	if (n < 0 || (size_t)n >= cap)
		return -ENOSPC;
	return n;
}

static const char *form_head(enum kvp_remote_acl_form form)
{
	return form == KVP_REMOTE_ACL_FILE ? "user" : "ACL SETUSER";
}

int kvp_remote_acl_domain(char *buf, size_t cap, const struct kvp_remote_domain_config *d,
			  enum kvp_remote_acl_form form)
{
	if (!kvp_remote_name_ok(d->name) || !kvp_remote_name_ok(d->user) || !d->password[0] ||
	    strcmp(d->user, "default") == 0)
		return -EINVAL;
	return emit(buf, cap,
		    snprintf(buf, cap,
			     "%s %s reset on >%s resetkeys ~" KVP_REMOTE_KEY_SCHEMA
			     ":%s:* resetchannels " KVP_REMOTE_ACL_COMMANDS,
			     form_head(form), d->user, d->password, d->name));
}

int kvp_remote_acl_router(char *buf, size_t cap, const char *user, const char *password,
			  enum kvp_remote_acl_form form)
{
	if (!kvp_remote_name_ok(user) || !password || !password[0] || strchr(password, ' ') ||
	    strcmp(user, "default") == 0)
		return -EINVAL;
	return emit(buf, cap,
		    snprintf(buf, cap,
			     "%s %s reset on >%s resetkeys %%R~" KVP_REMOTE_KEY_SCHEMA
			     ":*:r:* resetchannels -@all +get +ping",
			     form_head(form), user, password));
}
