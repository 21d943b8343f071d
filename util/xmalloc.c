/*
 * xmalloc.c - allocation that aborts on failure (see xmalloc.h for why).
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/xmalloc.h"

void *
xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL)
		fatalx("out of memory allocating %zu bytes", n);
	return p;
}

void *
xcalloc(size_t nmemb, size_t size)
{
	void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);

	if (p == NULL)
		fatalx("out of memory allocating %zu x %zu bytes", nmemb, size);
	return p;
}

void *
xreallocarray(void *p, size_t nmemb, size_t size)
{
	void *q;

	if (size != 0 && nmemb > SIZE_MAX / size)
		fatalx("allocation overflow: %zu x %zu", nmemb, size);
	q = realloc(p, nmemb * size != 0 ? nmemb * size : 1);
	if (q == NULL)
		fatalx("out of memory allocating %zu x %zu bytes", nmemb, size);
	return q;
}

char *
xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *
xstrndup(const char *s, size_t n)
{
	char *p;

	n = strnlen(s, n);
	p = xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *
xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *p;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&p, fmt, ap);
	va_end(ap);
	if (n < 0)
		fatalx("out of memory formatting a string");
	return p;
}
