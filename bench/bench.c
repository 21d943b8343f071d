/*
 * bench.c - retryd-bench: the load generator and measuring side of the
 * benchmarks (bench/README.md).  This file holds the command line, the
 * helpers that speak to retryd (tenant, topics, job pushes), to the
 * receiver (records) and to Redis (memory), and the JSON-lines output; the
 * workloads are in workloads.c, the table in report.c.
 *
 *   retryd-bench [options] w1|w2|w3|w4|w5|w6 ...   run workloads
 *   retryd-bench report FILE...                   print the table
 *   retryd-bench port                             print a free loopback port
 *
 * Key decision: the tool checks correctness (never early, exactly once, the
 * right attempt) and exits 3 when a check fails, but it never judges timing:
 * targets are printed next to the figures by the report, so the same binary
 * serves the make-check smoke and a real run.  Exit 1 means the tool itself
 * could not do its work (a daemon down, a setup call refused).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench/bench.h"
#include "util/buf.h"
#include "util/xmalloc.h"

#define CALL_TIMEOUT_MS	30000
#define REDIS_TOP	4	/* commands named in the *_redis_top figures */
#define DUMP_PAGE	100000

void
bench_sleep_ms(int64_t ms)
{
	struct timespec ts;

	if (ms <= 0)
		return;
	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)(ms % 1000) * 1000000L;
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* ---- JSON lines */

void
jset_int(struct json_object *o, const char *k, int64_t v)
{
	json_object_object_add(o, k, json_object_new_int64(v));
}

void
jset_dbl(struct json_object *o, const char *k, double v)
{
	char s[64];

	/* Three decimals are plenty for ms figures and B/job. */
	snprintf(s, sizeof(s), "%.3f", v);
	json_object_object_add(o, k, json_object_new_double_s(v, s));
}

void
jset_str(struct json_object *o, const char *k, const char *v)
{
	json_object_object_add(o, k, json_object_new_string(v));
}

void
jset_bool(struct json_object *o, const char *k, int v)
{
	json_object_object_add(o, k, json_object_new_boolean(v != 0));
}

void
jset_pcts_ms(struct json_object *o, const char *prefix, struct samples *s)
{
	static const struct {
		const char	*name;
		double		 p;
	} pcts[] = {
		{ "p50", 50 }, { "p90", 90 }, { "p99", 99 }, { "max", 100 },
		{ "min", 0 },
	};
	char k[64];
	size_t i;

	for (i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++) {
		snprintf(k, sizeof(k), "%s_%s_ms", prefix, pcts[i].name);
		jset_dbl(o, k, (double)samples_pct(s, pcts[i].p) / 1000.0);
	}
}

void
bench_emit(struct bench *b, const char *workload, struct json_object *o)
{
	struct json_object *line;
	struct rusage ru;
	char name[64];
	const char *s;

	if (b->label != NULL && b->label[0] != '\0')
		snprintf(name, sizeof(name), "%s_%s", b->label, workload);
	else
		snprintf(name, sizeof(name), "%s", workload);
	line = json_object_new_object();
	jset_str(line, "bench", "retryd");
	jset_str(line, "workload", name);
	jset_int(line, "at_ms", hc_wall_us() / 1000);
	/* The load generator's own CPU so far: it shares the machine. */
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		jset_dbl(line, "bench_cpu_s", (double)(ru.ru_utime.tv_sec +
		    ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec +
		    ru.ru_stime.tv_usec) / 1e6);
	json_object_object_foreach(o, k, v)
		json_object_object_add(line, k, json_object_get(v));
	s = json_object_to_json_string_ext(line, JSON_C_TO_STRING_PLAIN);
	printf("%s\n", s);
	fflush(stdout);
	if (b->json != NULL) {
		fprintf(b->json, "%s\n", s);
		fflush(b->json);
	}
	json_object_put(line);
	json_object_put(o);
}

/* ---- the CPU of retryd and Redis, from /proc/PID/stat */

/*
 * utime + stime in clock ticks from a /proc stat file, or -1; the name
 * (field 2, between the parentheses) into name[namelen] when given.
 */
static int64_t
stat_ticks(const char *path, char *name, size_t namelen)
{
	char buf[1024], *p, *q, *e;
	long long v = 0;
	ssize_t n;
	size_t len;
	int fd, field;

	if ((fd = open(path, O_RDONLY)) == -1)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* The name (field 2) may hold anything: count after its ')'. */
	if ((p = strrchr(buf, ')')) == NULL ||
	    (q = strchr(buf, '(')) == NULL || q > p)
		return -1;
	if (name != NULL && namelen > 0) {
		len = (size_t)(p - q - 1);
		if (len >= namelen)
			len = namelen - 1;
		memcpy(name, q + 1, len);
		name[len] = '\0';
	}
	for (field = 3, p++; field <= 15; field++) {
		while (*p == ' ')
			p++;
		if (field >= 14) {
			errno = 0;
			v += strtoll(p, &e, 10);
			if (errno != 0 || e == p)
				return -1;
			p = e;
		} else
			p += strcspn(p, " ");
	}
	return (int64_t)v;
}

