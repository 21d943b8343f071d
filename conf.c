/*
 * conf.c - the table of configuration keys and its reader.
 *
 * Key decision: every key is one row of conf_keys[] (name, type, default as
 * text, bounds, reloadable, environment variable), PgBouncer style.  The
 * defaults go through the same parser as the file, the file is walked setting
 * by setting so an unknown key or a bad value is reported with its line, and
 * the documentation checks (`retryd -K`) read the same table, so a key cannot
 * exist without being documented.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libconfig.h>

#include "conf.h"
#include "scheduler/conn.h"
#include "util/log.h"
#include "util/xmalloc.h"

struct conf conf;

enum conf_type {
	CT_STR,
	CT_INT,
	CT_BOOL,
	CT_DURATION,		/* milliseconds; "10s" or an integer of ms */
	CT_SIZE,		/* bytes; "1MiB" or an integer */
	CT_ENUM,		/* a string from a list, stored as its index */
};

struct conf_key {
	const char	*name;
	enum conf_type	 type;
	size_t		 off;
	const char	*def;
	int64_t		 min, max;
	int		 reloadable;
	const char	*env;
	const char	*const *choices;	/* CT_ENUM */
	int		(*check)(const char *v, char *why, size_t whylen);
};

static const char *const journal_modes[] = { "off", "async", "sync", NULL };
static const char *const log_levels[] = { "error", "warn", "info", "debug",
	NULL };

static int check_listen(const char *, char *, size_t);
static int check_redis_url(const char *, char *, size_t);
static int check_journal_url(const char *, char *, size_t);

#define OFF(m)		offsetof(struct conf, m)
#define DAY_MS		(24LL * 3600 * 1000)
#define STR(n, m, d, env, chk) \
	{ n, CT_STR, OFF(m), d, 0, 0, 0, env, NULL, chk }
#define NUM(n, t, m, d, lo, hi, rl) \
	{ n, t, OFF(m), d, lo, hi, rl, NULL, NULL, NULL }

