/*
 * registry_int.h - what the registry's own files share (registry.c and
 * registry_restore.c) and nothing else includes: one Redis command through
 * the registry's pool.
 *
 * Key decision: the registry's Redis access stays in one function, so every
 * file of the registry logs, classifies and pools errors alike.
 */
#ifndef RETRYD_SCHEDULER_REGISTRY_INT_H
#define RETRYD_SCHEDULER_REGISTRY_INT_H

#include <stdarg.h>

#include <hiredis/hiredis.h>

#include "scheduler/registry.h"

/* Every registry key starts with this (one hash tag, one slot). */
#define REG_KEY_PREFIX	"rd:{registry}:"

/*
 * One command on a pooled connection: the reply (the caller frees it), or
 * NULL with *err set (an error reply is logged and is REG_EINTERNAL).
 */
redisReply *registry_vcmd(struct registry *reg, enum reg_err *err,
	    const char *fmt, va_list ap);
redisReply *registry_cmd(struct registry *reg, enum reg_err *err,
	    const char *fmt, ...);

#endif
