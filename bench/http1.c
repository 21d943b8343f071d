/*
 * http1.c - HTTP/1.1 head parsing and chunked decoding for the bench tools
 * (see http1.h).
 *
 * Key decision: the parser re-reads the head from its first byte each time
 * more bytes arrive instead of keeping a state machine.  Heads are a few
 * hundred bytes and complete in one read on loopback, so the rescans cost
 * nothing measurable and the code stays short enough to trust.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "bench/http1.h"

static const char *
find_crlfcrlf(const char *p, size_t n)
{
	size_t i;

	for (i = 0; i + 3 < n; i++)
		if (p[i] == '\r' && p[i + 1] == '\n' && p[i + 2] == '\r' &&
		    p[i + 3] == '\n')
			return p + i;
	return NULL;
}

/* Does the value v[0..vn) contain token tok, case-insensitively? */
static int
has_token(const char *v, size_t vn, const char *tok)
{
	size_t tn = strlen(tok), i;

	for (i = 0; i + tn <= vn; i++)
		if (strncasecmp(v + i, tok, tn) == 0)
			return 1;
	return 0;
}

static int
parse_u64(const char *v, size_t vn, int64_t *out)
{
	int64_t x = 0;
	size_t i;

	if (vn == 0 || vn > 18)
		return -1;
	for (i = 0; i < vn; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		x = x * 10 + (v[i] - '0');
	}
	*out = x;
	return 0;
}

const char *
http1_header(const char *p, size_t head_len, const char *name, size_t *vlen)
{
	size_t nl = strlen(name);
	const char *line, *end = p + head_len, *eol, *v;

	/* Skip the start line. */
	line = memchr(p, '\n', head_len);
	if (line == NULL)
		return NULL;
	line++;
	while (line < end) {
		eol = memchr(line, '\n', (size_t)(end - line));
		if (eol == NULL)
			eol = end;
		if ((size_t)(eol - line) > nl && line[nl] == ':' &&
		    strncasecmp(line, name, nl) == 0) {
			v = line + nl + 1;
			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			while (eol > v && isspace((unsigned char)eol[-1]))
				eol--;
			*vlen = (size_t)(eol - v);
			return v;
		}
		line = eol + 1;
	}
	return NULL;
}

int64_t
http1_header_int(const char *p, size_t head_len, const char *name)
{
	const char *v;
	size_t vn;
	int64_t x;

	v = http1_header(p, head_len, name, &vn);
	if (v == NULL || parse_u64(v, vn, &x) == -1)
		return -1;
	return x;
}

static int
parse_start_line(const char *p, size_t n, int request, struct http1_head *h)
{
	const char *sp1, *sp2, *eol;
	int64_t code;

	eol = memchr(p, '\r', n);
	if (eol == NULL)
		return -1;
	sp1 = memchr(p, ' ', (size_t)(eol - p));
	if (sp1 == NULL)
		return -1;
	if (request) {
		sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
		if (sp2 == NULL || eol - sp2 < 9 ||
		    strncmp(sp2 + 1, "HTTP/1.", 7) != 0)
			return -1;
		h->method = p;
		h->method_len = (size_t)(sp1 - p);
		h->target = sp1 + 1;
		h->target_len = (size_t)(sp2 - sp1 - 1);
		if (sp2[8] == '0')
			h->close = 1;
		return 0;
	}
	if (sp1 - p < 8 || strncmp(p, "HTTP/1.", 7) != 0 || eol - sp1 < 4)
		return -1;
	if (parse_u64(sp1 + 1, 3, &code) == -1 || code < 100)
		return -1;
	h->status = (int)code;
	if (p[7] == '0')
		h->close = 1;
	return 0;
}

int
http1_parse_head(const char *p, size_t n, int request, struct http1_head *h)
{
	const char *e, *v;
	size_t vn;

	e = find_crlfcrlf(p, n);
	if (e == NULL)
		return n > HTTP1_MAX_HEAD ? -1 : 0;
	memset(h, 0, sizeof(*h));
	h->len = (size_t)(e - p) + 4;
	if (h->len > HTTP1_MAX_HEAD)
		return -1;
	if (parse_start_line(p, h->len, request, h) == -1)
		return -1;
	h->content_length = -1;
	v = http1_header(p, h->len, "content-length", &vn);
	if (v != NULL && parse_u64(v, vn, &h->content_length) == -1)
		return -1;
	v = http1_header(p, h->len, "transfer-encoding", &vn);
	if (v != NULL && has_token(v, vn, "chunked"))
		h->chunked = 1;
	v = http1_header(p, h->len, "connection", &vn);
	if (v != NULL && has_token(v, vn, "close"))
		h->close = 1;
	v = http1_header(p, h->len, "expect", &vn);
	if (v != NULL && has_token(v, vn, "100-continue"))
		h->expect_continue = 1;
	return 1;
}

int
http1_dechunk(const char *p, size_t n, size_t *used, struct buf *body)
{
	size_t off = 0, i;
	const char *eol;
	uint64_t size;
	int digits;

	buf_reset(body);
	for (;;) {
		eol = memchr(p + off, '\n', n - off);
		if (eol == NULL)
			return n - off > 256 ? -1 : 0;
		size = 0;
		digits = 0;
		for (i = off; p + i < eol; i++) {
			int c = (unsigned char)p[i], d;

			if (c >= '0' && c <= '9')
				d = c - '0';
			else if (c >= 'a' && c <= 'f')
				d = c - 'a' + 10;
			else if (c >= 'A' && c <= 'F')
				d = c - 'A' + 10;
			else
				break;
			if (++digits > 15)
				return -1;
			size = size * 16 + (uint64_t)d;
		}
		if (digits == 0)
			return -1;
		off = (size_t)(eol - p) + 1;
		if (size == 0)
			break;
		if (n - off < size + 2)
			return 0;
		if (buf_append(body, p + off, (size_t)size) == -1)
			return -1;
		off += (size_t)size + 2;
	}
	/* Trailers, up to and including the empty line. */
	for (;;) {
		eol = memchr(p + off, '\n', n - off);
		if (eol == NULL)
			return n - off > 4096 ? -1 : 0;
		if (eol == p + off || (eol == p + off + 1 && p[off] == '\r')) {
			*used = (size_t)(eol - p) + 1;
			return 1;
		}
		off = (size_t)(eol - p) + 1;
	}
}

int
http1_read_avail(int fd, struct buf *in, int *eof)
{
	char chunk[65536];
	ssize_t n;

	*eof = 0;
	for (;;) {
		n = read(fd, chunk, sizeof(chunk));
		if (n > 0) {
			if (buf_append(in, chunk, (size_t)n) == -1)
				return -1;
			if ((size_t)n < sizeof(chunk))
				return 0;
			continue;
		}
		if (n == 0) {
			*eof = 1;
			return 0;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN)
			return 0;
		return -1;
	}
}
