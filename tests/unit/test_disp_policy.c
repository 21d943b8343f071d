/*
 * test_disp_policy.c - the dispatcher's pure policies as tables: the SSRF
 * address policy, the callback URL check, header validation, and the
 * webhook signature with its cache of key pads.
 *
 * Key decision: one row per case, each row saying the input, the switch
 * (allow_private) and the expected verdict with its reason, so a change of
 * policy shows up as a changed row.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dispatcher/disp_int.h"
#include "dispatcher/dispatcher.h"
#include "util/crypto.h"

struct addr_row {
	const char	*addr;
	int		 allow_private;
	const char	*refusal;	/* NULL: allowed */
};

static const struct addr_row addr_rows[] = {
	/* public */
	{ "8.8.8.8", 0, NULL },
	{ "93.184.216.34", 0, NULL },
	{ "2606:4700::1111", 0, NULL },
	{ "::ffff:8.8.8.8", 0, NULL },
	{ "64:ff9b::8.8.8.8", 0, NULL },
	{ "2002:808:808::1", 0, NULL },
	{ "172.32.0.1", 0, NULL },
	{ "172.15.255.255", 0, NULL },
	{ "100.128.0.1", 0, NULL },
	{ "11.0.0.1", 0, NULL },
	{ "223.255.255.255", 0, NULL },
	/* loopback */
	{ "127.0.0.1", 0, "loopback" },
	{ "127.255.255.254", 0, "loopback" },
	{ "127.0.0.1", 1, NULL },
	{ "::1", 0, "loopback" },
	{ "::1", 1, NULL },
	{ "::ffff:127.0.0.1", 0, "loopback" },
	{ "::127.0.0.1", 0, "loopback" },
	{ "64:ff9b::127.0.0.1", 0, "loopback" },
	{ "2002:7f00:1::", 0, "loopback" },
	/* private */
	{ "10.0.0.1", 0, "private" },
	{ "10.255.255.255", 0, "private" },
	{ "172.16.0.1", 0, "private" },
	{ "172.31.255.255", 0, "private" },
	{ "192.168.1.1", 0, "private" },
	{ "192.168.1.1", 1, NULL },
	{ "::ffff:10.1.2.3", 0, "private" },
	{ "::ffff:192.168.0.1", 0, "private" },
	{ "2002:c0a8:101::1", 0, "private" },
	{ "fc00::1", 0, "unique-local" },
	{ "fd12:3456::1", 0, "unique-local" },
	{ "fd00:ec2::254", 0, "unique-local" },
	{ "fd12:3456::1", 1, NULL },
	{ "100.64.0.1", 0, "shared (CGNAT)" },
	{ "100.127.255.255", 0, "shared (CGNAT)" },
	/* link-local and metadata */
	{ "169.254.169.254", 0, "metadata" },
	{ "169.254.169.254", 1, NULL },
	{ "::ffff:169.254.169.254", 0, "metadata" },
	{ "169.254.1.1", 0, "link-local" },
	{ "fe80::1", 0, "link-local" },
	{ "febf::1", 0, "link-local" },
	{ "fec0::1", 0, "site-local" },
	/* unspecified, multicast, broadcast, reserved */
	{ "0.0.0.0", 0, "unspecified" },
	{ "0.1.2.3", 0, "unspecified" },
	{ "::", 0, "unspecified" },
	{ "::ffff:0.0.0.0", 0, "unspecified" },
	{ "224.0.0.1", 0, "multicast" },
	{ "239.255.255.250", 1, "multicast" },
	{ "ff02::1", 0, "multicast" },
	{ "ff02::1", 1, "multicast" },
	{ "::ffff:224.0.0.1", 1, "multicast" },
	{ "255.255.255.255", 0, "broadcast" },
	{ "255.255.255.255", 1, "broadcast" },
	{ "240.0.0.1", 0, "reserved" },
	{ "192.0.0.170", 0, "reserved" },
	{ "192.0.2.1", 0, "documentation" },
	{ "2001:db8::1", 0, "documentation" },
	{ "198.18.0.1", 0, "benchmarking" },
	{ "64:ff9b:1::1", 0, "NAT64 local-use" },
	{ "2001:0:4136:e378::1", 0, "Teredo" },
	{ "100::1", 0, "discard" },
};