static int64_t
proc_ticks(long pid)
{
	char path[64];

	if (pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	return stat_ticks(path, NULL, 0);
}

/* retryd's threads' ticks, summed by name (threads of one pool share it). */
static void
thread_ticks(long pid, struct bench_cpu *c)
{
	char path[320], name[16];
	struct dirent *de;
	int64_t t;
	size_t i;
	DIR *d;

	c->nthr = 0;
	if (pid <= 0)
		return;
	snprintf(path, sizeof(path), "/proc/%ld/task", pid);
	if ((d = opendir(path)) == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/task/%s/stat", pid,
		    de->d_name);
		if ((t = stat_ticks(path, name, sizeof(name))) < 0)
			continue;
		for (i = 0; i < c->nthr; i++)
			if (strcmp(c->thr_name[i], name) == 0)
				break;
		if (i == c->nthr) {
			if (c->nthr == BENCH_THREAD_NAMES)
				continue;
			memcpy(c->thr_name[i], name, sizeof(name));
			c->thr_ticks[i] = 0;
			c->nthr++;
		}
		c->thr_ticks[i] += t;
	}
	closedir(d);
}

void
bench_cpu_read(const struct bench *b, struct bench_cpu *c)
{
	c->ticks[0] = proc_ticks(b->pids[0]);
	c->ticks[1] = proc_ticks(b->pids[1]);
	thread_ticks(b->pids[0], c);
}

/*
 * retryd_cpu_us_per_X and redis_cpu_us_per_X between two readings: CPU
 * time is what a busy machine stretches least, so A/B comparisons use it.
 * retryd_thread_cpu_us_per_X splits retryd's by thread name (MHD-worker,
 * jrnl-writer, api-push, ...: DAEMON.md's thread table).
 */
void
jset_cpu_per(struct json_object *o, const struct bench_cpu *c0,
    const struct bench_cpu *c1, const char *per, int64_t n)
{
	static const char *const who[2] = { "retryd", "redis" };
	double us_per_tick = 1e6 / (double)sysconf(_SC_CLK_TCK);
	struct json_object *thr;
	char k[64];
	int64_t t;
	size_t j;
	int i;

	for (i = 0; i < 2 && n > 0; i++) {
		if (c0->ticks[i] < 0 || c1->ticks[i] < 0)
			continue;
		snprintf(k, sizeof(k), "%s_cpu_us_per_%s", who[i], per);
		jset_dbl(o, k, (double)(c1->ticks[i] - c0->ticks[i]) *
		    us_per_tick / (double)n);
	}
	if (n > 0 && c1->nthr > 0) {
		thr = json_object_new_object();
		for (i = 0; i < (int)c1->nthr; i++) {
			t = c1->thr_ticks[i];
			for (j = 0; j < c0->nthr; j++)
				if (strcmp(c0->thr_name[j],
				    c1->thr_name[i]) == 0)
					t -= c0->thr_ticks[j];
			if (t > 0)
				jset_dbl(thr, c1->thr_name[i], (double)t *
				    us_per_tick / (double)n);
		}
		snprintf(k, sizeof(k), "retryd_thread_cpu_us_per_%s", per);
		json_object_object_add(o, k, thr);
	}
}

/* ---- retryd's API */

/* A call with the admin key (xtenant NULL) or the tenant's key. */
static int
api_call(struct bench *b, int admin, const char *method, const char *path,
    const char *body, struct buf *out)
{
	char hdr[512];

	if (admin)
		snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s\r\n",
		    b->admin_key);
	else
		snprintf(hdr, sizeof(hdr), "%s", b->auth);
	return hc_call(&b->api, method, path, hdr, body, out, CALL_TIMEOUT_MS);
}

static char *
json_member_str(const char *text, const char *key)
{
	struct json_object *o, *v;
	char *r = NULL;

	o = json_tokener_parse(text);
	if (o != NULL && json_object_object_get_ex(o, key, &v) &&
	    json_object_is_type(v, json_type_string))
		r = xstrdup(json_object_get_string(v));
	json_object_put(o);
	return r;
}

