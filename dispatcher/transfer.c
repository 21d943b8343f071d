/*
 * transfer.c - one callback: the easy handle, its headers and signature, the
 * libcurl callbacks, and the classification of what came back.
 *
 * Key decision: every socket is opened by our CURLOPT_OPENSOCKETFUNCTION,
 * which judges the address libcurl is about to connect to (after DNS, per
 * address tried), so the SSRF policy holds whatever a name resolves to.  The
 * response is read to at most DISP_READ_MAX bytes, of which capture_max are
 * kept: past that the write callback refuses more, libcurl aborts the
 * transfer, and since the status line was already read the outcome is still
 * that status ("response too large" goes in the error text).  A receiver
 * cannot make us download without end, and a normal response ends normally
 * so its connection stays in the keep-alive cache.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dispatcher/disp_int.h"
#include "util/clock.h"
#include "util/crypto.h"
#include "util/log.h"
#include "util/xmalloc.h"

/*
 * The header lines of a request, gathered as pieces and then laid out in one
 * allocation: the list's nodes first, then the lines' text.  libcurl reads a
 * struct curl_slist's data and next only and never frees CURLOPT_HTTPHEADER,
 * so one free() (disp_xfer_free) undoes it, where curl_slist_append() takes
 * two allocations and a copy per line.
 */
#define HDR_LINES	(DISP_HEADERS_MAX + 8)

struct hdr_line {
	const char	*name;
	const char	*sep;
	const char	*value;
	size_t		 nlen, vlen;
};

struct hdr_lines {
	struct hdr_line	 v[HDR_LINES];
	size_t		 n;
	size_t		 text;		/* bytes of text, NULs included */
};

/* The line name sep value ("" for neither). */
static void
hdr_add(struct hdr_lines *h, const char *name, const char *sep,
    const char *value)
{
	struct hdr_line *l = &h->v[h->n++];

	l->name = name;
	l->nlen = strlen(name);
	l->sep = sep;
	l->value = value;
	l->vlen = strlen(value);
	h->text += l->nlen + strlen(sep) + l->vlen + 1;
}

static struct curl_slist *
hdr_list(const struct hdr_lines *h)
{
	struct curl_slist *nodes;
	size_t i, sl;
	char *p;

	if (h->n == 0)
		return NULL;
	nodes = xmalloc(h->n * sizeof(*nodes) + h->text);
	p = (char *)(nodes + h->n);
	for (i = 0; i < h->n; i++) {
		const struct hdr_line *l = &h->v[i];

		nodes[i].data = p;
		nodes[i].next = i + 1 < h->n ? &nodes[i + 1] : NULL;
		sl = strlen(l->sep);
		memcpy(p, l->name, l->nlen);
		memcpy(p + l->nlen, l->sep, sl);
		memcpy(p + l->nlen + sl, l->value, l->vlen);
		p += l->nlen + sl + l->vlen;
		*p++ = '\0';
	}
	return nodes;
}

