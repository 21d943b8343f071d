/*
 * validate.c - input rules of the REST API (see validate.h).
 *
 * Key decision: character classes are spelled out as explicit tests, not
 * locale-dependent ctype calls, so a name valid here is valid everywhere the
 * name travels (Redis keys, SQL rows, log lines, URLs), and nothing outside
 * ASCII ever passes as a name.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/internal.h"
#include "api/validate.h"
#include "util/xmalloc.h"

static int
is_alnum(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9');
}

/* 1 when s is 1..max characters, each alnum (if alnum) or in extra. */
static int
charset(const char *s, size_t max, int upper, const char *extra)
{
	size_t n = 0;
	int c;

	if (s == NULL)
		return 0;
	for (; (c = (unsigned char)*s) != '\0'; s++, n++) {
		if (n >= max)
			return 0;
		if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
			continue;
		if (upper && c >= 'A' && c <= 'Z')
			continue;
		if (strchr(extra, c) == NULL)
			return 0;
	}
	return n > 0;
}

int
api_valid_tenant(const char *s)
{
	return charset(s, 64, 0, "_-");
}

int
api_valid_topic(const char *s)
{
	/* "." and ".." are path steps to any client, never a name. */
	return charset(s, API_TOPIC_MAX, 1, "._-") && strcmp(s, ".") != 0 &&
	    strcmp(s, "..") != 0;
}

int
api_valid_bizkey(const char *s)
{
	return charset(s, API_BIZKEY_MAX, 1, "._:@+=-");
}

int
api_valid_client_id(const char *s)
{
	return charset(s, API_CLIENT_ID_MAX, 1, "._:-");
}

int
api_valid_job_id(const char *s)
{
	return api_valid_client_id(s);
}

int
api_looks_generated_id(const char *s)
{
	size_t n;
	int c;

	for (n = 0; (c = (unsigned char)s[n]) != '\0'; n++)
		if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z' &&
		    c != 'I' && c != 'L' && c != 'O' && c != 'U')))
			return 0;
	return n == 16;
}

int
api_valid_key_id(const char *s)
{
	return charset(s, API_KEY_ID_MAX, 0, "");
}

int
api_valid_header_name(const char *s)
{
	size_t n = 0;
	int c;

	for (; (c = (unsigned char)*s) != '\0'; s++, n++)
		if (n >= API_HEADER_NAME_MAX ||
		    (!is_alnum(c) && strchr("!#$%&'*+-.^_`|~", c) == NULL))
			return 0;
	return n > 0;
}