int
bench_setup_tenant(struct bench *b)
{
	struct buf out, body;
	char path[256];
	int st, rc = -1;

	buf_init(&out, 1 << 20);
	buf_init(&body, 4096);
	buf_printf(&body, "{\"name\":\"%s\"}", b->tenant);
	st = api_call(b, 1, "POST", "/v1/tenants", body.data, &out);
	if (st == 409) {
		/* It exists (a second invocation of the run): a new key. */
		buf_reset(&out);
		snprintf(path, sizeof(path), "/v1/tenants/%s/keys", b->tenant);
		st = api_call(b, 1, "POST", path, "{}", &out);
	}
	if (st != 200 && st != 201) {
		fprintf(stderr, "retryd-bench: creating tenant %s: status %d:"
		    " %.300s\n", b->tenant, st, out.data ? out.data : "");
		goto out;
	}
	free(b->api_key);
	b->api_key = json_member_str(out.data ? out.data : "", "api_key");
	if (b->api_key == NULL) {
		fprintf(stderr, "retryd-bench: no api_key in %.300s\n",
		    out.data ? out.data : "");
		goto out;
	}
	free(b->auth);
	b->auth = xasprintf("Authorization: Bearer %s\r\n", b->api_key);
	rc = 0;
out:
	buf_free(&out);
	buf_free(&body);
	return rc;
}

int
bench_topic(struct bench *b, const char *name, const char *json)
{
	struct buf out;
	char path[256];
	int st;

	buf_init(&out, 1 << 20);
	snprintf(path, sizeof(path), "/v1/topics/%s", name);
	st = api_call(b, 0, "PUT", path, json, &out);
	if (st != 200 && st != 201)
		fprintf(stderr, "retryd-bench: PUT %s: status %d: %.300s\n",
		    path, st, out.data ? out.data : "");
	buf_free(&out);
	return st == 200 || st == 201 ? 0 : -1;
}

int
bench_push_topic(struct bench *b, const char *name, int tag,
    const char *query, const char *schedule)
{
	struct buf json;
	int r;

	buf_init(&json, 4096);
	buf_printf(&json, "{\"callback_url\":\"%s/cb/%d%s%s\"", b->rcv_url,
	    tag, query != NULL ? "?" : "", query != NULL ? query : "");
	if (schedule != NULL)
		buf_printf(&json, ",\"retry_schedule\":\"%s\"", schedule);
	buf_puts(&json, "}");
	r = bench_topic(b, name, json.data);
	buf_free(&json);
	return r;
}

/* ---- the receiver */

int
bench_rcv_reset(struct bench *b)
{
	return hc_call(&b->rcv, "POST", "/reset", NULL, "", NULL,
	    CALL_TIMEOUT_MS) == 200 ? 0 : -1;
}

int64_t
bench_rcv_count(struct bench *b, int tag)
{
	struct buf out;
	char path[64];
	struct json_object *o, *v;
	int64_t n = -1;

	buf_init(&out, 4096);
	snprintf(path, sizeof(path), "/stats?tag=%d", tag);
	if (hc_call(&b->rcv, "GET", path, NULL, NULL, &out,
	    CALL_TIMEOUT_MS) == 200) {
		o = json_tokener_parse(out.data);
		if (o != NULL && json_object_object_get_ex(o, "tagged", &v))
			n = json_object_get_int64(v);
		json_object_put(o);
	}
	buf_free(&out);
	return n;
}

static int
parse_i64(const char **pp, int64_t *out)
{
	char *e;

	errno = 0;
	*out = strtoll(*pp, &e, 10);
	if (errno != 0 || e == *pp)
		return -1;
	*pp = e;
	return 0;
}

int
bench_rcv_fetch(struct bench *b, int tag, struct arrivals *a)
{
	struct buf out;
	char path[96];
	const char *p, *eol;
	int64_t from = 0, lines, f[6];
	int i, page, rc = -1;

	buf_init(&out, HC_MAX_BODY);
	for (page = 0; page < 10000; page++) {
		buf_reset(&out);
		snprintf(path, sizeof(path), "/records?from=%" PRId64
		    "&max=%d", from, DUMP_PAGE);
		if (hc_call(&b->rcv, "GET", path, NULL, NULL, &out,
		    CALL_TIMEOUT_MS) != 200)
			goto out;
		lines = 0;
		for (p = out.data; p != NULL && *p != '\0'; p = eol + 1) {
			eol = strchr(p, '\n');
			if (eol == NULL)
				break;
			lines++;
			for (i = 0; i < 6; i++)
				if (parse_i64(&p, &f[i]) == -1)
					goto out;
			if (f[0] != tag)
				continue;
			if (a->n == a->cap) {
				a->cap = a->cap ? a->cap * 2 : 4096;
				a->v = xreallocarray(a->v, a->cap,
				    sizeof(*a->v));
			}
			a->v[a->n].seq = f[1];
			a->v[a->n].attempt = (int)f[2];
			a->v[a->n].status = (int)f[3];
			a->v[a->n].due_ms = f[4];
			a->v[a->n].wall_us = f[5];
			a->n++;
		}
		from += lines;
		if (lines < DUMP_PAGE) {
			rc = 0;
			break;
		}
	}
out:
	buf_free(&out);
	return rc;
}

void
arrivals_free(struct arrivals *a)
{
	if (a == NULL)
		return;
	free(a->v);
	a->v = NULL;
	a->n = a->cap = 0;
}

/* ---- Redis */