static void
test_addr_table(void **state)
{
	struct sockaddr_in6 s6;
	struct sockaddr_in s4;
	const struct sockaddr *sa;
	const char *got;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(addr_rows) / sizeof(addr_rows[0]); i++) {
		const struct addr_row *r = &addr_rows[i];

		memset(&s4, 0, sizeof(s4));
		memset(&s6, 0, sizeof(s6));
		if (inet_pton(AF_INET, r->addr, &s4.sin_addr) == 1) {
			s4.sin_family = AF_INET;
			sa = (struct sockaddr *)&s4;
		} else {
			assert_int_equal(inet_pton(AF_INET6, r->addr,
			    &s6.sin6_addr), 1);
			s6.sin6_family = AF_INET6;
			sa = (struct sockaddr *)&s6;
		}
		got = disp_addr_refusal(sa, r->allow_private);
		if (r->refusal == NULL) {
			if (got != NULL)
				fail_msg("row %zu %s: refused as %s", i,
				    r->addr, got);
			assert_int_equal(disp_addr_allowed(sa,
			    r->allow_private), 1);
		} else {
			if (got == NULL || strcmp(got, r->refusal) != 0)
				fail_msg("row %zu %s: want %s, got %s", i,
				    r->addr, r->refusal, got ? got : "allowed");
			assert_int_equal(disp_addr_allowed(sa,
			    r->allow_private), 0);
		}
	}
}

static void
test_addr_family(void **state)
{
	struct sockaddr sa;

	(void)state;
	memset(&sa, 0, sizeof(sa));
	sa.sa_family = AF_UNIX;
	assert_string_equal(disp_addr_refusal(&sa, 1),
	    "unsupported address family");
	assert_int_equal(disp_addr_allowed(NULL, 1), 0);
}

struct url_row {
	const char	*url;
	int		 allow_private;
	const char	*why;		/* NULL: accepted; else a substring */
};

static const struct url_row url_rows[] = {
	{ "https://example.com/hook", 0, NULL },
	{ "http://example.com:8080/a?b=c", 0, NULL },
	{ "HTTPS://Example.COM/", 0, NULL },
	{ "https://93.184.216.34/x", 0, NULL },
	{ "https://[2606:4700::1111]/x", 0, NULL },
	{ "https://example.com/#frag", 0, NULL },
	{ "ftp://example.com/", 0, "only http and https" },
	{ "file:///etc/passwd", 0, "only http and https" },
	{ "gopher://example.com/", 0, "only http and https" },
	{ "example.com/hook", 0, "malformed" },
	{ "", 0, "empty URL" },
	{ "https://", 0, "malformed" },
	{ "https://user:pw@example.com/", 0, "credentials" },
	{ "https://user@example.com/", 0, "credentials" },
	{ "http://example.com:0/", 0, "port 0" },
	{ "http://127.0.0.1/", 0, "loopback" },
	{ "http://127.0.0.1:9000/", 1, NULL },
	{ "http://127.1/", 0, "loopback" },
	{ "http://2130706433/", 0, "loopback" },
	{ "http://0x7f000001/", 0, "loopback" },
	{ "http://[::1]/", 0, "loopback" },
	{ "http://[::ffff:127.0.0.1]/", 0, "loopback" },
	{ "http://[::1]:8080/", 1, NULL },
	{ "http://localhost/", 0, "loopback" },
	{ "http://LocalHost./", 0, "loopback" },
	{ "http://api.localhost/", 0, "loopback" },
	{ "http://localhost:8080/", 1, NULL },
	{ "http://10.0.0.5/", 0, "private" },
	{ "http://192.168.0.10/", 0, "private" },
	{ "http://169.254.169.254/latest/meta-data/", 0, "metadata" },
	{ "http://169.254.169.254/latest/meta-data/", 1, NULL },
	{ "http://[fe80::1]/", 0, "link-local" },
	{ "http://[fd00::1]/", 0, "unique-local" },
	{ "http://0.0.0.0/", 0, "unspecified" },
	{ "http://224.0.0.1/", 1, "multicast" },
	{ "http://exa mple.com/", 0, "malformed" },
	{ "http://example.com/\r\nX: y", 0, "malformed" },
	{ "http://notlocalhost.com/", 0, NULL },
	{ "http://127.0.0.1./", 0, "loopback" },
	{ "http://10.0.0.5./x", 0, "private" },
	{ "http://example.com./", 0, NULL },
	{ "http://app_web_1:8080/hook", 0, NULL },
	{ "http://xn--bcher-kva.example/", 0, NULL },
	{ "http://\xe2\x91\xa0\xe2\x91\xa1\xe2\x91\xa6.0.0.1/", 0,
	    "ASCII" },
	{ "http://b\xc3\xbc" "cher.example/", 0, "ASCII" },
	{ "http://4294967296/", 0, "not a valid IPv4" },
	{ "http://1.2.3.4.5/", 0, "not a valid IPv4" },
	{ "http://a..b/", 0, "empty label" },
};

