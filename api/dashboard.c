/*
 * dashboard.c - the dashboard's static files: GET / (index.html) and GET
 * /static/{file} (CSS, JavaScript, images), read from one directory.
 *
 * Key decisions: the directory is web.dir when set; else, when this binary
 * runs from its build tree (config.status beside it), the source tree's
 * web/ (RETRYD_SRCDIR), so a developer sees the files being edited; else the
 * installed $(pkgdatadir)/web (RETRYD_WEBDIR).  It is chosen once and
 * logged.  A file name is one path segment of [A-Za-z0-9_.-] that does not
 * start with a dot and ends in a known extension, so no request can name
 * anything outside that directory; symbolic links are not followed and only
 * regular files of at most WEB_FILE_MAX bytes are served.  Files are read at
 * each request (they are a few kilobytes) with an ETag and
 * "Cache-Control: no-cache", so a browser revalidates cheaply (304) and an
 * upgrade shows at once.  The pages get a Content-Security-Policy that
 * allows only this origin's scripts, styles and API: the dashboard has no
 * inline script and loads nothing from elsewhere.  The files hold no data;
 * every number on them comes from the API with the user's key.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "conf.h"
#include "util/log.h"
#include "util/xmalloc.h"

#ifndef RETRYD_WEBDIR
#define RETRYD_WEBDIR	"/usr/local/share/retryd/web"
#endif

#define WEB_FILE_MAX	(4u << 20)
#define WEB_NAME_MAX	64

static const struct {
	const char	*ext;
	const char	*ctype;
} ctypes[] = {
	{ ".html", "text/html; charset=utf-8" },
	{ ".css", "text/css; charset=utf-8" },
	{ ".js", "text/javascript; charset=utf-8" },
	{ ".svg", "image/svg+xml" },
	{ ".png", "image/png" },
	{ ".ico", "image/x-icon" },
	{ ".txt", "text/plain; charset=utf-8" },
};

#define CSP	"default-src 'none'; script-src 'self'; style-src 'self'; " \
	"img-src 'self' data:; connect-src 'self'; base-uri 'none'; " \
	"form-action 'none'; frame-ancestors 'none'"

static pthread_once_t dir_once = PTHREAD_ONCE_INIT;
static char web_dir[PATH_MAX];

/* 1 when the running binary sits in a configured build tree. */
static int
in_build_tree(void)
{
	char exe[PATH_MAX], probe[PATH_MAX + 32], *slash;
	ssize_t n;

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return 0;
	exe[n] = '\0';
	if ((slash = strrchr(exe, '/')) == NULL)
		return 0;
	*slash = '\0';
	snprintf(probe, sizeof(probe), "%s/config.status", exe);
	return access(probe, F_OK) == 0;
}

static void
dir_choose(void)
{
	const char *how;

	if (conf.web_dir != NULL && conf.web_dir[0] != '\0') {
		snprintf(web_dir, sizeof(web_dir), "%s", conf.web_dir);
		how = "web.dir";
	} else if (in_build_tree()) {
		snprintf(web_dir, sizeof(web_dir), "%s/web", RETRYD_SRCDIR);
		how = "the source tree (running uninstalled)";
	} else {
		snprintf(web_dir, sizeof(web_dir), "%s", RETRYD_WEBDIR);
		how = "installed";
	}
	log_info("dashboard: files from %s (%s)", web_dir, how);
}

/* The content type for a valid name, or NULL when it must not be served. */
static const char *
name_ctype(const char *name)
{
	size_t i, len = strlen(name), el;

	if (len == 0 || len > WEB_NAME_MAX || name[0] == '.')
		return NULL;
	for (i = 0; i < len; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') ||
		    (name[i] >= 'A' && name[i] <= 'Z') ||
		    (name[i] >= '0' && name[i] <= '9') ||
		    name[i] == '_' || name[i] == '-' || name[i] == '.'))
			return NULL;
	for (i = 0; i < sizeof(ctypes) / sizeof(ctypes[0]); i++) {
		el = strlen(ctypes[i].ext);
		if (len > el && strcmp(name + len - el, ctypes[i].ext) == 0)
			return ctypes[i].ctype;
	}
	return NULL;
}

static void
not_found(struct api_req *req, const char *name)
{
	api_error(req, 404, "not_found", NULL, "no dashboard file %s", name);
}

static void
serve(struct api_req *req, const char *name)
{
	const char *ctype = name_ctype(name), *inm;
	char path[PATH_MAX + WEB_NAME_MAX + 2], etag[64];
	struct stat st;
	char *data = NULL;
	size_t got = 0;
	ssize_t n;
	int fd = -1;

	if (ctype == NULL) {
		not_found(req, name);
		return;
	}
	pthread_once(&dir_once, dir_choose);
	snprintf(path, sizeof(path), "%s/%s", web_dir, name);
	if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) == -1 ||
	    fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) ||
	    (uintmax_t)st.st_size > WEB_FILE_MAX) {
		if (fd == -1 && errno != ENOENT)
			log_warn("dashboard: %s", path);
		not_found(req, name);
		goto out;
	}
	snprintf(etag, sizeof(etag), "\"%jx-%jx-%lx\"",
	    (uintmax_t)st.st_size, (uintmax_t)st.st_mtim.tv_sec,
	    (unsigned long)st.st_mtim.tv_nsec);
	api_add_header(req, "Cache-Control", "no-cache");
	api_add_header(req, "ETag", etag);
	api_add_header(req, "X-Content-Type-Options", "nosniff");
	if (strncmp(ctype, "text/html", 9) == 0) {
		api_add_header(req, "Content-Security-Policy", CSP);
		api_add_header(req, "Referrer-Policy", "no-referrer");
		api_add_header(req, "X-Frame-Options", "DENY");
	}
	if ((inm = api_header(req, "If-None-Match")) != NULL &&
	    strcmp(inm, etag) == 0) {
		api_reply(req, 304, NULL, "", 0);
		goto out;
	}
	data = xmalloc((size_t)st.st_size + 1);
	while (got < (size_t)st.st_size) {
		n = read(fd, data + got, (size_t)st.st_size - got);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got != (size_t)st.st_size) {
		log_warn("dashboard: reading %s", path);
		api_error(req, 500, "internal", NULL, "cannot read %s", name);
		goto out;
	}
	api_reply(req, 200, ctype, data, got);
out:
	free(data);
	if (fd != -1)
		close(fd);
}

static void
index_page(struct api_req *req)
{
	serve(req, "index.html");
}

static void
static_file(struct api_req *req)
{
	serve(req, req->param[0]);
}

const struct api_route api_routes_dashboard[] = {
	{ "GET", "/", API_AUTH_NONE, index_page, "the dashboard", 0 },
	{ "GET", "/static/{file}", API_AUTH_NONE, static_file,
	    "the dashboard's scripts, styles and images", 0 },
	{ NULL, NULL, 0, NULL, NULL, 0 },
};