static int64_t
info_field(const char *info, const char *name)
{
	const char *p = strstr(info, name);
	int64_t v;

	if (p == NULL)
		return -1;
	p += strlen(name);
	if (*p != ':')
		return -1;
	p++;
	return parse_i64(&p, &v) == 0 ? v : -1;
}

static redisContext *
redis_open(struct bench *b)
{
	struct timeval tv = { 5, 0 };
	redisContext *c;
	const char *p;
	char host[64];
	size_t hl;
	long port;
	char *e;

	if (b->redis_url == NULL || strncmp(b->redis_url, "redis://", 8) != 0)
		return NULL;
	p = b->redis_url + 8;
	hl = strcspn(p, ":/");
	if (hl == 0 || hl >= sizeof(host) || p[hl] != ':')
		return NULL;
	memcpy(host, p, hl);
	host[hl] = '\0';
	port = strtol(p + hl + 1, &e, 10);
	if (port < 1 || port > 65535)
		return NULL;
	c = redisConnectWithTimeout(host, (int)port, tv);
	if (c != NULL && c->err) {
		redisFree(c);
		c = NULL;
	}
	return c;
}

int
bench_redis_mem(struct bench *b, struct redis_mem *m)
{
	redisContext *c;
	redisReply *r;

	m->used = m->clients = m->keys = -1;
	if ((c = redis_open(b)) == NULL)
		return -1;
	r = redisCommand(c, "INFO memory");
	if (r != NULL && r->type == REDIS_REPLY_STRING) {
		m->used = info_field(r->str, "used_memory");
		m->clients = info_field(r->str, "mem_clients_normal");
	}
	freeReplyObject(r);
	r = redisCommand(c, "DBSIZE");
	if (r != NULL && r->type == REDIS_REPLY_INTEGER)
		m->keys = r->integer;
	freeReplyObject(r);
	redisFree(c);
	return m->used >= 0 ? 0 : -1;
}

int
bench_redis_cmdtime(struct bench *b, int reset, int64_t *usec,
    int64_t *calls, char *top, size_t toplen)
{
	struct {
		char	name[32];
		int64_t	calls;
		int64_t	usec;
	} t[REDIS_TOP] = { { "", 0, 0 } };
	redisContext *c;
	redisReply *r;
	const char *p;
	int64_t v, n;
	size_t i, len, off;
	int rc = -1, k;

	*usec = *calls = 0;
	if (top != NULL && toplen > 0)
		top[0] = '\0';
	if ((c = redis_open(b)) == NULL)
		return -1;
	r = redisCommand(c, "INFO commandstats");
	if (r == NULL || r->type != REDIS_REPLY_STRING)
		goto out;
	/* cmdstat_NAME:calls=N,usec=U,usec_per_call=...,... */
	for (p = strstr(r->str, "cmdstat_"); p != NULL;
	    p = strstr(p + 1, "cmdstat_")) {
		const char *q = strstr(p, ":calls=");

		if (q == NULL)
			break;
		q += strlen(":calls=");
		if (parse_i64(&q, &v) == -1)
			break;
		/* The bench's own INFO and CONFIG calls do not count. */
		if (strncmp(p, "cmdstat_info:", 13) == 0 ||
		    strncmp(p, "cmdstat_config", 14) == 0)
			continue;
		*calls += v;
		n = v;
		if (strncmp(q, ",usec=", 6) != 0)
			break;
		q += 6;
		if (parse_i64(&q, &v) == -1)
			break;
		*usec += v;
		/* Keep the REDIS_TOP costliest commands, costliest first. */
		for (k = REDIS_TOP - 1; k >= 0 && t[k].usec < v; k--)
			if (k + 1 < REDIS_TOP)
				t[k + 1] = t[k];
		if (++k < REDIS_TOP) {
			len = strcspn(p + 8, ":");
			if (len >= sizeof(t[k].name))
				len = sizeof(t[k].name) - 1;
			memcpy(t[k].name, p + 8, len);
			t[k].name[len] = '\0';
			t[k].calls = n;
			t[k].usec = v;
		}
	}
	for (i = 0, off = 0; top != NULL && i < REDIS_TOP && t[i].usec > 0 &&
	    off < toplen; i++)
		off += (size_t)snprintf(top + off, toplen - off, "%s%s %" PRId64
		    " calls %" PRId64 " us", i > 0 ? ", " : "", t[i].name,
		    t[i].calls, t[i].usec);
	rc = 0;
out:
	freeReplyObject(r);
	if (rc == 0 && reset) {
		r = redisCommand(c, "CONFIG RESETSTAT");
		freeReplyObject(r);
	}
	redisFree(c);
	return rc;
}

/* ---- pushing jobs */

struct push_ctx {
	struct bench		*b;
	const struct push_spec	*spec;
	struct push_result	*res;
	int64_t			 next;
	int64_t			*slot_n;	/* jobs in a slot's request */
	int64_t			*slot_first;	/* and the first one's number */
	char			 path[256];
	struct buf		 body;
	char			 pad[512];
};