int
api_valid_header_value(const char *s, size_t len)
{
	size_t i;
	int c;

	if (len > API_HEADER_VALUE_MAX)
		return 0;
	for (i = 0; i < len; i++) {
		c = (unsigned char)s[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return 0;
	}
	return 1;
}

int
api_reserved_header(const char *s)
{
	static const char *const exact[] = {
		"host", "content-length", "transfer-encoding", "connection",
		"expect", "upgrade", "te", "trailer", "keep-alive", NULL,
	};
	static const char *const prefix[] = {
		"webhook-", "retryd-", "proxy-", NULL,
	};
	size_t i;

	for (i = 0; exact[i] != NULL; i++)
		if (strcasecmp(s, exact[i]) == 0)
			return 1;
	for (i = 0; prefix[i] != NULL; i++)
		if (strncasecmp(s, prefix[i], strlen(prefix[i])) == 0)
			return 1;
	return 0;
}

int
api_check_tenant(struct api_req *req, const char *s, const char *field)
{
	if (api_valid_tenant(s))
		return 0;
	api_error(req, 400, "invalid_name", field,
	    "a tenant name is 1 to 64 of a-z 0-9 _ -");
	return -1;
}

int
api_check_topic(struct api_req *req, const char *s)
{
	if (api_valid_topic(s))
		return 0;
	api_error(req, 400, "invalid_name", "topic",
	    "a topic name is 1 to 128 of A-Z a-z 0-9 . _ -, not . or ..");
	return -1;
}

int
api_check_job_id(struct api_req *req, const char *s)
{
	return api_check_job_id_field(req, s, "id");
}

int
api_check_job_id_field(struct api_req *req, const char *s,
    const char *field)
{
	if (api_valid_job_id(s))
		return 0;
	api_error(req, 400, "invalid_id", field,
	    "a job id is 1 to 64 of A-Z a-z 0-9 . _ : -");
	return -1;
}

int
api_check_bizkey(struct api_req *req, const char *s, const char *field)
{
	if (api_valid_bizkey(s))
		return 0;
	api_error(req, 400, "invalid_bizkey", field,
	    "a bizkey is 1 to 128 of A-Z a-z 0-9 . _ : @ + = -");
	return -1;
}

/* The member, or NULL when absent or null. */
static json_object *
member(json_object *obj, const char *name, int *present)
{
	json_object *v = NULL;

	if (obj != NULL && !json_object_object_get_ex(obj, name, &v))
		v = NULL;
	if (present != NULL)
		*present = v != NULL;
	return v;
}

/*
 * A number out of [min, max].  max INT64_MAX - 1 means no bound of its own
 * (a later check, such as the horizon, has one): it is not named.
 */
static void
range_error(struct api_req *req, const char *field, int64_t min,
    int64_t max, int overflow)
{
	if (max < INT64_MAX - 1)
		api_error(req, 400, "invalid_field", field, overflow ?
		    "%s overflows (allowed: %" PRId64 " to %" PRId64 ")" :
		    "%s must be between %" PRId64 " and %" PRId64, field, min,
		    max);
	else if (overflow)
		api_error(req, 400, "invalid_field", field,
		    "%s overflows a 64-bit integer", field);
	else
		api_error(req, 400, "invalid_field", field,
		    "%s must be %" PRId64 " or more", field, min);
}

int
api_json_int(struct api_req *req, json_object *obj, const char *name,
    const char *field, int64_t min, int64_t max, int64_t *out, int *present)
{
	json_object *v = member(obj, name, present);
	int64_t n;

	if (v == NULL)
		return 0;
	if (!json_object_is_type(v, json_type_int)) {
		api_error(req, 400, "invalid_field", field,
		    "%s must be an integer", field);
		return -1;
	}
	n = json_object_get_int64(v);
	if (n == INT64_MAX || n == INT64_MIN || n < min || n > max) {
		range_error(req, field, min, max, n == INT64_MAX ||
		    n == INT64_MIN);
		return -1;
	}
	*out = n;
	return 0;
}

int
api_json_bool(struct api_req *req, json_object *obj, const char *name,
    const char *field, int *out, int *present)
{
	json_object *v = member(obj, name, present);

	if (v == NULL)
		return 0;
	if (!json_object_is_type(v, json_type_boolean)) {
		api_error(req, 400, "invalid_field", field,
		    "%s must be true or false", field);
		return -1;
	}
	*out = json_object_get_boolean(v);
	return 0;
}

int
api_json_string(struct api_req *req, json_object *obj, const char *name,
    const char *field, size_t maxlen, const char **out, int *present)
{
	json_object *v = member(obj, name, present);
	const char *s;
	size_t len;

	if (v == NULL)
		return 0;
	if (!json_object_is_type(v, json_type_string)) {
		api_error(req, 400, "invalid_field", field,
		    "%s must be a string", field);
		return -1;
	}
	s = json_object_get_string(v);
	len = (size_t)json_object_get_string_len(v);
	if (strlen(s) != len) {
		api_error(req, 400, "invalid_field", field,
		    "%s contains a NUL byte", field);
		return -1;
	}
	if (len > maxlen) {
		api_error(req, 400, "invalid_field", field,
		    "%s is longer than %zu bytes", field, maxlen);
		return -1;
	}
	*out = s;
	return 0;
}

int
api_json_batch(struct api_req *req, json_object *body, const char *items,
    size_t limit, json_object **arr, size_t *n)
{
	static const char *const allowed[] = { "jobs", NULL };

	if (api_json_only(req, body, allowed, "") == -1)
		return -1;
	if (!json_object_object_get_ex(body, "jobs", arr)) {
		api_error(req, 400, "missing_field", "jobs",
		    "jobs must be an array of %s", items);
		return -1;
	}
	if (!json_object_is_type(*arr, json_type_array)) {
		api_error(req, 400, "invalid_field", "jobs",
		    "jobs must be an array of %s", items);
		return -1;
	}
	*n = json_object_array_length(*arr);
	if (*n == 0 || *n > limit) {
		api_error(req, *n == 0 ? 400 : 413, *n == 0 ?
		    "invalid_field" : "batch_too_large", "jobs",
		    "a batch holds 1 to %zu jobs", limit);
		return -1;
	}
	return 0;
}

/* How many bytes of the member name k an error may show. */
static int
name_shown(const char *k)
{
	return (int)api_text_shown(k, strnlen(k, API_NAME_SHOWN),
	    API_NAME_SHOWN);
}

int
api_body_none(struct api_req *req)
{
	static const char *const none[] = { NULL };
	json_object *body;
	int rc;

	if (req->body.len == 0)
		return 0;
	if (api_body_json(req, &body) == -1)
		return -1;
	rc = api_json_only(req, body, none, "");
	json_object_put(body);
	return rc;
}

int
api_json_only(struct api_req *req, json_object *obj,
    const char *const *allowed, const char *prefix)
{
	char field[160];
	size_t i;

	json_object_object_foreach(obj, k, v) {
		(void)v;
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(k, allowed[i]) == 0)
				break;
		if (allowed[i] != NULL)
			continue;
		/* The name may hold anything: show a safe part of it. */
		snprintf(field, sizeof(field), "%s%.*s", prefix,
		    name_shown(k), k);
		api_error(req, 400, "unknown_field", field,
		    "unknown member \"%s\"", field);
		return -1;
	}
	return 0;
}

