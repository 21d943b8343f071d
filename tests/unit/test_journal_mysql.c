/*
 * test_journal_mysql.c - the MySQL backend of the journal tests: a private
 * mariadbd started through tests/mariadb.sh (or the server named by
 * RETRYD_TEST_MYSQL_URL), and direct SQL on it through libmariadb.
 *
 * Key decision: the script runs with fork/exec and a pipe, never through a
 * shell command line, and its one line of output is the URL.  The cases are
 * skipped only when mariadbd is not installed at all; a server that is
 * installed but fails to start fails them, with the script's reason.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mysql.h>

#include "journal/internal.h"
#include "tests/unit/test_journal.h"

static int
executable(const char *path)
{
	return access(path, X_OK) == 0;
}

static int
mariadbd_installed(void)
{
	static const char *const dirs[] = { "/usr/sbin", "/usr/local/sbin",
	    "/usr/bin", "/usr/local/bin", NULL };
	const char *path = getenv("PATH");
	char buf[1024];
	size_t i;

	for (i = 0; dirs[i] != NULL; i++) {
		snprintf(buf, sizeof(buf), "%s/mariadbd", dirs[i]);
		if (executable(buf))
			return 1;
		snprintf(buf, sizeof(buf), "%s/mysqld", dirs[i]);
		if (executable(buf))
			return 1;
	}
	while (path != NULL && *path != '\0') {
		const char *colon = strchr(path, ':');
		size_t n = colon != NULL ? (size_t)(colon - path) :
		    strlen(path);

		snprintf(buf, sizeof(buf), "%.*s/mariadbd", (int)n, path);
		if (n > 0 && executable(buf))
			return 1;
		path = colon != NULL ? colon + 1 : NULL;
	}
	return 0;
}

static int
find_script(char *out, size_t outlen)
{
	static const char *const rel[] = { "tests/mariadb.sh",
	    "../tests/mariadb.sh", "../../tests/mariadb.sh", NULL };
	const char *src = getenv("RETRYD_SRCDIR");
	size_t i;

	if (src != NULL && *src != '\0') {
		snprintf(out, outlen, "%s/tests/mariadb.sh", src);
		if (access(out, R_OK) == 0)
			return 0;
	}
#ifdef RETRYD_SRCDIR
	snprintf(out, outlen, "%s/tests/mariadb.sh", RETRYD_SRCDIR);
	if (access(out, R_OK) == 0)
		return 0;
#endif
	for (i = 0; rel[i] != NULL; i++) {
		snprintf(out, outlen, "%s", rel[i]);
		if (access(out, R_OK) == 0)
			return 0;
	}
	return -1;
}

/* Run tests/mariadb.sh CMD DIR; its stdout (first line) into out. */
static int
run_script(struct tb *b, const char *cmd, char *out, size_t outlen)
{
	char script[1024], owner[32];
	int fds[2], status;
	size_t n = 0;
	ssize_t r;
	pid_t pid;

	if (find_script(script, sizeof(script)) != 0) {
		snprintf(b->why, sizeof(b->why), "tests/mariadb.sh not found "
		    "(set RETRYD_SRCDIR)");
		return -1;
	}
	snprintf(owner, sizeof(owner), "%ld", (long)getpid());
	if (pipe(fds) != 0)
		return -1;
	if ((pid = fork()) < 0) {
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid == 0) {
		/* A crash of this test must not leave the server running. */
		setenv("MARIADB_SH_OWNER", owner, 1);
		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		execlp("bash", "bash", script, cmd, b->dir, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	while (out != NULL && n + 1 < outlen &&
	    (r = read(fds[0], out + n, outlen - n - 1)) != 0) {
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		n += (size_t)r;
	}
	if (out != NULL) {
		out[n] = '\0';
		out[strcspn(out, "\r\n")] = '\0';
	}
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		snprintf(b->why, sizeof(b->why), "tests/mariadb.sh %s %s "
		    "failed (see its output above)", cmd, b->dir);
		return -1;
	}
	return 0;
}

void
tbm_setup(struct tb *b)
{
	const char *env = getenv("RETRYD_TEST_MYSQL_URL");
	const char *tmp = getenv("TMPDIR");

	b->tried = 1;
	if (env != NULL && *env != '\0') {
		snprintf(b->url, sizeof(b->url), "%s", env);
		b->available = 1;
		return;
	}
	if (!mariadbd_installed()) {
		b->skip = 1;
		snprintf(b->why, sizeof(b->why), "mariadbd is not installed "
		    "and RETRYD_TEST_MYSQL_URL is not set");
		return;
	}
	snprintf(b->dir, sizeof(b->dir), "%s/retryd-mysql-XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	if (mkdtemp(b->dir) == NULL) {
		snprintf(b->why, sizeof(b->why), "mkdtemp: %s",
		    strerror(errno));
		return;
	}
	b->own_server = 1;
	if (run_script(b, "start", b->url, sizeof(b->url)) != 0 ||
	    strncmp(b->url, "mysql://", 8) != 0) {
		if (b->why[0] == '\0')
			snprintf(b->why, sizeof(b->why), "tests/mariadb.sh "
			    "printed no URL");
		return;
	}
	b->available = 1;
}

void
tbm_teardown(struct tb *b)
{
	if (b->own_server)
		(void)run_script(b, "destroy", NULL, 0);
	b->own_server = 0;
	b->available = 0;
}

int
tbm_stop(struct tb *b)
{
	return b->own_server ? run_script(b, "stop", NULL, 0) : -1;
}

int
tbm_start(struct tb *b)
{
	char url[TB_URL_MAX];

	if (!b->own_server)
		return -1;
	return run_script(b, "start", url, sizeof(url));
}

static MYSQL *
tbm_connect(struct tb *b)
{
	struct jrnl_url u;
	char why[256];
	MYSQL *my;

	if (jrnl_url_parse(b->url, &u, why, sizeof(why)) != JRNL_OK)
		return NULL;
	if ((my = mysql_init(NULL)) != NULL &&
	    mysql_real_connect(my, u.host, u.user, u.pass, u.db, u.port,
	    u.socket, CLIENT_MULTI_STATEMENTS) == NULL) {
		fprintf(stderr, "# mysql: %s\n", mysql_error(my));
		mysql_close(my);
		my = NULL;
	}
	jrnl_url_free(&u);
	return my;
}

int
tbm_exec(struct tb *b, const char *sql)
{
	MYSQL_RES *res;
	MYSQL *my;
	int rc = -1;

	if ((my = tbm_connect(b)) == NULL)
		return -1;
	if (mysql_query(my, sql) != 0) {
		fprintf(stderr, "# mysql: %s\n", mysql_error(my));
		goto out;
	}
	do {
		if ((res = mysql_store_result(my)) != NULL)
			mysql_free_result(res);
	} while (mysql_next_result(my) == 0);
	rc = mysql_errno(my) != 0 ? -1 : 0;
out:
	mysql_close(my);
	return rc;
}

int64_t
tbm_query_int(struct tb *b, const char *sql)
{
	MYSQL_RES *res = NULL;
	MYSQL_ROW row;
	MYSQL *my;
	int64_t v = -1;

	if ((my = tbm_connect(b)) == NULL)
		return -1;
	if (mysql_query(my, sql) != 0 ||
	    (res = mysql_store_result(my)) == NULL)
		goto out;
	if ((row = mysql_fetch_row(res)) != NULL && row[0] != NULL)
		v = strtoll(row[0], NULL, 10);
out:
	if (res != NULL)
		mysql_free_result(res);
	mysql_close(my);
	return v;
}
