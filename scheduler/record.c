/*
 * record.c - the scheduler's names and bytes in Redis: name checks, id keys,
 * key names, and the C side of the packed job record and attempt log that
 * scheduler/scripts/lib.lua reads and writes (docs/internals/REDIS-SCHEMA.md).
 *
 * Key decision: memory per pending job is the budget that shapes this file.
 * A generated id is stored as an 11-byte key (0x01 and its 80 bits) instead
 * of its 16 characters, and the record is binary with every optional field
 * (priority, attempts, creation time, bizkey, headers, schedule, time to
 * run, version, reservation) present only when set; the creation time of a
 * generated id is its own timestamp and is not stored at all.  A
 * client-given id is stored as its text: its characters never include
 * 0x01, so the two forms never collide.  The flags byte is full, so the
 * version's flag is the state byte's high bit.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/sched_int.h"
#include "util/xmalloc.h"

#define F_PRI		0x01
#define F_ATT		0x02
#define F_CRE		0x04
#define F_TTR		0x08
#define F_BIZ		0x10
#define F_HDR		0x20
#define F_SCH		0x40
#define F_RES		0x80
/* In the state byte, whose low bits hold the state: a version is stored. */
#define F_VER		0x80

#define IDKEY_PACKED	0x01
#define IDKEY_LEN	11
#define TIME_MAX_MS	((INT64_C(1) << 42) - 1)