int
api_json_headers(struct api_req *req, json_object *hdrs, const char *field,
    char **out)
{
	json_object *copy = NULL;
	const char *s;
	char f[320];
	size_t len;
	int n = 0, rc = -1;

	*out = NULL;
	if (hdrs == NULL || json_object_is_type(hdrs, json_type_null))
		return 0;
	if (!json_object_is_type(hdrs, json_type_object)) {
		api_error(req, 400, "invalid_header", field,
		    "%s must be an object of header names to strings",
		    field);
		return -1;
	}
	copy = json_object_new_object();
	json_object_object_foreach(hdrs, k, v) {
		if (++n > API_HEADERS_MAX) {
			api_error(req, 400, "invalid_header", field,
			    "at most %d headers", API_HEADERS_MAX);
			goto out;
		}
		if (!api_valid_header_name(k)) {
			/* Name the member, as much as is safe to show. */
			snprintf(f, sizeof(f), "%s.%.*s", field,
			    name_shown(k), k);
			api_error(req, 400, "invalid_header", f,
			    "%s: a header name must be an HTTP token", f);
			goto out;
		}
		snprintf(f, sizeof(f), "%s.%s", field, k);
		if (api_reserved_header(k)) {
			api_error(req, 400, "invalid_header", f,
			    "%s is reserved: retryd sets it", k);
			goto out;
		}
		if (!json_object_is_type(v, json_type_string)) {
			api_error(req, 400, "invalid_header", f,
			    "a header value must be a string");
			goto out;
		}
		s = json_object_get_string(v);
		len = (size_t)json_object_get_string_len(v);
		if (strlen(s) != len || !api_valid_header_value(s, len)) {
			api_error(req, 400, "invalid_header", f,
			    "a header value is at most %d printable bytes "
			    "without CR, LF or NUL", API_HEADER_VALUE_MAX);
			goto out;
		}
		json_object_object_add(copy, k, json_object_new_string_len(s,
		    (int)len));
	}
	if (n > 0)
		*out = xstrdup(json_object_to_json_string_ext(copy,
		    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	rc = 0;
out:
	json_object_put(copy);
	return rc;
}

int
api_json_schedule(struct api_req *req, json_object *v, const char *field,
    int64_t horizon_ms, struct retry_schedule *out)
{
	struct schedule_error err;
	int64_t ms[SCHEDULE_MAX_WAITS];
	json_object *e;
	size_t i, n;
	const char *s;

	memset(&err, 0, sizeof(err));
	if (json_object_is_type(v, json_type_string)) {
		s = json_object_get_string(v);
		if (schedule_parse(s, (size_t)json_object_get_string_len(v),
		    horizon_ms, out, &err) == 0)
			return 0;
		api_error(req, 400, "invalid_schedule", field,
		    "%s: at offset %zu: %s", field, err.pos, err.reason);
		return -1;
	}
	if (!json_object_is_type(v, json_type_array)) {
		api_error(req, 400, "invalid_schedule", field,
		    "%s must be a string like \"<0,2m,10m>\" or an array of "
		    "milliseconds", field);
		return -1;
	}
	n = json_object_array_length(v);
	if (n == 0 || n > SCHEDULE_MAX_WAITS) {
		api_error(req, 400, "invalid_schedule", field,
		    "%s must have 1 to %d waits", field, SCHEDULE_MAX_WAITS);
		return -1;
	}
	for (i = 0; i < n; i++) {
		e = json_object_array_get_idx(v, i);
		if (!json_object_is_type(e, json_type_int)) {
			api_error(req, 400, "invalid_schedule", field,
			    "%s[%zu] must be an integer (milliseconds)",
			    field, i);
			return -1;
		}
		ms[i] = json_object_get_int64(e);
		if (ms[i] == INT64_MAX || ms[i] == INT64_MIN) {
			api_error(req, 400, "invalid_schedule", field,
			    "%s[%zu] overflows", field, i);
			return -1;
		}
	}
	if (schedule_from_ms(ms, n, horizon_ms, out, &err) == 0)
		return 0;
	api_error(req, 400, "invalid_schedule", field, "%s[%zu]: %s", field,
	    err.pos, err.reason);
	return -1;
}

int
api_query_int(struct api_req *req, const char *name, int64_t min,
    int64_t max, int64_t dflt, int64_t *out)
{
	const char *s = api_query(req, name);
	char *end;
	long long v;

	if (s == NULL) {
		*out = dflt;
		return 0;
	}
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*s == '\0' || *end != '\0' || errno != 0 ||
	    !((*s >= '0' && *s <= '9') || *s == '-')) {
		api_error(req, 400, "invalid_field", name,
		    "%s must be an integer", name);
		return -1;
	}
	if (v < min || v > max) {
		range_error(req, name, min, max, 0);
		return -1;
	}
	*out = v;
	return 0;
}

int
api_query_bool(struct api_req *req, const char *name, int dflt, int *out)
{
	const char *s = api_query(req, name);

	if (s == NULL) {
		*out = dflt;
		return 0;
	}
	if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0)
		*out = 1;
	else if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0)
		*out = 0;
	else {
		api_error(req, 400, "invalid_field", name,
		    "%s must be true or false", name);
		return -1;
	}
	return 0;
}

