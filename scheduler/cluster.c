/*
 * cluster.c - the pure parts of talking to a Redis Cluster: the slot of a
 * key (CRC16 of its hash tag, as the Redis Cluster specification defines
 * it) and the reading of a MOVED or ASK redirection.
 *
 * Key decision: no I/O and no state here, so that the rules the routing in
 * conn.c depends on are unit tested against the specification's examples.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/conn.h"
#include "util/crypto.h"

int
sched_key_slot(const char *key, size_t len)
{
	const char *open, *close;

	/* The part between the first '{' and the next '}', when not empty. */
	open = memchr(key, '{', len);
	if (open != NULL) {
		close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
		if (close != NULL && close > open + 1)
			return crc16_xmodem(open + 1,
			    (size_t)(close - open - 1)) % SCHED_SLOTS;
	}
	return crc16_xmodem(key, len) % SCHED_SLOTS;
}

int
sched_redirect_parse(const char *err, size_t len, struct sched_redirect *out)
{
	const char *p, *end = err + len, *colon, *sp;
	char num[8], *e;
	size_t n, hlen;
	long v;

	if (len > 6 && memcmp(err, "MOVED ", 6) == 0) {
		out->ask = 0;
		p = err + 6;
	} else if (len > 4 && memcmp(err, "ASK ", 4) == 0) {
		out->ask = 1;
		p = err + 4;
	} else
		return 0;
	/* SLOT HOST:PORT; the host may be an IPv6 address, so its last ':'. */
	if ((sp = memchr(p, ' ', (size_t)(end - p))) == NULL)
		return 0;
	n = (size_t)(sp - p);
	if (n == 0 || n >= sizeof(num))
		return 0;
	memcpy(num, p, n);
	num[n] = '\0';
	errno = 0;
	v = strtol(num, &e, 10);
	if (errno != 0 || *e != '\0' || num[0] < '0' || num[0] > '9' ||
	    v < 0 || v >= SCHED_SLOTS)
		return 0;
	out->slot = (int)v;
	p = sp + 1;
	for (colon = NULL, sp = p; sp < end; sp++)
		if (*sp == ':')
			colon = sp;
	if (colon == NULL || colon == p)
		return 0;
	hlen = (size_t)(colon - p);
	if (hlen >= sizeof(out->host))
		return 0;
	n = (size_t)(end - colon - 1);
	if (n == 0 || n >= sizeof(num))
		return 0;
	memcpy(num, colon + 1, n);
	num[n] = '\0';
	errno = 0;
	v = strtol(num, &e, 10);
	if (errno != 0 || *e != '\0' || num[0] < '0' || num[0] > '9' ||
	    v < 1 || v > 65535)
		return 0;
	memcpy(out->host, p, hlen);
	out->host[hlen] = '\0';
	out->port = (int)v;
	return 1;
}