static const struct conf_key conf_keys[] = {
	STR("listen", listen, "127.0.0.1:8080", "RETRYD_LISTEN", check_listen),
	STR("data_dir", data_dir, "./retryd-data", "RETRYD_DATA_DIR", NULL),
	STR("admin_key", admin_key, "", "RETRYD_ADMIN_KEY", NULL),
	STR("instance", instance, "", "RETRYD_INSTANCE", NULL),
	{ "log.level", CT_ENUM, OFF(log_level), "info", 0, 3, 1,
	  "RETRYD_LOG_LEVEL", log_levels, NULL },
	NUM("log.access", CT_BOOL, log_access, "false", 0, 1, 1),
	STR("redis.url", redis_url, "redis://127.0.0.1:6379/0",
	    "RETRYD_REDIS_URL", check_redis_url),
	NUM("redis.timeout", CT_DURATION, redis_timeout_ms, "2s", 10,
	    60000, 0),
	STR("journal.url", journal_url, "", "RETRYD_JOURNAL_URL",
	    check_journal_url),
	{ "journal.mode", CT_ENUM, OFF(journal_mode), "sync", 0, 2, 0, NULL,
	  journal_modes, NULL },
	NUM("journal.flush_interval", CT_DURATION, journal_flush_ms, "100ms",
	    1, 60000, 0),
	NUM("journal.timeout", CT_DURATION, journal_timeout_ms, "2s", 100,
	    60000, 0),
	NUM("journal.retention", CT_DURATION, journal_retention_ms, "30d",
	    60000, 3650 * DAY_MS, 1),
	NUM("journal.purge_interval", CT_DURATION, journal_purge_ms, "1m",
	    10, 3600000, 0),
	NUM("scheduler.shards", CT_INT, sched_shards, "16", 1, 1024, 0),
	/* At most SCHED_BATCH_MAX (scheduler/sched.h: Lua's unpack()). */
	NUM("scheduler.batch", CT_INT, sched_batch, "100", 1, 2000, 1),
	NUM("scheduler.sweep", CT_DURATION, sched_sweep_ms, "1s", 10, 60000,
	    1),
	NUM("scheduler.lease", CT_DURATION, sched_lease_ms, "5s", 100, 600000,
	    0),
	NUM("scheduler.retention", CT_DURATION, sched_retention_ms, "1h", 0,
	    30 * DAY_MS, 1),
	NUM("dispatcher.threads", CT_INT, disp_threads, "2", 1, 64, 0),
	{ "dispatcher.allow_private_targets", CT_BOOL, OFF(disp_allow_private),
	  "false", 0, 1, 0, "RETRYD_ALLOW_PRIVATE_TARGETS", NULL, NULL },
	NUM("dispatcher.timeout", CT_DURATION, disp_timeout_ms, "10s", 100,
	    60000, 1),
	NUM("dispatcher.max_timeout", CT_DURATION, disp_max_timeout_ms, "60s",
	    100, 600000, 1),
	NUM("dispatcher.max_in_flight", CT_INT, disp_max_in_flight, "256", 1,
	    100000, 1),
	NUM("dispatcher.max_total_in_flight", CT_INT, disp_max_total, "10000",
	    1, 1000000, 0),
	NUM("dispatcher.max_tenant_in_flight", CT_INT, disp_max_tenant, "0",
	    0, 1000000, 0),
	NUM("dispatcher.retry_after_cap", CT_DURATION, disp_retry_after_cap_ms,
	    "1h", 0, 30 * DAY_MS, 1),
	NUM("dispatcher.capture_bytes", CT_SIZE, disp_capture_bytes, "1KiB",
	    0, 65536, 0),
	NUM("http.threads", CT_INT, http_threads, "4", 1, 256, 0),
	NUM("http.max_connections", CT_INT, http_max_connections, "16384", 16,
	    1000000, 0),
	NUM("http.timeout", CT_DURATION, http_timeout_ms, "60s", 1000,
	    3600000, 0),
	STR("web.dir", web_dir, "", NULL, NULL),
	NUM("metrics.require_key", CT_BOOL, metrics_require_key, "false", 0,
	    1, 1),
	NUM("metrics.counts_interval", CT_DURATION, metrics_counts_ms, "5s",
	    0, 3600000, 1),
	NUM("limits.request_body", CT_SIZE, limit_request_body, "1MiB", 1024,
	    1LL << 30, 1),
	NUM("limits.job_body", CT_SIZE, limit_job_body, "256KiB", 1,
	    1LL << 30, 1),
	NUM("limits.horizon", CT_DURATION, limit_horizon_ms, "365d", 1000,
	    100 * 365 * DAY_MS, 1),
	NUM("limits.max_pending", CT_INT, limit_max_pending, "1000000", 1,
	    INT64_C(1000000000000), 1),
	NUM("limits.rate", CT_INT, limit_rate, "0", 0, 10000000, 1),
	NUM("limits.max_wait", CT_DURATION, limit_max_wait_ms, "60s", 0,
	    3600000, 1),
	NUM("limits.max_waiting", CT_INT, limit_max_waiting, "0", 0, 10000000,
	    1),
	NUM("limits.batch", CT_INT, limit_batch, "1000", 1, 100000, 1),
	NUM("shutdown.grace", CT_DURATION, shutdown_grace_ms, "10s", 0,
	    3600000, 1),
	NUM("debug.fake_clock", CT_BOOL, debug_fake_clock, "false", 0, 1, 0),
};
#define NKEYS	(sizeof(conf_keys) / sizeof(conf_keys[0]))

struct conf_unit {
	const char	*suffix;
	int64_t		 mul;
};

