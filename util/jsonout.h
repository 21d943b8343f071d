/*
 * jsonout.h - a json-c value printed as json-c prints it with
 * JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, byte for byte,
 * without json-c's printbuf and its snprintf per number.  A job's body is
 * stored as this text, once per pushed job; tests/unit/test_jsonout.c
 * holds it to json-c's own output.
 */
#ifndef RETRYD_UTIL_JSONOUT_H
#define RETRYD_UTIL_JSONOUT_H

#include <json-c/json.h>

struct buf;

/* Appends v (NULL is JSON null) to b: 0, or -1 as buf_append (b's max). */
int	jsonout_put(struct buf *b, struct json_object *v);

#endif
