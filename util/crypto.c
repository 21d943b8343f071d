/*
 * crypto.c - SHA-256, HMAC-SHA256, base64, CRC32, hex, random bytes and a
 * constant-time compare (see crypto.h).
 *
 * Key decision: everything here is written from the specifications (FIPS
 * 180-4, RFC 2104, RFC 4648) in plain portable C, byte-oriented and without
 * allocation, so it is easy to check against the published test vectors and
 * safe to call from any thread.  Speed is secondary: these hash webhook bodies
 * and API keys, not bulk data.  base64_decode is strict (no whitespace, no
 * stray padding, unused trailing bits must be zero) so that one byte string
 * has exactly one accepted encoding.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

#include "util/crypto.h"

/* ---- SHA-256 (FIPS 180-4, section 6.2) -------------------------------- */

/* First 32 bits of the fractional parts of the cube roots of the first 64
 * primes (FIPS 180-4, 4.2.2). */
static const uint32_t sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5,
	0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
	0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
	0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5,
	0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t
ror32(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static uint32_t
load_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void
store_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* One 512-bit block: message schedule, then the 64 rounds (6.2.2). */
static void
sha256_block(uint32_t h[8], const uint8_t blk[64])
{
	uint32_t w[64], a, b, c, d, e, f, g, hh, t1, t2, s0, s1;
	int i;

	for (i = 0; i < 16; i++)
		w[i] = load_be32(blk + 4 * i);
	for (i = 16; i < 64; i++) {
		s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^
		    (w[i - 15] >> 3);
		s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^
		    (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}

	a = h[0]; b = h[1]; c = h[2]; d = h[3];
	e = h[4]; f = h[5]; g = h[6]; hh = h[7];
	for (i = 0; i < 64; i++) {
		s1 = ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25);
		t1 = hh + s1 + ((e & f) ^ (~e & g)) + sha256_k[i] + w[i];
		s0 = ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22);
		t2 = s0 + ((a & b) ^ (a & c) ^ (b & c));
		hh = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	h[0] += a; h[1] += b; h[2] += c; h[3] += d;
	h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

void
sha256_init(struct sha256_ctx *c)
{
	/* FIPS 180-4, 5.3.3. */
	c->h[0] = 0x6a09e667;
	c->h[1] = 0xbb67ae85;
	c->h[2] = 0x3c6ef372;
	c->h[3] = 0xa54ff53a;
	c->h[4] = 0x510e527f;
	c->h[5] = 0x9b05688c;
	c->h[6] = 0x1f83d9ab;
	c->h[7] = 0x5be0cd19;
	c->nbytes = 0;
	c->blen = 0;
}

void
sha256_update(struct sha256_ctx *c, const void *p, size_t n)
{
	const uint8_t *in = p;
	size_t take;

	if (n == 0)
		return;
	c->nbytes += n;
	if (c->blen > 0) {
		take = 64 - c->blen;
		if (take > n)
			take = n;
		memcpy(c->block + c->blen, in, take);
		c->blen += take;
		in += take;
		n -= take;
		if (c->blen < 64)
			return;
		sha256_block(c->h, c->block);
		c->blen = 0;
	}
	while (n >= 64) {
		sha256_block(c->h, in);
		in += 64;
		n -= 64;
	}
	if (n > 0) {
		memcpy(c->block, in, n);
		c->blen = n;
	}
}

void
sha256_final(struct sha256_ctx *c, uint8_t out[SHA256_LEN])
{
	uint64_t bits = c->nbytes * 8;
	int i;

	/* Padding (5.1.1): a 1 bit, zeros to 56 mod 64, the 64-bit length. */
	c->block[c->blen++] = 0x80;
	if (c->blen > 56) {
		memset(c->block + c->blen, 0, 64 - c->blen);
		sha256_block(c->h, c->block);
		c->blen = 0;
	}
	memset(c->block + c->blen, 0, 56 - c->blen);
	store_be32(c->block + 56, (uint32_t)(bits >> 32));
	store_be32(c->block + 60, (uint32_t)bits);
	sha256_block(c->h, c->block);

	for (i = 0; i < 8; i++)
		store_be32(out + 4 * i, c->h[i]);
	explicit_bzero(c, sizeof(*c));
}

void
sha256(const void *p, size_t n, uint8_t out[SHA256_LEN])
{
	struct sha256_ctx c;

	sha256_init(&c);
	sha256_update(&c, p, n);
	sha256_final(&c, out);
}

/* ---- HMAC-SHA256 (RFC 2104, block size B = 64) ------------------------- */

void
hmac_sha256(const void *key, size_t keylen, const void *msg, size_t msglen,
    uint8_t out[SHA256_LEN])
{
	struct sha256_ctx c;
	uint8_t k0[64], pad[64], inner[SHA256_LEN];
	int i;

	/* Keys longer than B are hashed first; shorter ones are zero-filled. */
	memset(k0, 0, sizeof(k0));
	if (keylen > sizeof(k0))
		sha256(key, keylen, k0);
	else if (keylen > 0)
		memcpy(k0, key, keylen);

	for (i = 0; i < 64; i++)
		pad[i] = k0[i] ^ 0x36;
	sha256_init(&c);
	sha256_update(&c, pad, sizeof(pad));
	sha256_update(&c, msg, msglen);
	sha256_final(&c, inner);

	for (i = 0; i < 64; i++)
		pad[i] = k0[i] ^ 0x5c;
	sha256_init(&c);
	sha256_update(&c, pad, sizeof(pad));
	sha256_update(&c, inner, sizeof(inner));
	sha256_final(&c, out);

	explicit_bzero(k0, sizeof(k0));
	explicit_bzero(pad, sizeof(pad));
	explicit_bzero(inner, sizeof(inner));
}

/* ---- base64 (RFC 4648, sections 4 and 5) ------------------------------- */

static const char b64_std[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char b64_url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

ssize_t
base64_encode(const void *in, size_t n, char *out, size_t outlen, int url)
{
	const uint8_t *p = in;
	const char *alpha = url ? b64_url : b64_std;
	size_t full = n / 3, rest = n % 3, need, i, o = 0;
	uint32_t v;

	/* Output characters: 4 per full group, rest + 1 (url) or 4 (padded)
	 * for a final partial group. */
	if (full > (SIZE_MAX - 5) / 4 || full > (size_t)SSIZE_MAX / 4 - 2) {
		errno = EOVERFLOW;
		return -1;
	}
	need = full * 4;
	if (rest > 0)
		need += url ? rest + 1 : 4;
	if (outlen < need + 1) {
		errno = ENOBUFS;
		return -1;
	}

	for (i = 0; i < full; i++, p += 3) {
		v = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
		out[o++] = alpha[(v >> 18) & 0x3f];
		out[o++] = alpha[(v >> 12) & 0x3f];
		out[o++] = alpha[(v >> 6) & 0x3f];
		out[o++] = alpha[v & 0x3f];
	}
	if (rest > 0) {
		v = (uint32_t)p[0] << 16;
		if (rest == 2)
			v |= (uint32_t)p[1] << 8;
		out[o++] = alpha[(v >> 18) & 0x3f];
		out[o++] = alpha[(v >> 12) & 0x3f];
		if (rest == 2)
			out[o++] = alpha[(v >> 6) & 0x3f];
		else if (!url)
			out[o++] = '=';
		if (!url)
			out[o++] = '=';
	}
	out[o] = '\0';
	return (ssize_t)o;
}

/* The 6-bit value of a standard-alphabet character, or -1. */
static int
b64_value(unsigned char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	if (ch == '+')
		return 62;
	if (ch == '/')
		return 63;
	return -1;
}

ssize_t
base64_decode(const char *in, size_t n, uint8_t *out, size_t outlen)
{
	size_t i, o = 0, need, rest;
	uint32_t v = 0;
	int d;

	/* Padding is optional, but when present it completes the last quantum
	 * exactly: one '=' after 3 characters, two after 2. */
	if (n >= 1 && in[n - 1] == '=') {
		if (n % 4 != 0)
			goto bad;
		n--;
		if (in[n - 1] == '=')
			n--;
	}
	rest = n % 4;
	if (rest == 1)
		goto bad;
	need = n / 4 * 3 + (rest ? rest - 1 : 0);
	if (need > (size_t)SSIZE_MAX) {
		errno = EOVERFLOW;
		return -1;
	}
	if (outlen < need) {
		errno = ENOBUFS;
		return -1;
	}

	for (i = 0; i < n; i++) {
		if ((d = b64_value((unsigned char)in[i])) == -1)
			goto bad;
		v = v << 6 | (uint32_t)d;
		if (i % 4 == 3) {
			out[o++] = (uint8_t)(v >> 16);
			out[o++] = (uint8_t)(v >> 8);
			out[o++] = (uint8_t)v;
			v = 0;
		}
	}
	/* A final partial quantum: its unused low bits must be zero. */
	if (rest == 2) {
		if (v & 0x0f)
			goto bad;
		out[o++] = (uint8_t)(v >> 4);
	} else if (rest == 3) {
		if (v & 0x03)
			goto bad;
		out[o++] = (uint8_t)(v >> 10);
		out[o++] = (uint8_t)(v >> 2);
	}
	return (ssize_t)o;
bad:
	errno = EINVAL;
	return -1;
}

/* ---- CRC32 (IEEE 802.3, reflected polynomial 0xEDB88320) ---------------- */

/* crc32_table[i] is the CRC register after shifting the byte i through it
 * eight times; generated from the polynomial and checked by the unit test's
 * "123456789" -> 0xCBF43926 check value. */
static const uint32_t crc32_table[256] = {
	0x00000000, 0x77073096, 0xee0e612c, 0x990951ba, 0x076dc419, 0x706af48f,
	0xe963a535, 0x9e6495a3, 0x0edb8832, 0x79dcb8a4, 0xe0d5e91e, 0x97d2d988,
	0x09b64c2b, 0x7eb17cbd, 0xe7b82d07, 0x90bf1d91, 0x1db71064, 0x6ab020f2,
	0xf3b97148, 0x84be41de, 0x1adad47d, 0x6ddde4eb, 0xf4d4b551, 0x83d385c7,
	0x136c9856, 0x646ba8c0, 0xfd62f97a, 0x8a65c9ec, 0x14015c4f, 0x63066cd9,
	0xfa0f3d63, 0x8d080df5, 0x3b6e20c8, 0x4c69105e, 0xd56041e4, 0xa2677172,
	0x3c03e4d1, 0x4b04d447, 0xd20d85fd, 0xa50ab56b, 0x35b5a8fa, 0x42b2986c,
	0xdbbbc9d6, 0xacbcf940, 0x32d86ce3, 0x45df5c75, 0xdcd60dcf, 0xabd13d59,
	0x26d930ac, 0x51de003a, 0xc8d75180, 0xbfd06116, 0x21b4f4b5, 0x56b3c423,
	0xcfba9599, 0xb8bda50f, 0x2802b89e, 0x5f058808, 0xc60cd9b2, 0xb10be924,
	0x2f6f7c87, 0x58684c11, 0xc1611dab, 0xb6662d3d, 0x76dc4190, 0x01db7106,
	0x98d220bc, 0xefd5102a, 0x71b18589, 0x06b6b51f, 0x9fbfe4a5, 0xe8b8d433,
	0x7807c9a2, 0x0f00f934, 0x9609a88e, 0xe10e9818, 0x7f6a0dbb, 0x086d3d2d,
	0x91646c97, 0xe6635c01, 0x6b6b51f4, 0x1c6c6162, 0x856530d8, 0xf262004e,
	0x6c0695ed, 0x1b01a57b, 0x8208f4c1, 0xf50fc457, 0x65b0d9c6, 0x12b7e950,
	0x8bbeb8ea, 0xfcb9887c, 0x62dd1ddf, 0x15da2d49, 0x8cd37cf3, 0xfbd44c65,
	0x4db26158, 0x3ab551ce, 0xa3bc0074, 0xd4bb30e2, 0x4adfa541, 0x3dd895d7,
	0xa4d1c46d, 0xd3d6f4fb, 0x4369e96a, 0x346ed9fc, 0xad678846, 0xda60b8d0,
	0x44042d73, 0x33031de5, 0xaa0a4c5f, 0xdd0d7cc9, 0x5005713c, 0x270241aa,
	0xbe0b1010, 0xc90c2086, 0x5768b525, 0x206f85b3, 0xb966d409, 0xce61e49f,
	0x5edef90e, 0x29d9c998, 0xb0d09822, 0xc7d7a8b4, 0x59b33d17, 0x2eb40d81,
	0xb7bd5c3b, 0xc0ba6cad, 0xedb88320, 0x9abfb3b6, 0x03b6e20c, 0x74b1d29a,
	0xead54739, 0x9dd277af, 0x04db2615, 0x73dc1683, 0xe3630b12, 0x94643b84,
	0x0d6d6a3e, 0x7a6a5aa8, 0xe40ecf0b, 0x9309ff9d, 0x0a00ae27, 0x7d079eb1,
	0xf00f9344, 0x8708a3d2, 0x1e01f268, 0x6906c2fe, 0xf762575d, 0x806567cb,
	0x196c3671, 0x6e6b06e7, 0xfed41b76, 0x89d32be0, 0x10da7a5a, 0x67dd4acc,
	0xf9b9df6f, 0x8ebeeff9, 0x17b7be43, 0x60b08ed5, 0xd6d6a3e8, 0xa1d1937e,
	0x38d8c2c4, 0x4fdff252, 0xd1bb67f1, 0xa6bc5767, 0x3fb506dd, 0x48b2364b,
	0xd80d2bda, 0xaf0a1b4c, 0x36034af6, 0x41047a60, 0xdf60efc3, 0xa867df55,
	0x316e8eef, 0x4669be79, 0xcb61b38c, 0xbc66831a, 0x256fd2a0, 0x5268e236,
	0xcc0c7795, 0xbb0b4703, 0x220216b9, 0x5505262f, 0xc5ba3bbe, 0xb2bd0b28,
	0x2bb45a92, 0x5cb36a04, 0xc2d7ffa7, 0xb5d0cf31, 0x2cd99e8b, 0x5bdeae1d,
	0x9b64c2b0, 0xec63f226, 0x756aa39c, 0x026d930a, 0x9c0906a9, 0xeb0e363f,
	0x72076785, 0x05005713, 0x95bf4a82, 0xe2b87a14, 0x7bb12bae, 0x0cb61b38,
	0x92d28e9b, 0xe5d5be0d, 0x7cdcefb7, 0x0bdbdf21, 0x86d3d2d4, 0xf1d4e242,
	0x68ddb3f8, 0x1fda836e, 0x81be16cd, 0xf6b9265b, 0x6fb077e1, 0x18b74777,
	0x88085ae6, 0xff0f6a70, 0x66063bca, 0x11010b5c, 0x8f659eff, 0xf862ae69,
	0x616bffd3, 0x166ccf45, 0xa00ae278, 0xd70dd2ee, 0x4e048354, 0x3903b3c2,
	0xa7672661, 0xd06016f7, 0x4969474d, 0x3e6e77db, 0xaed16a4a, 0xd9d65adc,
	0x40df0b66, 0x37d83bf0, 0xa9bcae53, 0xdebb9ec5, 0x47b2cf7f, 0x30b5ffe9,
	0xbdbdf21c, 0xcabac28a, 0x53b39330, 0x24b4a3a6, 0xbad03605, 0xcdd70693,
	0x54de5729, 0x23d967bf, 0xb3667a2e, 0xc4614ab8, 0x5d681b02, 0x2a6f2b94,
	0xb40bbe37, 0xc30c8ea1, 0x5a05df1b, 0x2d02ef8d,
};

uint32_t
crc32_update(uint32_t crc, const void *p, size_t n)
{
	const uint8_t *q = p;

	crc = ~crc;
	while (n-- > 0)
		crc = crc32_table[(crc ^ *q++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

uint16_t
crc16_xmodem(const void *p, size_t n)
{
	const uint8_t *q = p;
	uint16_t crc = 0;
	int b;

	while (n-- > 0) {
		crc ^= (uint16_t)(*q++ << 8);
		for (b = 0; b < 8; b++)
			crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 :
			    crc << 1);
	}
	return crc;
}

/* ---- hex, random bytes, constant-time compare --------------------------- */

void
hex_encode(const void *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	const uint8_t *p = in;
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 0x0f];
	}
	out[2 * n] = '\0';
}

int
random_bytes(void *p, size_t n)
{
	uint8_t *q = p;
	ssize_t r;

	while (n > 0) {
		r = getrandom(q, n, 0);
		if (r == -1) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		q += r;
		n -= (size_t)r;
	}
	return 0;
}

/*
 * Returns 0 when equal, otherwise the sign of the first differing byte as
 * memcmp(3) does.  Every byte is visited and no branch depends on the data:
 * "first difference" is tracked with a mask that latches once set.
 */
int
timingsafe_memcmp(const void *a, const void *b, size_t n)
{
	const uint8_t *pa = a, *pb = b;
	uint32_t x, differ, seen = 0, take;
	int res = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		x = (uint32_t)(pa[i] ^ pb[i]);
		/* (x + 0xff) >> 8 is 1 iff x != 0; differ is then all ones. */
		differ = 0u - ((x + 0xff) >> 8);
		take = differ & ~seen;
		res += ((int)pa[i] - (int)pb[i]) * (int)(take & 1);
		seen |= differ;
	}
	return (res > 0) - (res < 0);
}
