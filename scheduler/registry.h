/*
 * registry.h - tenants, their API keys and their topics, stored in Redis
 * (docs/internals/REDIS-SCHEMA.md, "Registry keys"), with a per-process cache.
 *
 * Key decisions: every registry key lives under the one hash tag {registry},
 * so each change is one atomic Lua script even on Redis Cluster (the
 * registry is small; one slot holds it).  API keys are never stored: only
 * the lower-case hex SHA-256 of each, which is also how a request's key is
 * looked up.  Reads go through a cache with a short TTL (cache_ttl_ms,
 * default 1 s); a change made through this process invalidates its entries
 * at once (and a read of Redis that raced with it is cached expired, so it
 * cannot bring the old value back), other instances see it when their
 * entry expires.  So a revoked key may keep working on another instance
 * for up to the TTL.
 *
 * Threading: every function may be called from any thread.
 * Ownership: strings passed in are copied or used during the call only;
 * structures returned are the caller's, freed with the matching *_free().
 */
#ifndef RETRYD_SCHEDULER_REGISTRY_H
#define RETRYD_SCHEDULER_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "scheduler/sched.h"
#include "schedules/schedule.h"

#define REG_TENANT_MAX		64	/* name length, without the NUL */
#define REG_TOPIC_MAX		128
#define REG_KEY_ID_MAX		32
/* "rk_" + 43 characters of url-safe base64 of 32 random bytes. */
#define REG_API_KEY_LEN		46
/* "whsec_" + standard base64 of up to 64 bytes. */
#define REG_SECRET_MAX		96
#define REG_SECRET_RAW_MAX	64

enum reg_err {
	REG_OK = 0,
	REG_ENOTFOUND,		/* no such tenant, key or topic */
	REG_EEXISTS,		/* a tenant with that name exists */
	REG_EUNAVAIL,		/* Redis unreachable or timed out */
	REG_EINVAL,		/* a bad argument (caller's bug) */
	REG_EINTERNAL,		/* unexpected reply: logged */
	REG_ECHANGED,		/* changed since it was read (put_if) */
};

const char *registry_strerror(enum reg_err e);

struct registry;

/*
 * redis_url as sched_redis_seeds_parse() takes it; the registry keeps its
 * own small connection pool.  cache_ttl_ms <= 0 means 1000.  NULL with why on a
 * bad URL; Redis being down is not an error here.
 */
struct registry *registry_new(const char *redis_url, int64_t timeout_ms,
	    int64_t cache_ttl_ms, char *why, size_t whylen);
void	registry_free(struct registry *reg);
/* Drop every cached entry (tests, and after Redis lost its data). */
void	registry_flush_cache(struct registry *reg);
/* Drop the cached "not found" answers, keeping what was found. */
void	registry_forget_misses(struct registry *reg);
/* Every cached entry expired, kept to be served stale (tests). */
void	registry_cache_expire(struct registry *reg);

/* Tenants. */
struct registry_tenant {
	char	 name[REG_TENANT_MAX + 1];
	int64_t	 created_ms;
	int64_t	 max_pending;	/* 0: the configured default */
	int64_t	 max_in_flight;	/* 0: dispatcher.max_tenant_in_flight */
	int	 nkeys;		/* keys in force */
};

struct registry_key {
	char	 key_id[REG_KEY_ID_MAX + 1];
	int64_t	 created_ms;
};

/*
 * Create a tenant with its first key.  api_key receives the key in clear
 * (shown once; only its hash is stored), key_id its id.  REG_EEXISTS when
 * the name is taken.
 */
enum reg_err registry_tenant_create(struct registry *reg, const char *name,
	    int64_t max_pending, int64_t max_in_flight, int64_t now_ms,
	    char api_key[REG_API_KEY_LEN + 1],
	    char key_id[REG_KEY_ID_MAX + 1]);
enum reg_err registry_tenant_get(struct registry *reg, const char *name,
	    struct registry_tenant *out);
/* Every tenant, sorted by name; *out is the caller's (free()). */
enum reg_err registry_tenant_list(struct registry *reg,
	    struct registry_tenant **out, size_t *n);
/*
 * Sets the tenant's overrides: each a value, 0 to restore the configured
 * one, or REG_LIMIT_KEEP to leave it as it is (never written, so a change
 * made meanwhile to it stays).  On REG_OK now and was (each unless NULL)
 * hold {max_pending, max_in_flight} as they are after and were before.
 */
#define REG_LIMIT_KEEP	(-1)
enum reg_err registry_tenant_set_limits(struct registry *reg,
	    const char *name, int64_t max_pending, int64_t max_in_flight,
	    int64_t now[2], int64_t was[2]);
