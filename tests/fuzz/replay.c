/* SPDX-License-Identifier: MIT */
/*
 * replay.c - the main of a harness built without libFuzzer: feed it every file named on
 * the command line, or found in a directory named there, once each (fuzz.h).  A defect
 * the corpus holds shows as a crash or a sanitizer report; the files are fed in name
 * order and each is named before it runs, so the log says which one did it.
 *
 * Usage: fuzz-replay-TARGET DIR|FILE...   Exit 0, 1 for an unreadable or empty corpus.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int feed(const char *path, unsigned long *n)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long len;

	if (!f || fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		if (f)
			fclose(f);
		return -1;
	}
	/* an exact-size copy: a harness reading one byte too far meets ASan, not slack */
	buf = malloc(len ? (size_t)len : 1);
	if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
		fprintf(stderr, "replay: %s: read failed\n", path);
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	fprintf(stderr, "replay: %s (%ld bytes)\n", path, len);
	LLVMFuzzerTestOneInput(buf, (size_t)len);
	free(buf);
	++*n;
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int feed_dir(const char *dir, unsigned long *n)
{
	struct dirent **ents;
	int m = scandir(dir, &ents, NULL, by_name);
	int r = 0;

	if (m < 0) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	for (int i = 0; i < m; i++) {
		char path[4096];

		if (ents[i]->d_name[0] != '.' && !r) {
			snprintf(path, sizeof(path), "%s/%s", dir, ents[i]->d_name);
			r = feed(path, n);
		}
		free(ents[i]);
	}
	free(ents);
	return r;
}

int main(int argc, char **argv)
{
	unsigned long n = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;
		int r;

		if (stat(argv[i], &st)) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		r = S_ISDIR(st.st_mode) ? feed_dir(argv[i], &n) : feed(argv[i], &n);
		if (r)
			return 1;
	}
	if (!n) {
		fprintf(stderr, "replay: no input (an empty corpus proves nothing)\n");
		return 1;
	}
	printf("replay: %lu inputs, no defect\n", n);
	return 0;
}
