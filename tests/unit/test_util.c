/*
 * test_util.c - unit tests for util/: bounded buffers, the clock, log level
 * names, allocation, the crypto primitives and job ids.
 *
 * Key decision: the crypto tests are tables of published vectors (FIPS 180-4
 * examples, RFC 4231, RFC 4648), one row per vector, so each row can be
 * checked against its source by eye.  The id tests pass the clock in
 * explicitly instead of reading it, and each uses its own range of ms far
 * from the others, because the generator's state is process-wide.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/buf.h"
#include "util/clock.h"
#include "util/crypto.h"
#include "util/id.h"
#include "util/log.h"
#include "util/strutil.h"
#include "util/xmalloc.h"

#define NELEM(a)	(sizeof(a) / sizeof((a)[0]))

/* ---- helpers ------------------------------------------------------------ */

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Lowercase hex -> bytes; returns the byte count. */
static size_t
unhex(const char *hex, uint8_t *out, size_t outlen)
{
	size_t n = strlen(hex) / 2, i;
	int hi, lo;

	assert_int_equal(strlen(hex) % 2, 0);
	assert_true(n <= outlen);
	for (i = 0; i < n; i++) {
		hi = hexval(hex[2 * i]);
		lo = hexval(hex[2 * i + 1]);
		assert_true(hi >= 0 && lo >= 0);
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return n;
}

static void
assert_digest(const uint8_t d[SHA256_LEN], const char *want)
{
	char hex[2 * SHA256_LEN + 1];

	hex_encode(d, SHA256_LEN, hex);
	assert_string_equal(hex, want);
}

/* ---- buf ---------------------------------------------------------------- */

static void
test_buf_cap(void **state)
{
	struct buf b;
	int i;

	buf_init(&b, 8);
	assert_int_equal(buf_puts(&b, "12345678"), 0);
	assert_int_equal(b.len, 8);
	errno = 0;
	assert_int_equal(buf_append(&b, "9", 1), -1);
	assert_int_equal(errno, ENOBUFS);
	assert_int_equal(b.len, 8);
	assert_string_equal(b.data, "12345678");
	assert_int_equal(buf_append(&b, "", 0), 0);
	buf_free(&b);
	buf_free(NULL);

	/* Growth stops at max + 1 (room for the NUL), never beyond. */
	buf_init(&b, 100);
	for (i = 0; i < 100; i++)
		assert_int_equal(buf_append(&b, "x", 1), 0);
	assert_int_equal(b.len, 100);
	assert_int_equal(b.cap, 101);
	assert_int_equal(buf_append(&b, "x", 1), -1);
	assert_int_equal(b.len, 100);
	buf_free(&b);
}

static void
test_buf_append_fails_whole(void **state)
{
	struct buf b;

	buf_init(&b, 10);
	assert_int_equal(buf_puts(&b, "hello"), 0);
	assert_int_equal(buf_puts(&b, "world!"), -1);
	assert_int_equal(errno, ENOBUFS);
	assert_int_equal(b.len, 5);
	assert_string_equal(b.data, "hello");
	assert_int_equal(buf_puts(&b, "world"), 0);
	assert_string_equal(b.data, "helloworld");
	buf_reset(&b);
	assert_int_equal(b.len, 0);
	assert_string_equal(b.data, "");
	buf_free(&b);
}

static void
test_buf_printf(void **state)
{
	struct buf b;

	buf_init(&b, 16);
	assert_int_equal(buf_printf(&b, "%s-%d", "job", 42), 0);
	assert_string_equal(b.data, "job-42");
	assert_int_equal(b.len, 6);
	/* 6 + 11 > 16: fails whole, contents unchanged. */
	assert_int_equal(buf_printf(&b, "%011d", 7), -1);
	assert_int_equal(errno, ENOBUFS);
	assert_string_equal(b.data, "job-42");
	assert_int_equal(buf_printf(&b, "%010d", 7), 0);
	assert_string_equal(b.data, "job-420000000007");
	assert_int_equal(b.len, 16);
	buf_free(&b);
}

static void
test_buf_steal(void **state)
{
	struct buf b;
	size_t len;
	char *s;

	buf_init(&b, 64);
	assert_int_equal(buf_puts(&b, "payload"), 0);
	s = buf_steal(&b, &len);
	assert_string_equal(s, "payload");
	assert_int_equal(len, 7);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	free(s);

	/* Stealing an empty buffer still hands out a string to free. */
	s = buf_steal(&b, &len);
	assert_non_null(s);
	assert_string_equal(s, "");
	assert_int_equal(len, 0);
	free(s);
	assert_int_equal(buf_puts(&b, "again"), 0);
	assert_string_equal(b.data, "again");
	buf_free(&b);
}

/* ---- clock, log, xmalloc ------------------------------------------------ */

static void
test_pct_decode(void **state)
{
	static const struct {
		const char	*in;
		const char	*out;	/* NULL: refused */
	} rows[] = {
		{ "plain", "plain" },
		{ "p%40ss%2Fw%3Ard", "p@ss/w:rd" },
		{ "%7e%7E", "~~" },
		{ "", "" },
		{ "%00", NULL },		/* an escaped NUL */
		{ "a%0", NULL },		/* truncated */
		{ "a%", NULL },
		{ "%zz", NULL },		/* not hex */
		{ "%4", NULL },
	};
	char out[32];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int r = str_pct_decode(rows[i].in, strlen(rows[i].in), out,
		    sizeof(out));

		if (rows[i].out == NULL)
			assert_int_equal(r, -1);
		else {
			assert_int_equal(r, 0);
			assert_string_equal(out, rows[i].out);
		}
	}
	/* Too small an out is refused, never truncated. */
	assert_int_equal(str_pct_decode("abcdef", 6, out, 6), -1);
	assert_int_equal(str_pct_decode("abcde", 5, out, 6), 0);
	assert_int_equal(str_hexval('f'), 15);
	assert_int_equal(str_hexval('G'), -1);
}

