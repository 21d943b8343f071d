/*
 * id.c - time-ordered job ids (see id.h for the layout).
 *
 * Key decision: the generator never sleeps.  Its state (last ms, last
 * sequence) sits behind one mutex; a clock that steps backwards is ignored
 * (the last ms is kept), and when the 4096 sequence numbers of a ms are used
 * up the generator borrows the next ms as its logical time instead of
 * waiting for the wall clock to reach it.  Ids therefore stay unique and
 * strictly increasing per process, at the cost of running a little ahead of
 * the wall clock during a burst of more than 4096 ids per ms; the wall clock
 * catches up as soon as the burst ends.
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>

#include "util/id.h"

#define ID_MS_BITS	44
#define ID_NODE_BITS	14
#define ID_SEQ_BITS	12
#define ID_SHARD_BITS	10

#define ID_MS_MASK	((UINT64_C(1) << ID_MS_BITS) - 1)
#define ID_SEQ_MAX	((1u << ID_SEQ_BITS) - 1)

/* Crockford base32: digits and uppercase letters without I, L, O, U. */
static const char id_alphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

static pthread_mutex_t	id_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t		id_node;	/* read and written atomically */
static int64_t		id_last_ms = -1;	/* under id_lock */
static uint32_t		id_last_seq;		/* under id_lock */

void
id_set_node(uint32_t node)
{
	__atomic_store_n(&id_node, node & ID_MAX_NODE, __ATOMIC_RELAXED);
}

/*
 * The 80 bits are kept as hi (the top 16 bits) and lo (the low 64); the
 * string's character i holds bits 79-5i .. 75-5i.
 */
void
id_format(const struct id_parts *parts, char out[ID_LEN + 1])
{
	uint64_t ms = (uint64_t)parts->ms & ID_MS_MASK;
	uint64_t hi, lo, rest;
	int i;

	/* bits 79..36: ms; 35..22: node; 21..10: seq; 9..0: shard */
	rest = (uint64_t)(parts->node & ID_MAX_NODE) << 22 |
	    (uint64_t)(parts->seq & ID_SEQ_MAX) << 10 |
	    (uint64_t)(parts->shard & ID_MAX_SHARD);
	hi = ms >> 28;
	lo = (ms & ((UINT64_C(1) << 28) - 1)) << 36 | rest;

	for (i = ID_LEN - 1; i >= 0; i--) {
		out[i] = id_alphabet[lo & 0x1f];
		lo = lo >> 5 | (hi & 0x1f) << 59;
		hi >>= 5;
	}
	out[ID_LEN] = '\0';
}

/*
 * The 5-bit value of an id character, or -1 (lowercase and I L O U too):
 * a table, as ids are parsed several times per job.
 */
#define V(c, v)	[(unsigned char)(c)] = (v) + 1
static const signed char id_values[256] = {
	V('0', 0), V('1', 1), V('2', 2), V('3', 3), V('4', 4), V('5', 5),
	V('6', 6), V('7', 7), V('8', 8), V('9', 9), V('A', 10), V('B', 11),
	V('C', 12), V('D', 13), V('E', 14), V('F', 15), V('G', 16),
	V('H', 17), V('J', 18), V('K', 19), V('M', 20), V('N', 21),
	V('P', 22), V('Q', 23), V('R', 24), V('S', 25), V('T', 26),
	V('V', 27), V('W', 28), V('X', 29), V('Y', 30), V('Z', 31),
};
#undef V

static int
id_char_value(char ch)
{
	return id_values[(unsigned char)ch] - 1;
}

int
id_parse(const char *s, struct id_parts *parts)
{
	uint64_t hi = 0, lo = 0;
	int i, v;

	if (s == NULL)
		return -1;
	for (i = 0; i < ID_LEN; i++) {
		if (s[i] == '\0' || (v = id_char_value(s[i])) == -1)
			return -1;
		hi = hi << 5 | lo >> 59;
		lo = lo << 5 | (uint64_t)v;
	}
	if (s[ID_LEN] != '\0')
		return -1;
	/* 16 characters are exactly 80 bits, so hi never exceeds 16 bits. */
	if (parts != NULL) {
		parts->ms = (int64_t)((hi & 0xffff) << 28 | lo >> 36);
		parts->node = (uint32_t)(lo >> 22) & ID_MAX_NODE;
		parts->seq = (uint32_t)(lo >> 10) & ID_SEQ_MAX;
		parts->shard = (uint32_t)lo & ID_MAX_SHARD;
	}
	return 0;
}

void
id_generate(uint32_t shard, int64_t now_ms, char out[ID_LEN + 1])
{
	struct id_parts parts;
	int64_t ms;
	uint32_t seq;

	if (now_ms < 0)
		now_ms = 0;
	pthread_mutex_lock(&id_lock);
	if (now_ms > id_last_ms) {
		ms = now_ms;
		seq = 0;
	} else if (id_last_seq < ID_SEQ_MAX) {
		/* Same ms, or the clock went back: stay on the last ms. */
		ms = id_last_ms;
		seq = id_last_seq + 1;
	} else {
		/* This ms is used up: borrow the next one. */
		ms = id_last_ms + 1;
		seq = 0;
	}
	id_last_ms = ms;
	id_last_seq = seq;
	pthread_mutex_unlock(&id_lock);

	parts.ms = ms;
	parts.node = __atomic_load_n(&id_node, __ATOMIC_RELAXED);
	parts.seq = seq;
	parts.shard = shard & ID_MAX_SHARD;
	id_format(&parts, out);
}
