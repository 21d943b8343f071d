/*
 * query.c - the scheduler's reads: a job with its attempt log, counts per
 * state, the dead letters of a topic newest first, which shards hold a
 * topic's best ready jobs (reading only the shards heads.c does not know),
 * a bizkey's job (one, or many in two round trips).  Plain commands, no
 * scripts: a read needs no atomicity beyond one command's.
 *
 * Key decision: a read that spans a tenant's shards is one pipeline of one
 * command per shard (one round trip), merged here: counts are summed, the
 * dead letters are merged by (dead time, id key) descending with a cursor
 * that names the last one returned, ready heads are ordered by their score.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/sched_int.h"
#include "util/crypto.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define DEAD_LIST_MAX	1000

/*
 * Sends n commands (argv/lens per command; each names its key second) and
 * reads the n replies into out[]; SCHED_OK, or an error with every reply
 * freed.  On a cluster, one pipeline per node.
 */
static enum sched_err
pipeline(struct sched *s, redisContext *c, int n, int argc,
    const char *const *argv, const size_t *lens, redisReply **out,
    int *broken)
{
	struct sched_pipe *q = sched_pipe_new(s->pool, c);
	const char **a;
	const size_t *l;
	enum sched_err e = SCHED_OK;
	void *rep;
	int i, j;

	for (i = 0; i < n; i++) {
		a = (const char **)argv + (size_t)i * (size_t)argc;
		l = lens + (size_t)i * (size_t)argc;
		if (sched_pipe_append_argv(q, a[1], l[1], argc, a, l) == -1) {
			*broken = 1;
			e = SCHED_EUNAVAIL;
			goto out;
		}
	}
	for (i = 0; i < n; i++) {
		if (sched_pipe_getreply(q, &rep) != REDIS_OK) {
			for (j = 0; j < i; j++)
				freeReplyObject(out[j]);
			*broken = 1;
			log_warnx("redis: %s", c->errstr);
			e = SCHED_EUNAVAIL;
			goto out;
		}
		out[i] = rep;
	}
out:
	sched_pipe_free(q);
	return e;
}

/*
 * Command i of a pipeline() of three-word commands: cmd key arg (arg is
 * arglen bytes).  key and arg are borrowed.
 */
static void
cmd3(const char **argv, size_t *lens, size_t i, const char *cmd,
    const char *key, const char *arg, size_t arglen)
{
	argv[3 * i] = cmd;
	lens[3 * i] = strlen(cmd);
	argv[3 * i + 1] = key;
	lens[3 * i + 1] = strlen(key);
	argv[3 * i + 2] = arg;
	lens[3 * i + 2] = arglen;
}

static void
free_replies(redisReply **r, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (r[i] != NULL)
			freeReplyObject(r[i]);
}

/* The job at idk in shard, with its log; ENOTFOUND when absent. */
static enum sched_err
fetch(struct sched *s, redisContext *c, const char *tenant, int shard,
    const char *idk, size_t idklen, int want_log, struct sched_job **out,
    int *broken)
{
	char kj[SCHED_KEY_MAX], ka[SCHED_KEY_MAX];
	const char *argv[6];
	size_t lens[6];
	redisReply *r[2] = { NULL, NULL };
	struct sched_job *job;
	enum sched_err e;
	int n = want_log ? 2 : 1;

	sched_key(kj, tenant, shard, "j", NULL);
	sched_key(ka, tenant, shard, "a", NULL);
	argv[0] = argv[3] = "HGET";
	lens[0] = lens[3] = 4;
	argv[1] = kj;
	lens[1] = strlen(kj);
	argv[4] = ka;
	lens[4] = strlen(ka);
	argv[2] = argv[5] = idk;
	lens[2] = lens[5] = idklen;
	if ((e = pipeline(s, c, n, 3, argv, lens, r, broken)) != SCHED_OK)
		return e;
	if (r[0]->type == REDIS_REPLY_NIL) {
		e = SCHED_ENOTFOUND;
		goto out;
	}
	if (r[0]->type != REDIS_REPLY_STRING) {
		e = sched_reply_err(c, r[0], broken, "HGET");
		goto out;
	}
	job = sched_rec_decode(tenant, shard, idk, idklen, r[0]->str,
	    r[0]->len);
	if (job == NULL) {
		log_warnx("redis: a malformed job record in %s", kj);
		e = SCHED_EINTERNAL;
		goto out;
	}
	if (want_log && r[1]->type == REDIS_REPLY_STRING &&
	    sched_attlog_decode(r[1]->str, r[1]->len, &job->attempt_log,
	    &job->nattempt_log) == -1)
		log_warnx("redis: a malformed attempt log in %s", ka);
	*out = job;
out:
	free_replies(r, n);
	return e;
}

