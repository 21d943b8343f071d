/*
 * test_jsonout.c - util/jsonout.c against json-c itself: every value must
 * print byte for byte as json_object_to_json_string_length() with
 * JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE prints it, since
 * job bodies printed either way must be the same bytes.
 *
 * Key decision: the reference is the json-c the program is linked with, not
 * expected strings written here, so a json-c whose printing differs fails
 * this test instead of changing stored bodies unseen.  Three sources of
 * values: texts parsed as the API parses them, values built by hand at the
 * edges (every byte in a string, the integer limits), and trees built from
 * a fixed-seed generator.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "util/buf.h"
#include "util/jsonout.h"

#define NELEM(a)	(sizeof(a) / sizeof((a)[0]))
#define FLAGS	(JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/* v prints as json-c prints it; v is released. */
static void
same_as_jsonc(struct json_object *v, const char *what)
{
	struct buf b;
	const char *want;
	size_t n;

	buf_init(&b, 1 << 20);
	assert_int_equal(jsonout_put(&b, v), 0);
	want = json_object_to_json_string_length(v, FLAGS, &n);
	if (b.len != n || memcmp(b.data, want, n) != 0)
		fail_msg("%s: printed %.*s, json-c %.*s", what, (int)b.len,
		    b.data != NULL ? b.data : "", (int)n, want);
	buf_free(&b);
	json_object_put(v);
}

/* text inside [ ]: a number alone is not complete until its end. */
static struct json_object *
parse(const char *text)
{
	struct json_tokener *tok = json_tokener_new_ex(64);
	struct json_object *v;
	char *a;

	json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
	    JSON_TOKENER_VALIDATE_UTF8);
	assert_true(asprintf(&a, "[%s]", text) > 0);
	v = json_tokener_parse_ex(tok, a, (int)strlen(a));
	free(a);
	assert_int_equal(json_tokener_get_error(tok), json_tokener_success);
	json_tokener_free(tok);
	return v;
}

static void
test_texts(void **state)
{
	static const char *const texts[] = {
		"{}", "[]", "null", "true", "false", "0", "-0", "1", "-1",
		"9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "18446744073709551615",
		"1.0", "-0.0", "0.1", "1e5", "1E+5", "1.5e-300", "123.4560",
		"\"\"", "\"a\"", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
		"\"\\u0000\\u0001\\u001f\\u0020\\u007f\"",
		"\"\\u00e9\\u20ac\\ud83d\\ude00 caf\xc3\xa9 \xe2\x82\xac\"",
		"\"a/b</script>\"",
		"{\"a\":1,\"b\":[1,2,{\"c\":null}],\"d\":{}}",
		"{ \"a\" : [ 1 , 2 ] , \"b\" : \"x\" }",
		"[null,null,[],{},[[[]]]]",
		"{\"k\\n\\u0001\\\"\":\"v\",\"\\u00e9\":true}",
		"{\"order\":42,\"items\":[{\"sku\":\"A-1\",\"qty\":2,"
		    "\"price\":9.99}],\"note\":\"ring twice\\n\"}",
	};
	char what[64];
	size_t i;

	(void)state;
	for (i = 0; i < NELEM(texts); i++) {
		snprintf(what, sizeof(what), "text %zu", i);
		same_as_jsonc(parse(texts[i]), what);
	}
}

static void
test_edges(void **state)
{
	static const int64_t ints[] = { INT64_MIN, INT64_MIN + 1, -10, -1,
		0, 1, 9, 10, INT64_MAX - 1, INT64_MAX };
	static const uint64_t uints[] = { 0, (uint64_t)INT64_MAX,
		(uint64_t)INT64_MAX + 1, UINT64_MAX };
	struct json_object *o, *a;
	char bytes[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bytes); i++)
		bytes[i] = (char)i;
	same_as_jsonc(json_object_new_string_len(bytes, sizeof(bytes)),
	    "every byte");
	for (i = 0; i < NELEM(ints); i++)
		same_as_jsonc(json_object_new_int64(ints[i]), "int64");
	for (i = 0; i < NELEM(uints); i++)
		same_as_jsonc(json_object_new_uint64(uints[i]), "uint64");
	same_as_jsonc(json_object_new_double(0.1), "double");
	same_as_jsonc(json_object_new_double(-0.0), "double -0");
	same_as_jsonc(json_object_new_double(1e300), "double 1e300");
	same_as_jsonc(NULL, "NULL");
	o = json_object_new_object();
	json_object_object_add(o, "n", NULL);
	json_object_object_add(o, "\x01\x1f\"\\/", json_object_new_int(1));
	a = json_object_new_array();
	json_object_array_add(a, NULL);
	json_object_array_add(a, json_object_new_boolean(0));
	json_object_array_put_idx(a, 4, json_object_new_boolean(1));
	json_object_object_add(o, "a", a);
	same_as_jsonc(o, "object with nulls and a sparse array");
}