void
api_sched_describe(enum sched_err e, const char *what,
    struct api_err_desc *d)
{
	d->field = NULL;
	d->code = d->code_buf;
	switch (e) {
	case SCHED_OK:
		d->status = 500;
		d->code = "internal";
		snprintf(d->msg, sizeof(d->msg), "no error to report");
		break;
	case SCHED_ENOTFOUND:
		d->status = 404;
		snprintf(d->code_buf, sizeof(d->code_buf), "%s_not_found",
		    what);
		snprintf(d->msg, sizeof(d->msg), "no such %s", what);
		break;
	case SCHED_ECONFLICT:
		d->status = 409;
		d->code = "conflict";
		snprintf(d->msg, sizeof(d->msg),
		    "the %s is in a state that forbids this", what);
		break;
	case SCHED_ESTALE:
		d->status = 409;
		d->code = "stale_token";
		d->field = "token";
		snprintf(d->msg, sizeof(d->msg),
		    "the token is not the current reservation's");
		break;
	case SCHED_EUNAVAIL:
		d->status = 503;
		d->code = "unavailable";
		snprintf(d->msg, sizeof(d->msg),
		    "Redis is unavailable; try again");
		break;
	case SCHED_EFULL:
		d->status = 507;
		d->code = "redis_full";
		snprintf(d->msg, sizeof(d->msg),
		    "Redis is out of memory (its maxmemory): nothing was "
		    "done; try again later");
		break;
	case SCHED_EAGAIN:
		d->status = 503;
		d->code = "unavailable";
		snprintf(d->msg, sizeof(d->msg),
		    "the job's topic cannot be read now (Redis is being "
		    "rebuilt); try again");
		break;
	case SCHED_EINVAL:
		d->status = 400;
		d->code = "invalid_request";
		snprintf(d->msg, sizeof(d->msg),
		    "the scheduler refused the request");
		break;
	default:
		d->status = 500;
		d->code = "internal";
		snprintf(d->msg, sizeof(d->msg), "scheduler: %s",
		    sched_strerror(e));
		break;
	}
}