enum sched_err
sched_q_job(struct sched *s, redisContext *c, const char *tenant,
    const char *id, int want_log, struct sched_job **out, int *broken)
{
	char idk[SCHED_IDKEY_MAX], kj[SCHED_KEY_MAX];
	const char **argv = NULL;
	size_t *lens = NULL, idklen;
	redisReply **r = NULL;
	struct id_parts ip;
	enum sched_err e;
	int first, n, i, found = -1;

	*out = NULL;
	if (!sched_valid_tenant(tenant) || sched_idkey(id, idk, &idklen) == -1)
		return SCHED_ENOTFOUND;
	first = sched_shard_of(s, id);
	e = fetch(s, c, tenant, first, idk, idklen, want_log, out, broken);
	if (e != SCHED_ENOTFOUND ||
	    (id_parse(id, &ip) == 0 && (int)ip.shard < s->cfg.shards))
		return e;

	/* A client-given id with a bizkey lives in its bizkey's shard. */
	n = s->cfg.shards;
	argv = xcalloc((size_t)n * 3, sizeof(*argv));
	lens = xcalloc((size_t)n * 3, sizeof(*lens));
	r = xcalloc((size_t)n, sizeof(*r));
	for (i = 0; i < n; i++) {
		sched_key(kj, tenant, i, "j", NULL);
		cmd3(argv, lens, (size_t)i, "HEXISTS", xstrdup(kj), idk,
		    idklen);
	}
	e = pipeline(s, c, n, 3, argv, lens, r, broken);
	if (e == SCHED_OK) {
		for (i = 0; i < n; i++)
			if (found < 0 && i != first &&
			    r[i]->type == REDIS_REPLY_INTEGER &&
			    r[i]->integer == 1)
				found = i;
		free_replies(r, n);
		e = found < 0 ? SCHED_ENOTFOUND : fetch(s, c, tenant, found,
		    idk, idklen, want_log, out, broken);
	}
	for (i = 0; i < n; i++)
		free((char *)argv[3 * i + 1]);
	free(argv);
	free(lens);
	free(r);
	return e;
}

/* Field pos of an HMGET reply when it holds a record, else NULL. */
static redisReply *
hmget_field(const redisReply *r, size_t pos)
{
	if (pos >= r->elements || r->element[pos]->type != REDIS_REPLY_STRING)
		return NULL;
	return r->element[pos];
}

