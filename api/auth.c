/*
 * auth.c - who is calling: the server's authenticate callback, and the
 * request rate per key.
 *
 * Key decisions:
 *  - A key is only ever compared by its SHA-256: the admin key's hash is
 *    compared in constant time, a tenant key's hash is looked up in the
 *    registry (which stores nothing else), so no key sits in Redis.
 *  - Failure answers are chosen so nothing leaks: a missing, unknown or
 *    revoked key is 401 whatever route it aimed at; a valid tenant key on an
 *    admin route is 403; everything about another tenant is 404 (in the
 *    handlers, since the tenant is all that authentication decides).
 *  - The rate limit (limits.rate requests per second per tenant key, burst
 *    of one second) is a token bucket per key id in one hash table under
 *    one mutex.  The admin key is not limited: it is the operator's.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "api/internal.h"
#include "api/validate.h"
#include "conf.h"
#include "scheduler/registry.h"
#include "util/clock.h"
#include "util/crypto.h"
#include "util/strutil.h"
#include "util/xmalloc.h"

#define API_KEY_MAXLEN		512
#define RATE_BUCKETS		1024
#define RATE_MAX_ENTRIES	100000

struct rate_entry {
	struct rate_entry	*next;
	char			*key;		/* tenant "/" key_id */
	double			 tokens;
	int64_t			 last_mono_us;
};

static pthread_mutex_t rate_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rate_entry *rate_table[RATE_BUCKETS];
static size_t rate_n;

size_t
api_body_limit(void *arg)
{
	(void)arg;
	return (size_t)CONF_GET(limit_request_body);
}

static void
rate_clear_locked(void)
{
	struct rate_entry *e, *next;
	size_t i;

	for (i = 0; i < RATE_BUCKETS; i++) {
		for (e = rate_table[i]; e != NULL; e = next) {
			next = e->next;
			free(e->key);
			free(e);
		}
		rate_table[i] = NULL;
	}
	rate_n = 0;
}

/*
 * Take one token from key's bucket.  0, or the seconds to wait (>= 1) when
 * the bucket is empty.
 */
static int64_t
rate_take(const char *key, int64_t rate)
{
	struct rate_entry *e;
	uint32_t b = str_hash(STR_HASH_INIT, key) % RATE_BUCKETS;
	int64_t now = clock_mono_us(), wait = 0;

	pthread_mutex_lock(&rate_lock);
	for (e = rate_table[b]; e != NULL; e = e->next)
		if (strcmp(e->key, key) == 0)
			break;
	if (e == NULL) {
		if (rate_n >= RATE_MAX_ENTRIES)
			rate_clear_locked();
		e = xcalloc(1, sizeof(*e));
		e->key = xstrdup(key);
		e->tokens = (double)rate;
		e->last_mono_us = now;
		e->next = rate_table[b];
		rate_table[b] = e;
		rate_n++;
	}
	if (now > e->last_mono_us) {
		e->tokens += (double)(now - e->last_mono_us) / 1e6 *
		    (double)rate;
		if (e->tokens > (double)rate)
			e->tokens = (double)rate;
	}
	e->last_mono_us = now;
	if (e->tokens >= 1.0)
		e->tokens -= 1.0;
	else {
		wait = (int64_t)((1.0 - e->tokens) / (double)rate +
		    0.999999);
		if (wait < 1)
			wait = 1;
	}
	pthread_mutex_unlock(&rate_lock);
	return wait;
}

/* The key of "Authorization: Bearer KEY", or NULL. */
static const char *
bearer(struct api_req *req)
{
	const char *h = api_header(req, "Authorization");

	if (h == NULL)
		return NULL;
	while (*h == ' ' || *h == '\t')
		h++;
	if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
		return NULL;
	h += 6;
	while (*h == ' ' || *h == '\t')
		h++;
	if (*h == '\0' || strlen(h) > API_KEY_MAXLEN)
		return NULL;
	return h;
}

/* The length of key without its trailing blanks (not part of a key). */
static size_t
key_len(const char *key)
{
	size_t n = strlen(key);

	while (n > 0 && (key[n - 1] == ' ' || key[n - 1] == '\t'))
		n--;
	return n;
}

/*
 * The admin key's SHA-256, computed again only when the configured key
 * changes (a reload), not on every request.
 */
static pthread_mutex_t admin_lock = PTHREAD_MUTEX_INITIALIZER;
static char *admin_seen;
static uint8_t admin_hash[SHA256_LEN];