/* str_copy: snprintf(dst, size, "%s", src)'s result, cut to fit. */
static void
test_str_copy(void **state)
{
	static const char *const srcs[] = { "", "a", "abc", "abcdefgh",
		"abcdefghijklmnop" };
	char got[16], want[16];
	size_t i, size;

	(void)state;
	for (i = 0; i < NELEM(srcs); i++)
		for (size = 1; size <= sizeof(got); size++) {
			memset(got, 'x', sizeof(got));
			memset(want, 'x', sizeof(want));
			snprintf(want, size, "%s", srcs[i]);
			assert_ptr_equal(str_copy(got, size, srcs[i]), got);
			assert_memory_equal(got, want, sizeof(got));
		}
	/* Size 0 writes nothing. */
	memset(got, 'x', sizeof(got));
	str_copy(got, 0, "abc");
	assert_int_equal(got[0], 'x');
}

/* FNV-1a 32-bit reference values; chaining equals hashing the whole. */
static void
test_str_hash(void **state)
{
	(void)state;
	assert_int_equal(str_hash(STR_HASH_INIT, ""), 0x811c9dc5u);
	assert_int_equal(str_hash(STR_HASH_INIT, "a"), 0xe40c292cu);
	assert_int_equal(str_hash(STR_HASH_INIT, "foobar"), 0xbf9cf968u);
	assert_int_equal(str_hash(str_hash(STR_HASH_INIT, "foo"), "bar"),
	    str_hash(STR_HASH_INIT, "foobar"));
}

static void
test_clock_fake(void **state)
{
	int64_t mono;

	clock_set_fake(1000);
	assert_true(clock_is_fake());
	assert_int_equal(clock_wall_ms(), 1000);
	clock_advance_ms(250);
	assert_int_equal(clock_wall_ms(), 1250);
	/* The monotonic clock stays real: it paces I/O, not due times. */
	mono = clock_mono_us();
	assert_true(mono > 1250 * 1000);
	clock_advance_ms(1000000);
	assert_true(clock_mono_us() - mono < 1000000LL * 1000);
	clock_set_fake(INT64_C(1700000000000));
	assert_int_equal(clock_wall_ms(), INT64_C(1700000000000));
	clock_advance_ms(1);
	assert_int_equal(clock_wall_ms(), INT64_C(1700000000001));
}

/*
 * log_every: the first call says, the next ones within the interval are
 * held and counted, and the first after it says with their count.  The
 * interval's end is reached by moving the last time back, not by waiting.
 */
