/*
 * validate.h - the input rules of the REST API in one place: names, ids,
 * bizkeys, header sets, integers, schedules, and strict reading of JSON
 * members with the field named in every error.
 *
 * Key decision: every check that fails answers the request itself (400 in
 * API.md's error shape, naming the field) and returns -1, so a handler is a
 * straight line of "if (check(...) == -1) goto out;".  Integers come from
 * json-c, which saturates at INT64_MIN/INT64_MAX instead of failing: no
 * field of the API accepts values near those extremes, so a saturated value
 * is reported as an overflow.
 */
#ifndef RETRYD_API_VALIDATE_H
#define RETRYD_API_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "api/http.h"
#include "schedules/schedule.h"

#define API_TOPIC_MAX		128
#define API_BIZKEY_MAX		128
#define API_CLIENT_ID_MAX	64
#define API_JOB_ID_MAX		64
#define API_KEY_ID_MAX		32
#define API_HEADERS_MAX		32
#define API_HEADER_NAME_MAX	256
#define API_HEADER_VALUE_MAX	4096
#define API_PRIORITY_MIN	(-1000)
#define API_PRIORITY_MAX	1000

/* Pure predicates: 1 when s (NUL-terminated) is well-formed. */
int	api_valid_tenant(const char *s);	/* [a-z0-9_-]{1,64} */
int	api_valid_topic(const char *s);		/* [A-Za-z0-9._-]{1,128} */
int	api_valid_bizkey(const char *s);	/* [A-Za-z0-9._:@+=-]{1,128} */
int	api_valid_client_id(const char *s);	/* [A-Za-z0-9._:-]{1,64} */
/* Any id a job may have: generated or a client's. */
int	api_valid_job_id(const char *s);
/* 16 characters of Crockford base32: the form of generated ids. */
int	api_looks_generated_id(const char *s);
int	api_valid_key_id(const char *s);	/* [a-z0-9]{1,32} */
/* An RFC 9110 token. */
int	api_valid_header_name(const char *s);
/* Printable (and tab, and UTF-8), no CR, LF or other control byte. */
int	api_valid_header_value(const char *s, size_t len);
/* webhook-*, retryd-*, host, content-length, ... (case-insensitive). */
int	api_reserved_header(const char *s);

/*
 * Checks of path parameters: 0, or -1 after answering 400 naming field.
 */
int	api_check_tenant(struct api_req *req, const char *s,
	    const char *field);
int	api_check_topic(struct api_req *req, const char *s);
int	api_check_job_id(struct api_req *req, const char *s);
int	api_check_job_id_field(struct api_req *req, const char *s,
	    const char *field);
int	api_check_bizkey(struct api_req *req, const char *s,
	    const char *field);

/*
 * JSON members.  Each looks `name` up in obj; *present (may be NULL) says
 * whether it was there (a JSON null counts as absent).  0 on success
 * (absent included), -1 after answering 400 naming field (the JSON path
 * the client wrote, e.g. "jobs[3].delay_ms").
 */
int	api_json_int(struct api_req *req, json_object *obj, const char *name,
	    const char *field, int64_t min, int64_t max, int64_t *out,
	    int *present);
int	api_json_bool(struct api_req *req, json_object *obj,
	    const char *name, const char *field, int *out, int *present);
/* *out points into obj (valid while obj is); NUL bytes refused. */
int	api_json_string(struct api_req *req, json_object *obj,
	    const char *name, const char *field, size_t maxlen,
	    const char **out, int *present);
/*
 * A batch's body, {"jobs": [...]} and nothing else, 1 to limit items
 * (items: what the array holds, for the error): 0 with *arr and *n, or -1
 * after answering 400 (413 when too many).
 */
int	api_json_batch(struct api_req *req, json_object *body,
	    const char *items, size_t limit, json_object **arr, size_t *n);
/*
 * Refuse members of obj not in the NULL-terminated list allowed: 400
 * unknown_field naming the first such one (prefix + name).
 */
int	api_json_only(struct api_req *req, json_object *obj,
	    const char *const *allowed, const char *prefix);
/*
 * A route that takes no body: none, or an empty JSON object.  0, or -1
 * after answering 400 (invalid_json, unknown_field).
 */
int	api_body_none(struct api_req *req);

/*
 * A header object {"Name": "value", ...}: at most API_HEADERS_MAX, valid
 * names and values, none reserved.  On success *out is the compact JSON
 * text (malloc'd) or NULL when obj is absent or empty.
 */
int	api_json_headers(struct api_req *req, json_object *hdrs,
	    const char *field, char **out);
/*
 * A retry schedule: a string "<0,2m,...>" or an array of milliseconds.
 * 0 with *out filled, -1 after answering 400 invalid_schedule.
 */
int	api_json_schedule(struct api_req *req, json_object *v,
	    const char *field, int64_t horizon_ms, struct retry_schedule *out);

/* A query argument as an integer in [min, max]; absent -> *out = dflt. */
int	api_query_int(struct api_req *req, const char *name, int64_t min,
	    int64_t max, int64_t dflt, int64_t *out);
/* "true"/"false"/"1"/"0"; absent -> *out = dflt. */
int	api_query_bool(struct api_req *req, const char *name, int dflt,
	    int *out);

#endif