int64_t
push_due_ms(const struct push_spec *spec, int64_t i)
{
	if (spec->delay_ms >= 0)
		return 0;
	return spec->base_ms + (spec->n > 0 ? i * spec->spread_ms / spec->n :
	    0);
}

static int
job_json(struct push_ctx *c, int64_t i)
{
	const struct push_spec *s = c->spec;
	int64_t due = push_due_ms(s, i);
	char body[128];
	int n, pad;

	n = snprintf(body, sizeof(body), "{\"s\":%" PRId64 ",\"d\":%" PRId64
	    ",\"p\":\"\"}", i, due);
	pad = c->b->body_bytes - n;
	if (pad < 0)
		pad = 0;
	if (pad > (int)sizeof(c->pad) - 1)
		pad = (int)sizeof(c->pad) - 1;
	if (s->client_ids)	/* /push: the topic, the id, "delay" */
		return buf_printf(&c->body, "{\"topic\":\"%s\",\"id\":"
		    "\"b-%ld-%" PRId64 "\",\"delay\":%" PRId64 ",\"body\":"
		    "{\"s\":%" PRId64 ",\"d\":%" PRId64 ",\"p\":\"%.*s\"}}",
		    s->topic, (long)getpid(), i, s->delay_ms, i, due, pad,
		    c->pad);
	if (s->delay_ms >= 0)
		return buf_printf(&c->body, "{\"delay_ms\":%" PRId64
		    ",\"body\":{\"s\":%" PRId64 ",\"d\":%" PRId64
		    ",\"p\":\"%.*s\"}}", s->delay_ms, i, due, pad, c->pad);
	return buf_printf(&c->body, "{\"run_at_ms\":%" PRId64
	    ",\"body\":{\"s\":%" PRId64 ",\"d\":%" PRId64
	    ",\"p\":\"%.*s\"}}", due, i, due, pad, c->pad);
}

static int
push_next(void *arg, int slot, struct buf *req)
{
	struct push_ctx *c = arg;
	const struct push_spec *s = c->spec;
	int64_t k, i;

	if (c->next >= s->n)
		return 0;
	k = s->batch > 1 ? s->batch : 1;
	if (k > s->n - c->next)
		k = s->n - c->next;
	buf_reset(&c->body);
	if (s->batch > 1)
		buf_puts(&c->body, "{\"jobs\":[");
	for (i = 0; i < k; i++) {
		if (i > 0)
			buf_puts(&c->body, ",");
		if (job_json(c, c->next + i) == -1)
			return -1;
	}
	if (s->batch > 1)
		buf_puts(&c->body, "]}");
	if (hc_format(req, &c->b->api, "POST", c->path, c->b->auth,
	    c->body.data, c->body.len) == -1)
		return -1;
	c->slot_n[slot] = k;
	c->slot_first[slot] = c->next;
	c->next += k;
	return 1;
}

/* "Not now" answers: the daemon refused the job without failing. */
static int
refusal(int status)
{
	return status == 429 || status == 503;
}

/*
 * Count the results of a batch push of njobs jobs numbered from first:
 * accepted
 * (objects with an id, marked in res->accepted), refused (status 429 or
 * 503) and failed; the first job not accepted is described in
 * res->first_error.
 */
static void
batch_results(struct push_result *res, const char *text, int64_t first,
    int64_t njobs)
{
	struct json_object *o, *arr = NULL, *e, *v;
	int64_t ok = 0, refused = 0;
	size_t i, n;

	o = json_tokener_parse(text);
	if (json_object_is_type(o, json_type_array))
		arr = o;
	else if (json_object_is_type(o, json_type_object)) {
		json_object_object_foreach(o, k, val) {
			(void)k;
			if (json_object_is_type(val, json_type_array)) {
				arr = val;
				break;
			}
		}
	}
	n = arr != NULL ? json_object_array_length(arr) : 0;
	for (i = 0; i < n && (int64_t)i < njobs; i++) {
		e = json_object_array_get_idx(arr, i);
		if (json_object_is_type(e, json_type_object) &&
		    json_object_object_get_ex(e, "id", &v) &&
		    !json_object_object_get_ex(e, "error", &v)) {
			ok++;
			res->accepted[first + (int64_t)i] = 1;
			continue;
		}
		if (json_object_object_get_ex(e, "status", &v) &&
		    refusal(json_object_get_int(v)))
			refused++;
		if (res->first_error[0] == '\0')
			snprintf(res->first_error, sizeof(res->first_error),
			    "jobs[%zu]: %.200s", i,
			    json_object_to_json_string_ext(e,
			    JSON_C_TO_STRING_PLAIN));
	}
	json_object_put(o);
	res->ok += ok;
	res->refused += refused;
	res->failed += njobs - ok - refused;
}