enum sched_err
sched_q_jobs(struct sched *s, redisContext *c, const char *const *tenants,
    const char *const *ids, size_t n, struct sched_job **out, int *broken)
{
	char kj[SCHED_KEY_MAX], (*idk)[SCHED_IDKEY_MAX];
	const char **tv, **argv;
	size_t *idklen, *ti, *pos, *lens, nt = 0, i, t, m;
	struct sched_pipe *q;
	redisReply **r, **rv, *e1;
	struct id_parts ip;
	enum sched_err e = SCHED_OK;
	int shards = s->cfg.shards, sh, k, nr = 0;

	idk = xcalloc(n, sizeof(*idk));
	idklen = xcalloc(n, sizeof(*idklen));
	ti = xcalloc(n, sizeof(*ti));
	pos = xcalloc(n, sizeof(*pos));
	tv = xcalloc(n, sizeof(*tv));
	argv = xcalloc(n + 2, sizeof(*argv));
	lens = xcalloc(n + 2, sizeof(*lens));
	/* The ids each tenant names, in order: HMGET fields pos[i]. */
	for (i = 0; i < n; i++) {
		out[i] = NULL;
		ti[i] = SIZE_MAX;
		if (!sched_valid_tenant(tenants[i]) ||
		    sched_idkey(ids[i], idk[i], &idklen[i]) == -1)
			continue;
		for (t = 0; t < nt && strcmp(tv[t], tenants[i]) != 0; t++)
			;
		if (t == nt)
			tv[nt++] = tenants[i];
		ti[i] = t;
	}
	r = xcalloc(nt * (size_t)shards + 1, sizeof(*r));
	q = sched_pipe_new(s->pool, c);
	for (t = 0; t < nt; t++) {
		argv[0] = "HMGET";
		lens[0] = 5;
		for (i = 0, m = 2; i < n; i++)
			if (ti[i] == t) {
				pos[i] = m - 2;
				argv[m] = idk[i];
				lens[m++] = idklen[i];
			}
		for (sh = 0; sh < shards; sh++) {
			sched_key(kj, tv[t], sh, "j", NULL);
			argv[1] = kj;
			lens[1] = strlen(kj);
			if (sched_pipe_append_argv(q, kj, lens[1], (int)m, argv,
			    lens) == -1) {
				*broken = 1;
				e = SCHED_EUNAVAIL;
				goto out;
			}
		}
	}
	/* Every reply is read, an error one too: none is left on c. */
	for (nr = 0; nr < (int)nt * shards; nr++)
		if (sched_pipe_getreply(q, (void **)&r[nr]) != REDIS_OK) {
			*broken = 1;
			log_warnx("redis: %s", c->errstr);
			e = SCHED_EUNAVAIL;
			goto out;
		}
	for (k = 0; k < nr; k++)
		if (r[k]->type != REDIS_REPLY_ARRAY) {
			e = sched_reply_err(c, r[k], broken, "HMGET");
			goto out;
		}
	/* Each id where sched_q_job() finds it: its shard, then any. */
	for (i = 0; i < n; i++) {
		if (ti[i] == SIZE_MAX)
			continue;
		rv = r + ti[i] * (size_t)shards;
		sh = sched_shard_of(s, ids[i]);
		e1 = hmget_field(rv[sh], pos[i]);
		/* A client-given id with a bizkey lives in its bizkey's. */
		if (e1 == NULL && (id_parse(ids[i], &ip) == -1 ||
		    (int)ip.shard >= shards))
			for (k = 0; k < shards && e1 == NULL; k++)
				if (k != sh &&
				    (e1 = hmget_field(rv[k], pos[i])) != NULL)
					sh = k;
		if (e1 == NULL)
			continue;
		out[i] = sched_rec_decode(tv[ti[i]], sh, idk[i], idklen[i],
		    e1->str, e1->len);
		if (out[i] == NULL) {
			log_warnx("redis: a malformed job record in shard %d",
			    sh);
			e = SCHED_EINTERNAL;
			goto out;
		}
	}
out:
	if (e != SCHED_OK)
		for (i = 0; i < n; i++) {
			sched_job_free(out[i]);
			out[i] = NULL;
		}
	free_replies(r, nr);
	sched_pipe_free(q);
	free(r);
	free(lens);
	free(argv);
	free(tv);
	free(pos);
	free(ti);
	free(idklen);
	free(idk);
	return e;
}

