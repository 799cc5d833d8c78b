/* SPDX-License-Identifier: MIT */
/* kvpool-mkmodel: main() of the executable; the program is mkmodel_cli.c (see run.h). */
#include <stdio.h>
#include <string.h>

#include "compute/run.h"

#ifndef KVP_VERSION
#define KVP_VERSION "unknown"
#endif

int main(int argc, char **argv)
{
	/* the version of every kvpool program is meson's project version */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--version")) {
			printf("kvpool-mkmodel %s\n", KVP_VERSION);
			return 0;
		}
	}
	return kvp_mkmodel_main(argc, argv);
}