int
sched_valid_tenant(const char *t)
{
	size_t i;

	if (t == NULL)
		return 0;
	for (i = 0; t[i] != '\0'; i++) {
		char c = t[i];

		if (i >= 64 || !((c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return 0;
	}
	return i > 0;
}

int
sched_valid_topic(const char *t)
{
	size_t i;

	if (t == NULL)
		return 0;
	for (i = 0; t[i] != '\0'; i++) {
		char c = t[i];

		if (i >= 128 || !((c >= 'a' && c <= 'z') ||
		    (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return i > 0;
}

int
sched_valid_client_id(const char *id)
{
	size_t i;

	if (id == NULL)
		return 0;
	for (i = 0; id[i] != '\0'; i++) {
		char c = id[i];

		if (i >= 64 || !((c >= 'a' && c <= 'z') ||
		    (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '.' || c == '_' || c == ':' || c == '-'))
			return 0;
	}
	return i > 0;
}

int
sched_idkey(const char *id, char out[SCHED_IDKEY_MAX], size_t *len)
{
	struct id_parts p;
	uint64_t hi, lo;
	int i;

	if (id_parse(id, &p) == 0) {
		hi = (uint64_t)p.ms >> 28;
		lo = ((uint64_t)p.ms & ((UINT64_C(1) << 28) - 1)) << 36 |
		    (uint64_t)p.node << 22 | (uint64_t)p.seq << 10 |
		    (uint64_t)p.shard;
		out[0] = IDKEY_PACKED;
		out[1] = (char)(hi >> 8);
		out[2] = (char)hi;
		for (i = 0; i < 8; i++)
			out[3 + i] = (char)(lo >> (56 - 8 * i));
		*len = IDKEY_LEN;
		return 0;
	}
	if (!sched_valid_client_id(id))
		return -1;
	*len = strlen(id);
	memcpy(out, id, *len);
	return 0;
}

int
sched_idkey_text(const char *k, size_t len, char *out)
{
	const unsigned char *u = (const unsigned char *)k;
	struct id_parts p;
	uint64_t hi, lo = 0;
	int i;

	if (len == IDKEY_LEN && u[0] == IDKEY_PACKED) {
		hi = (uint64_t)u[1] << 8 | u[2];
		for (i = 0; i < 8; i++)
			lo = lo << 8 | u[3 + i];
		p.ms = (int64_t)(hi << 28 | lo >> 36);
		p.node = (uint32_t)(lo >> 22) & ID_MAX_NODE;
		p.seq = (uint32_t)(lo >> 10) & 0xfff;
		p.shard = (uint32_t)lo & ID_MAX_SHARD;
		id_format(&p, out);
		return 0;
	}
	if (len == 0 || len > 64)
		return -1;
	memcpy(out, k, len);
	out[len] = '\0';
	return 0;
}

/* Appends s to out at *n, never past SCHED_KEY_MAX - 1 (cut as snprintf). */
static void
key_put(char *out, size_t *n, const char *s)
{
	size_t len = strlen(s);

	if (len > SCHED_KEY_MAX - 1 - *n)
		len = SCHED_KEY_MAX - 1 - *n;
	memcpy(out + *n, s, len);
	*n += len;
}

/*
 * "rd:{TENANT:SHARD}:SUFFIX[:TOPIC]".  Built by hand, not by snprintf: a
 * script call names up to 11 keys and a reserve+ack about 18, and
 * snprintf's format parsing was most of the cost.
 */
void
sched_key(char out[SCHED_KEY_MAX], const char *tenant, int shard,
    const char *suffix, const char *topic)
{
	char num[16], *d = num + sizeof(num) - 1;
	unsigned int v = shard < 0 ? 0u - (unsigned int)shard :
	    (unsigned int)shard;
	size_t n = 0;

	*d = '\0';
	do {
		*--d = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	if (shard < 0)
		*--d = '-';
	key_put(out, &n, "rd:{");
	key_put(out, &n, tenant);
	key_put(out, &n, ":");
	key_put(out, &n, d);
	key_put(out, &n, "}:");
	key_put(out, &n, suffix);
	if (topic != NULL) {
		key_put(out, &n, ":");
		key_put(out, &n, topic);
	}
	out[n] = '\0';
}

void
sched_tag(char out[SCHED_KEY_MAX], const char *tenant, int shard)
{
	snprintf(out, SCHED_KEY_MAX, "%s:%d", tenant, shard);
}

/* ---- big-endian fields --------------------------------------------------- */

int
sched_put_be(struct buf *b, uint64_t v, int n)
{
	unsigned char tmp[8];
	int i;

	for (i = 0; i < n; i++)
		tmp[i] = (unsigned char)(v >> (8 * (n - 1 - i)));
	return buf_append(b, tmp, (size_t)n);
}

int
sched_put_str(struct buf *b, const char *s, size_t len, int lenbytes)
{
	if (sched_put_be(b, len, lenbytes) == -1)
		return -1;
	return len > 0 ? buf_append(b, s, len) : 0;
}

struct reader {
	const unsigned char	*p;
	size_t			 left;
	int			 bad;
};

static uint64_t
get_be(struct reader *r, int n)
{
	uint64_t v = 0;
	int i;

	if (r->bad || r->left < (size_t)n) {
		r->bad = 1;
		return 0;
	}
	for (i = 0; i < n; i++)
		v = v << 8 | r->p[i];
	r->p += n;
	r->left -= (size_t)n;
	return v;
}

/* A copy of the next len bytes (NUL-terminated), or NULL when bad. */
static char *
get_bytes(struct reader *r, size_t len)
{
	char *s;

	if (r->bad || r->left < len) {
		r->bad = 1;
		return NULL;
	}
	s = xmalloc(len + 1);
	memcpy(s, r->p, len);
	s[len] = '\0';
	r->p += len;
	r->left -= len;
	return s;
}

/* ---- the job record ------------------------------------------------------ */

int
sched_rec_encode(const struct sched_job *job, struct buf *b)
{
	struct id_parts ip;
	size_t tl, bl = 0, hl = 0, sl = 0;
	int flags = 0, store_created;

	tl = job->topic != NULL ? strlen(job->topic) : 0;
	if (job->bizkey != NULL)
		bl = strlen(job->bizkey);
	if (job->headers_json != NULL)
		hl = strlen(job->headers_json);
	if (job->schedule != NULL)
		sl = strlen(job->schedule);
	if (tl == 0 || tl > 255 || bl > SCHED_BIZKEY_MAX || sl > 65535 ||
	    hl > UINT32_MAX || job->priority < -1000 || job->priority > 1000 ||
	    job->due_ms < 0 || job->due_ms > TIME_MAX_MS ||
	    job->created_ms < 0 || job->created_ms > TIME_MAX_MS ||
	    job->ttr_ms < 0 || job->ttr_ms > TIME_MAX_MS ||
	    job->attempts < 0 || job->version < 0 ||
	    job->version > SCHED_VERSION_MAX || (int)job->state < 0 ||
	    job->state >= SCHED_NSTATES || job->state == SCHED_IN_FLIGHT) {
		errno = EINVAL;
		return -1;
	}
	store_created = id_parse(job->id, &ip) != 0 ||
	    ip.ms != job->created_ms;
	if (job->priority != 0)
		flags |= F_PRI;
	if (job->attempts != 0)
		flags |= F_ATT;
	if (store_created)
		flags |= F_CRE;
	if (job->ttr_ms != 0)
		flags |= F_TTR;
	if (job->bizkey != NULL)
		flags |= F_BIZ;
	if (job->headers_json != NULL)
		flags |= F_HDR;
	if (job->schedule != NULL)
		flags |= F_SCH;

	buf_reset(b);
	if (sched_put_be(b, (uint64_t)job->state |
	    (job->version != 0 ? F_VER : 0), 1) == -1 ||
	    sched_put_be(b, (uint64_t)flags, 1) == -1 ||
	    sched_put_be(b, (uint64_t)job->due_ms, 6) == -1 ||
	    sched_put_str(b, job->topic, tl, 1) == -1)
		return -1;
	if ((flags & F_PRI) && sched_put_be(b,
	    (uint64_t)(uint16_t)(int16_t)job->priority, 2) == -1)
		return -1;
	if ((flags & F_ATT) && sched_put_be(b,
	    (uint64_t)(job->attempts > 65535 ? 65535 : job->attempts),
	    2) == -1)
		return -1;
	if ((flags & F_CRE) &&
	    sched_put_be(b, (uint64_t)job->created_ms, 6) == -1)
		return -1;
	if ((flags & F_TTR) && sched_put_be(b, (uint64_t)job->ttr_ms, 6) == -1)
		return -1;
	if ((flags & F_BIZ) && sched_put_str(b, job->bizkey, bl, 2) == -1)
		return -1;
	if ((flags & F_HDR) && sched_put_str(b, job->headers_json, hl, 4) == -1)
		return -1;
	if ((flags & F_SCH) && sched_put_str(b, job->schedule, sl, 2) == -1)
		return -1;
	if (job->version != 0 &&
	    sched_put_be(b, (uint64_t)job->version, 6) == -1)
		return -1;
	if (job->body_len > 0 && buf_append(b, job->body, job->body_len) == -1)
		return -1;
	return 0;
}

struct sched_job *
sched_rec_decode(const char *tenant, int shard, const char *idk,
    size_t idklen, const char *rec, size_t len)
{
	struct reader r = { (const unsigned char *)rec, len, 0 };
	struct sched_job *job;
	struct id_parts ip;
	size_t tl;
	int flags, st;

	job = xcalloc(1, sizeof(*job));
	if (sched_idkey_text(idk, idklen, job->id) == -1)
		goto bad;
	job->tenant = xstrdup(tenant);
	job->shard = shard;
	st = (int)get_be(&r, 1);
	flags = (int)get_be(&r, 1);
	job->due_ms = (int64_t)get_be(&r, 6);
	tl = (size_t)get_be(&r, 1);
	job->topic = get_bytes(&r, tl);
	if (r.bad || (st & ~F_VER) >= SCHED_NSTATES)
		goto bad;
	job->state = (enum sched_state)(st & ~F_VER);
	if (flags & F_PRI)
		job->priority = (int16_t)(uint16_t)get_be(&r, 2);
	if (flags & F_ATT)
		job->attempts = (int)get_be(&r, 2);
	if (flags & F_CRE)
		job->created_ms = (int64_t)get_be(&r, 6);
	else if (id_parse(job->id, &ip) == 0)
		job->created_ms = ip.ms;
	if (flags & F_TTR)
		job->ttr_ms = (int64_t)get_be(&r, 6);
	if (flags & F_BIZ)
		job->bizkey = get_bytes(&r, (size_t)get_be(&r, 2));
	if (flags & F_HDR)
		job->headers_json = get_bytes(&r, (size_t)get_be(&r, 4));
	if (flags & F_SCH)
		job->schedule = get_bytes(&r, (size_t)get_be(&r, 2));
	if (st & F_VER)
		job->version = (int64_t)get_be(&r, 6);
	if (flags & F_RES) {
		if (r.left < SCHED_TOKEN_LEN)
			goto bad;
		memcpy(job->token, r.p, SCHED_TOKEN_LEN);
		job->token[SCHED_TOKEN_LEN] = '\0';
		r.p += SCHED_TOKEN_LEN;
		r.left -= SCHED_TOKEN_LEN;
		job->deadline_ms = (int64_t)get_be(&r, 6);
	}
	if (r.bad)
		goto bad;
	job->body_len = r.left;
	job->body = get_bytes(&r, r.left);
	return job;
bad:
	sched_job_free(job);
	return NULL;
}

/* ---- the attempt log ----------------------------------------------------- */

void
sched_attempt_encode(const struct sched_attempt *a, int64_t at_ms,
    struct buf *b)
{
	size_t el = 0, xl = 0;
	int64_t lat;
	int st;

	buf_reset(b);
	if (a != NULL && a->error != NULL)
		el = strlen(a->error);
	if (el > SCHED_ERROR_MAX)
		el = SCHED_ERROR_MAX;
	if (a != NULL && a->excerpt != NULL)
		xl = a->excerpt_len;
	if (xl > SCHED_EXCERPT_MAX)
		xl = SCHED_EXCERPT_MAX;
	if (a != NULL && a->at_ms > 0)
		at_ms = a->at_ms;
	if (at_ms < 0 || at_ms > TIME_MAX_MS)
		at_ms = 0;
	st = a != NULL ? a->status : 0;
	if (st < 0 || st > 65535)
		st = 0;
	lat = a != NULL ? a->latency_ms : 0;
	if (lat < 0)
		lat = 0;
	if (lat > UINT32_MAX)
		lat = UINT32_MAX;
	(void)sched_put_be(b, (uint64_t)at_ms, 6);
	(void)sched_put_be(b, (uint64_t)st, 2);
	(void)sched_put_be(b, (uint64_t)lat, 4);
	(void)sched_put_str(b, el ? a->error : NULL, el, 2);
	(void)sched_put_str(b, xl ? a->excerpt : NULL, xl, 2);
}

void
sched_attempts_free(struct sched_attempt *a, size_t n)
{
	size_t i;

	if (a == NULL)
		return;
	for (i = 0; i < n; i++) {
		free(a[i].error);
		free(a[i].excerpt);
	}
	free(a);
}

int
sched_attlog_decode(const char *s, size_t len, struct sched_attempt **out,
    size_t *n)
{
	struct reader r = { (const unsigned char *)s, len, 0 };
	struct sched_attempt *v = NULL, *a;
	size_t nv = 0, l;

	while (r.left > 0 && !r.bad) {
		v = xreallocarray(v, nv + 1, sizeof(*v));
		a = &v[nv++];
		memset(a, 0, sizeof(*a));
		a->at_ms = (int64_t)get_be(&r, 6);
		a->status = (int)get_be(&r, 2);
		a->latency_ms = (int64_t)get_be(&r, 4);
		l = (size_t)get_be(&r, 2);
		if (l > 0)
			a->error = get_bytes(&r, l);
		l = (size_t)get_be(&r, 2);
		if (l > 0) {
			a->excerpt = get_bytes(&r, l);
			a->excerpt_len = l;
		}
	}
	if (r.bad) {
		sched_attempts_free(v, nv);
		return -1;
	}
	*out = v;
	*n = nv;
	return 0;
}

void
sched_job_free(struct sched_job *job)
{
	if (job == NULL)
		return;
	free(job->tenant);
	free(job->topic);
	free(job->bizkey);
	free(job->body);
	free(job->headers_json);
	free(job->schedule);
	sched_attempts_free(job->attempt_log, job->nattempt_log);
	free(job);
}