enum sched_err
sched_q_counts(struct sched *s, redisContext *c, const char *tenant,
    const char *topic, int64_t counts[SCHED_NSTATES], int *broken)
{
	const int argc = 2 + SCHED_NSTATES;
	char (*keys)[SCHED_KEY_MAX], fields[SCHED_NSTATES][160];
	const char **argv;
	size_t *lens;
	redisReply **r;
	enum sched_err e;
	int n = s->cfg.shards, i, st;
	char *end;
	long long v;

	memset(counts, 0, sizeof(int64_t) * SCHED_NSTATES);
	for (st = 0; st < SCHED_NSTATES; st++)
		snprintf(fields[st], sizeof(fields[st]), "%s:%d",
		    topic != NULL ? topic : "", st);
	keys = xcalloc((size_t)n, sizeof(*keys));
	argv = xcalloc((size_t)n * (size_t)argc, sizeof(*argv));
	lens = xcalloc((size_t)n * (size_t)argc, sizeof(*lens));
	r = xcalloc((size_t)n, sizeof(*r));
	for (i = 0; i < n; i++) {
		const char **a = argv + (size_t)i * (size_t)argc;
		size_t *l = lens + (size_t)i * (size_t)argc;

		sched_key(keys[i], tenant, i, "c", NULL);
		a[0] = "HMGET";
		l[0] = 5;
		a[1] = keys[i];
		l[1] = strlen(keys[i]);
		for (st = 0; st < SCHED_NSTATES; st++) {
			a[2 + st] = fields[st];
			l[2 + st] = strlen(fields[st]);
		}
	}
	e = pipeline(s, c, n, argc, argv, lens, r, broken);
	if (e != SCHED_OK)
		goto out;
	for (i = 0; i < n; i++) {
		if (r[i]->type != REDIS_REPLY_ARRAY ||
		    r[i]->elements != SCHED_NSTATES) {
			e = sched_reply_err(c, r[i], broken, "HMGET");
			continue;
		}
		for (st = 0; st < SCHED_NSTATES; st++) {
			redisReply *x = r[i]->element[st];

			if (x->type != REDIS_REPLY_STRING)
				continue;
			errno = 0;
			v = strtoll(x->str, &end, 10);
			if (errno == 0 && *end == '\0')
				counts[st] += v;
		}
	}
	free_replies(r, n);
out:
	free(keys);
	free(argv);
	free(lens);
	free(r);
	return e;
}

static int
ready_cmp(const void *a, const void *b)
{
	const struct sched_head *x = a, *y = b;

	if (x->score != y->score)
		return x->score < y->score ? -1 : 1;
	return x->shard - y->shard;
}

/*
 * The first n scores of the ready set of the topic of each shard with
 * read[shard], in one pipeline, handed to sched_heads_learn() with gen[].
 */
static enum sched_err
ready_heads(struct sched *s, redisContext *c, const char *tenant,
    const char *topic, size_t n, const unsigned char *read,
    const uint64_t *gen, int *broken)
{
	char (*keys)[SCHED_KEY_MAX], last[24];
	const char **argv;
	size_t *lens, j;
	redisReply **r;
	double *score;
	enum sched_err e;
	int ns = s->cfg.shards, *shard, nr = 0, i, k;

	snprintf(last, sizeof(last), "%zu", n - 1);
	keys = xcalloc((size_t)ns, sizeof(*keys));
	argv = xcalloc((size_t)ns * 5, sizeof(*argv));
	lens = xcalloc((size_t)ns * 5, sizeof(*lens));
	r = xcalloc((size_t)ns, sizeof(*r));
	shard = xcalloc((size_t)ns, sizeof(*shard));
	score = xcalloc(n, sizeof(*score));
	for (i = 0; i < ns; i++) {
		if (!read[i])
			continue;
		shard[nr] = i;
		sched_key(keys[nr], tenant, i, "r", topic);
		argv[5 * nr] = "ZRANGE";
		lens[5 * nr] = 6;
		argv[5 * nr + 1] = keys[nr];
		lens[5 * nr + 1] = strlen(keys[nr]);
		argv[5 * nr + 2] = "0";
		lens[5 * nr + 2] = 1;
		argv[5 * nr + 3] = last;
		lens[5 * nr + 3] = strlen(last);
		argv[5 * nr + 4] = "WITHSCORES";
		lens[5 * nr + 4] = 10;
		nr++;
	}
	e = pipeline(s, c, nr, 5, argv, lens, r, broken);
	if (e != SCHED_OK)
		goto out;
	for (i = 0; i < nr; i++) {
		if (r[i]->type == REDIS_REPLY_ERROR) {
			e = sched_reply_err(c, r[i], broken, "ZRANGE");
			continue;
		}
		if (r[i]->type != REDIS_REPLY_ARRAY)
			continue;
		for (k = 0, j = 1; j < r[i]->elements && (size_t)k < n;
		    j += 2) {
			if (r[i]->element[j]->type != REDIS_REPLY_STRING)
				continue;
			score[k++] = strtod(r[i]->element[j]->str, NULL);
		}
		sched_heads_learn(s, tenant, topic, shard[i], gen[shard[i]],
		    score, k, (size_t)k == n);
	}
	free_replies(r, nr);
out:
	free(keys);
	free(argv);
	free(lens);
	free(r);
	free(shard);
	free(score);
	return e;
}

