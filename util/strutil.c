/*
 * strutil.c - hex digits, percent-decoding, bounded copies and the string
 * hash (see strutil.h).
 *
 * Key decision: one strict decoder for every URL part retryd reads (Redis
 * and journal URLs, their user names and passwords): a malformed escape is
 * an error, never passed through, and "%00" is refused.
 */
#include "config.h"

#include <string.h>

#include "util/strutil.h"

int
str_hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int
str_pct_decode(const char *s, size_t n, char *out, size_t outlen)
{
	size_t i, o = 0;
	int hi, lo;
	char c;

	for (i = 0; i < n; i++) {
		c = s[i];
		if (c == '%') {
			if (i + 2 >= n)
				return -1;
			if ((hi = str_hexval((unsigned char)s[i + 1])) < 0 ||
			    (lo = str_hexval((unsigned char)s[i + 2])) < 0 ||
			    (hi | lo) == 0)
				return -1;
			c = (char)(hi << 4 | lo);
			i += 2;
		}
		if (o + 1 >= outlen)
			return -1;
		out[o++] = c;
	}
	if (outlen == 0)
		return -1;
	out[o] = '\0';
	return 0;
}

char *
str_copy(char *dst, size_t size, const char *src)
{
	size_t n;

	if (size == 0)
		return dst;
	n = strnlen(src, size - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
	return dst;
}

uint32_t
str_hash(uint32_t h, const char *s)
{
	for (; *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * STR_HASH_PRIME;
	return h;
}