static int
is_admin_hash(const uint8_t h[SHA256_LEN])
{
	const char *admin = conf.admin_key;
	uint8_t b[SHA256_LEN];

	if (admin == NULL || admin[0] == '\0')
		return 0;
	pthread_mutex_lock(&admin_lock);
	if (admin_seen == NULL || strcmp(admin_seen, admin) != 0) {
		if (admin_seen != NULL)
			explicit_bzero(admin_seen, strlen(admin_seen));
		free(admin_seen);
		admin_seen = xstrdup(admin);
		sha256(admin, strlen(admin), admin_hash);
	}
	memcpy(b, admin_hash, sizeof(b));
	pthread_mutex_unlock(&admin_lock);
	return timingsafe_memcmp(h, b, sizeof(b)) == 0;
}

int
api_is_admin_request(struct api_req *req)
{
	const char *key = bearer(req);
	uint8_t h[SHA256_LEN];

	if (key == NULL)
		return 0;
	sha256(key, key_len(key), h);
	return is_admin_hash(h);
}

static int
unauthorized(struct api_req *req, const char *why)
{
	api_add_header(req, "WWW-Authenticate", "Bearer realm=\"retryd\"");
	api_error(req, 401, "unauthorized", NULL, "%s", why);
	return -1;
}

static int
as_tenant(struct api_req *req, struct api_ctx *ctx)
{
	struct registry_tenant t;
	const char *name = api_header(req, "X-Tenant");
	enum reg_err e;

	if (name == NULL) {
		api_error(req, 400, "tenant_required", "X-Tenant",
		    "the admin key acts as a tenant only with an X-Tenant "
		    "header naming it");
		return -1;
	}
	if (api_check_tenant(req, name, "X-Tenant") == -1)
		return -1;
	if ((e = registry_tenant_get(ctx->reg, name, &t)) != REG_OK) {
		if (e != REG_ENOTFOUND)
			api_reg_error(req, e, "tenant");
		else if (!api_rebuilding(req))
			api_error(req, 404, "tenant_not_found", "X-Tenant",
			    "no tenant named %s", name);
		return -1;
	}
	str_copy(req->tenant, sizeof(req->tenant), name);
	return 0;
}

int
api_authenticate(struct api_req *req, enum api_auth need, void *arg)
{
	struct api_ctx *ctx = arg;
	char tenant[REG_TENANT_MAX + 1], key_id[REG_KEY_ID_MAX + 1];
	char rk[REG_TENANT_MAX + REG_KEY_ID_MAX + 2], ra[32];
	uint8_t h[SHA256_LEN];
	const char *key;
	enum reg_err e;
	int64_t rate, wait;
	size_t n;

	if (need == API_AUTH_NONE)
		return 0;
	if ((key = bearer(req)) == NULL)
		return unauthorized(req, "an API key is required: "
		    "Authorization: Bearer <key>");
	n = key_len(key);
	sha256(key, n, h);	/* once, for both comparisons */
	if (is_admin_hash(h)) {
		req->admin = 1;
		str_copy(req->key_id, sizeof(req->key_id), "admin");
		return need == API_AUTH_ADMIN ? 0 : as_tenant(req, ctx);
	}
	if (n != REG_API_KEY_LEN || strncmp(key, "rk_", 3) != 0 ||
	    ctx == NULL || ctx->reg == NULL)
		return unauthorized(req, "invalid API key");
	e = registry_key_lookup(ctx->reg, h, tenant, key_id);
	explicit_bzero(h, sizeof(h));
	if (e == REG_ENOTFOUND)
		return api_rebuilding(req) ? -1 :
		    unauthorized(req, "invalid API key");
	if (e != REG_OK) {
		api_reg_error(req, e, "key");
		return -1;
	}
	if (need == API_AUTH_ADMIN) {
		api_error(req, 403, "forbidden", NULL,
		    "this route needs the admin key");
		return -1;
	}
	str_copy(req->tenant, sizeof(req->tenant), tenant);
	str_copy(req->key_id, sizeof(req->key_id), key_id);
	if ((rate = CONF_GET(limit_rate)) > 0) {
		snprintf(rk, sizeof(rk), "%s/%s", tenant, key_id);
		if ((wait = rate_take(rk, rate)) > 0) {
			snprintf(ra, sizeof(ra), "%lld", (long long)wait);
			api_add_header(req, "Retry-After", ra);
			api_error(req, 429, "rate_limited", NULL,
			    "more than %lld requests per second with this "
			    "key; retry after %lld s", (long long)rate,
			    (long long)wait);
			return -1;
		}
	}
	return 0;
}