static void
test_url_table(void **state)
{
	char why[256];
	size_t i;
	int r;

	(void)state;
	for (i = 0; i < sizeof(url_rows) / sizeof(url_rows[0]); i++) {
		const struct url_row *u = &url_rows[i];

		r = disp_url_check(u->url, u->allow_private, why, sizeof(why));
		if (u->why == NULL && r != 0)
			fail_msg("row %zu %s: refused: %s", i, u->url, why);
		if (u->why != NULL && (r != -1 || strstr(why, u->why) == NULL))
			fail_msg("row %zu %s: want \"%s\", got %d \"%s\"", i,
			    u->url, u->why, r, why);
	}
}

static void
test_url_edges(void **state)
{
	char big[DISP_URL_MAX + 64];
	char why[8];

	(void)state;
	assert_int_equal(disp_url_check(NULL, 0, NULL, 0), -1);
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	memcpy(big, "http://", 7);
	assert_int_equal(disp_url_check(big, 0, NULL, 0), -1);
	/* A short why is truncated, never overrun. */
	assert_int_equal(disp_url_check("ftp://x/", 0, why, sizeof(why)), -1);
	assert_int_equal(strlen(why), sizeof(why) - 1);
}

struct header_row {
	const char	*name;
	const char	*value;
	int		 valid;
	int		 reserved;
};

static const struct header_row header_rows[] = {
	{ "X-Foo", "bar", 1, 0 },
	{ "X-Foo", "", 1, 0 },
	{ "X-Foo", "a\tb", 1, 0 },
	{ "X-Foo", "caf\xc3\xa9", 1, 0 },
	{ "Content-Type", "text/plain", 1, 0 },
	{ "Authorization", "Bearer x", 1, 0 },
	{ "X-Foo", "a\r\nX-Evil: 1", 0, 0 },
	{ "X-Foo", "a\nb", 0, 0 },
	{ "X-Foo", "a\rb", 0, 0 },
	{ "X-Foo", "a\x01" "b", 0, 0 },
	{ "X-Foo", "a\x7f", 0, 0 },
	{ "X Foo", "a", 0, 0 },
	{ "X-Foo:", "a", 0, 0 },
	{ "", "a", 0, 0 },
	{ "X\r\nFoo", "a", 0, 0 },
	{ "webhook-id", "x", 1, 1 },
	{ "Webhook-Signature", "x", 1, 1 },
	{ "RETRYD-TENANT", "x", 1, 1 },
	{ "Host", "x", 1, 1 },
	{ "content-length", "1", 1, 1 },
	{ "Transfer-Encoding", "chunked", 1, 1 },
	{ "Connection", "close", 1, 1 },
	{ "Expect", "100-continue", 1, 1 },
	{ "Proxy-Authorization", "x", 1, 1 },
	{ "Upgrade", "h2c", 1, 1 },
};