static const struct conf_unit duration_units[] = {
	{ "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 },
	{ "d", 86400000 }, { "", 1 }, { NULL, 0 },
};

static const struct conf_unit size_units[] = {
	{ "", 1 }, { "B", 1 }, { "k", 1024 }, { "K", 1024 }, { "KiB", 1024 },
	{ "KB", 1024 }, { "M", 1 << 20 }, { "MiB", 1 << 20 }, { "MB", 1 << 20 },
	{ "G", 1 << 30 }, { "GiB", 1 << 30 }, { "GB", 1 << 30 }, { NULL, 0 },
};

/* A non-negative integer followed by one of units; 0 or -1. */
static int
parse_with_units(const char *s, const struct conf_unit *units, int64_t *out)
{
	char *end;
	long long v;

	if (!isdigit((unsigned char)s[0]))
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0)
		return -1;
	for (; units->suffix != NULL; units++) {
		if (strcmp(end, units->suffix) != 0)
			continue;
		if (v > INT64_MAX / units->mul)
			return -1;
		*out = v * units->mul;
		return 0;
	}
	return -1;
}

int
conf_parse_duration(const char *s, int64_t *ms)
{
	return parse_with_units(s, duration_units, ms);
}

static int
parse_size(const char *s, int64_t *bytes)
{
	return parse_with_units(s, size_units, bytes);
}

static int
check_listen(const char *v, char *why, size_t whylen)
{
	const char *colon = strrchr(v, ':');
	char *end;
	long port;

	if (colon == NULL || colon == v) {
		snprintf(why, whylen, "\"%s\" is not host:port", v);
		return -1;
	}
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (colon[1] == '\0' || *end != '\0' || errno != 0 || port < 0 ||
	    port > 65535) {
		snprintf(why, whylen, "bad port in \"%s\"", v);
		return -1;
	}
	return 0;
}

/*
 * One URL or a cluster's seeds, as the scheduler will read them (the value
 * is not repeated: it may hold a password).
 */
static int
check_redis_url(const char *v, char *why, size_t whylen)
{
	struct redis_target *t;
	char one[256];
	int rc;

	t = xcalloc(SCHED_SEEDS_MAX, sizeof(*t));
	rc = sched_redis_seeds_parse(v, t, SCHED_SEEDS_MAX, one, sizeof(one));
	free(t);
	if (rc == -1) {
		snprintf(why, whylen, "redis.url: %s", one);
		return -1;
	}
	return 0;
}

static int
check_journal_url(const char *v, char *why, size_t whylen)
{
	if (v[0] == '\0' || strcmp(v, "none") == 0 ||
	    strncmp(v, "sqlite:///", 10) == 0 ||
	    strncmp(v, "mysql://", 8) == 0 ||
	    strncmp(v, "mariadb://", 10) == 0)
		return 0;
	snprintf(why, whylen, "\"%s\" is not sqlite:///PATH, mysql://... "
	    "or none", v);
	return -1;
}

static const struct conf_key *
key_find(const char *name)
{
	size_t i;

	for (i = 0; i < NKEYS; i++)
		if (strcmp(conf_keys[i].name, name) == 0)
			return &conf_keys[i];
	return NULL;
}

static char **
str_slot(struct conf *c, const struct conf_key *k)
{
	return (char **)(void *)((char *)c + k->off);
}

static int64_t *
num_slot(struct conf *c, const struct conf_key *k)
{
	return (int64_t *)(void *)((char *)c + k->off);
}

/*
 * Store a value given as text (a default, an environment variable or a
 * string setting) into c.  0, or -1 with why.
 */
