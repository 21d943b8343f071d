/*
 * scripts.h - the Lua scripts of the delay core (scheduler/scripts/NAME.lua,
 * compiled into the binary by scheduler/local.mk) and running them by
 * EVALSHA.
 *
 * Key decision: the SHA1 of each script is learnt from SCRIPT LOAD the first
 * time it is needed (no SHA1 code in the process), and a NOSCRIPT reply
 * (Redis restarted, SCRIPT FLUSH, a failover) loads it again and retries
 * once, so callers never see the script cache.
 */
#ifndef RETRYD_SCHEDULER_SCRIPTS_H
#define RETRYD_SCHEDULER_SCRIPTS_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "scheduler/conn.h"

enum sched_script {
	SCRIPT_PUSH = 0,
	SCRIPT_CANCEL,
	SCRIPT_RESCHEDULE,
	SCRIPT_PROMOTE,
	SCRIPT_RESERVE,
	SCRIPT_FINISH,
	SCRIPT_RESTORE,
	SCRIPT_REDRIVE,
	SCRIPT_PURGE,
	SCRIPT_LEASE,
	SCRIPT_HEARTBEAT,
	SCRIPT_SCHEMA,
	SCRIPT_PUSH_MANY,
	SCRIPT_DROP,
	SCRIPT_COUNT
};

/* The sources, generated into scripts_gen.c from the .lua files. */
extern const char sched_lua_lib[];
extern const char sched_lua_push[];
extern const char sched_lua_push_many[];
extern const char sched_lua_cancel[];
extern const char sched_lua_reschedule[];
extern const char sched_lua_promote[];
extern const char sched_lua_reserve[];
extern const char sched_lua_finish[];
extern const char sched_lua_restore[];
extern const char sched_lua_redrive[];
extern const char sched_lua_purge[];
extern const char sched_lua_lease[];
extern const char sched_lua_heartbeat[];
extern const char sched_lua_schema[];
extern const char sched_lua_drop[];

struct sched_scripts;

/* Calls go through pool (kept, not owned), to the node of their key. */
struct sched_scripts *sched_scripts_new(struct sched_pool *pool);
void	sched_scripts_free(struct sched_scripts *sc);
const char *sched_script_name(enum sched_script id);
/* Logs a script's error reply, at most one line a second. */
void	sched_log_script_err(const char *script, const char *err);
/*
 * Runs script id with nkeys keys then nargs arguments from argv (lens[i]
 * bytes each; lens NULL: NUL-terminated).  The reply is the caller's (an
 * error reply included, logged); NULL with *broken = 1 on an I/O error (the
 * context is unusable), NULL with *broken = 0 when the script cannot load.
 * The call runs on the node serving the first key (c when that is its
 * node); a NOSCRIPT reply loads the script there and runs it once more.
 */
redisReply *sched_script_run(struct sched_scripts *sc, redisContext *c,
	    enum sched_script id, int nkeys, int nargs, const char **argv,
	    const size_t *lens, int *broken);

#endif