/* Decimal of v into b (at least 21 bytes); returns b. */
static char *
fmt_ll(char *b, long long v)
{
	char t[24];
	unsigned long long u;
	size_t n = 0, i = 0;

	u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
	do {
		t[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u > 0);
	if (v < 0)
		b[i++] = '-';
	while (n > 0)
		b[i++] = t[--n];
	b[i] = '\0';
	return b;
}

/* An identity that goes into a header value: short, no control byte. */
static int
value_clean(const char *s)
{
	if (strlen(s) > DISP_HEADER_NAME_MAX)
		return 0;
	for (; *s != '\0'; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

/* A later header of the same name wins: the job's over the topic's. */
static int
overridden(const struct disp_request *r, size_t i)
{
	size_t j;

	for (j = i + 1; j < r->nheaders; j++)
		if (r->headers[j].name != NULL &&
		    strcasecmp(r->headers[j].name, r->headers[i].name) == 0)
			return 1;
	return 0;
}

static int
build_headers(struct disp_xfer *x, struct disp_sign_cache *keys, char *why,
    size_t whylen)
{
	const struct disp_request *r = x->req;
	char sig[3 + BASE64_ENCODED_LEN(SHA256_LEN)], tsb[24], attb[24];
	struct hdr_lines h;
	int have_ctype = 0;
	long long ts;
	size_t i;

	if (!value_clean(r->job_id) || !value_clean(r->tenant) ||
	    !value_clean(r->topic)) {
		snprintf(why, whylen, "job id, tenant or topic too long "
		    "or holds a control byte");
		return -1;
	}
	if (r->nheaders > DISP_HEADERS_MAX) {
		snprintf(why, whylen, "more than %d headers", DISP_HEADERS_MAX);
		return -1;
	}
	h.n = 0;
	h.text = 0;
	for (i = 0; i < r->nheaders; i++) {
		const struct disp_header *c = &r->headers[i];

		if (!disp_header_valid(c->name, c->value)) {
			snprintf(why, whylen, "header %.64s refused: bad name, "
			    "or CR, LF or a control byte in its value",
			    c->name != NULL ? c->name : "(null)");
			return -1;
		}
		if (disp_header_reserved(c->name) || overridden(r, i))
			continue;
		if (strcasecmp(c->name, "content-type") == 0)
			have_ctype = 1;
		/* "Name;" is libcurl's way to send an empty value. */
		hdr_add(&h, c->name, c->value[0] != '\0' ? ": " : ";",
		    c->value);
	}
	if (!have_ctype)
		hdr_add(&h, "Content-Type", ": ", "application/json");
	ts = (long long)(x->started_ms / 1000);
	hdr_add(&h, "webhook-id", ": ", r->job_id);
	hdr_add(&h, "webhook-timestamp", ": ", fmt_ll(tsb, ts));
	if (r->secret_len > 0 && r->secret_len <= DISP_SECRET_MAX &&
	    disp_sign(keys, r->secret, r->secret_len, r->job_id, ts, r->body,
	    r->body_len, sig, sizeof(sig)) == 0)
		hdr_add(&h, "webhook-signature", ": ", sig);
	hdr_add(&h, "retryd-attempt", ": ", fmt_ll(attb, r->attempt));
	hdr_add(&h, "retryd-topic", ": ", r->topic);
	hdr_add(&h, "retryd-tenant", ": ", r->tenant);
	/* No 100-continue round trip: receivers answer small bodies fast.
	 * "Expect:" with nothing after the colon removes the header. */
	hdr_add(&h, "Expect:", "", "");
	x->hdrs = hdr_list(&h);
	return 0;
}

static size_t
write_cb(char *p, size_t size, size_t nmemb, void *arg)
{
	struct disp_xfer *x = arg;
	size_t n = size * nmemb, room;

	room = x->excerpt.max - x->excerpt.len;
	if (room > 0)
		(void)buf_append(&x->excerpt, p, n < room ? n : room);
	x->body_bytes += n;
	if (x->body_bytes > DISP_READ_MAX) {
		x->body_too_large = 1;
		return 0;	/* libcurl aborts with CURLE_WRITE_ERROR */
	}
	return n;
}

static size_t
header_cb(char *p, size_t size, size_t nmemb, void *arg)
{
	struct disp_xfer *x = arg;
	size_t n = size * nmemb, i, j;

	x->header_bytes += n;
	if (x->header_bytes > DISP_HEADER_READ_MAX) {
		x->headers_too_large = 1;
		return 0;
	}
	/* A new status line starts a new block (after a 1xx): forget the
	 * last one's Retry-After. */
	if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
		x->retry_after[0] = '\0';
		return n;
	}
	if (n <= 12 || strncasecmp(p, "retry-after:", 12) != 0)
		return n;
	for (i = 12; i < n && (p[i] == ' ' || p[i] == '\t'); i++)
		;
	for (j = n; j > i && (p[j - 1] == '\r' || p[j - 1] == '\n' ||
	    p[j - 1] == ' ' || p[j - 1] == '\t'); j--)
		;
	if (j - i >= sizeof(x->retry_after))
		snprintf(x->retry_after, sizeof(x->retry_after), "%s", "?");
	else {
		memcpy(x->retry_after, p + i, j - i);
		x->retry_after[j - i] = '\0';
	}
	return n;
}

static curl_socket_t
opensocket_cb(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct disp_xfer *x = arg;
	char ip[INET6_ADDRSTRLEN] = "?";
	const void *src = NULL;
	const char *why;
	int fd;

	if (purpose != CURLSOCKTYPE_IPCXN) {
		snprintf(x->blocked, sizeof(x->blocked), "%s",
		    "not an outbound connection");
		return CURL_SOCKET_BAD;
	}
	why = disp_addr_refusal(&a->addr, x->allow_private);
	if (why != NULL) {
		if (a->family == AF_INET)
			src = &((struct sockaddr_in *)(void *)&a->addr)
			    ->sin_addr;
		else if (a->family == AF_INET6)
			src = &((struct sockaddr_in6 *)(void *)&a->addr)
			    ->sin6_addr;
		if (src != NULL)
			inet_ntop(a->family, src, ip, sizeof(ip));
		snprintf(x->blocked, sizeof(x->blocked), "%s %s", why, ip);
		return CURL_SOCKET_BAD;
	}
	fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
	return fd == -1 ? CURL_SOCKET_BAD : fd;
}

/*
 * CURLOPT_PREREQFUNCTION: called once a connection is ready for the request,
 * before it is sent.  When a reused keep-alive connection ends without an
 * answer, libcurl sends the request again on another one (up to five
 * times), which suits a GET; a callback's POST may have been read and acted
 * on.  So a second send is refused: the attempt fails as a connection error
 * and the job's schedule decides when it runs again.
 */
#if LIBCURL_VERSION_NUM >= 0x075000
static int
prereq_cb(void *arg, char *primary_ip, char *local_ip, int primary_port,
    int local_port)
{
	struct disp_xfer *x = arg;

	(void)primary_ip;
	(void)local_ip;
	(void)primary_port;
	(void)local_port;
	if (x->sends++ == 0)
		return CURL_PREREQFUNC_OK;
	return CURL_PREREQFUNC_ABORT;
}
#endif

#define SETOPT(opt, val) do {						\
	if (curl_easy_setopt(x->easy, opt, val) != CURLE_OK) {		\
		snprintf(why, whylen, "libcurl refused %s", #opt);	\
		goto out;						\
	}								\
} while (0)

int
disp_xfer_setup(struct disp_xfer *x, const char *user_agent, CURLSH *share,
    struct disp_sign_cache *keys, char *why, size_t whylen)
{
	const struct disp_request *r = x->req;
	long timeout;
	int ret = -1;

	if (strlen(r->url) > DISP_URL_MAX) {
		snprintf(why, whylen, "URL longer than %d bytes", DISP_URL_MAX);
		goto out;
	}
	if (build_headers(x, keys, why, whylen) == -1)
		goto out;
	if ((x->easy = curl_easy_init()) == NULL) {
		snprintf(why, whylen, "curl_easy_init failed");
		goto out;
	}
	timeout = r->timeout_ms > 0 ? (long)r->timeout_ms :
	    DISP_TIMEOUT_DEFAULT_MS;
	SETOPT(CURLOPT_PRIVATE, x);
	SETOPT(CURLOPT_URL, r->url);
#if LIBCURL_VERSION_NUM >= 0x075500
	SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
#else
	SETOPT(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	SETOPT(CURLOPT_POST, 1L);
	SETOPT(CURLOPT_POSTFIELDS, r->body != NULL ? r->body : "");
	SETOPT(CURLOPT_POSTFIELDSIZE_LARGE,
	    (curl_off_t)(r->body != NULL ? r->body_len : 0));
	SETOPT(CURLOPT_HTTPHEADER, x->hdrs);
	SETOPT(CURLOPT_USERAGENT, user_agent);
	SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
	SETOPT(CURLOPT_NOSIGNAL, 1L);
	SETOPT(CURLOPT_TIMEOUT_MS, timeout);
	SETOPT(CURLOPT_PROXY, "");	/* never a proxy from the environment */
	SETOPT(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
	SETOPT(CURLOPT_ERRORBUFFER, x->errbuf);
	SETOPT(CURLOPT_WRITEFUNCTION, write_cb);
	SETOPT(CURLOPT_WRITEDATA, x);
	SETOPT(CURLOPT_HEADERFUNCTION, header_cb);
	SETOPT(CURLOPT_HEADERDATA, x);
	SETOPT(CURLOPT_OPENSOCKETFUNCTION, opensocket_cb);
	SETOPT(CURLOPT_OPENSOCKETDATA, x);
	if (share != NULL)
		SETOPT(CURLOPT_SHARE, share);
#if LIBCURL_VERSION_NUM >= 0x075000
	SETOPT(CURLOPT_PREREQFUNCTION, prereq_cb);
	SETOPT(CURLOPT_PREREQDATA, x);
#endif
	ret = 0;
out:
	return ret;
}

static enum schedule_outcome_kind
classify(CURLcode rc)
{
	switch (rc) {
	case CURLE_OPERATION_TIMEDOUT:
		return SCHEDULE_TIMEOUT;
	case CURLE_COULDNT_CONNECT:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return SCHEDULE_CONNECT;
	case CURLE_COULDNT_RESOLVE_HOST:
		return SCHEDULE_DNS;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_ENGINE_INITFAILED:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_SHUTDOWN_FAILED:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
	case CURLE_USE_SSL_FAILED:
#if LIBCURL_VERSION_NUM >= 0x074900
	case CURLE_SSL_CLIENTCERT:
#endif
		return SCHEDULE_TLS;
	default:
		return SCHEDULE_ERROR;
	}
}

static void
result_status(struct disp_xfer *x, long status, struct disp_result *res)
{
	res->http_status = (int)status;
	res->kind = status >= 200 && status <= 299 ? SCHEDULE_OK :
	    SCHEDULE_HTTP;
	if ((status == 429 || status == 503) && x->retry_after[0] != '\0' &&
	    schedule_parse_retry_after(x->retry_after, clock_wall_ms(),
	    &res->retry_after_ms) == -1) {
		res->retry_after_ms = -1;
		log_obj(LOG_LVL_DEBUG, &(struct log_obj){ x->req->tenant,
		    x->req->topic, x->req->job_id, x->req->attempt },
		    "ignoring unparsable Retry-After");
	}
}

void
disp_xfer_result(struct disp_xfer *x, CURLcode rc, struct disp_result *res)
{
	curl_off_t total_us = 0;
	long status = 0;

	memset(res, 0, sizeof(*res));
	res->cookie = x->req->cookie;
	res->req = x->req;
	res->retry_after_ms = -1;
	res->started_ms = x->started_ms;
	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	if (curl_easy_getinfo(x->easy, CURLINFO_TOTAL_TIME_T, &total_us) ==
	    CURLE_OK && total_us > 0)
		res->latency_ms = (int64_t)(total_us / 1000);

	if (rc == CURLE_OK && status > 0)
		result_status(x, status, res);
	else if (rc == CURLE_WRITE_ERROR && x->body_too_large && status > 0) {
		result_status(x, status, res);
		snprintf(res->error, sizeof(res->error), "response body longer "
		    "than %d bytes; the rest was not read", DISP_READ_MAX);
	} else if (x->blocked[0] != '\0') {
		res->kind = SCHEDULE_BLOCKED;
		snprintf(res->error, sizeof(res->error),
		    "target address refused: %s", x->blocked);
	} else if (rc == CURLE_ABORTED_BY_CALLBACK && x->sends > 1) {
		res->kind = SCHEDULE_CONNECT;
		snprintf(res->error, sizeof(res->error), "the connection "
		    "closed without an answer; the request was not sent "
		    "again");
	} else if (rc == CURLE_WRITE_ERROR && x->headers_too_large) {
		res->kind = SCHEDULE_ERROR;
		snprintf(res->error, sizeof(res->error), "response headers "
		    "longer than %d bytes", DISP_HEADER_READ_MAX);
	} else {
		res->kind = rc == CURLE_OK ? SCHEDULE_ERROR : classify(rc);
		snprintf(res->error, sizeof(res->error), "%s",
		    x->errbuf[0] != '\0' ? x->errbuf : curl_easy_strerror(rc));
	}
	res->body_excerpt = buf_steal(&x->excerpt, &res->body_excerpt_len);
}

void
disp_xfer_free(struct disp_xfer *x)
{
	if (x == NULL)
		return;
	if (x->easy != NULL)
		curl_easy_cleanup(x->easy);
	free(x->hdrs);		/* one block: hdr_list() */
	buf_free(&x->excerpt);
	disp_request_free(x->req);
	free(x);
}