static void
push_done(void *arg, int slot, const struct hc_resp *r)
{
	struct push_ctx *c = arg;
	struct push_result *res = c->res;
	int64_t k = c->slot_n[slot], first = c->slot_first[slot];

	samples_add(&res->lat_us, r->lat_us);
	if (r->status == 201 || r->status == 200) {
		if (c->spec->batch > 1) {
			batch_results(res, r->body, first, k);
			return;
		}
		res->ok++;
		res->accepted[first] = 1;
		return;
	}
	if (refusal(r->status))
		res->refused += k;
	else
		res->failed += k;
	if (res->first_error[0] == '\0')
		snprintf(res->first_error, sizeof(res->first_error),
		    "status %d: %.200s", r->status, r->body);
}

void
push_result_free(struct push_result *res)
{
	samples_free(&res->lat_us);
	free(res->accepted);
	res->accepted = NULL;
}

int
bench_push(struct bench *b, const struct push_spec *spec,
    struct push_result *res)
{
	static const struct hc_ops ops = { push_next, push_done };
	struct push_ctx c;
	struct hc_pool *p;
	int64_t t0;
	int rc = 0;

	memset(&c, 0, sizeof(c));
	memset(res, 0, sizeof(*res));
	c.b = b;
	c.spec = spec;
	c.res = res;
	memset(c.pad, 'x', sizeof(c.pad) - 1);
	if (spec->client_ids)
		snprintf(c.path, sizeof(c.path), "/push");
	else
		snprintf(c.path, sizeof(c.path), "/v1/topics/%s/jobs%s",
		    spec->topic, spec->batch > 1 ? ":batch" : "");
	buf_init(&c.body, HC_MAX_BODY);
	c.slot_n = xcalloc((size_t)spec->conc, sizeof(*c.slot_n));
	c.slot_first = xcalloc((size_t)spec->conc, sizeof(*c.slot_first));
	res->accepted = xcalloc((size_t)(spec->n > 0 ? spec->n : 1), 1);
	p = hc_pool_new(&b->api, spec->conc, &ops, &c, CALL_TIMEOUT_MS);
	if (p == NULL) {
		rc = -1;
		goto out;
	}
	t0 = hc_mono_us();
	if (hc_pool_run(p, t0 + b->wait_ms * 1000) == -1)
		rc = -1;
	res->elapsed_us = hc_mono_us() - t0;
	/* Jobs not answered before the deadline count as failed. */
	if (res->ok + res->refused + res->failed < spec->n &&
	    res->first_error[0] == '\0')
		snprintf(res->first_error, sizeof(res->first_error),
		    "%" PRId64 " jobs not pushed before the deadline",
		    spec->n - res->ok - res->refused - res->failed);
	res->failed = spec->n - res->ok - res->refused;
out:
	hc_pool_free(p);
	free(c.slot_n);
	free(c.slot_first);
	buf_free(&c.body);
	return rc;
}

/* ---- the command line */

static int
free_port(void)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	int fd, port = -1;

	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd == -1)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static void
usage(void)
{
	fprintf(stderr,
"usage: retryd-bench [options] w1|w2|w3|w4|w5|w6|timer ...\n"
"       retryd-bench report FILE...\n"
"       retryd-bench port\n"
"  --api URL          retryd, http://127.0.0.1:PORT (required)\n"
"  --receiver URL     bench-receiver, http://127.0.0.1:PORT (required)\n"
"  --admin-key KEY    or RETRYD_ADMIN_KEY in the environment\n"
"  --redis URL        redis://127.0.0.1:PORT, for memory figures\n"
"  --tenant NAME      default bench\n"
"  --json FILE        append the JSON lines to FILE too\n"
"  --label NAME       prefix of the workload names\n"
"  --w1-jobs N        W1 jobs per phase (100000)\n"
"  --w1-conc N        W1 single POSTs in flight (64)\n"
"  --w1-ahead MS      W1 jobs are due this far ahead (60000)\n"
"  --batch N          jobs per batch push (1000)\n"
"  --batch-conc N     batch pushes in flight (4)\n"
"  --w2-jobs N        W2 jobs (20000)      --w2-spread MS  over (10000)\n"
"  --w3-jobs N        W3 jobs (20000)\n"
"  --w4-jobs N        W4 jobs (2000)       --w4-spread MS  over (1000)\n"
"  --w5-jobs N        W5 jobs (50000)      --w5-conc N     consumers (64)\n"
"  --w5-batch N       W5 batched phase: jobs per reserve, 1..100 (32);\n"
"                     0 skips the phase\n"
"  --w6-pending N     W6 backlog (1000000)\n"
"  --lead MS          first due time after the start of a push (3000)\n"
"  --wait MS          bound on any one wait (120000)\n"
"  --body-bytes N     bytes of each job body (60)\n"
"  --pids R[,D]       retryd's (and Redis's) pid, for CPU per job\n");
	exit(2);
}