#define READY_ROUNDS	3

enum sched_err
sched_q_ready_take(struct sched *s, redisContext *c, const char *tenant,
    const char *topic, size_t n, int fresh, int *take, uint64_t *gen,
    int *mp, int *more, int *broken)
{
	struct sched_head *h;
	enum sched_err e = SCHED_OK;
	unsigned char *read, *full;
	size_t nh, i, m;
	int ns = s->cfg.shards, *seen, k, unknown, round, capped;
	double cap = 0;

	memset(take, 0, (size_t)ns * sizeof(*take));
	*more = 0;
	*mp = 0;
	if (n == 0)
		return SCHED_OK;
	/* Enough of each shard for an even spread twice over. */
	m = 2 * ((n + (size_t)ns - 1) / (size_t)ns) + 2;
	if (m > n)
		m = n;
	if (m > SCHED_HEADS_MAX)
		m = SCHED_HEADS_MAX;
	/* Read (and ask reserve.lua for) a few more when n is small. */
	*mp = (int)(m > SCHED_HEADS_READ ? m : SCHED_HEADS_READ);
	read = xcalloc((size_t)ns, 1);
	full = xcalloc((size_t)ns, 1);
	seen = xcalloc((size_t)ns, sizeof(*seen));
	/* Not zeroed (10 KiB at 16 shards): collect fills what it returns. */
	h = xreallocarray(NULL, (size_t)ns * SCHED_HEADS_MAX, sizeof(*h));
	/* A shard forgotten while it was read is read again. */
	for (round = 0; round < READY_ROUNDS; round++) {
		sched_heads_plan(s, tenant, topic, (int)m, fresh && round == 0,
		    read, gen);
		for (k = 0; k < ns && !read[k]; k++)
			;
		if (k < ns)
			e = ready_heads(s, c, tenant, topic, (size_t)*mp,
			    read, gen, broken);
		if (e != SCHED_OK)
			goto out;
		nh = sched_heads_collect(s, tenant, topic, h, seen, full,
		    &unknown);
		if (!unknown)
			break;
	}
	qsort(h, nh, sizeof(*h), ready_cmp);
	for (i = 0, capped = 0; i < nh && i < n; i++) {
		/*
		 * A shard known to its limit may hold better jobs than the
		 * next one known: past its last known score (cap), stop and
		 * let the caller read again.  Its jobs not known score at
		 * least cap, so the next ones known that tie with it are as
		 * good (jobs pushed together, due the same millisecond):
		 * they are taken in the same pass.
		 */
		if (capped && h[i].score > cap) {
			*more = 1;
			break;
		}
		take[h[i].shard]++;
		if (!capped && full[h[i].shard] &&
		    take[h[i].shard] == seen[h[i].shard]) {
			capped = 1;
			cap = h[i].score;
		}
	}
	/* Short of n with a shard known to its limit: it has more. */
	if (capped && i < n)
		*more = 1;
	if (unknown)
		*more = 1;
out:
	free(read);
	free(full);
	free(seen);
	free(h);
	return e;
}

