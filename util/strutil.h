/*
 * strutil.h - small string helpers shared by the URL and path parsers:
 * hex digits and percent-decoding.  Decoding refuses "%00" so a NUL can
 * never be smuggled into a C string through an escape.
 */
#ifndef RETRYD_UTIL_STRUTIL_H
#define RETRYD_UTIL_STRUTIL_H

#include <stddef.h>

/* The value of hex digit c (either case), or -1. */
int	str_hexval(int c);
/*
 * Percent-decode s[0..n) into out (outlen bytes, with the NUL).  0, or -1 on
 * a bad or truncated escape, an escaped NUL, or an out too small.
 */
int	str_pct_decode(const char *s, size_t n, char *out, size_t outlen);

#endif
