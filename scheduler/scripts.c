/*
 * scripts.c - running the delay core's Lua scripts by EVALSHA (see
 * scripts.h).  Each script's text is scheduler/scripts/lib.lua followed by
 * its own file, joined once at start.
 *
 * Key decision: the SHA1s come from SCRIPT LOAD, kept under a mutex; a
 * NOSCRIPT error loads the script again, on the node that said it, and
 * retries exactly once.  A script that fails to load is a bug in the scripts
 * and is logged as such.  A script goes to the node serving its first key
 * (conn.c routes it; on a single Redis that is always c).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/scripts.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define SHA_LEN		40
#define ARGV_MAX	64

struct sched_scripts {
	pthread_mutex_t	 lock;
	struct sched_pool *pool;	/* routes the calls; not owned */
	char		*text[SCRIPT_COUNT];
	char		 sha[SCRIPT_COUNT][SHA_LEN + 1];	/* under lock */
};

static const struct {
	const char	*name;
	const char	*src;
	int		 lib;
} script_src[SCRIPT_COUNT] = {
	[SCRIPT_PUSH] = { "push", sched_lua_push, 1 },
	[SCRIPT_CANCEL] = { "cancel", sched_lua_cancel, 1 },
	[SCRIPT_RESCHEDULE] = { "reschedule", sched_lua_reschedule, 1 },
	[SCRIPT_PROMOTE] = { "promote", sched_lua_promote, 1 },
	[SCRIPT_RESERVE] = { "reserve", sched_lua_reserve, 1 },
	[SCRIPT_FINISH] = { "finish", sched_lua_finish, 1 },
	[SCRIPT_RESTORE] = { "restore", sched_lua_restore, 1 },
	[SCRIPT_REDRIVE] = { "redrive", sched_lua_redrive, 1 },
	[SCRIPT_PURGE] = { "purge", sched_lua_purge, 1 },
	[SCRIPT_LEASE] = { "lease", sched_lua_lease, 0 },
	[SCRIPT_HEARTBEAT] = { "heartbeat", sched_lua_heartbeat, 1 },
	[SCRIPT_SCHEMA] = { "schema", sched_lua_schema, 0 },
	[SCRIPT_PUSH_MANY] = { "push_many", sched_lua_push_many, 1 },
	[SCRIPT_DROP] = { "drop", sched_lua_drop, 1 },
};

struct sched_scripts *
sched_scripts_new(struct sched_pool *pool)
{
	struct sched_scripts *sc = xcalloc(1, sizeof(*sc));
	int i;

	sc->pool = pool;
	pthread_mutex_init(&sc->lock, NULL);
	for (i = 0; i < SCRIPT_COUNT; i++)
		sc->text[i] = xasprintf("%s%s",
		    script_src[i].lib ? sched_lua_lib : "", script_src[i].src);
	return sc;
}

void
sched_scripts_free(struct sched_scripts *sc)
{
	int i;

	if (sc == NULL)
		return;
	for (i = 0; i < SCRIPT_COUNT; i++)
		free(sc->text[i]);
	pthread_mutex_destroy(&sc->lock);
	free(sc);
}

const char *
sched_script_name(enum sched_script id)
{
	if ((int)id < 0 || id >= SCRIPT_COUNT)
		return "unknown";
	return script_src[id].name;
}

/* SCRIPT LOAD; 0 with sha filled, or -1 (*io set on an I/O error). */
static int
script_load(struct sched_scripts *sc, redisContext *c, enum sched_script id,
    char sha[SHA_LEN + 1], int *io)
{
	redisReply *r;
	int rc = -1;

	r = redisCommand(c, "SCRIPT LOAD %s", sc->text[id]);
	if (r == NULL) {
		*io = 1;
		return -1;
	}
	sched_redis_count_reply(r);
	if (r->type == REDIS_REPLY_STRING && r->len == SHA_LEN) {
		memcpy(sha, r->str, SHA_LEN);
		sha[SHA_LEN] = '\0';
		pthread_mutex_lock(&sc->lock);
		memcpy(sc->sha[id], sha, SHA_LEN + 1);
		pthread_mutex_unlock(&sc->lock);
		rc = 0;
	} else {
		log_warnx("redis: loading script %s failed: %s",
		    script_src[id].name,
		    r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
	}
	freeReplyObject(r);
	return rc;
}

struct noscript {
	struct sched_scripts	*sc;
	enum sched_script	 id;
	char			*sha;
	int			 io;
};

/* A NOSCRIPT reply: loads the script on the node that gave it; 1, or 0. */
static int
noscript_fix(redisContext *ctx, const redisReply *r, void *arg)
{
	struct noscript *ns = arg;

	if (strncmp(r->str, "NOSCRIPT", 8) != 0)
		return 0;
	if (script_load(ns->sc, ctx, ns->id, ns->sha, &ns->io) == -1)
		return 0;
	return 1;
}

redisReply *
sched_script_run(struct sched_scripts *sc, redisContext *c,
    enum sched_script id, int nkeys, int nargs, const char **argv,
    const size_t *lens, int *broken)
{
	const char *av[ARGV_MAX + 3];
	size_t al[ARGV_MAX + 3];
	char sha[SHA_LEN + 1], nk[16];
	struct noscript ns;
	redisReply *r = NULL;
	int i, n, io = 0;

	*broken = 0;
	n = nkeys + nargs;
	if (n > ARGV_MAX || nkeys < 0 || nargs < 0)
		return NULL;
	pthread_mutex_lock(&sc->lock);
	memcpy(sha, sc->sha[id], sizeof(sha));
	pthread_mutex_unlock(&sc->lock);
	if (sha[0] == '\0' && script_load(sc, c, id, sha, &io) == -1) {
		*broken = io;
		return NULL;
	}

	snprintf(nk, sizeof(nk), "%d", nkeys);
	av[0] = "EVALSHA";
	al[0] = 7;
	av[1] = sha;
	al[1] = SHA_LEN;
	av[2] = nk;
	al[2] = strlen(nk);
	for (i = 0; i < n; i++) {
		av[i + 3] = argv[i];
		al[i + 3] = lens != NULL ? lens[i] : strlen(argv[i]);
	}
	ns.sc = sc;
	ns.id = id;
	ns.sha = sha;
	ns.io = 0;
	r = sched_pool_command_fix(sc->pool, c, broken, nkeys > 0 ? av[3] :
	    NULL, nkeys > 0 ? al[3] : 0, n + 3, av, al, noscript_fix, &ns);
	if (r == NULL)
		return NULL;
	if (r->type == REDIS_REPLY_ERROR)
		sched_log_script_err(script_src[id].name, r->str);
	return r;
}

/*
 * A script's error reply.  A Redis out of memory (OOM) or otherwise
 * refusing refuses every call alike: one line a second, with how many
 * were held back since.
 */
void
sched_log_script_err(const char *script, const char *err)
{
	static struct log_every every = LOG_EVERY_INIT;
	uint64_t held;

	if (log_every(&every, LOG_EVERY_US, &held))
		log_warnx("redis: script %s: %s (and %llu script error(s) "
		    "since the last such line)", script, err,
		    (unsigned long long)held);
}