enum sched_err
sched_q_bizkey(struct sched *s, redisContext *c, const char *tenant,
    int shard, const char *topic, const char *bizkey,
    char idk[SCHED_IDKEY_MAX], size_t *idklen, int *broken)
{
	char kb[SCHED_KEY_MAX], *field;
	const char *argv[3];
	size_t lens[3];
	redisReply *r;
	enum sched_err e = SCHED_OK;

	sched_key(kb, tenant, shard, "b", NULL);
	field = xasprintf("%s:%s", topic, bizkey);
	argv[0] = "HGET";
	lens[0] = 4;
	argv[1] = kb;
	lens[1] = strlen(kb);
	argv[2] = field;
	lens[2] = strlen(field);
	r = sched_pool_command_argv(s->pool, c, broken, kb, lens[1], 3, argv,
	    lens);
	free(field);
	if (r == NULL || (r->type != REDIS_REPLY_STRING &&
	    r->type != REDIS_REPLY_NIL)) {
		e = sched_reply_err(c, r, broken, "HGET");
	} else if (r->type == REDIS_REPLY_NIL || r->len == 0 ||
	    r->len > SCHED_IDKEY_MAX) {
		e = SCHED_ENOTFOUND;
	} else {
		memcpy(idk, r->str, r->len);
		*idklen = r->len;
	}
	if (r != NULL)
		freeReplyObject(r);
	return e;
}

/* ---- dead letters, newest first ------------------------------------------ */

struct dead_ent {
	int64_t	 at_ms;
	int	 shard;
	size_t	 klen;
	char	 key[SCHED_IDKEY_MAX];
};

/* Newest first: dead time, then id key, both descending. */
static int
dead_cmp(const struct dead_ent *x, const struct dead_ent *y)
{
	size_t m = x->klen < y->klen ? x->klen : y->klen;
	int d;

	if (x->at_ms != y->at_ms)
		return x->at_ms > y->at_ms ? -1 : 1;
	if ((d = memcmp(x->key, y->key, m)) != 0)
		return -d;
	if (x->klen != y->klen)
		return x->klen > y->klen ? -1 : 1;
	return 0;
}

static int
dead_qcmp(const void *a, const void *b)
{
	return dead_cmp(a, b);
}

/* "<dead ms>:<id>" into cur; 0 or -1. */
static int
cursor_parse(const char *s, struct dead_ent *cur)
{
	const char *colon = strchr(s, ':');
	char num[24], *end;

	if (colon == NULL || colon == s || (size_t)(colon - s) >= sizeof(num))
		return -1;
	memcpy(num, s, (size_t)(colon - s));
	num[colon - s] = '\0';
	errno = 0;
	cur->at_ms = strtoll(num, &end, 10);
	if (errno != 0 || *end != '\0' || cur->at_ms < 0)
		return -1;
	return sched_idkey(colon + 1, cur->key, &cur->klen);
}

static void
collect(redisReply *r, int shard, const struct dead_ent *cur,
    struct dead_ent **v, size_t *nv)
{
	struct dead_ent d;
	size_t i;

	if (r->type != REDIS_REPLY_ARRAY)
		return;
	for (i = 0; i + 1 < r->elements; i += 2) {
		redisReply *m = r->element[i], *sc = r->element[i + 1];

		if (m->type != REDIS_REPLY_STRING || m->len == 0 ||
		    m->len > SCHED_IDKEY_MAX || sc->type != REDIS_REPLY_STRING)
			continue;
		d.at_ms = strtoll(sc->str, NULL, 10);
		d.shard = shard;
		d.klen = m->len;
		memcpy(d.key, m->str, m->len);
		if (cur != NULL && dead_cmp(&d, cur) <= 0)
			continue;	/* at or before the cursor */
		*v = xreallocarray(*v, *nv + 1, sizeof(**v));
		(*v)[(*nv)++] = d;
	}
}

