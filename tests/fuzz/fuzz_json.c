/*
 * fuzz_json.c - libFuzzer target for the RFC 8259 check every request body
 * goes through before json-c reads it (api_json_scan_dup() in api/http.c):
 * a hand-written scanner of untrusted bytes that also decodes member names
 * and prints the path of one given twice into the caller's buffer.
 *
 * Key decision: besides "no crash" (under ASan: ./configure --enable-fuzz
 * --enable-asan CC=clang), the target checks what the API relies on and
 * aborts when it breaks:
 *  - the path buffer: the scanner is run with a buffer of 1 to 24 bytes on
 *    the heap, so a write past its end is an ASan report, and the path it
 *    leaves is terminated inside it;
 *  - agreement: api_json_scan() (no member names kept) gives the same
 *    reason and shape as api_json_scan_dup(), except where the latter
 *    stopped at a repeated or \u0000 name;
 *  - json-c: a text the scanner calls valid, shallower than the tokener's
 *    depth and without a NUL byte (the API refuses those first), is read
 *    whole by json-c with the flags, depth and call api_body_json() uses.
 * Built only with --enable-fuzz (see api/local.mk).
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "api/http.h"
#include "tests/fuzz/fuzz.h"

#define TOKENER_DEPTH	64	/* as api/http.c's thread_tokener() */

static int
same_shape(const struct api_json_shape *a, const struct api_json_shape *b)
{
	return a->depth == b->depth && a->digits == b->digits &&
	    a->exponent == b->exponent && a->u_escape == b->u_escape &&
	    a->unprintable == b->unprintable && a->int_range == b->int_range;
}

/*
 * Whether json-c, as api_body_json() sets it up and calls it (the text
 * with the NUL after it), reads s[0..n) whole.
 */
static int
jsonc_reads(const uint8_t *s, size_t n)
{
	struct json_tokener *tok;
	json_object *obj;
	enum json_tokener_error e;
	char *text;
	size_t i;
	int ok;

	if ((tok = json_tokener_new_ex(TOKENER_DEPTH)) == NULL ||
	    (text = malloc(n + 1)) == NULL)
		abort();
	memcpy(text, s, n);
	text[n] = '\0';
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
	    JSON_TOKENER_VALIDATE_UTF8);
	obj = json_tokener_parse_ex(tok, text, (int)n + 1);
	e = json_tokener_get_error(tok);
	ok = e == json_tokener_success;
	for (i = json_tokener_get_parse_end(tok); ok && i < n; i++)
		ok = strchr(" \t\r\n", s[i]) != NULL;
	json_object_put(obj);
	json_tokener_free(tok);
	free(text);
	return ok;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct api_json_shape sh, plain;
	const char *why, *why_plain;
	size_t duplen = size % 24 + 1;
	char *dup;

	if (size >= INT32_MAX)
		return 0;
	dup = malloc(duplen);
	fuzz_check(dup != NULL);
	memset(dup, 'x', duplen);
	why = api_json_scan_dup(data, size, &sh, dup, duplen);
	why_plain = api_json_scan(data, size, &plain);

	fuzz_check(why == NULL || why[0] != '\0');
	if (sh.dup_name || sh.nul_name) {
		fuzz_check(why != NULL);
		fuzz_check(memchr(dup, '\0', duplen) != NULL);
	} else {
		fuzz_check((why == NULL) == (why_plain == NULL));
		fuzz_check(why == NULL || strcmp(why, why_plain) == 0);
		fuzz_check(same_shape(&sh, &plain));
	}
	if (why == NULL && sh.depth < TOKENER_DEPTH &&
	    memchr(data, '\0', size) == NULL)
		fuzz_check(jsonc_reads(data, size));
	free(dup);
	return 0;
}
