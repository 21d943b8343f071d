/*
 * buf.c - bounded growable buffer (see buf.h).
 *
 * Key decision: growth doubles but never past max + 1 (room for the NUL), and
 * an append that would cross max fails whole, leaving the buffer as it was,
 * so a caller can answer "413 too large" with its state intact.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/xmalloc.h"

void
buf_init(struct buf *b, size_t max)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

int
buf_reserve(struct buf *b, size_t n)
{
	size_t need, cap;

	if (n > b->max || b->len > b->max - n) {
		errno = ENOBUFS;
		return -1;
	}
	need = b->len + n + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	if (cap > b->max + 1)
		cap = b->max + 1;
	while (cap < need)
		cap = cap > (b->max + 1) / 2 ? b->max + 1 : cap * 2;
	b->data = xreallocarray(b->data, cap, 1);
	b->cap = cap;
	return 0;
}

int
buf_append(struct buf *b, const void *p, size_t n)
{
	if (buf_reserve(b, n) == -1)
		return -1;
	if (n > 0)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int
buf_puts(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int
buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
	va_list ap2;
	int n;

	va_copy(ap2, ap);
	n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return -1;
	if (buf_reserve(b, (size_t)n) == -1)
		return -1;
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int
buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = buf_vprintf(b, fmt, ap);
	va_end(ap);
	return r;
}

void
buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data != NULL)
		b->data[0] = '\0';
}

char *
buf_steal(struct buf *b, size_t *lenp)
{
	char *p = b->data;

	if (lenp != NULL)
		*lenp = b->len;
	if (p == NULL)
		p = xstrdup("");
	b->data = NULL;
	b->len = b->cap = 0;
	return p;
}

void
buf_free(struct buf *b)
{
	if (b == NULL)
		return;
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}
