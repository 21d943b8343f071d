/*
 * registry_restore.c - putting tenants, key hashes and topics back into
 * Redis after it lost its data, and the flag and lock by which the
 * instances sharing a Redis agree that one of them rebuilds it from the
 * journal (restore.c drives both).
 *
 * Key decisions:
 *  - A restore never overwrites: each record is written only when Redis
 *    does not hold it, in one script (atomic, one hash tag), so running a
 *    restore twice, or while clients already re-create things, changes
 *    nothing that is there.
 *  - The flag (rd:{registry}:restore) is set before a rebuild starts and
 *    cleared only when one completed, so an instance that dies half-way
 *    leaves the flag for the next one.  The lock (rd:{registry}:restore_lock,
 *    SET NX PX, renewed while working) keeps two instances from doing the
 *    same work.  Renewing fails when the flag is gone: Redis lost its data
 *    again during the rebuild, which must then start over.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <json-c/json.h>

#include "scheduler/registry.h"
#include "scheduler/registry_int.h"
#include "util/xmalloc.h"

#define P		REG_KEY_PREFIX
#define FLAG_KEY	P "restore"
#define LOCK_KEY	P "restore_lock"

/* One command whose reply is an integer: REG_OK and *v, or an error. */
static enum reg_err
cmd_int(struct registry *reg, long long *v, const char *fmt, ...)
{
	redisReply *r;
	enum reg_err err;
	va_list ap;

	va_start(ap, fmt);
	r = registry_vcmd(reg, &err, fmt, ap);
	va_end(ap);
	if (r == NULL)
		return err;
	err = REG_EINTERNAL;
	if (r->type == REDIS_REPLY_INTEGER) {
		*v = r->integer;
		err = REG_OK;
	}
	freeReplyObject(r);
	return err;
}

/* ------------------------------------------------------------------ */
/* Tenant settings as the journal keeps them */

char *
registry_tenant_settings_json(int64_t max_pending, int64_t max_in_flight)
{
	return xasprintf("{\"max_pending\":%" PRId64 ",\"max_in_flight\":%"
	    PRId64 "}", max_pending, max_in_flight);
}

/* The member name of o if it is an integer >= 0, else 0. */
static int64_t
settings_int(json_object *o, const char *name)
{
	json_object *v;

	if (json_object_object_get_ex(o, name, &v) &&
	    json_object_is_type(v, json_type_int) &&
	    json_object_get_int64(v) >= 0)
		return json_object_get_int64(v);
	return 0;
}

