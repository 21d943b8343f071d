/*
 * policy.c - the SSRF policy: which addresses a callback may reach, and the
 * registration-time check of a callback URL.
 *
 * Key decision: the policy is one table of special-purpose prefixes (RFC 6890
 * and its IPv6 registry) searched most specific first, and an IPv6 address
 * that carries an IPv4 one (mapped, compatible, NAT64, 6to4) is judged by the
 * IPv4 address, so ::ffff:127.0.0.1 is loopback.  The table decides; the
 * transfer code enforces it on every socket it opens (transfer.c), which is
 * what stops DNS rebinding; disp_url_check() only gives an early answer for
 * literal addresses.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "dispatcher/dispatcher.h"

struct disp_prefix {
	int		 family;
	uint8_t		 addr[16];
	int		 bits;
	const char	*name;
	int		 always;	/* refused even with allow_private */
};

/* Most specific first within each family: the first match wins. */
static const struct disp_prefix disp_prefixes[] = {
	{ AF_INET, { 169, 254, 169, 254 }, 32, "metadata", 0 },
	{ AF_INET, { 255, 255, 255, 255 }, 32, "broadcast", 1 },
	{ AF_INET, { 0 }, 8, "unspecified", 0 },
	{ AF_INET, { 10 }, 8, "private", 0 },
	{ AF_INET, { 100, 64 }, 10, "shared (CGNAT)", 0 },
	{ AF_INET, { 127 }, 8, "loopback", 0 },
	{ AF_INET, { 169, 254 }, 16, "link-local", 0 },
	{ AF_INET, { 172, 16 }, 12, "private", 0 },
	{ AF_INET, { 192, 0, 0 }, 24, "reserved", 0 },
	{ AF_INET, { 192, 0, 2 }, 24, "documentation", 0 },
	{ AF_INET, { 192, 168 }, 16, "private", 0 },
	{ AF_INET, { 198, 18 }, 15, "benchmarking", 0 },
	{ AF_INET, { 198, 51, 100 }, 24, "documentation", 0 },
	{ AF_INET, { 203, 0, 113 }, 24, "documentation", 0 },
	{ AF_INET, { 224 }, 4, "multicast", 1 },
	{ AF_INET, { 240 }, 4, "reserved", 0 },

	{ AF_INET6, { 0 }, 128, "unspecified", 0 },
	{ AF_INET6, { [15] = 1 }, 128, "loopback", 0 },
	{ AF_INET6, { 0x00, 0x64, 0xff, 0x9b, 0x00, 0x01 }, 48,
	  "NAT64 local-use", 0 },
	{ AF_INET6, { 0x01 }, 64, "discard", 0 },
	{ AF_INET6, { 0x20, 0x01, 0x0d, 0xb8 }, 32, "documentation", 0 },
	{ AF_INET6, { 0x20, 0x01 }, 32, "Teredo", 0 },
	{ AF_INET6, { 0xfc }, 7, "unique-local", 0 },
	{ AF_INET6, { 0xfe, 0x80 }, 10, "link-local", 0 },
	{ AF_INET6, { 0xfe, 0xc0 }, 10, "site-local", 0 },
	{ AF_INET6, { 0xff }, 8, "multicast", 1 },
};

static int
prefix_match(const uint8_t *a, const uint8_t *p, int bits)
{
	int full = bits / 8, rest = bits % 8;
	uint8_t mask;

	if (memcmp(a, p, (size_t)full) != 0)
		return 0;
	if (rest == 0)
		return 1;
	mask = (uint8_t)(0xff << (8 - rest));
	return (a[full] & mask) == (p[full] & mask);
}

static const struct disp_prefix *
prefix_lookup(int family, const uint8_t *a)
{
	size_t i;

	for (i = 0; i < sizeof(disp_prefixes) / sizeof(disp_prefixes[0]); i++)
		if (disp_prefixes[i].family == family &&
		    prefix_match(a, disp_prefixes[i].addr,
		    disp_prefixes[i].bits))
			return &disp_prefixes[i];
	return NULL;
}

/* The IPv4 address an IPv6 one carries, if it is of a form that does. */
static int
embedded_v4(const uint8_t *a, uint8_t v4[4])
{
	static const uint8_t mapped[12] = { [10] = 0xff, [11] = 0xff };
	static const uint8_t compat[12] = { 0 };
	static const uint8_t nat64[12] = { 0x00, 0x64, 0xff, 0x9b };

	if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0 ||
	    memcmp(a, compat, 12) == 0) {
		memcpy(v4, a + 12, 4);
		return 1;
	}
	if (a[0] == 0x20 && a[1] == 0x02) {	/* 6to4: 2002:V4::/48 */
		memcpy(v4, a + 2, 4);
		return 1;
	}
	return 0;
}

static const struct disp_prefix *
addr_class(const struct sockaddr *sa)
{
	const struct disp_prefix *p;
	const uint8_t *a;
	uint8_t v4[4];

	if (sa->sa_family == AF_INET) {
		a = (const uint8_t *)
		    &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
		return prefix_lookup(AF_INET, a);
	}
	a = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
	/* :: and ::1 lie inside ::/96 but are IPv6 addresses of their own. */
	if ((p = prefix_lookup(AF_INET6, a)) != NULL && p->bits == 128)
		return p;
	if (embedded_v4(a, v4))
		return prefix_lookup(AF_INET, v4);
	return p;
}