static int
key_set_text(struct conf *c, const struct conf_key *k, const char *v,
    char *why, size_t whylen)
{
	int64_t n;
	size_t i;
	char *end;
	long long ll;

	switch (k->type) {
	case CT_STR:
		if (k->check != NULL && k->check(v, why, whylen) == -1)
			return -1;
		free(*str_slot(c, k));
		*str_slot(c, k) = xstrdup(v);
		return 0;
	case CT_ENUM:
		for (i = 0; k->choices[i] != NULL; i++)
			if (strcmp(v, k->choices[i]) == 0) {
				*num_slot(c, k) = (int64_t)i;
				return 0;
			}
		snprintf(why, whylen, "%s: \"%s\" is not one of the choices",
		    k->name, v);
		return -1;
	case CT_BOOL:
		if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0 ||
		    strcmp(v, "yes") == 0)
			n = 1;
		else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0 ||
		    strcmp(v, "no") == 0)
			n = 0;
		else {
			snprintf(why, whylen, "%s: \"%s\" is not a boolean",
			    k->name, v);
			return -1;
		}
		break;
	case CT_INT:
		errno = 0;
		ll = strtoll(v, &end, 10);
		if (v[0] == '\0' || *end != '\0' || errno != 0) {
			snprintf(why, whylen, "%s: \"%s\" is not an integer",
			    k->name, v);
			return -1;
		}
		n = ll;
		break;
	case CT_DURATION:
		if (conf_parse_duration(v, &n) == -1) {
			snprintf(why, whylen, "%s: bad duration \"%s\" (use "
			    "an integer with ms, s, m, h or d)", k->name, v);
			return -1;
		}
		break;
	case CT_SIZE:
		if (parse_size(v, &n) == -1) {
			snprintf(why, whylen, "%s: bad size \"%s\" (use an "
			    "integer with k, KiB, M, MiB, G or GiB)", k->name,
			    v);
			return -1;
		}
		break;
	default:
		snprintf(why, whylen, "%s: internal: bad type", k->name);
		return -1;
	}
	if (n < k->min || n > k->max) {
		snprintf(why, whylen, "%s: %s is out of range (%lld to %lld)",
		    k->name, v, (long long)k->min, (long long)k->max);
		return -1;
	}
	*num_slot(c, k) = n;
	return 0;
}

/* One libconfig setting into c: types checked against the key's. */
static int
key_set_setting(struct conf *c, const struct conf_key *k,
    const config_setting_t *s, char *why, size_t whylen)
{
	char num[32];
	int t = config_setting_type(s);

	switch (t) {
	case CONFIG_TYPE_STRING:
		if (k->type == CT_INT || k->type == CT_BOOL) {
			snprintf(why, whylen, "%s: expected %s, not a string",
			    k->name, k->type == CT_INT ? "an integer" :
			    "true or false");
			return -1;
		}
		return key_set_text(c, k, config_setting_get_string(s), why,
		    whylen);
	case CONFIG_TYPE_INT:
	case CONFIG_TYPE_INT64:
		if (k->type == CT_STR || k->type == CT_ENUM ||
		    k->type == CT_BOOL) {
			snprintf(why, whylen, "%s: expected %s, not a number",
			    k->name, k->type == CT_BOOL ? "true or false" :
			    "a string");
			return -1;
		}
		snprintf(num, sizeof(num), "%lld",
		    (long long)config_setting_get_int64(s));
		return key_set_text(c, k, num, why, whylen);
	case CONFIG_TYPE_BOOL:
		if (k->type != CT_BOOL) {
			snprintf(why, whylen, "%s: a boolean is not allowed "
			    "here", k->name);
			return -1;
		}
		return key_set_text(c, k, config_setting_get_bool(s) ?
		    "true" : "false", why, whylen);
	default:
		snprintf(why, whylen, "%s: unsupported value type", k->name);
		return -1;
	}
}

/*
 * The integer a setting's line holds as written, for a check of what
 * libconfig made of it: libconfig 1.5 (Debian's) keeps only the low 32
 * bits of an integer written without the L suffix, so 5000000000 reads
 * as 705032704 and 2147483648 as -2147483648, silently.  1 with *out,
 * 0 when the line cannot say (the name twice on it, a comment before the
 * value), -1 when the literal is beyond 64 bits too.  The literal is
 * found as libconfig writes one: the name, '=' or ':', then (on that
 * line or, past blank lines, a later one) a decimal or 0x number.
 */
