/* SPDX-License-Identifier: MIT */
/*
 * fuzz_config.c - the INI reader (util/ini.h) under both configurations that use it:
 * kvpoold's (svc/config.h: every section, [domain NAME] and [remote] included) and
 * kvpool-http's (ipc/http/config.h), each loaded over its defaults and then checked
 * across fields, and every key kvpoold accepted printed back.
 */
#include <stdio.h>
#include <unistd.h>

#include "ipc/http/config.h"
#include "svc/config.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct kvp_config c;
	static struct kvp_http_config h;
	char path[64], err[512];
	int fd = fuzz_file(data, size, path, sizeof(path));
	FILE *null;

	if (fd < 0)
		return 0;
	kvp_config_defaults(&c);
	if (!kvp_config_load_file(&c, path, true, err, sizeof(err)) &&
	    !kvp_config_check(&c, err, sizeof(err)) && (null = fopen("/dev/null", "w"))) {
		kvp_config_print(&c, null);
		fclose(null);
	}
	kvp_http_config_defaults(&h);
	if (!kvp_http_config_load_file(&h, path, true, err, sizeof(err)))
		kvp_http_config_check(&h, err, sizeof(err));
	close(fd);
	return 0;
}