const char *
disp_addr_refusal(const struct sockaddr *sa, int allow_private)
{
	const struct disp_prefix *p;

	if (sa == NULL ||
	    (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
		return "unsupported address family";
	if ((p = addr_class(sa)) == NULL)
		return NULL;
	if (allow_private && !p->always)
		return NULL;
	return p->name;
}

int
disp_addr_allowed(const struct sockaddr *sa, int allow_private)
{
	return disp_addr_refusal(sa, allow_private) == NULL;
}

static void
set_why(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
set_why(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	if (why == NULL || whylen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
}

/* "localhost", "localhost.", "x.localhost" (RFC 6761: always loopback). */
static int
is_localhost(const char *host)
{
	size_t n = strlen(host);

	if (n > 0 && host[n - 1] == '.')
		n--;
	if (n == 9 && strncasecmp(host, "localhost", 9) == 0)
		return 1;
	return n > 10 && strncasecmp(host + n - 10, ".localhost", 10) == 0;
}

/*
 * NULL when host (no brackets) is spelled as a resolver takes it: labels
 * of ASCII letters, digits, hyphens and underscores (container networks
 * name hosts so), one trailing dot at most, and a last label not all
 * digits (that is an IPv4 address, checked apart); else why not.  curl
 * refuses the rest only when it connects, so a topic would take a
 * callback URL that no attempt can reach.
 */
static const char *
host_syntax(const char *host)
{
	size_t i, n = strlen(host), label = 0, digits = 0;

	if (n > 0 && host[n - 1] == '.')
		n--;
	if (n == 0)
		return "the host is empty";
	for (i = 0; i < n; i++) {
		char c = host[i];

		if (c == '.') {
			if (label == 0)
				return "the host has an empty label";
			label = digits = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '-' || c == '_'))
			return "the host must be ASCII letters, digits, dots, "
			    "hyphens and underscores (an internationalized "
			    "name in its xn-- form)";
		label++;
		if (c >= '0' && c <= '9')
			digits++;
	}
	if (label == digits)
		return "the host is not a valid IPv4 address, and a name "
		    "cannot end in a label of digits";
	return NULL;
}

/* Judges a literal address host now; 1 when it was one. */
static int
check_literal(const char *host, int allow_private, const char **refusal)
{
	struct sockaddr_in6 s6;
	struct sockaddr_in s4;
	char tmp[INET6_ADDRSTRLEN + 2];
	size_t n = strlen(host);

	memset(&s4, 0, sizeof(s4));
	memset(&s6, 0, sizeof(s6));
	if (n > 2 && host[0] == '[' && host[n - 1] == ']' &&
	    n - 2 < sizeof(tmp)) {
		memcpy(tmp, host + 1, n - 2);
		tmp[n - 2] = '\0';
		if (inet_pton(AF_INET6, tmp, &s6.sin6_addr) != 1)
			return 0;
		s6.sin6_family = AF_INET6;
		*refusal = disp_addr_refusal((struct sockaddr *)&s6,
		    allow_private);
		return 1;
	}
	/* inet_aton also takes 127.1, 0x7f.1 and 2130706433, as the resolver
	 * does. */
	if (inet_aton(host, &s4.sin_addr) != 0) {
		s4.sin_family = AF_INET;
		*refusal = disp_addr_refusal((struct sockaddr *)&s4,
		    allow_private);
		return 1;
	}
	return 0;
}

int
disp_url_check(const char *url, int allow_private, char *why, size_t whylen)
{
	const char *refusal = NULL, *bad;
	char *scheme = NULL, *host = NULL, *user = NULL, *port = NULL;
	size_t n;
	CURLUcode uc;
	CURLU *u = NULL;
	int ret = -1;

	set_why(why, whylen, "%s", "");
	if (url == NULL || *url == '\0') {
		set_why(why, whylen, "%s", "empty URL");
		goto out;
	}
	if (strlen(url) > DISP_URL_MAX) {
		set_why(why, whylen, "%s", "URL longer than 4096 bytes");
		goto out;
	}
	if ((u = curl_url()) == NULL) {
		set_why(why, whylen, "%s", "out of memory");
		goto out;
	}
	if ((uc = curl_url_set(u, CURLUPART_URL, url, 0)) != CURLUE_OK) {
#if LIBCURL_VERSION_NUM >= 0x075000
		set_why(why, whylen, "malformed URL: %s",
		    curl_url_strerror(uc));
#else
		set_why(why, whylen, "%s", "malformed URL");
#endif
		goto out;
	}
	if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    (strcasecmp(scheme, "http") != 0 &&
	    strcasecmp(scheme, "https") != 0)) {
		set_why(why, whylen, "%s",
		    "only http and https URLs are allowed");
		goto out;
	}
	if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK) {
		set_why(why, whylen, "%s", "credentials in the URL are not "
		    "allowed; send them in a header");
		goto out;
	}
	if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
	    *host == '\0') {
		set_why(why, whylen, "%s", "URL has no host");
		goto out;
	}
	if (curl_url_get(u, CURLUPART_PORT, &port, 0) == CURLUE_OK &&
	    strcmp(port, "0") == 0) {
		set_why(why, whylen, "%s", "port 0 is not allowed");
		goto out;
	}
	/* "127.0.0.1." is 127.0.0.1 to the resolver. */
	if ((n = strlen(host)) > 1 && host[n - 1] == '.' && host[0] != '[')
		host[n - 1] = '\0';
	if (check_literal(host, allow_private, &refusal)) {
		if (refusal != NULL) {
			set_why(why, whylen, "target address refused: %s",
			    refusal);
			goto out;
		}
	} else if (host[0] != '[' && (bad = host_syntax(host)) != NULL) {
		set_why(why, whylen, "%s", bad);
		goto out;
	} else if (!allow_private && is_localhost(host)) {
		set_why(why, whylen, "%s", "target address refused: loopback");
		goto out;
	}
	ret = 0;
out:
	curl_free(port);
	curl_free(user);
	curl_free(host);
	curl_free(scheme);
	curl_url_cleanup(u);
	return ret;
}