static void
test_header_table(void **state)
{
	struct disp_request *r;
	size_t i;

	(void)state;
	r = disp_request_new();
	for (i = 0; i < sizeof(header_rows) / sizeof(header_rows[0]); i++) {
		const struct header_row *h = &header_rows[i];

		if (disp_header_valid(h->name, h->value) != h->valid)
			fail_msg("row %zu %s: valid should be %d", i, h->name,
			    h->valid);
		if (h->valid &&
		    disp_header_reserved(h->name) != h->reserved)
			fail_msg("row %zu %s: reserved should be %d", i,
			    h->name, h->reserved);
		errno = 0;
		assert_int_equal(disp_request_add_header(r, h->name, h->value),
		    h->valid ? 0 : -1);
		if (!h->valid)
			assert_int_equal(errno, EINVAL);
	}
	disp_request_free(r);
}

static void
test_header_limits(void **state)
{
	struct disp_request *r;
	char big[DISP_HEADER_VALUE_MAX + 2];
	int i;

	(void)state;
	r = disp_request_new();
	memset(big, 'v', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(disp_request_add_header(r, "X-Big", big), -1);
	assert_int_equal(errno, E2BIG);
	for (i = 0; i < DISP_HEADERS_MAX; i++)
		assert_int_equal(disp_request_add_header(r, "X-N", "v"), 0);
	assert_int_equal(disp_request_add_header(r, "X-N", "v"), -1);
	assert_int_equal(errno, E2BIG);
	disp_request_free(r);
}

static void
test_secret(void **state)
{
	struct disp_request *r;

	(void)state;
	r = disp_request_new();
	/* The Standard Webhooks example secret: 24 bytes. */
	assert_int_equal(disp_request_set_secret(r,
	    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), 0);
	assert_int_equal(r->secret_len, 24);
	assert_int_equal(r->secret[0], 0x31);
	assert_int_equal(disp_request_set_secret(r, "aGVsbG8="), 0);
	assert_int_equal(r->secret_len, 5);
	assert_memory_equal(r->secret, "hello", 5);
	assert_int_equal(disp_request_set_secret(r, "whsec_!!!"), -1);
	assert_int_equal(disp_request_set_secret(r, "whsec_"), -1);
	assert_int_equal(disp_request_set_secret(r, NULL), -1);
	assert_int_equal(r->secret_len, 5);
	disp_request_free(r);
	disp_request_free(NULL);
}

/* "v1," + base64 of hmac_sha256() over "{id}.{ts}.{body}": the reference. */
static void
sign_ref(const uint8_t *key, size_t keylen, const char *id, long long ts,
    const char *body, size_t body_len, char *out, size_t outlen)
{
	uint8_t mac[SHA256_LEN];
	char msg[512];
	int n;

	n = snprintf(msg, sizeof(msg), "%s.%lld.", id, ts);
	assert_true(n > 0 && (size_t)n + body_len <= sizeof(msg));
	memcpy(msg + n, body, body_len);
	hmac_sha256(key, keylen, msg, (size_t)n + body_len, mac);
	memcpy(out, "v1,", 3);
	assert_true(base64_encode(mac, sizeof(mac), out + 3, outlen - 3,
	    0) > 0);
}

static void
test_sign_vector(void **state)
{
	static struct disp_sign_cache c;
	const char *body = "{\"test\": 2432232314}";
	char sig[3 + BASE64_ENCODED_LEN(SHA256_LEN)];
	struct disp_request *r;
	int i;

	(void)state;
	r = disp_request_new();
	assert_int_equal(disp_request_set_secret(r,
	    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), 0);
	/* The Standard Webhooks example, signed twice: pads hashed, then
	 * taken from the cache; the same bytes both times. */
	for (i = 0; i < 2; i++) {
		assert_int_equal(disp_sign(&c, r->secret, r->secret_len,
		    "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330LL, body,
		    strlen(body), sig, sizeof(sig)), 0);
		assert_string_equal(sig,
		    "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
		assert_int_equal(c.loads, 1);
	}
	/* No key, a key too long, no room: refused, out empty. */
	assert_int_equal(disp_sign(&c, r->secret, 0, "a", 1, "", 0, sig,
	    sizeof(sig)), -1);
	assert_int_equal(disp_sign(&c, r->secret, DISP_SECRET_MAX + 1, "a", 1,
	    "", 0, sig, sizeof(sig)), -1);
	assert_int_equal(disp_sign(&c, r->secret, r->secret_len, "a", 1, "",
	    0, sig, 10), -1);
	assert_string_equal(sig, "");
	disp_request_free(r);
	disp_sign_cache_wipe(&c);
	assert_int_equal(c.loads, 0);
	assert_int_equal(c.slot[0].keylen, 0);
}

/*
 * Against hmac_sha256 for every key length and bodies around the block
 * boundaries, with more keys than slots (evictions, collisions) and keys
 * that differ in one byte (a rotated secret must never sign with the old
 * pads).
 */
static void
test_sign_cache(void **state)
{
	static struct disp_sign_cache c;
	char body[300], sig[3 + BASE64_ENCODED_LEN(SHA256_LEN)];
	char want[sizeof(sig)];
	static const size_t blens[] = { 0, 1, 20, 55, 56, 63, 64, 65, 119,
	    120, 200, 300 };
	uint8_t key[DISP_SECRET_MAX];
	size_t kl, b, i;
	int round;

	(void)state;
	for (i = 0; i < sizeof(body); i++)
		body[i] = (char)('a' + i % 26);
	for (round = 0; round < 3; round++)
		for (kl = 1; kl <= DISP_SECRET_MAX; kl++) {
			for (i = 0; i < kl; i++)
				key[i] = (uint8_t)(i * 7 + kl);
			for (b = 0; b < sizeof(blens) / sizeof(blens[0]);
			    b++) {
				sign_ref(key, kl, "job_x", 1700000000LL + b,
				    body, blens[b], want, sizeof(want));
				assert_int_equal(disp_sign(&c, key, kl,
				    "job_x", 1700000000LL + b, body, blens[b],
				    sig, sizeof(sig)), 0);
				assert_string_equal(sig, want);
			}
			/* The same key but its last byte. */
			key[kl - 1] ^= 0x01;
			sign_ref(key, kl, "j", 5, body, 10, want,
			    sizeof(want));
			assert_int_equal(disp_sign(&c, key, kl, "j", 5, body,
			    10, sig, sizeof(sig)), 0);
			assert_string_equal(sig, want);
		}
	/* 128 distinct keys in 64 slots, three rounds: some were held. */
	assert_true(c.loads > 0 && c.loads <= 3 * 2 * DISP_SECRET_MAX);
	disp_sign_cache_wipe(&c);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_addr_table),
		cmocka_unit_test(test_addr_family),
		cmocka_unit_test(test_url_table),
		cmocka_unit_test(test_url_edges),
		cmocka_unit_test(test_header_table),
		cmocka_unit_test(test_header_limits),
		cmocka_unit_test(test_secret),
		cmocka_unit_test(test_sign_vector),
		cmocka_unit_test(test_sign_cache),
	};

	return cmocka_run_group_tests_name("dispatcher policy", tests, NULL,
	    NULL);
}