/* Removes the tenant, its keys and its topics (not its jobs). */
enum reg_err registry_tenant_delete(struct registry *reg, const char *name);

/* Keys. */
enum reg_err registry_key_create(struct registry *reg, const char *tenant,
	    int64_t now_ms, char api_key[REG_API_KEY_LEN + 1],
	    char key_id[REG_KEY_ID_MAX + 1]);
/* The tenant's keys in force, oldest first; *out is the caller's (free()). */
enum reg_err registry_key_list(struct registry *reg, const char *tenant,
	    struct registry_key **out, size_t *n);
enum reg_err registry_key_revoke(struct registry *reg, const char *tenant,
	    const char *key_id);
/*
 * Which tenant an API key belongs to, by the SHA-256 of the key as the
 * client sent it (the caller hashes it once for every comparison it makes).
 * REG_ENOTFOUND for an unknown or revoked key.
 */
enum reg_err registry_key_lookup(struct registry *reg,
	    const uint8_t key_hash[32],
	    char tenant[REG_TENANT_MAX + 1],
	    char key_id[REG_KEY_ID_MAX + 1]);

/* Topics. */
enum registry_mode {
	REG_MODE_PUSH = 0,	/* callbacks to callback_url */
	REG_MODE_PULL,		/* consumers reserve, ack, nack */
};

struct registry_header {
	char	*name;
	char	*value;
};

struct registry_topic {
	char	 tenant[REG_TENANT_MAX + 1];
	char	 name[REG_TOPIC_MAX + 1];
	enum registry_mode mode;
	char	*callback_url;		/* NULL for a pull topic without one */
	struct registry_header *headers;
	size_t	 nheaders;
	char	 secret[REG_SECRET_MAX + 1];	/* "whsec_..." */
	uint8_t	 secret_raw[REG_SECRET_RAW_MAX];	/* the HMAC key */
	size_t	 secret_len;
	int64_t	 timeout_ms;
	int	 max_in_flight;
	int64_t	 ttr_ms;
	struct retry_schedule schedule;
	int64_t	 created_ms;
	int64_t	 updated_ms;
	/*
	 * The registry's own: references to a cached topic (0: not shared).
	 * Last: registry_topic_dup() copies what comes before it.
	 */
	int	 refs;
};

/* A zeroed topic. */
struct registry_topic *registry_topic_new(void);
/* Frees every member, wipes the secret.  Accepts NULL. */
void	registry_topic_free(struct registry_topic *t);
/* A copy of t (its own callback URL and headers). */
struct registry_topic *registry_topic_dup(const struct registry_topic *t);
/* Appends a copy of name: value (the caller validated them). */
void	registry_topic_add_header(struct registry_topic *t, const char *name,
	    const char *value);
/*
 * Sets the secret from "whsec_BASE64" (prefix optional): 0, or -1 when the
 * base64 is bad or the key is not 16 to REG_SECRET_RAW_MAX bytes.
 */
int	registry_topic_set_secret(struct registry_topic *t, const char *whsec);
/* A new random secret (32 bytes). */
int	registry_topic_new_secret(struct registry_topic *t);

/*
 * Create or replace t (t->tenant, t->name).  created_ms is kept from an
 * existing topic (and written back into t); *created says whether it is
 * new.  REG_ENOTFOUND when the tenant does not exist.
 */
enum reg_err registry_topic_put(struct registry *reg,
	    struct registry_topic *t, int64_t now_ms, int *created);
/*
 * registry_topic_put, made only while the topic's stored JSON is still
 * expect (as registry_topic_read gave it; "" for no such topic), else
 * REG_ECHANGED and nothing written: the read-modify-write of a change
 * that keeps part of the topic (its secret, its settings) never undoes a
 * change made since the read, on this instance or another.
 */
enum reg_err registry_topic_put_if(struct registry *reg,
	    struct registry_topic *t, int64_t now_ms, const char *expect,
	    int *created);
/*
 * The topic as Redis has it now, never a cached copy, and its stored JSON
 * in *raw (free(); "" with REG_ENOTFOUND) for registry_topic_put_if.
 */
enum reg_err registry_topic_read(struct registry *reg, const char *tenant,
	    const char *topic, struct registry_topic **out, char **raw);
/* A copy of the topic (the caller's, registry_topic_free()). */
enum reg_err registry_topic_get(struct registry *reg, const char *tenant,
	    const char *topic, struct registry_topic **out);
/*
 * The cached topic itself, shared and read-only, for the push path, which
 * only reads it: no copy per request.  Give it back with
 * registry_topic_release(); a later change of the topic replaces the
 * cache's entry and leaves a held one as it was.
 */
enum reg_err registry_topic_hold(struct registry *reg, const char *tenant,
	    const char *topic, const struct registry_topic **out);