enum sched_err
api_status_sched(int status)
{
	return status == 503 ? SCHED_EUNAVAIL : status == 507 ? SCHED_EFULL :
	    SCHED_EINTERNAL;
}

void
api_sched_error(struct api_req *req, enum sched_err e, const char *what)
{
	struct api_err_desc d;

	if (e == SCHED_ENOTFOUND && api_rebuilding(req))
		return;
	api_sched_describe(e, what, &d);
	api_error_desc(req, &d);
}

int
api_rebuild_owed(struct api_ctx *ctx)
{
	int owed;

	if (ctx == NULL || ctx->jrnl == NULL || ctx->reg == NULL ||
	    registry_rebuild_owed(ctx->reg, &owed) != REG_OK || !owed)
		return 0;
	registry_forget_misses(ctx->reg);
	return 1;
}

void
api_rebuilding_describe(struct api_err_desc *d)
{
	d->status = 503;
	d->code = "rebuilding";
	d->field = NULL;
	snprintf(d->msg, sizeof(d->msg), "Redis lost data and is being "
	    "rebuilt from the journal; what this names may be back then: "
	    "try again");
}

int
api_rebuilding(struct api_req *req)
{
	struct api_err_desc d;

	if (!api_rebuild_owed(api_ctx_of(req)))
		return 0;
	api_rebuilding_describe(&d);
	api_add_header(req, "Retry-After", "1");
	api_error_desc(req, &d);
	return 1;
}

void
api_reg_describe(enum reg_err e, const char *what, struct api_err_desc *d)
{
	d->field = NULL;
	d->code = d->code_buf;
	switch (e) {
	case REG_ENOTFOUND:
		d->status = 404;
		snprintf(d->code_buf, sizeof(d->code_buf), "%s_not_found",
		    what);
		snprintf(d->msg, sizeof(d->msg), "no such %s", what);
		break;
	case REG_EEXISTS:
		d->status = 409;
		snprintf(d->code_buf, sizeof(d->code_buf), "%s_exists", what);
		snprintf(d->msg, sizeof(d->msg), "that %s exists already",
		    what);
		break;
	case REG_EUNAVAIL:
		d->status = 503;
		d->code = "unavailable";
		snprintf(d->msg, sizeof(d->msg),
		    "Redis is unavailable; try again");
		break;
	case REG_ECHANGED:
		d->status = 409;
		d->code = "conflict";
		snprintf(d->msg, sizeof(d->msg),
		    "the %s changed meanwhile; try again", what);
		break;
	default:
		d->status = 500;
		d->code = "internal";
		snprintf(d->msg, sizeof(d->msg), "registry: %s",
		    registry_strerror(e));
		break;
	}
}

void
api_reg_error(struct api_req *req, enum reg_err e, const char *what)
{
	struct api_err_desc d;

	if (e == REG_ENOTFOUND && api_rebuilding(req))
		return;
	api_reg_describe(e, what, &d);
	api_error_desc(req, &d);
}

void
api_error_desc(struct api_req *req, const struct api_err_desc *d)
{
	api_error(req, d->status, d->code, d->field, "%s", d->msg);
}

void
api_journal_desc(struct api_err_desc *d, const char *fmt, ...)
{
	va_list ap;

	d->status = 503;
	d->code = "journal_unavailable";
	d->field = NULL;
	va_start(ap, fmt);
	vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
	va_end(ap);
}
