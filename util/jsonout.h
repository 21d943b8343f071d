/*
 * jsonout.h - a json-c value printed as json-c prints it with
 * JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, byte for byte,
 * without json-c's printbuf and its snprintf per number.  A job's body is
 * stored as this text, once per pushed job, and the answers the API prints
 * without json-c quote their strings and integers with it;
 * tests/unit/test_jsonout.c holds it to json-c's own output.
 */
#ifndef RETRYD_UTIL_JSONOUT_H
#define RETRYD_UTIL_JSONOUT_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

struct buf;

/* Appends v (NULL is JSON null) to b: 0, or -1 as buf_append (b's max). */
int	jsonout_put(struct buf *b, struct json_object *v);
/* The same for the string s[0..n) (at most 6 n + 2 bytes) and for v. */
int	jsonout_str(struct buf *b, const char *s, size_t n);
int	jsonout_int(struct buf *b, int64_t v);

#endif