static void
test_log_every(void **state)
{
	struct log_every le = LOG_EVERY_INIT;
	uint64_t held = 99;
	int i;

	(void)state;
	assert_int_equal(log_every(&le, INT64_MAX / 2, &held), 1);
	assert_int_equal(held, 0);
	for (i = 0; i < 3; i++)
		assert_int_equal(log_every(&le, INT64_MAX / 2, &held), 0);
	le.last_us -= INT64_MAX / 2;	/* the interval has passed */
	assert_int_equal(log_every(&le, INT64_MAX / 2, &held), 1);
	assert_int_equal(held, 3);
	assert_int_equal(log_every(&le, INT64_MAX / 2, &held), 0);
	/* No interval: every call says, nothing is held. */
	for (i = 0; i < 3; i++) {
		assert_int_equal(log_every(&le, 0, &held), 1);
		assert_int_equal(held, i == 0 ? 1 : 0);
	}
}

static void
test_log_level_parse(void **state)
{
	static const struct {
		const char	*name;
		int		 level;
	} rows[] = {
		{ "error", LOG_LVL_ERROR },
		{ "warn", LOG_LVL_WARN },
		{ "info", LOG_LVL_INFO },
		{ "debug", LOG_LVL_DEBUG },
		{ "DEBUG", -1 },
		{ "warning", -1 },
		{ "", -1 },
		{ "info ", -1 },
	};
	size_t i;

	for (i = 0; i < NELEM(rows); i++) {
		assert_int_equal(log_level_parse(rows[i].name), rows[i].level);
		if (rows[i].level >= 0)
			assert_string_equal(log_level_name(
			    (enum log_level)rows[i].level), rows[i].name);
	}
}

static void
test_xmalloc(void **state)
{
	char *s;
	int *v;
	size_t i;

	s = xasprintf("%s-%d-%05.1f", "t", 42, 2.5);
	assert_string_equal(s, "t-42-002.5");
	free(s);
	s = xstrdup("hello");
	assert_string_equal(s, "hello");
	free(s);
	s = xstrndup("hello", 3);
	assert_string_equal(s, "hel");
	free(s);
	v = xcalloc(100, sizeof(*v));
	for (i = 0; i < 100; i++)
		assert_int_equal(v[i], 0);
	v = xreallocarray(v, 1000, sizeof(*v));
	v[999] = 7;
	assert_int_equal(v[0], 0);
	free(v);
	free(xmalloc(0));
}

/* ---- SHA-256 and HMAC-SHA256 ------------------------------------------- */

static void
test_sha256_vectors(void **state)
{
	/* FIPS 180-4 example messages (NIST CSRC examples). */
	static const struct {
		const char	*msg;
		const char	*digest;
	} rows[] = {
		{ "",
		  "e3b0c44298fc1c149afbf4c8996fb924"
		  "27ae41e4649b934ca495991b7852b855" },
		{ "abc",
		  "ba7816bf8f01cfea414140de5dae2223"
		  "b00361a396177a9cb410ff61f20015ad" },
		{ "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		  "248d6a61d20638b8e5c026930c3e6039"
		  "a33ce45964ff2167f6ecedd419db06c1" },
		{ "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
		  "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
		  "cf5b16a778af8380036ce59e7b049237"
		  "0b249b11e8f07a51afac45037afee9d1" },
	};
	uint8_t d[SHA256_LEN];
	size_t i;

	for (i = 0; i < NELEM(rows); i++) {
		sha256(rows[i].msg, strlen(rows[i].msg), d);
		assert_digest(d, rows[i].digest);
	}
}