/* Drops a reference from registry_topic_hold().  Accepts NULL. */
void	registry_topic_release(const struct registry_topic *t);
/* The tenant's topics sorted by name; free with registry_topic_list_free. */
enum reg_err registry_topic_list(struct registry *reg, const char *tenant,
	    struct registry_topic ***out, size_t *n);
void	registry_topic_list_free(struct registry_topic **v, size_t n);
enum reg_err registry_topic_delete(struct registry *reg, const char *tenant,
	    const char *topic);

/*
 * The scheduler's topic_info hook: 0 and *out filled; -1 when the topic is
 * gone (Redis has none and owes no rebuild); -2 when it cannot be told now
 * (Redis unreachable, or owed a rebuild, and no topic cached: a miss
 * cached before does not count).
 */
int	registry_topic_info(struct registry *reg, const char *tenant,
	    const char *topic, struct sched_topic_info *out);
/*
 * A topic read back from elsewhere (the journal) for the scheduler while
 * registry_topic_info() cannot tell: *out filled from its stored JSON
 * (registry_topic_json()), and the topic cached expired unless the cache
 * has it, so lookups that find Redis still without it are served it as
 * any stale entry.  0, or -1 when the JSON is unreadable.
 */
int	registry_topic_recall(struct registry *reg, const char *tenant,
	    const char *topic, const char *json, int64_t created_ms,
	    struct sched_topic_info *out);

/*
 * The stored form of a topic: JSON holding every setting and the signing
 * secret, not created_ms (kept apart).  The caller frees it.  The journal
 * keeps this text and registry_restore_topic() takes it back.
 */
char	*registry_topic_json(const struct registry_topic *t);
/*
 * A tenant's settings as the journal keeps them, and back (0, or -1).  A
 * setting the text lacks (one written before it existed) is 0: none.
 */
char	*registry_tenant_settings_json(int64_t max_pending,
	    int64_t max_in_flight);
int	registry_tenant_settings_parse(const char *json, int64_t *max_pending,
	    int64_t *max_in_flight);

/*
 * Rebuilding the registry after Redis lost its data (registry_restore.c).
 * Each call re-creates one record exactly as given unless Redis holds it
 * already (then it is left as it is); *created says which.  Idempotent.
 * A key or topic of a tenant Redis does not have is REG_ENOTFOUND.
 */
enum reg_err registry_restore_tenant(struct registry *reg, const char *name,
	    int64_t created_ms, int64_t max_pending, int64_t max_in_flight,
	    int *created);
enum reg_err registry_restore_key(struct registry *reg, const char *tenant,
	    const char *key_id, const char *hash_hex, int64_t created_ms,
	    int *created);
enum reg_err registry_restore_topic(struct registry *reg, const char *tenant,
	    const char *name, const char *json, int64_t created_ms,
	    int *created);

/*
 * Coordinating a rebuild among the instances sharing a Redis: a flag says
 * "Redis must be rebuilt from the journal" until a rebuild completes, and a
 * lock lets one instance do it while the others wait.  Both live in Redis,
 * so they vanish with its data (which is when a rebuild is needed anyway).
 */
struct registry_restore_state {
	int	 pending;	/* the flag is set */
	int	 schema;	/* the scheduler's schema marker is there */
	int64_t	 tenants;	/* tenants in the registry */
};

enum reg_err registry_restore_state(struct registry *reg,
	    struct registry_restore_state *out);
/*
 * *owed 1 when Redis is owed a rebuild from the journal: the schema marker
 * is gone (it lost its data; a rebuild writes the marker last) or the flag
 * is set.  What Redis says is missing meanwhile may come back.
 */
enum reg_err registry_rebuild_owed(struct registry *reg, int *owed);
/* Set the flag (why: a short reason kept in it). */
enum reg_err registry_restore_request(struct registry *reg, const char *why);
/*
 * Take the lock for holder (renew 0: *got 0 when another holds it, -1 when
 * no rebuild is owed, the flag being gone: taking the lock and clearing
 * the flag are each one script, so an instance that waited for another
 * cannot take the lock just freed and rebuild again), or renew it (renew
 * 1: *got 0 when it or the flag is gone, i.e. Redis lost its data again or
 * the lock timed out: start over).
 */
enum reg_err registry_restore_lock(struct registry *reg, const char *holder,
	    int64_t ttl_ms, int renew, int *got);
/* Clear the flag and the lock if holder still holds it (*done 1). */
enum reg_err registry_restore_done(struct registry *reg, const char *holder,
	    int *done);
/* Let go of the lock (the flag stays). */
enum reg_err registry_restore_unlock(struct registry *reg,
	    const char *holder);

#endif