static int64_t
num_opt(const char *name, const char *s, int64_t lo, int64_t hi)
{
	long long x;
	char *e;

	errno = 0;
	x = strtoll(s, &e, 10);
	if (errno != 0 || e == s || *e != '\0' || x < lo || x > hi) {
		fprintf(stderr, "retryd-bench: --%s: not a number in "
		    "[%" PRId64 ", %" PRId64 "]: %s\n", name, lo, hi, s);
		exit(2);
	}
	return (int64_t)x;
}

enum {
	O_API = 256, O_RCV, O_ADMIN, O_REDIS, O_TENANT, O_JSON, O_LABEL,
	O_W1JOBS, O_W1CONC, O_W1AHEAD, O_BATCH, O_BATCHCONC, O_W2JOBS,
	O_W2SPREAD, O_W3JOBS, O_W4JOBS, O_W4SPREAD, O_W5JOBS, O_W5CONC,
	O_W5BATCH, O_W6PENDING, O_LEAD, O_WAIT, O_BODY, O_PIDS,
};

static const struct option longopts[] = {
	{ "api", required_argument, NULL, O_API },
	{ "receiver", required_argument, NULL, O_RCV },
	{ "admin-key", required_argument, NULL, O_ADMIN },
	{ "redis", required_argument, NULL, O_REDIS },
	{ "tenant", required_argument, NULL, O_TENANT },
	{ "json", required_argument, NULL, O_JSON },
	{ "label", required_argument, NULL, O_LABEL },
	{ "w1-jobs", required_argument, NULL, O_W1JOBS },
	{ "w1-conc", required_argument, NULL, O_W1CONC },
	{ "w1-ahead", required_argument, NULL, O_W1AHEAD },
	{ "batch", required_argument, NULL, O_BATCH },
	{ "batch-conc", required_argument, NULL, O_BATCHCONC },
	{ "w2-jobs", required_argument, NULL, O_W2JOBS },
	{ "w2-spread", required_argument, NULL, O_W2SPREAD },
	{ "w3-jobs", required_argument, NULL, O_W3JOBS },
	{ "w4-jobs", required_argument, NULL, O_W4JOBS },
	{ "w4-spread", required_argument, NULL, O_W4SPREAD },
	{ "w5-jobs", required_argument, NULL, O_W5JOBS },
	{ "w5-conc", required_argument, NULL, O_W5CONC },
	{ "w5-batch", required_argument, NULL, O_W5BATCH },
	{ "w6-pending", required_argument, NULL, O_W6PENDING },
	{ "lead", required_argument, NULL, O_LEAD },
	{ "wait", required_argument, NULL, O_WAIT },
	{ "body-bytes", required_argument, NULL, O_BODY },
	{ "pids", required_argument, NULL, O_PIDS },
	{ NULL, 0, NULL, 0 },
};

/* --pids R[,D] */
static void
parse_pids(struct bench *b, const char *s)
{
	char buf[64], *comma;
	size_t n = strlen(s);

	if (n >= sizeof(buf)) {
		fprintf(stderr, "retryd-bench: --pids: too long: %s\n", s);
		exit(2);
	}
	memcpy(buf, s, n + 1);
	if ((comma = strchr(buf, ',')) != NULL) {
		*comma = '\0';
		b->pids[1] = (long)num_opt("pids", comma + 1, 1, INT32_MAX);
	}
	b->pids[0] = (long)num_opt("pids", buf, 1, INT32_MAX);
}