/* jsonout_str() and jsonout_int() print as json-c prints the value. */
static void
test_scalars(void **state)
{
	static const int64_t ints[] = { INT64_MIN, -10, -1, 0, 9, 10,
		INT64_MAX };
	struct json_object *v;
	struct buf b;
	const char *want;
	char bytes[256];
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof(bytes); i++)
		bytes[i] = (char)i;
	for (i = 0; i <= NELEM(ints); i++) {
		buf_init(&b, 1 << 12);
		if (i < NELEM(ints)) {
			v = json_object_new_int64(ints[i]);
			assert_int_equal(jsonout_int(&b, ints[i]), 0);
		} else {
			v = json_object_new_string_len(bytes, sizeof(bytes));
			assert_int_equal(jsonout_str(&b, bytes, sizeof(bytes)),
			    0);
		}
		want = json_object_to_json_string_length(v, FLAGS, &n);
		assert_int_equal(b.len, n);
		assert_memory_equal(b.data, want, n);
		buf_free(&b);
		json_object_put(v);
	}
}

static uint64_t seed = 0x9e3779b97f4a7c15ull;

static uint64_t
rnd(void)
{
	seed ^= seed << 13;
	seed ^= seed >> 7;
	seed ^= seed << 17;
	return seed;
}

static void
rnd_bytes(char *s, size_t n, int nul)
{
	size_t i;

	for (i = 0; i < n; i++) {
		/* Mostly the bytes that escape, then any. */
		s[i] = (char)(rnd() % 3 == 0 ? rnd() % 0x24 : rnd() % 256);
		if (!nul && s[i] == '\0')
			s[i] = 'z';
	}
	s[n] = '\0';
}

static struct json_object *
rnd_value(int depth)
{
	struct json_object *v;
	char s[24];
	size_t i, n;

	switch (rnd() % (depth < 4 ? 9 : 7)) {
	case 0:
		return NULL;
	case 1:
		return json_object_new_boolean((int)(rnd() & 1));
	case 2:
		return json_object_new_int64((int64_t)rnd() >>
		    (rnd() % 64));
	case 3:
		return json_object_new_uint64(rnd());
	case 4:
		return json_object_new_double((double)(int64_t)rnd() /
		    (double)(rnd() % 1000 + 1));
	case 5:
	case 6:
		n = rnd() % 20;
		rnd_bytes(s, n, 1);
		return json_object_new_string_len(s, (int)n);
	case 7:
		v = json_object_new_array();
		for (n = rnd() % 5, i = 0; i < n; i++)
			json_object_array_add(v, rnd_value(depth + 1));
		return v;
	default:
		v = json_object_new_object();
		for (n = rnd() % 5, i = 0; i < n; i++) {
			rnd_bytes(s, rnd() % 8, 0);
			json_object_object_add(v, s, rnd_value(depth + 1));
		}
		return v;
	}
}

static void
test_generated(void **state)
{
	char what[64];
	int i;

	(void)state;
	for (i = 0; i < 20000; i++) {
		snprintf(what, sizeof(what), "generated value %d", i);
		same_as_jsonc(rnd_value(0), what);
	}
}

static void
test_max(void **state)
{
	struct json_object *v = parse("{\"a\":\"0123456789\",\"b\":[1,2,3]}");
	struct buf b;

	(void)state;
	buf_init(&b, 8);
	assert_int_equal(jsonout_put(&b, v), -1);
	assert_int_equal(errno, ENOBUFS);
	assert_true(b.len <= 8);
	buf_free(&b);
	buf_init(&b, 32);
	assert_int_equal(jsonout_put(&b, v), 0);
	assert_string_equal(b.data,
	    "[{\"a\":\"0123456789\",\"b\":[1,2,3]}]");
	buf_free(&b);
	json_object_put(v);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_texts),
		cmocka_unit_test(test_edges),
		cmocka_unit_test(test_scalars),
		cmocka_unit_test(test_generated),
		cmocka_unit_test(test_max),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