enum sched_err
sched_q_dead_list(struct sched *s, redisContext *c, const char *tenant,
    const char *topic, const char *cursor, size_t limit,
    struct sched_job ***jobs, size_t *njobs, char *next_cursor,
    size_t next_cursor_len, int *broken)
{
	struct dead_ent cur, *v = NULL;
	struct sched_job **out = NULL, *job;
	char (*keys)[SCHED_KEY_MAX], lim[24], curs[24], excl[26];
	char text[SCHED_IDTEXT_MAX];
	const char **argv;
	size_t *lens, nv = 0, i, nout = 0;
	redisReply **r;
	enum sched_err e;
	int n = s->cfg.shards, has_cur = 0, per, k;

	*jobs = NULL;
	*njobs = 0;
	/* Parsed first: next_cursor may be the same buffer as cursor. */
	if (cursor != NULL && *cursor != '\0') {
		if (cursor_parse(cursor, &cur) == -1)
			return SCHED_EINVAL;
		has_cur = 1;
	}
	if (next_cursor_len > 0)
		next_cursor[0] = '\0';
	if (limit == 0)
		return SCHED_OK;
	if (limit > DEAD_LIST_MAX)
		limit = DEAD_LIST_MAX;
	/* Per shard: the newest before the cursor, and the cursor's ties. */
	per = has_cur ? 2 : 1;
	keys = xcalloc((size_t)n, sizeof(*keys));
	argv = xcalloc((size_t)n * (size_t)per * 8, sizeof(*argv));
	lens = xcalloc((size_t)n * (size_t)per * 8, sizeof(*lens));
	r = xcalloc((size_t)n * (size_t)per, sizeof(*r));
	snprintf(lim, sizeof(lim), "%zu", limit);
	snprintf(curs, sizeof(curs), "%lld", has_cur ? (long long)cur.at_ms :
	    0LL);
	snprintf(excl, sizeof(excl), "(%s", curs);
	for (k = 0; k < n; k++) {
		const char **a = argv + (size_t)k * (size_t)per * 8;

		sched_key(keys[k], tenant, k, "x", topic);
		a[0] = "ZREVRANGEBYSCORE";
		a[1] = keys[k];
		a[2] = has_cur ? excl : "+inf";
		a[3] = "-inf";
		a[4] = "WITHSCORES";
		a[5] = "LIMIT";
		a[6] = "0";
		a[7] = lim;
		if (has_cur) {
			a[8] = "ZRANGEBYSCORE";
			a[9] = keys[k];
			a[10] = curs;
			a[11] = curs;
			a[12] = "WITHSCORES";
			a[13] = "LIMIT";
			a[14] = "0";
			a[15] = "10000";
		}
	}
	for (i = 0; i < (size_t)n * (size_t)per * 8; i++)
		lens[i] = strlen(argv[i]);
	e = pipeline(s, c, n * per, 8, argv, lens, r, broken);
	if (e != SCHED_OK)
		goto out;
	for (k = 0; k < n * per; k++) {
		if (r[k]->type == REDIS_REPLY_ERROR)
			e = sched_reply_err(c, r[k], broken, "ZRANGEBYSCORE");
		collect(r[k], k / per, has_cur ? &cur : NULL, &v, &nv);
	}
	free_replies(r, n * per);
	if (e != SCHED_OK)
		goto out;
	if (nv > 1)
		qsort(v, nv, sizeof(*v), dead_qcmp);
	if (nv > limit)
		nv = limit;
	out = xcalloc(nv + 1, sizeof(*out));
	for (i = 0; i < nv; i++) {
		job = NULL;
		e = fetch(s, c, tenant, v[i].shard, v[i].key, v[i].klen, 0,
		    &job, broken);
		if (e == SCHED_ENOTFOUND)
			continue;
		if (e != SCHED_OK)
			break;
		out[nout++] = job;
	}
	if (e == SCHED_ENOTFOUND)
		e = SCHED_OK;
	if (e == SCHED_OK && nv == limit && nv > 0 &&
	    sched_idkey_text(v[nv - 1].key, v[nv - 1].klen, text) == 0)
		snprintf(next_cursor, next_cursor_len, "%lld:%s",
		    (long long)v[nv - 1].at_ms, text);
	if (e != SCHED_OK) {
		for (i = 0; i < nout; i++)
			sched_job_free(out[i]);
		free(out);
		out = NULL;
		nout = 0;
	}
	*jobs = out;
	*njobs = nout;
out:
	free(v);
	free(keys);
	free(argv);
	free(lens);
	free(r);
	return e;
}

/*
 * The unfinished jobs holding bizkeys[0..n) in topic: one pipeline of HGETs
 * of the bizkey indexes, one of the records they name (in the same shards).
 * A bizkey indexed for a job that is gone or finished names none, as in
 * push.lua.
 */
