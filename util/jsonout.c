/*
 * jsonout.c - json-c's plain printing, done directly into a buf (see
 * jsonout.h).
 *
 * Key decision: the output must be what json-c prints, since stored
 * bodies were printed by it before and callbacks are signed over them.
 * Strings are escaped by json-c's rules (json_escape_str: the two-letter
 * escapes for \b \n \r \t \f " and \, \u00xx in lower-case hex for the
 * other bytes below 0x20, everything else as is); integers are printed
 * here; a double keeps json-c's own printing (the text it was parsed
 * from), as doubles are rare in bodies and their formatting is json-c's
 * business.  Each piece is measured first, its room reserved once, and
 * written in place: a body is printed once per pushed job.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "util/buf.h"
#include "util/jsonout.h"

#define JSONOUT_FLAGS \
	(JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/* What byte c becomes in a string: 1 (itself), 2 (\x) or 6 (\u00xx). */
static const unsigned char esc_len[256] = {
	6, 6, 6, 6, 6, 6, 6, 6, 2, 2, 2, 6, 2, 2, 6, 6,
	6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6,
	1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/* One byte, as buf_append(b, &c, 1). */
static int
put_char(struct buf *b, char c)
{
	if (buf_reserve(b, 1) == -1)
		return -1;
	b->data[b->len++] = c;
	b->data[b->len] = '\0';
	return 0;
}

/* s[0..n) as a JSON string, then tail (0 for none). */
static int
put_string(struct buf *b, const char *s, size_t n, char tail)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *u = (const unsigned char *)s;
	size_t i, out = 2 + (tail != 0);
	char *p;

	for (i = 0; i < n; i++)
		out += esc_len[u[i]];
	if (buf_reserve(b, out) == -1)
		return -1;
	p = b->data + b->len;
	*p++ = '"';
	for (i = 0; i < n; i++) {
		switch (esc_len[u[i]]) {
		case 1:
			*p++ = (char)u[i];
			continue;
		case 2:
			*p++ = '\\';
			switch (u[i]) {
			case '\b': *p++ = 'b'; break;
			case '\n': *p++ = 'n'; break;
			case '\r': *p++ = 'r'; break;
			case '\t': *p++ = 't'; break;
			case '\f': *p++ = 'f'; break;
			default: *p++ = (char)u[i]; break;	/* " and \ */
			}
			continue;
		default:
			memcpy(p, "\\u00", 4);
			p[4] = hex[u[i] >> 4];
			p[5] = hex[u[i] & 0xf];
			p += 6;
		}
	}
	*p++ = '"';
	if (tail != 0)
		*p++ = tail;
	*p = '\0';
	b->len = (size_t)(p - b->data);
	return 0;
}

/* The digits of u, after a '-' when neg. */
static int
put_digits(struct buf *b, uint64_t u, int neg)
{
	char d[24], *q = d + sizeof(d);

	do
		*--q = (char)('0' + u % 10);
	while ((u /= 10) != 0);
	if (neg)
		*--q = '-';
	return buf_append(b, q, (size_t)(d + sizeof(d) - q));
}

int
jsonout_int(struct buf *b, int64_t v)
{
	return put_digits(b, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
}

int
jsonout_str(struct buf *b, const char *s, size_t n)
{
	return put_string(b, s, n, 0);
}

static int
put_int(struct buf *b, struct json_object *v)
{
	int64_t i = json_object_get_int64(v);

	/* json-c keeps integers past INT64_MAX as uint64; get_int64 clamps. */
	if (i == INT64_MAX)
		return put_digits(b, json_object_get_uint64(v), 0);
	return jsonout_int(b, i);
}

int
jsonout_put(struct buf *b, struct json_object *v)
{
	struct json_object_iterator it, end;
	const char *s;
	size_t i, n;

	switch (json_object_get_type(v)) {
	case json_type_null:
		return buf_append(b, "null", 4);
	case json_type_boolean:
		return json_object_get_boolean(v) ? buf_append(b, "true", 4) :
		    buf_append(b, "false", 5);
	case json_type_int:
		return put_int(b, v);
	case json_type_string:
		return jsonout_str(b, json_object_get_string(v),
		    (size_t)json_object_get_string_len(v));
	case json_type_array:
		if (put_char(b, '[') == -1)
			return -1;
		n = json_object_array_length(v);
		for (i = 0; i < n; i++)
			if ((i > 0 && put_char(b, ',') == -1) ||
			    jsonout_put(b, json_object_array_get_idx(v, i)) ==
			    -1)
				return -1;
		return put_char(b, ']');
	case json_type_object:
		if (put_char(b, '{') == -1)
			return -1;
		it = json_object_iter_begin(v);
		end = json_object_iter_end(v);
		for (i = 0; !json_object_iter_equal(&it, &end);
		    json_object_iter_next(&it), i++) {
			s = json_object_iter_peek_name(&it);
			if ((i > 0 && put_char(b, ',') == -1) ||
			    put_string(b, s, strlen(s), ':') == -1 ||
			    jsonout_put(b, json_object_iter_peek_value(&it)) ==
			    -1)
				return -1;
		}
		return put_char(b, '}');
	case json_type_double:
	default:
		s = json_object_to_json_string_length(v, JSONOUT_FLAGS, &n);
		return buf_append(b, s, n);
	}
}
