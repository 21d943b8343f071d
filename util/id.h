/*
 * id.h - job ids: unique across instances, sorted by creation time, and
 * carrying the job's shard so any instance finds a job from its id alone.
 *
 * An id is 80 bits written as 16 characters of Crockford base32 (0-9A-Z
 * without I L O U), most significant first, so ids sort as strings in creation
 * order:  44 bits Unix ms | 14 bits node | 12 bits sequence | 10 bits shard.
 * The node number is unique among running instances (handed out by the
 * scheduler from Redis at start-up); the sequence counts within one ms and the
 * generator moves on to the next ms when it runs out (without waiting), and
 * never goes backwards when the wall clock does.
 */
#ifndef RETRYD_UTIL_ID_H
#define RETRYD_UTIL_ID_H

#include <stdint.h>

#define ID_LEN		16		/* characters, without the NUL */
#define ID_MAX_NODE	16383
#define ID_MAX_SHARD	1023

struct id_parts {
	int64_t		ms;
	uint32_t	node;
	uint32_t	seq;
	uint32_t	shard;
};

/* Set this process's node number (0..ID_MAX_NODE); thread-safe. */
void	id_set_node(uint32_t node);
/*
 * Make a new id for the given shard (0..ID_MAX_SHARD) into out[ID_LEN + 1].
 * now_ms is the caller's clock reading (clock_wall_ms()).  Thread-safe.
 */
void	id_generate(uint32_t shard, int64_t now_ms, char out[ID_LEN + 1]);
/* 0 and fills parts when s is a well-formed id; -1 otherwise. */
int	id_parse(const char *s, struct id_parts *parts);
/* Encode parts (fields already in range) into out[ID_LEN + 1]. */
void	id_format(const struct id_parts *parts, char out[ID_LEN + 1]);

#endif