enum sched_err
sched_q_bizkeys(struct sched *s, redisContext *c, const char *tenant,
    const char *topic, const char *const *bizkeys, size_t n,
    struct sched_push_result *res, int *found, int *broken)
{
	char (*keys)[SCHED_KEY_MAX], **fields;
	const char **argv;
	size_t *lens, *at, *of, m = 0, k = 0, i, j;
	int *shard, nr = 0, nrj = 0;
	redisReply **r, **rj;
	struct sched_job *job;
	enum sched_err e = SCHED_OK;

	memset(found, 0, n * sizeof(*found));
	keys = xcalloc(n + 1, sizeof(*keys));
	fields = xcalloc(n + 1, sizeof(*fields));
	argv = xcalloc(3 * n + 3, sizeof(*argv));
	lens = xcalloc(3 * n + 3, sizeof(*lens));
	at = xcalloc(n + 1, sizeof(*at));
	of = xcalloc(n + 1, sizeof(*of));
	shard = xcalloc(n + 1, sizeof(*shard));
	r = xcalloc(n + 1, sizeof(*r));
	rj = xcalloc(n + 1, sizeof(*rj));
	for (i = 0; i < n; i++) {
		if (bizkeys[i] == NULL || bizkeys[i][0] == '\0' ||
		    strlen(bizkeys[i]) > SCHED_BIZKEY_MAX)
			continue;
		shard[m] = sched_shard_for(s, bizkeys[i], NULL);
		sched_key(keys[m], tenant, shard[m], "b", NULL);
		fields[m] = xasprintf("%s:%s", topic, bizkeys[i]);
		cmd3(argv, lens, m, "HGET", keys[m], fields[m],
		    strlen(fields[m]));
		at[m++] = i;
	}
	if (m == 0 || (e = pipeline(s, c, (int)m, 3, argv, lens, r,
	    broken)) != SCHED_OK)
		goto out;
	nr = (int)m;
	for (j = 0; j < m; j++) {
		if (r[j]->type == REDIS_REPLY_NIL || (r[j]->type ==
		    REDIS_REPLY_STRING && (r[j]->len == 0 ||
		    r[j]->len > SCHED_IDKEY_MAX)))
			continue;
		if (r[j]->type != REDIS_REPLY_STRING) {
			e = sched_reply_err(c, r[j], broken, "HGET");
			goto out;
		}
		sched_key(keys[j], tenant, shard[j], "j", NULL);
		cmd3(argv, lens, k, "HGET", keys[j], r[j]->str, r[j]->len);
		of[k++] = j;
	}
	if (k == 0 || (e = pipeline(s, c, (int)k, 3, argv, lens, rj,
	    broken)) != SCHED_OK)
		goto out;
	nrj = (int)k;
	for (i = 0; i < k; i++) {
		j = of[i];
		if (rj[i]->type == REDIS_REPLY_NIL)
			continue;
		if (rj[i]->type != REDIS_REPLY_STRING) {
			e = sched_reply_err(c, rj[i], broken, "HGET");
			goto out;
		}
		job = sched_rec_decode(tenant, shard[j], r[j]->str, r[j]->len,
		    rj[i]->str, rj[i]->len);
		if (job == NULL) {
			log_warnx("redis: a malformed job record in %s",
			    keys[j]);
			e = SCHED_EINTERNAL;
			goto out;
		}
		if (job->state <= SCHED_RETRYING) {
			memset(&res[at[j]], 0, sizeof(res[at[j]]));
			snprintf(res[at[j]].id, sizeof(res[at[j]].id), "%s",
			    job->id);
			res[at[j]].deduplicated = 1;
			res[at[j]].run_at_ms = job->due_ms;
			res[at[j]].state = job->state;
			found[at[j]] = 1;
		}
		sched_job_free(job);
	}
out:
	if (e != SCHED_OK)
		memset(found, 0, n * sizeof(*found));
	free_replies(rj, nrj);
	free_replies(r, nr);
	for (j = 0; j < m; j++)
		free(fields[j]);
	free(rj);
	free(r);
	free(shard);
	free(of);
	free(at);
	free(lens);
	free(argv);
	free(fields);
	free(keys);
	return e;
}