static void
test_sha256_million_a(void **state)
{
	struct sha256_ctx c;
	uint8_t d[SHA256_LEN];
	char chunk[997];
	size_t left = 1000000, n;

	memset(chunk, 'a', sizeof(chunk));
	sha256_init(&c);
	while (left > 0) {
		n = left < sizeof(chunk) ? left : sizeof(chunk);
		sha256_update(&c, chunk, n);
		left -= n;
	}
	sha256_final(&c, d);
	assert_digest(d,
	    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* Chunked updates must agree with one-shot hashing around block edges. */
static void
test_sha256_chunking(void **state)
{
	static const size_t lens[] = { 1, 55, 56, 57, 63, 64, 65, 119, 120,
	    127, 128, 129, 1000 };
	uint8_t msg[1000], one[SHA256_LEN], inc[SHA256_LEN];
	struct sha256_ctx c;
	size_t i, j, step;

	for (i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 7 + 3);
	for (i = 0; i < NELEM(lens); i++) {
		sha256(msg, lens[i], one);
		for (step = 1; step <= 65; step += 16) {
			sha256_init(&c);
			for (j = 0; j < lens[i]; j += step)
				sha256_update(&c, msg + j, lens[i] - j < step ?
				    lens[i] - j : step);
			sha256_update(&c, NULL, 0);
			sha256_final(&c, inc);
			assert_memory_equal(one, inc, SHA256_LEN);
		}
	}
}

static void
test_hmac_rfc4231(void **state)
{
	/* RFC 4231 section 4: test cases 1-4, 6, 7 (5 truncates the tag). */
	static const struct {
		const char	*key;	/* hex */
		const char	*data;	/* hex, or NULL to use text */
		const char	*text;
		const char	*mac;
	} rows[] = {
		{ "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", NULL, "Hi There",
		  "b0344c61d8db38535ca8afceaf0bf12b"
		  "881dc200c9833da726e9376c2e32cff7" },
		{ "4a656665", NULL, "what do ya want for nothing?",
		  "5bdcc146bf60754e6a042426089575c7"
		  "5a003f089d2739839dec58b964ec3843" },
		{ "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		  "dddddddddddddddddddddddddddddddddddddddddddddddddd"
		  "dddddddddddddddddddddddddddddddddddddddddddddddddd", NULL,
		  "773ea91e36800e46854db8ebd09181a7"
		  "2959098b3ef8c122d9635514ced565fe" },
		{ "0102030405060708090a0b0c0d0e0f10111213141516171819",
		  "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
		  "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd", NULL,
		  "82558a389a443c0ea4cc819899f2083a"
		  "85f0faa3e578f8077a2e3ff46729665b" },
		{ NULL, NULL,
		  "Test Using Larger Than Block-Size Key - Hash Key First",
		  "60e431591ee0b67f0d8a26aacbf5b77f"
		  "8e0bc6213728c5140546040f0ee37f54" },
		{ NULL, NULL,
		  "This is a test using a larger than block-size key and a "
		  "larger than block-size data. The key needs to be hashed "
		  "before being used by the HMAC algorithm.",
		  "9b09ffa71b942fcb27635fbcd5b0e944"
		  "bfdc63644f0713938a7f51535c3a35e2" },
	};
	uint8_t key[131], data[64], mac[SHA256_LEN];
	size_t i, klen, dlen;
	const void *msg;

	for (i = 0; i < NELEM(rows); i++) {
		if (rows[i].key != NULL) {
			klen = unhex(rows[i].key, key, sizeof(key));
		} else {
			/* Cases 6 and 7: 131 bytes of 0xaa. */
			memset(key, 0xaa, sizeof(key));
			klen = sizeof(key);
		}
		if (rows[i].data != NULL) {
			dlen = unhex(rows[i].data, data, sizeof(data));
			msg = data;
		} else {
			dlen = strlen(rows[i].text);
			msg = rows[i].text;
		}
		hmac_sha256(key, klen, msg, dlen, mac);
		assert_digest(mac, rows[i].mac);
	}
}

/* ---- base64 ------------------------------------------------------------- */

static void
test_base64_rfc4648(void **state)
{
	/* RFC 4648 section 10. */
	static const struct {
		const char	*plain;
		const char	*std;
		const char	*url;	/* unpadded */
	} rows[] = {
		{ "", "", "" },
		{ "f", "Zg==", "Zg" },
		{ "fo", "Zm8=", "Zm8" },
		{ "foo", "Zm9v", "Zm9v" },
		{ "foob", "Zm9vYg==", "Zm9vYg" },
		{ "fooba", "Zm9vYmE=", "Zm9vYmE" },
		{ "foobar", "Zm9vYmFy", "Zm9vYmFy" },
	};
	char enc[BASE64_ENCODED_LEN(6)];
	uint8_t dec[8];
	size_t i, n;
	ssize_t r;

	for (i = 0; i < NELEM(rows); i++) {
		n = strlen(rows[i].plain);
		r = base64_encode(rows[i].plain, n, enc, sizeof(enc), 0);
		assert_int_equal(r, strlen(rows[i].std));
		assert_string_equal(enc, rows[i].std);
		r = base64_encode(rows[i].plain, n, enc, sizeof(enc), 1);
		assert_int_equal(r, strlen(rows[i].url));
		assert_string_equal(enc, rows[i].url);

		/* Decode both padded and unpadded standard forms. */
		r = base64_decode(rows[i].std, strlen(rows[i].std), dec,
		    sizeof(dec));
		assert_int_equal(r, n);
		assert_memory_equal(dec, rows[i].plain, n);
		r = base64_decode(rows[i].url, strlen(rows[i].url), dec,
		    sizeof(dec));
		assert_int_equal(r, n);
		assert_memory_equal(dec, rows[i].plain, n);
	}
}

static void
test_base64_urlsafe(void **state)
{
	static const uint8_t in[] = { 0xfb, 0xff, 0xbf, 0xfb, 0xff };
	char enc[BASE64_ENCODED_LEN(sizeof(in))];
	uint8_t dec[sizeof(in)];

	assert_int_equal(base64_encode(in, sizeof(in), enc, sizeof(enc), 0), 8);
	assert_string_equal(enc, "+/+/+/8=");
	assert_int_equal(base64_encode(in, sizeof(in), enc, sizeof(enc), 1), 7);
	assert_string_equal(enc, "-_-_-_8");
	assert_int_equal(base64_decode("+/+/+/8=", 8, dec, sizeof(dec)), 5);
	assert_memory_equal(dec, in, sizeof(in));
	/* The standard decoder does not take the url-safe alphabet. */
	assert_int_equal(base64_decode("-_-_-_8", 7, dec, sizeof(dec)), -1);
}

static void
test_base64_bad_input(void **state)
{
	static const char *const bad[] = {
		"Z",		/* one character cannot hold a byte */
		"Zm9vY",
		"Zg=",		/* padding must complete the quantum */
		"Zg===",
		"Zm9=",		/* unused low bits not zero ('9': 01) */
		"Zh==",		/* unused low bits not zero ('h': 0001) */
		"=",
		"==",
		"====",
		"Z===",
		"Zg==Zg==",	/* padding in the middle */
		"Zm=v",
		"Zm9v!",
		"Zm9 v",
		"Zm9v\n",
		"Zm9v-_",
		"Zm9v\x80",
	};
	uint8_t out[16];
	size_t i;

	for (i = 0; i < NELEM(bad); i++) {
		errno = 0;
		assert_int_equal(base64_decode(bad[i], strlen(bad[i]), out,
		    sizeof(out)), -1);
		assert_int_equal(errno, EINVAL);
	}
	/* An embedded NUL is a bad character too. */
	assert_int_equal(base64_decode("Zm\0v", 4, out, sizeof(out)), -1);
}

static void
test_base64_sizes(void **state)
{
	char enc[9];
	uint8_t dec[6];

	/* Exactly enough room, then one byte short. */
	assert_int_equal(base64_encode("foobar", 6, enc, 9, 0), 8);
	assert_int_equal(base64_encode("foobar", 6, enc, 8, 0), -1);
	assert_int_equal(errno, ENOBUFS);
	assert_int_equal(base64_encode("f", 1, enc, 3, 1), 2);
	assert_string_equal(enc, "Zg");
	assert_int_equal(base64_encode("f", 1, enc, 2, 1), -1);
	assert_int_equal(base64_encode("f", 1, enc, 4, 0), -1);
	assert_int_equal(base64_decode("Zm9vYmFy", 8, dec, 6), 6);
	assert_int_equal(base64_decode("Zm9vYmFy", 8, dec, 5), -1);
	assert_int_equal(errno, ENOBUFS);
	assert_int_equal(base64_decode("Zm9vYg==", 8, dec, 4), 4);
	assert_int_equal(base64_decode("", 0, dec, 0), 0);
}

/* ---- CRC32, hex, random, compare ---------------------------------------- */

/* The check value of the Redis Cluster specification. */
static void
test_crc16(void **state)
{
	(void)state;
	assert_int_equal(crc16_xmodem("123456789", 9), 0x31C3);
	assert_int_equal(crc16_xmodem("", 0), 0);
	assert_int_equal(crc16_xmodem("foo", 3) % 16384, 12182);
}

static void
test_crc32(void **state)
{
	uint32_t c;

	assert_int_equal(crc32_update(0, "123456789", 9), 0xCBF43926u);
	assert_int_equal(crc32_update(0, "", 0), 0);
	c = crc32_update(0, "1234", 4);
	c = crc32_update(c, "56789", 5);
	assert_int_equal(c, 0xCBF43926u);
	assert_int_equal(crc32_update(0,
	    "The quick brown fox jumps over the lazy dog", 43), 0x414FA339u);
}

static void
test_hex_encode(void **state)
{
	static const uint8_t in[] = { 0x00, 0x01, 0xab, 0x7f, 0xff };
	char out[2 * sizeof(in) + 1];

	hex_encode(in, sizeof(in), out);
	assert_string_equal(out, "0001ab7fff");
	hex_encode(in, 0, out);
	assert_string_equal(out, "");
}

static void
test_random_bytes(void **state)
{
	uint8_t a[64], b[64], big[70000];

	assert_int_equal(random_bytes(a, sizeof(a)), 0);
	assert_int_equal(random_bytes(b, sizeof(b)), 0);
	assert_memory_not_equal(a, b, sizeof(a));
	assert_int_equal(random_bytes(a, 0), 0);
	/* Larger than one getrandom() may return at once (32 MiB is the
	 * limit; short reads can happen earlier on signals). */
	assert_int_equal(random_bytes(big, sizeof(big)), 0);
}

static void
test_timingsafe_memcmp(void **state)
{
	static const struct {
		const char	*a;
		const char	*b;
		size_t		 n;
	} rows[] = {
		{ "", "", 0 },
		{ "abc", "abc", 3 },
		{ "abc", "abd", 3 },
		{ "abd", "abc", 3 },
		{ "xbc", "abc", 3 },
		{ "abc", "xbc", 3 },
		{ "ab\x01", "ab\xff", 3 },
		{ "\xff\x00", "\x00\xff", 2 },
		{ "abcX", "abcY", 3 },	/* beyond n does not count */
	};
	size_t i;
	int want, got;

	for (i = 0; i < NELEM(rows); i++) {
		want = memcmp(rows[i].a, rows[i].b, rows[i].n);
		want = (want > 0) - (want < 0);
		got = timingsafe_memcmp(rows[i].a, rows[i].b, rows[i].n);
		assert_int_equal(got, want);
	}
}

/* ---- ids ---------------------------------------------------------------- */

static void
assert_id_wellformed(const char *id)
{
	static const char alphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
	size_t i;

	assert_int_equal(strlen(id), ID_LEN);
	for (i = 0; i < ID_LEN; i++)
		assert_non_null(memchr(alphabet, id[i], 32));
}

static void
test_id_format_parse(void **state)
{
	static const struct {
		struct id_parts	 parts;
		const char	*id;	/* NULL: round trip only */
	} rows[] = {
		{ { 0, 0, 0, 0 }, "0000000000000000" },
		{ { 0, 0, 0, 1 }, "0000000000000001" },
		{ { 0, 0, 0, 1023 }, "00000000000000ZZ" },
		{ { 0, 0, 1, 0 }, "0000000000000100" },
		{ { 1, 0, 0, 0 }, "0000000020000000" },
		{ { (INT64_C(1) << 44) - 1, ID_MAX_NODE, 4095, ID_MAX_SHARD },
		  "ZZZZZZZZZZZZZZZZ" },
		{ { INT64_C(1700000000000), 12345, 678, 910 }, NULL },
		{ { INT64_C(4102444800000), 1, 4095, 0 }, NULL },
		{ { 0, ID_MAX_NODE, 0, 0 }, NULL },
	};
	struct id_parts p;
	char id[ID_LEN + 1];
	size_t i;

	for (i = 0; i < NELEM(rows); i++) {
		id_format(&rows[i].parts, id);
		assert_id_wellformed(id);
		if (rows[i].id != NULL)
			assert_string_equal(id, rows[i].id);
		memset(&p, 0xff, sizeof(p));
		assert_int_equal(id_parse(id, &p), 0);
		assert_int_equal(p.ms, rows[i].parts.ms);
		assert_int_equal(p.node, rows[i].parts.node);
		assert_int_equal(p.seq, rows[i].parts.seq);
		assert_int_equal(p.shard, rows[i].parts.shard);
	}
	assert_int_equal(id_parse("7ZZZZZZZZZZZZZZZ", NULL), 0);
}

/* Every byte in the last place: taken with its value iff Crockford's. */
static void
test_id_every_char(void **state)
{
	static const char alphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
	struct id_parts p;
	const char *at;
	char id[ID_LEN + 1] = "000000000000000x";
	int c;

	(void)state;
	for (c = 1; c < 256; c++) {
		id[ID_LEN - 1] = (char)c;
		at = memchr(alphabet, c, 32);
		if (at == NULL) {
			assert_int_equal(id_parse(id, &p), -1);
			continue;
		}
		assert_int_equal(id_parse(id, &p), 0);
		assert_int_equal(p.shard, (uint32_t)(at - alphabet));
	}
}

static void
test_id_parse_rejects(void **state)
{
	static const char *const bad[] = {
		"",
		"000000000000000",		/* 15 */
		"00000000000000000",		/* 17 */
		"0000000000000000 ",
		" 000000000000000",
		"000000000000000a",		/* lowercase */
		"abcdefghjkmnpqrs",
		"000000000000000I",
		"000000000000000L",
		"000000000000000O",
		"000000000000000U",
		"00000000-0000000",
		"000000000000000\x80",
	};
	struct id_parts p;
	size_t i;

	for (i = 0; i < NELEM(bad); i++)
		assert_int_equal(id_parse(bad[i], &p), -1);
	assert_int_equal(id_parse(NULL, &p), -1);
}

static void
test_id_node_shard(void **state)
{
	static const uint32_t nodes[] = { 0, 1, 77, ID_MAX_NODE };
	static const uint32_t shards[] = { 0, 1, 513, ID_MAX_SHARD };
	int64_t now = INT64_C(1800000000000);
	struct id_parts p;
	char id[ID_LEN + 1];
	size_t i, j;

	for (i = 0; i < NELEM(nodes); i++) {
		id_set_node(nodes[i]);
		for (j = 0; j < NELEM(shards); j++) {
			id_generate(shards[j], now, id);
			assert_id_wellformed(id);
			assert_int_equal(id_parse(id, &p), 0);
			assert_int_equal(p.node, nodes[i]);
			assert_int_equal(p.shard, shards[j]);
			assert_int_equal(p.ms, now);
		}
	}
	id_set_node(0);
}

/*
 * Ids come out in string order across a clock that repeats, jumps ahead and
 * steps back; their ms never goes backwards.
 */
static void
test_id_order(void **state)
{
	static const int64_t steps[] = {
		0, 0, 0, 1, 1, 5, 5, 5, 4, 3, 0, 6, 6, 100, 99, 100, 101, 50,
		101, 102, 1000, 1000,
	};
	int64_t base = INT64_C(1900000000000), maxms = 0;
	struct id_parts p;
	char prev[ID_LEN + 1] = "", id[ID_LEN + 1];
	size_t i;
	int rep;

	for (i = 0; i < NELEM(steps); i++) {
		for (rep = 0; rep < 3; rep++) {
			id_generate((uint32_t)(i * 37 % 1024), base + steps[i],
			    id);
			assert_true(strcmp(prev, id) < 0);
			assert_int_equal(id_parse(id, &p), 0);
			if (base + steps[i] > maxms)
				maxms = base + steps[i];
			/* The id keeps the newest ms the generator saw. */
			assert_int_equal(p.ms, maxms);
			memcpy(prev, id, sizeof(id));
		}
	}
}

/* When a ms runs out of sequence numbers, the next ms is borrowed. */
static void
test_id_seq_exhaustion(void **state)
{
	int64_t now = INT64_C(2000000000000);
	struct id_parts p;
	char prev[ID_LEN + 1] = "", id[ID_LEN + 1];
	uint32_t i;

	for (i = 0; i < 4096; i++) {
		id_generate(3, now, id);
		assert_int_equal(id_parse(id, &p), 0);
		assert_int_equal(p.ms, now);
		assert_int_equal(p.seq, i);
		assert_true(strcmp(prev, id) < 0);
		memcpy(prev, id, sizeof(id));
	}
	id_generate(3, now, id);
	assert_int_equal(id_parse(id, &p), 0);
	assert_int_equal(p.ms, now + 1);
	assert_int_equal(p.seq, 0);
	assert_true(strcmp(prev, id) < 0);
	memcpy(prev, id, sizeof(id));

	/* The wall clock is behind the logical ms now: stay on it. */
	id_generate(3, now, id);
	assert_int_equal(id_parse(id, &p), 0);
	assert_int_equal(p.ms, now + 1);
	assert_int_equal(p.seq, 1);
	assert_true(strcmp(prev, id) < 0);

	/* The wall clock catches up and passes: back to real time. */
	id_generate(3, now + 2, id);
	assert_int_equal(id_parse(id, &p), 0);
	assert_int_equal(p.ms, now + 2);
	assert_int_equal(p.seq, 0);
}

static int
cmp_id(const void *a, const void *b)
{
	return strcmp(a, b);
}

#define ID_MANY	10000

static void
test_id_unique(void **state)
{
	char (*ids)[ID_LEN + 1];
	int64_t now = INT64_C(2100000000000);
	size_t i;

	ids = xcalloc(ID_MANY, sizeof(*ids));
	/* All at one wall ms: more than two ms worth of sequence numbers. */
	for (i = 0; i < ID_MANY; i++) {
		id_generate(7, now, ids[i]);
		if (i > 0)
			assert_true(strcmp(ids[i - 1], ids[i]) < 0);
	}
	qsort(ids, ID_MANY, sizeof(*ids), cmp_id);
	for (i = 1; i < ID_MANY; i++)
		assert_true(strcmp(ids[i - 1], ids[i]) != 0);
	free(ids);
}

#define ID_THREADS	4
#define ID_PER_THREAD	5000

struct id_worker {
	pthread_t	 tid;
	int64_t		 now;
	char		(*ids)[ID_LEN + 1];
};

static void *
id_worker_run(void *arg)
{
	struct id_worker *w = arg;
	size_t i;

	for (i = 0; i < ID_PER_THREAD; i++)
		id_generate(1, w->now + (int64_t)(i % 3), w->ids[i]);
	return NULL;
}

static void
test_id_threads(void **state)
{
	struct id_worker w[ID_THREADS];
	char (*ids)[ID_LEN + 1];
	size_t i, total = ID_THREADS * ID_PER_THREAD;

	ids = xcalloc(total, sizeof(*ids));
	for (i = 0; i < ID_THREADS; i++) {
		w[i].now = INT64_C(2200000000000);
		w[i].ids = ids + i * ID_PER_THREAD;
		assert_int_equal(pthread_create(&w[i].tid, NULL,
		    id_worker_run, &w[i]), 0);
	}
	for (i = 0; i < ID_THREADS; i++)
		assert_int_equal(pthread_join(w[i].tid, NULL), 0);
	/* Each thread sees its own ids in increasing order... */
	for (i = 0; i < total; i++)
		if (i % ID_PER_THREAD != 0)
			assert_true(strcmp(ids[i - 1], ids[i]) < 0);
	/* ...and no id is handed out twice. */
	qsort(ids, total, sizeof(*ids), cmp_id);
	for (i = 1; i < total; i++)
		assert_true(strcmp(ids[i - 1], ids[i]) != 0);
	free(ids);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buf_cap),
		cmocka_unit_test(test_buf_append_fails_whole),
		cmocka_unit_test(test_buf_printf),
		cmocka_unit_test(test_buf_steal),
		cmocka_unit_test(test_pct_decode),
		cmocka_unit_test(test_str_copy),
		cmocka_unit_test(test_str_hash),
		cmocka_unit_test(test_clock_fake),
		cmocka_unit_test(test_log_level_parse),
		cmocka_unit_test(test_log_every),
		cmocka_unit_test(test_xmalloc),
		cmocka_unit_test(test_sha256_vectors),
		cmocka_unit_test(test_sha256_million_a),
		cmocka_unit_test(test_sha256_chunking),
		cmocka_unit_test(test_hmac_rfc4231),
		cmocka_unit_test(test_base64_rfc4648),
		cmocka_unit_test(test_base64_urlsafe),
		cmocka_unit_test(test_base64_bad_input),
		cmocka_unit_test(test_base64_sizes),
		cmocka_unit_test(test_crc16),
		cmocka_unit_test(test_crc32),
		cmocka_unit_test(test_hex_encode),
		cmocka_unit_test(test_random_bytes),
		cmocka_unit_test(test_timingsafe_memcmp),
		cmocka_unit_test(test_id_format_parse),
		cmocka_unit_test(test_id_parse_rejects),
		cmocka_unit_test(test_id_every_char),
		cmocka_unit_test(test_id_node_shard),
		cmocka_unit_test(test_id_order),
		cmocka_unit_test(test_id_seq_exhaustion),
		cmocka_unit_test(test_id_unique),
		cmocka_unit_test(test_id_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