static void
parse_opts(struct bench *b, int argc, char **argv)
{
	const char *json = NULL;
	int ch;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case O_API:
			if (hc_parse_url(optarg, &b->api) == -1) {
				fprintf(stderr, "retryd-bench: --api: not an "
				    "http://127.x.x.x:PORT URL: %s\n", optarg);
				exit(2);
			}
			break;
		case O_RCV:
			if (hc_parse_url(optarg, &b->rcv) == -1) {
				fprintf(stderr, "retryd-bench: --receiver: not "
				    "an http://127.x.x.x:PORT URL: %s\n",
				    optarg);
				exit(2);
			}
			b->rcv_url = optarg;
			break;
		case O_ADMIN: b->admin_key = optarg; break;
		case O_REDIS: b->redis_url = optarg; break;
		case O_TENANT: b->tenant = optarg; break;
		case O_JSON: json = optarg; break;
		case O_LABEL: b->label = optarg; break;
		case O_W1JOBS:
			b->w1_jobs = num_opt("w1-jobs", optarg, 1, 100000000);
			break;
		case O_W1CONC:
			b->w1_conc = (int)num_opt("w1-conc", optarg, 1, 4096);
			break;
		case O_W1AHEAD:
			b->w1_ahead_ms = num_opt("w1-ahead", optarg, 0,
			    INT64_C(86400000) * 365);
			break;
		case O_BATCH:
			b->batch = (int)num_opt("batch", optarg, 2, 100000);
			break;
		case O_BATCHCONC:
			b->batch_conc = (int)num_opt("batch-conc", optarg, 1,
			    1024);
			break;
		case O_W2JOBS:
			b->w2_jobs = num_opt("w2-jobs", optarg, 1, 100000000);
			break;
		case O_W2SPREAD:
			b->w2_spread_ms = num_opt("w2-spread", optarg, 0,
			    3600000);
			break;
		case O_W3JOBS:
			b->w3_jobs = num_opt("w3-jobs", optarg, 1, 100000000);
			break;
		case O_W4JOBS:
			b->w4_jobs = num_opt("w4-jobs", optarg, 1, 10000000);
			break;
		case O_W4SPREAD:
			b->w4_spread_ms = num_opt("w4-spread", optarg, 0,
			    3600000);
			break;
		case O_W5JOBS:
			b->w5_jobs = num_opt("w5-jobs", optarg, 1, 100000000);
			break;
		case O_W5CONC:
			b->w5_conc = (int)num_opt("w5-conc", optarg, 1, 4096);
			break;
		case O_W5BATCH:
			/* The API's bound on a reserve's max. */
			b->w5_batch = (int)num_opt("w5-batch", optarg, 0, 100);
			break;
		case O_W6PENDING:
			b->w6_pending = num_opt("w6-pending", optarg, 0,
			    1000000000);
			break;
		case O_LEAD:
			b->lead_ms = num_opt("lead", optarg, 0, 3600000);
			break;
		case O_WAIT:
			b->wait_ms = num_opt("wait", optarg, 1000, 86400000);
			break;
		case O_BODY:
			b->body_bytes = (int)num_opt("body-bytes", optarg, 0,
			    500);
			break;
		case O_PIDS:
			parse_pids(b, optarg);
			break;
		default:
			usage();
		}
	}
	if (json != NULL && (b->json = fopen(json, "a")) == NULL) {
		fprintf(stderr, "retryd-bench: %s: %s\n", json,
		    strerror(errno));
		exit(1);
	}
}

static const struct {
	const char	*name;
	int		(*fn)(struct bench *);
} workloads[] = {
	{ "w1", bench_w1 }, { "w2", bench_w2 }, { "w3", bench_w3 },
	{ "w4", bench_w4 }, { "w5", bench_w5 }, { "w6", bench_w6 },
	{ "timer", bench_timer },
};

int
main(int argc, char **argv)
{
	struct bench b;
	size_t k;
	int i, rc = 0, found, api;

	if (argc >= 2 && strcmp(argv[1], "report") == 0)
		return bench_report(argc - 2, argv + 2);
	if (argc == 2 && strcmp(argv[1], "port") == 0) {
		i = free_port();
		if (i == -1)
			return 1;
		printf("%d\n", i);
		return 0;
	}
	memset(&b, 0, sizeof(b));
	b.tenant = "bench";
	b.admin_key = getenv("RETRYD_ADMIN_KEY");
	b.w1_jobs = 100000;
	b.w1_conc = 64;
	b.w1_ahead_ms = 60000;
	b.batch = 1000;
	b.batch_conc = 4;
	b.w2_jobs = 20000;
	b.w2_spread_ms = 10000;
	b.w3_jobs = 20000;
	b.w4_jobs = 2000;
	b.w4_spread_ms = 1000;
	b.w5_jobs = 50000;
	b.w5_conc = 64;
	b.w5_batch = 32;
	b.w6_pending = 1000000;
	b.lead_ms = 3000;
	b.wait_ms = 120000;
	b.body_bytes = 60;
	parse_opts(&b, argc, argv);
	/* The timer ceiling needs the receiver only. */
	api = optind < argc - 1 || (optind < argc &&
	    strcmp(argv[optind], "timer") != 0);
	if (optind >= argc || b.rcv.port == 0 || (api && (b.api.port == 0 ||
	    b.admin_key == NULL)))
		usage();
	if (api && bench_setup_tenant(&b) == -1)
		return 1;
	for (i = optind; i < argc; i++) {
		found = 0;
		for (k = 0; k < sizeof(workloads) / sizeof(workloads[0]); k++) {
			if (strcmp(argv[i], workloads[k].name) != 0)
				continue;
			found = 1;
			if (workloads[k].fn(&b) == -1) {
				fprintf(stderr, "retryd-bench: %s could not "
				    "run\n", argv[i]);
				rc = 1;
			}
		}
		if (!found) {
			fprintf(stderr, "retryd-bench: no workload %s\n",
			    argv[i]);
			usage();
		}
	}
	if (rc == 0 && b.failures > 0) {
		fprintf(stderr, "retryd-bench: %d correctness check(s) "
		    "failed\n", b.failures);
		rc = 3;
	}
	if (b.json != NULL)
		fclose(b.json);
	free(b.api_key);
	free(b.auth);
	return rc;
}