static int
int_as_written(const config_setting_t *s, const char *path, long long *out)
{
	const char *file = config_setting_source_file(s);
	const char *name = config_setting_name(s), *p, *at = NULL, *q;
	size_t nlen = strlen(name), cap = 0;
	unsigned int want = config_setting_source_line(s), n = 0;
	char *line = NULL, *end;
	int found = 0, rc = 0;
	FILE *f;

	if ((f = fopen(file != NULL ? file : path, "r")) == NULL)
		return 0;
	while (n != want && getline(&line, &cap, f) != -1)
		n++;
	if (n != want)
		goto out;
	for (p = line; (p = strstr(p, name)) != NULL; p += nlen) {
		if (p > line && (isalnum((unsigned char)p[-1]) ||
		    strchr("_-*", p[-1]) != NULL))
			continue;
		q = p + nlen;
		while (*q == ' ' || *q == '\t')
			q++;
		if (*q != '=' && *q != ':')
			continue;
		at = q + 1;
		found++;
	}
	if (found != 1)
		goto out;
	/* The value may start a line or more below its name. */
	at += strspn(at, " \t\r\n");
	while (*at == '\0' && getline(&line, &cap, f) != -1)
		at = line + strspn(line, " \t\r\n");
	errno = 0;
	if (at[0] == '0' && (at[1] == 'x' || at[1] == 'X')) {
		unsigned long long u = strtoull(at + 2, &end, 16);

		if (u > LLONG_MAX)
			errno = ERANGE;
		*out = (long long)u;
	} else if (isdigit((unsigned char)at[at[0] == '-' || at[0] == '+']))
		*out = strtoll(at, &end, 10);
	else
		goto out;
	rc = errno != 0 ? -1 : 1;
out:
	free(line);
	fclose(f);
	return rc;
}

static int
walk(struct conf *c, const char *file, const config_setting_t *group,
    const char *prefix, char *err, size_t errlen)
{
	char name[256], why[512];
	const config_setting_t *s;
	const struct conf_key *k;
	long long v;
	int i, w, n = config_setting_length(group);

	for (i = 0; i < n; i++) {
		s = config_setting_get_elem(group, (unsigned)i);
		if (prefix[0] != '\0')
			snprintf(name, sizeof(name), "%s.%s", prefix,
			    config_setting_name(s));
		else
			snprintf(name, sizeof(name), "%s",
			    config_setting_name(s));
		if (config_setting_type(s) == CONFIG_TYPE_GROUP) {
			if (walk(c, file, s, name, err, errlen) == -1)
				return -1;
			continue;
		}
		if ((k = key_find(name)) == NULL) {
			snprintf(err, errlen, "%s:%d: unknown key \"%s\"", file,
			    config_setting_source_line(s), name);
			return -1;
		}
		w = config_setting_type(s) == CONFIG_TYPE_INT ?
		    int_as_written(s, file, &v) : 0;
		if (w == -1) {
			snprintf(err, errlen, "%s:%d: %s: the integer does not "
			    "fit in 64 bits", file,
			    config_setting_source_line(s), name);
			return -1;
		}
		if (w == 1 && v != config_setting_get_int(s)) {
			snprintf(err, errlen, "%s:%d: %s: %lld does not fit in "
			    "32 bits, and libconfig reads it as %d: write it "
			    "%lldL", file, config_setting_source_line(s), name,
			    v, config_setting_get_int(s), v);
			return -1;
		}
		if (key_set_setting(c, k, s, why, sizeof(why)) == -1) {
			snprintf(err, errlen, "%s:%d: %s", file,
			    config_setting_source_line(s), why);
			return -1;
		}
	}
	return 0;
}

void
conf_free(struct conf *c)
{
	size_t i;

	for (i = 0; i < NKEYS; i++)
		if (conf_keys[i].type == CT_STR) {
			free(*str_slot(c, &conf_keys[i]));
			*str_slot(c, &conf_keys[i]) = NULL;
		}
}

/*
 * Why libconfig could not read path.  It opens a directory and fails
 * reading it with errno left 0, which strerror() calls "Success".
 */