int
registry_tenant_settings_parse(const char *json, int64_t *max_pending,
    int64_t *max_in_flight)
{
	json_object *o;
	int rc = -1;

	*max_pending = 0;
	*max_in_flight = 0;
	if (json == NULL || *json == '\0')
		return 0;
	if ((o = json_tokener_parse(json)) == NULL)
		return -1;
	if (json_object_is_type(o, json_type_object)) {
		rc = 0;
		*max_pending = settings_int(o, "max_pending");
		*max_in_flight = settings_int(o, "max_in_flight");
	}
	json_object_put(o);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Records */

static const char LUA_RESTORE_TENANT[] =
    "if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
    "redis.call('HSET', KEYS[2], 'created_ms', ARGV[2], 'max_pending',"
    " ARGV[3], 'max_in_flight', ARGV[4])\n"
    "redis.call('SET', KEYS[3], '1')\n"
    "return 1\n";

enum reg_err
registry_restore_tenant(struct registry *reg, const char *name,
    int64_t created_ms, int64_t max_pending, int64_t max_in_flight,
    int *created)
{
	char cms[32], maxp[32], maxf[32];
	enum reg_err err;
	long long v;

	*created = 0;
	if (name == NULL || *name == '\0' || strlen(name) > REG_TENANT_MAX ||
	    max_pending < 0 || max_in_flight < 0)
		return REG_EINVAL;
	snprintf(cms, sizeof(cms), "%" PRId64, created_ms);
	snprintf(maxp, sizeof(maxp), "%" PRId64, max_pending);
	snprintf(maxf, sizeof(maxf), "%" PRId64, max_in_flight);
	err = cmd_int(reg, &v, "EVAL %s 3 " P "tenants " P "tenant:%s "
	    P "version %s %s %s %s", LUA_RESTORE_TENANT, name, name, cms, maxp,
	    maxf);
	if (err == REG_OK)
		*created = v == 1;
	return err;
}

static const char LUA_RESTORE_KEY[] =
    "if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end\n"
    "if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then return 0 end\n"
    "if redis.call('HSETNX', KEYS[3], ARGV[2], ARGV[3] .. ' ' .. ARGV[4])"
    " == 0 then return 0 end\n"
    "redis.call('HSET', KEYS[2], ARGV[3], ARGV[1] .. ' ' .. ARGV[2])\n"
    "return 1\n";

enum reg_err
registry_restore_key(struct registry *reg, const char *tenant,
    const char *key_id, const char *hash_hex, int64_t created_ms,
    int *created)
{
	char cms[32];
	enum reg_err err;
	long long v;
	size_t i;

	*created = 0;
	if (tenant == NULL || key_id == NULL || hash_hex == NULL ||
	    strlen(tenant) > REG_TENANT_MAX || *key_id == '\0' ||
	    strlen(key_id) > REG_KEY_ID_MAX || strchr(key_id, ' ') != NULL ||
	    strlen(hash_hex) != 64)
		return REG_EINVAL;
	for (i = 0; i < 64; i++)
		if (strchr("0123456789abcdef", hash_hex[i]) == NULL)
			return REG_EINVAL;
	snprintf(cms, sizeof(cms), "%" PRId64, created_ms);
	err = cmd_int(reg, &v, "EVAL %s 3 " P "tenants " P "keys "
	    P "tkeys:%s %s %s %s %s", LUA_RESTORE_KEY, tenant, tenant, key_id,
	    hash_hex, cms);
	if (err == REG_OK && v == -1)
		err = REG_ENOTFOUND;
	if (err == REG_OK)
		*created = v == 1;
	return err;
}

static const char LUA_RESTORE_TOPIC[] =
    "if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end\n"
    "if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3]) == 0 then"
    " return 0 end\n"
    "redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])\n"
    "return 1\n";

enum reg_err
registry_restore_topic(struct registry *reg, const char *tenant,
    const char *name, const char *json, int64_t created_ms, int *created)
{
	json_object *o;
	char cms[32];
	enum reg_err err;
	long long v;
	int ok;

	*created = 0;
	if (tenant == NULL || name == NULL || json == NULL ||
	    strlen(tenant) > REG_TENANT_MAX || *name == '\0' ||
	    strlen(name) > REG_TOPIC_MAX)
		return REG_EINVAL;
	/* Only a JSON object the registry could have written goes in. */
	o = json_tokener_parse(json);
	ok = o != NULL && json_object_is_type(o, json_type_object);
	json_object_put(o);
	if (!ok)
		return REG_EINVAL;
	snprintf(cms, sizeof(cms), "%" PRId64, created_ms);
	err = cmd_int(reg, &v, "EVAL %s 3 " P "tenants " P "topics:%s "
	    P "topicc:%s %s %s %s %s", LUA_RESTORE_TOPIC, tenant, tenant,
	    tenant, name, json, cms);
	if (err == REG_OK && v == -1)
		err = REG_ENOTFOUND;
	if (err == REG_OK)
		*created = v == 1;
	return err;
}

/* ------------------------------------------------------------------ */
/* The flag and the lock */

enum reg_err
registry_restore_state(struct registry *reg,
    struct registry_restore_state *out)
{
	enum reg_err err;
	long long v;

	memset(out, 0, sizeof(*out));
	if ((err = cmd_int(reg, &v, "EXISTS " FLAG_KEY)) != REG_OK)
		return err;
	out->pending = v > 0;
	if ((err = cmd_int(reg, &v, "EXISTS rd:schema")) != REG_OK)
		return err;
	out->schema = v > 0;
	if ((err = cmd_int(reg, &v, "SCARD " P "tenants")) != REG_OK)
		return err;
	out->tenants = v;
	return REG_OK;
}

enum reg_err
registry_rebuild_owed(struct registry *reg, int *owed)
{
	enum reg_err err;
	long long v;

	*owed = 0;
	if ((err = cmd_int(reg, &v, "EXISTS rd:schema")) != REG_OK)
		return err;
	if (v == 0) {
		*owed = 1;
		return REG_OK;
	}
	if ((err = cmd_int(reg, &v, "EXISTS " FLAG_KEY)) != REG_OK)
		return err;
	*owed = v > 0;
	return REG_OK;
}

enum reg_err
registry_restore_request(struct registry *reg, const char *why)
{
	redisReply *r;
	enum reg_err err;

	if ((r = registry_cmd(reg, &err, "SET " FLAG_KEY " %s",
	    why != NULL ? why : "")) == NULL)
		return err;
	freeReplyObject(r);
	return REG_OK;
}

static const char LUA_RESTORE_LOCK[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if ARGV[3] == '1' then\n"
    "  if v ~= ARGV[1] or redis.call('EXISTS', KEYS[2]) == 0 then"
    " return 0 end\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return 1\n"
    "end\n"
    "if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end\n"
    "if v and v ~= ARGV[1] then return 0 end\n"
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
    "return 1\n";

enum reg_err
registry_restore_lock(struct registry *reg, const char *holder,
    int64_t ttl_ms, int renew, int *got)
{
	char ttl[32];
	enum reg_err err;
	long long v;

	*got = 0;
	if (holder == NULL || *holder == '\0' || ttl_ms <= 0)
		return REG_EINVAL;
	snprintf(ttl, sizeof(ttl), "%" PRId64, ttl_ms);
	err = cmd_int(reg, &v, "EVAL %s 2 " LOCK_KEY " " FLAG_KEY
	    " %s %s %s", LUA_RESTORE_LOCK, holder, ttl, renew ? "1" : "0");
	if (err == REG_OK)
		*got = v == 1 ? 1 : v == -1 ? -1 : 0;
	return err;
}

static const char LUA_RESTORE_DONE[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "redis.call('DEL', KEYS[1], KEYS[2])\n"
    "return 1\n";

enum reg_err
registry_restore_done(struct registry *reg, const char *holder, int *done)
{
	enum reg_err err;
	long long v;

	*done = 0;
	err = cmd_int(reg, &v, "EVAL %s 2 " LOCK_KEY " " FLAG_KEY
	    " %s", LUA_RESTORE_DONE, holder);
	if (err == REG_OK)
		*done = v == 1;
	return err;
}

static const char LUA_RESTORE_UNLOCK[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "end\n"
    "return 1\n";

enum reg_err
registry_restore_unlock(struct registry *reg, const char *holder)
{
	long long v;

	return cmd_int(reg, &v, "EVAL %s 1 " LOCK_KEY " %s",
	    LUA_RESTORE_UNLOCK, holder);
}
