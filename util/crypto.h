/*
 * crypto.h - SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104), base64
 * (RFC 4648, standard and url-safe alphabets), CRC32 (IEEE 802.3,
 * the zlib polynomial) and CRC16 (CCITT XMODEM, Redis Cluster's key slots),
 * written for this project so that signing webhooks and
 * hashing API keys need no extra library.  Pure functions, no allocation.
 */
#ifndef RETRYD_UTIL_CRYPTO_H
#define RETRYD_UTIL_CRYPTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SHA256_LEN	32

struct sha256_ctx {
	uint32_t	h[8];
	uint64_t	nbytes;
	uint8_t		block[64];
	size_t		blen;
};

void	sha256_init(struct sha256_ctx *c);
void	sha256_update(struct sha256_ctx *c, const void *p, size_t n);
void	sha256_final(struct sha256_ctx *c, uint8_t out[SHA256_LEN]);
void	sha256(const void *p, size_t n, uint8_t out[SHA256_LEN]);

void	hmac_sha256(const void *key, size_t keylen, const void *msg,
	    size_t msglen, uint8_t out[SHA256_LEN]);

/* Space base64_encode needs for n input bytes, including the NUL. */
#define BASE64_ENCODED_LEN(n)	((((n) + 2) / 3) * 4 + 1)
/*
 * Encode n bytes; url != 0 selects the url-safe alphabet without padding.
 * Returns the length written (NUL-terminated), or -1 if outlen is too small.
 */
ssize_t	base64_encode(const void *in, size_t n, char *out, size_t outlen,
	    int url);
/*
 * Decode standard base64 (padding optional; no whitespace).  Returns the
 * number of bytes written, or -1 on bad input or a too-small out.
 */
ssize_t	base64_decode(const char *in, size_t n, uint8_t *out, size_t outlen);

/* crc32(0, p, n) starts a checksum; pass the result back in to continue. */
uint32_t crc32_update(uint32_t crc, const void *p, size_t n);

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0) of n bytes. */
uint16_t crc16_xmodem(const void *p, size_t n);

/* Lowercase hex of n bytes into out (2n+1 bytes). */
void	hex_encode(const void *in, size_t n, char *out);

/* Fills p with n bytes from getrandom(2); 0 or -1 with errno. */
int	random_bytes(void *p, size_t n);

/* Constant-time comparison: 0 when equal. */
int	timingsafe_memcmp(const void *a, const void *b, size_t n);

#endif
