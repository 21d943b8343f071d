/*
 * strutil.h - small string helpers shared by the URL and path parsers:
 * hex digits and percent-decoding; a bounded copy; and the string hash of
 * the in-memory tables.  Decoding refuses "%00" so a NUL can never be
 * smuggled into a C string through an escape.
 */
#ifndef RETRYD_UTIL_STRUTIL_H
#define RETRYD_UTIL_STRUTIL_H

#include <stddef.h>
#include <stdint.h>

/* The value of hex digit c (either case), or -1. */
int	str_hexval(int c);
/*
 * Percent-decode s[0..n) into out (outlen bytes, with the NUL).  0, or -1 on
 * a bad or truncated escape, an escaped NUL, or an out too small.
 */
int	str_pct_decode(const char *s, size_t n, char *out, size_t outlen);

/*
 * src into dst (size bytes with the NUL), cut to fit: snprintf(dst, size,
 * "%s", src) without reading a format.  Returns dst.
 */
char	*str_copy(char *dst, size_t size, const char *src);

/* FNV-1a, 32 bits: the start value and the prime. */
#define STR_HASH_INIT	2166136261u
#define STR_HASH_PRIME	16777619u
/*
 * The FNV-1a hash h carried on over the bytes of s (start with
 * STR_HASH_INIT; chain calls to hash several strings).  For hash tables,
 * not for anything an attacker must not steer.
 */
uint32_t str_hash(uint32_t h, const char *s);

#endif
