/*
 * sign.c - the webhook-signature of a callback: "v1," and the base64 of
 * HMAC-SHA256(secret, "{id}.{timestamp}.{body}") (Standard Webhooks).
 *
 * Key decision: HMAC hashes two blocks that depend on the key alone, K ^ ipad
 * and K ^ opad (RFC 2104, section 4, allows keeping them).  Each loop keeps
 * the SHA-256 states after those blocks for the secrets it has signed with,
 * in a small direct-mapped table on a hash of the key (loop thread only, so
 * no lock), and a callback then hashes only its message and the inner
 * digest: two SHA-256 compressions of five fewer for a 60-byte body, the
 * same bytes as hmac_sha256().  The message is hashed in its three parts,
 * never copied together.  A slot holds the key itself, compared on every
 * use, so a rotated secret is a miss, never a stale signature; the table is
 * wiped when the loop ends.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "dispatcher/disp_int.h"

/* FNV-1a of the key: which slot it may live in. */
static size_t
key_slot(const uint8_t *key, size_t keylen)
{
	uint64_t h = 14695981039346656037ULL;
	size_t i;

	for (i = 0; i < keylen; i++) {
		h ^= key[i];
		h *= 1099511628211ULL;
	}
	return (size_t)(h % DISP_SIGN_SLOTS);
}

/* Hashes the padded key blocks of key into k. */
static void
key_load(struct disp_sign_key *k, const uint8_t *key, size_t keylen)
{
	uint8_t k0[64], pad[64];
	int i;

	memset(k0, 0, sizeof(k0));
	memcpy(k0, key, keylen);	/* keylen <= DISP_SECRET_MAX = 64 */
	for (i = 0; i < 64; i++)
		pad[i] = k0[i] ^ 0x36;
	sha256_init(&k->inner);
	sha256_update(&k->inner, pad, sizeof(pad));
	for (i = 0; i < 64; i++)
		pad[i] = k0[i] ^ 0x5c;
	sha256_init(&k->outer);
	sha256_update(&k->outer, pad, sizeof(pad));
	memcpy(k->key, key, keylen);
	k->keylen = keylen;
	explicit_bzero(k0, sizeof(k0));
	explicit_bzero(pad, sizeof(pad));
}

int
disp_sign(struct disp_sign_cache *c, const uint8_t *key, size_t keylen,
    const char *id, long long ts, const void *body, size_t body_len,
    char *out, size_t outlen)
{
	struct disp_sign_key *k;
	struct sha256_ctx h;
	uint8_t inner[SHA256_LEN], mac[SHA256_LEN];
	char mid[32];
	int n, ret = -1;

	if (keylen == 0 || keylen > DISP_SECRET_MAX || outlen < 3)
		return -1;
	k = &c->slot[key_slot(key, keylen)];
	if (k->keylen != keylen || memcmp(k->key, key, keylen) != 0) {
		key_load(k, key, keylen);
		c->loads++;
	}
	n = snprintf(mid, sizeof(mid), ".%lld.", ts);
	h = k->inner;
	sha256_update(&h, id, strlen(id));
	sha256_update(&h, mid, (size_t)n);
	if (body_len > 0)
		sha256_update(&h, body, body_len);
	sha256_final(&h, inner);
	h = k->outer;
	sha256_update(&h, inner, sizeof(inner));
	sha256_final(&h, mac);
	memcpy(out, "v1,", 3);
	if (base64_encode(mac, sizeof(mac), out + 3, outlen - 3, 0) >= 0)
		ret = 0;
	else
		out[0] = '\0';
	explicit_bzero(inner, sizeof(inner));
	explicit_bzero(mac, sizeof(mac));
	return ret;
}

void
disp_sign_cache_wipe(struct disp_sign_cache *c)
{
	explicit_bzero(c, sizeof(*c));
}
