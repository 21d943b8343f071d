/*
 * replay.c - runs a fuzz target's corpus through it without libFuzzer, so
 * `make check` (and its ASan+UBSan build) holds every target to its corpus:
 * the inputs a fuzzing run kept for their coverage and the ones that once
 * broke something.  Linked with one target's LLVMFuzzerTestOneInput(); the
 * corpus is REPLAY_CORPUS under $RETRYD_SRCDIR (the source tree it was
 * built from, else), or the directories or files named on the command line.
 *
 * Key decision: each input is read into a buffer of exactly its size, as
 * libFuzzer passes it, so a read past its end is an ASan report.  A target
 * aborts on a broken invariant, which ends the program: the line naming the
 * input is written first, so the log says which one.  Output is TAP, one
 * test per corpus.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

/* The file's bytes in a buffer of their size (1 for none); NULL on error. */
static uint8_t *
slurp(const char *path, size_t *lenp)
{
	FILE *f;
	struct stat st;
	uint8_t *p;

	if ((f = fopen(path, "rb")) == NULL)
		return NULL;
	if (fstat(fileno(f), &st) == -1 || st.st_size < 0 ||
	    (p = malloc(st.st_size > 0 ? (size_t)st.st_size : 1)) == NULL) {
		fclose(f);
		return NULL;
	}
	*lenp = (size_t)st.st_size;
	if (fread(p, 1, *lenp, f) != *lenp) {
		free(p);
		p = NULL;
	}
	fclose(f);
	return p;
}

/* Runs the file at path through the target: 0, or -1 when unreadable. */
static int
run_input(const char *path)
{
	uint8_t *data;
	size_t len;

	if ((data = slurp(path, &len)) == NULL)
		return -1;
	printf("# input: %s\n", path);
	fflush(stdout);
	LLVMFuzzerTestOneInput(data, len);
	free(data);
	return 0;
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of dir (or dir itself, a file): inputs run, or -1. */
static long
replay(const char *dir)
{
	struct dirent *de;
	struct stat st;
	DIR *d;
	char **names = NULL, path[4096], **v;
	size_t n = 0, max = 0, i;
	long ran = 0;

	if (stat(dir, &st) == -1)
		return -1;
	if (!S_ISDIR(st.st_mode))
		return run_input(dir) == 0 ? 1 : -1;
	if ((d = opendir(dir)) == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (n == max) {
			max = max ? 2 * max : 64;
			if ((v = realloc(names, max * sizeof(*v))) == NULL)
				goto fail;
			names = v;
		}
		if ((names[n] = strdup(de->d_name)) == NULL)
			goto fail;
		n++;
	}
	closedir(d);
	d = NULL;
	qsort(names, n, sizeof(*names), name_cmp);
	for (i = 0; i < n; i++) {
		if (snprintf(path, sizeof(path), "%s/%s", dir, names[i]) >=
		    (int)sizeof(path) || stat(path, &st) == -1)
			goto fail;
		if (!S_ISREG(st.st_mode))
			continue;
		if (run_input(path) == -1)
			goto fail;
		ran++;
	}
	goto out;
fail:
	ran = -1;
out:
	if (d != NULL)
		closedir(d);
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return ran;
}

int
main(int argc, char **argv)
{
	const char *top = getenv("RETRYD_SRCDIR"), *corpus[1];
	const char *const *v = (const char *const *)argv + 1;
	char path[4096];
	int i, n = argc - 1, failed = 0;
	long ran;

	if (top == NULL || top[0] == '\0')
		top = RETRYD_SRCDIR;
	if (n == 0) {
		snprintf(path, sizeof(path), "%s/%s", top, REPLAY_CORPUS);
		corpus[0] = path;
		v = corpus;
		n = 1;
	}
	printf("1..%d\n", n);
	for (i = 0; i < n; i++) {
		errno = 0;
		if ((ran = replay(v[i])) > 0)
			printf("ok %d - %ld inputs of %s\n", i + 1, ran, v[i]);
		else {
			printf("not ok %d - %s: %s\n", i + 1, v[i], ran == 0 ?
			    "no inputs" : errno != 0 ? strerror(errno) :
			    "cannot read it");
			failed = 1;
		}
	}
	return failed;
}