static const char *
io_error(const char *path, int e)
{
	struct stat st;

	if (e == 0 && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		e = EISDIR;
	return e != 0 ? strerror(e) : "an input/output error";
}

int
conf_load(struct conf *c, const char *path, char *err, size_t errlen)
{
	char why[512], host[200];
	config_t cf;
	const char *v;
	size_t i;
	int rc = -1;

	memset(c, 0, sizeof(*c));
	for (i = 0; i < NKEYS; i++)
		if (key_set_text(c, &conf_keys[i], conf_keys[i].def, why,
		    sizeof(why)) == -1) {
			snprintf(err, errlen, "default of %s", why);
			goto out;
		}

	if (path != NULL) {
		config_init(&cf);
		if (config_read_file(&cf, path) != CONFIG_TRUE) {
			if (config_error_type(&cf) == CONFIG_ERR_FILE_IO)
				snprintf(err, errlen, "%s: cannot read: %s",
				    path, io_error(path, errno));
			else
				snprintf(err, errlen, "%s:%d: %s",
				    config_error_file(&cf) ?
				    config_error_file(&cf) : path,
				    config_error_line(&cf),
				    config_error_text(&cf));
			config_destroy(&cf);
			goto out;
		}
		if (walk(c, path, config_root_setting(&cf), "", err,
		    errlen) == -1) {
			config_destroy(&cf);
			goto out;
		}
		config_destroy(&cf);
	}

	for (i = 0; i < NKEYS; i++) {
		if (conf_keys[i].env == NULL ||
		    (v = getenv(conf_keys[i].env)) == NULL)
			continue;
		if (key_set_text(c, &conf_keys[i], v, why, sizeof(why)) == -1) {
			snprintf(err, errlen, "environment %s: %s",
			    conf_keys[i].env, why);
			goto out;
		}
	}

	if (c->instance[0] == '\0') {
		if (gethostname(host, sizeof(host)) == -1)
			snprintf(host, sizeof(host), "localhost");
		host[sizeof(host) - 1] = '\0';
		free(c->instance);
		c->instance = xasprintf("%s:%ld", host, (long)getpid());
	}
	if (c->disp_timeout_ms > c->disp_max_timeout_ms) {
		snprintf(err, errlen, "%s: dispatcher.timeout is longer than "
		    "dispatcher.max_timeout", path ? path : "defaults");
		goto out;
	}
	rc = 0;
out:
	if (rc == -1)
		conf_free(c);
	return rc;
}

static void
describe(const struct conf_key *k, const struct conf *c, char *out,
    size_t outlen)
{
	int64_t n;

	if (k->type == CT_STR) {
		snprintf(out, outlen, "\"%s\"", *str_slot((struct conf *)c,
		    k));
		return;
	}
	n = *num_slot((struct conf *)c, k);
	if (k->type == CT_ENUM)
		snprintf(out, outlen, "%s", k->choices[n]);
	else if (k->type == CT_BOOL)
		snprintf(out, outlen, "%s", n ? "true" : "false");
	else
		snprintf(out, outlen, "%lld%s", (long long)n,
		    k->type == CT_DURATION ? "ms" : "");
}

int
conf_reload(const char *path, char *err, size_t errlen)
{
	struct conf next;
	const struct conf_key *k;
	char was[300], now[300];
	int64_t *live;
	size_t i;

	if (conf_load(&next, path, err, errlen) == -1)
		return -1;
	for (i = 0; i < NKEYS; i++) {
		k = &conf_keys[i];
		describe(k, &conf, was, sizeof(was));
		describe(k, &next, now, sizeof(now));
		if (strcmp(was, now) == 0 || strcmp(k->name, "instance") == 0)
			continue;
		if (!k->reloadable || k->type == CT_STR) {
			log_warnx("config: %s changed from %s to %s: needs a "
			    "restart, still using %s", k->name, was, now, was);
			continue;
		}
		live = num_slot(&conf, k);
		__atomic_store_n(live, *num_slot(&next, k), __ATOMIC_RELAXED);
		log_info("config: %s changed from %s to %s", k->name, was,
		    now);
	}
	conf_free(&next);
	return 0;
}

void
conf_print_keys(void)
{
	size_t i;

	for (i = 0; i < NKEYS; i++)
		printf("%s\n", conf_keys[i].name);
}
