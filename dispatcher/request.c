/*
 * request.c - building, validating and freeing a struct disp_request.
 *
 * Key decision: header syntax is checked twice, when a header is added (so the
 * API can answer 400) and again just before sending (transfer.c), because a
 * request may be filled by hand; the rules live here once.  Names must be
 * RFC 9110 tokens; values may hold no control byte but tab, so no header can
 * smuggle a CR LF into the request.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dispatcher/dispatcher.h"
#include "util/crypto.h"
#include "util/xmalloc.h"

struct disp_request *
disp_request_new(void)
{
	struct disp_request *r;

	r = xcalloc(1, sizeof(*r));
	r->timeout_ms = DISP_TIMEOUT_DEFAULT_MS;
	return r;
}

void
disp_request_free(struct disp_request *r)
{
	size_t i;

	if (r == NULL)
		return;
	for (i = 0; i < r->nheaders; i++) {
		free(r->headers[i].name);
		free(r->headers[i].value);
	}
	free(r->headers);
	free(r->url);
	free(r->body);
	free(r->tenant);
	free(r->topic);
	free(r->job_id);
	explicit_bzero(r->secret, sizeof(r->secret));
	free(r);
}

static int
is_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9'))
		return 1;
	return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

int
disp_header_valid(const char *name, const char *value)
{
	const unsigned char *p;
	size_t n;

	if (name == NULL || value == NULL)
		return 0;
	n = strlen(name);
	if (n == 0 || n > DISP_HEADER_NAME_MAX)
		return 0;
	for (p = (const unsigned char *)name; *p != '\0'; p++)
		if (!is_tchar(*p))
			return 0;
	if (strlen(value) > DISP_HEADER_VALUE_MAX)
		return 0;
	for (p = (const unsigned char *)value; *p != '\0'; p++)
		if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
			return 0;
	return 1;
}

int
disp_header_reserved(const char *name)
{
	static const char *const exact[] = {
		"host", "content-length", "transfer-encoding", "connection",
		"expect", "upgrade", "te", "trailer", "keep-alive",
	};
	size_t i;

	if (strncasecmp(name, "webhook-", 8) == 0 ||
	    strncasecmp(name, "retryd-", 7) == 0 ||
	    strncasecmp(name, "proxy-", 6) == 0)
		return 1;
	for (i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
		if (strcasecmp(name, exact[i]) == 0)
			return 1;
	return 0;
}

int
disp_request_add_header(struct disp_request *r, const char *name,
    const char *value)
{
	struct disp_header *h;

	if (!disp_header_valid(name, value)) {
		errno = (name != NULL && value != NULL &&
		    (strlen(name) > DISP_HEADER_NAME_MAX ||
		    strlen(value) > DISP_HEADER_VALUE_MAX)) ? E2BIG : EINVAL;
		return -1;
	}
	if (r->nheaders >= DISP_HEADERS_MAX) {
		errno = E2BIG;
		return -1;
	}
	r->headers = xreallocarray(r->headers, r->nheaders + 1,
	    sizeof(*r->headers));
	h = &r->headers[r->nheaders++];
	h->name = xstrdup(name);
	h->value = xstrdup(value);
	return 0;
}

int
disp_request_set_secret(struct disp_request *r, const char *whsec)
{
	uint8_t key[BASE64_ENCODED_LEN(DISP_SECRET_MAX)];
	ssize_t n;
	int ret = -1;

	if (whsec == NULL) {
		errno = EINVAL;
		goto out;
	}
	if (strncmp(whsec, "whsec_", 6) == 0)
		whsec += 6;
	n = base64_decode(whsec, strlen(whsec), key, sizeof(key));
	if (n <= 0 || (size_t)n > DISP_SECRET_MAX) {
		errno = EINVAL;
		goto out;
	}
	memcpy(r->secret, key, (size_t)n);
	r->secret_len = (size_t)n;
	ret = 0;
out:
	explicit_bzero(key, sizeof(key));
	return ret;
}
