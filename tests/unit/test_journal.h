/*
 * test_journal.h - what the journal's test files share: the backend a test
 * case runs against, and direct SQL on it that goes around the journal
 * (to plant a newer schema version, to count rows, to start afresh).
 *
 * Key decision: every test case is written once and run once per backend,
 * its backend passed as cmocka's initial state; a backend that cannot run
 * here says why and its cases are reported as skipped.
 */
#ifndef RETRYD_TEST_JOURNAL_H
#define RETRYD_TEST_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "journal/journal.h"

#define TB_URL_MAX	1024
#define TB_WHY_MAX	512

struct tb {
	const char	*name;		/* "sqlite", "mysql" */
	int		 is_mysql;
	int		 tried;		/* setup attempted (mysql) */
	int		 available;
	int		 skip;		/* not available: skip, not fail */
	int		 own_server;	/* we started it: we may stop it */
	char		 why[TB_WHY_MAX];
	char		 dir[256];	/* temp dir of the db or server */
	char		 url[TB_URL_MAX];
};

/* Collecting callbacks. */
struct ids {
	char	v[256][48];
	size_t	n;
};

struct one_job {
	int	found;
	char	state[32];
	int	attempts;
	int64_t	due_ms;
	int64_t	created_ms;
	int64_t	updated_ms;
	int64_t	finished_ms;
	int64_t	version;
};

/* test_journal_fixture.c: the backends, passed as cmocka's initial state. */
extern struct tb	sqlite_b;
extern struct tb	mysql_b;

int	tj_setup(void **state);
int	tj_teardown(void **state);
int	tj_group_teardown(void **state);
/* The backend of this case, or fail when it cannot run. */
struct tb *tj_begin(void **state);
/* SQL around the journal; tj_int: the first column, or -1. */
int	tj_exec(struct tb *b, const char *sql);
int64_t	tj_int(struct tb *b, const char *sql);
struct jrnl_config tj_cfg(struct tb *b, enum jrnl_mode mode);
struct jrnl *tj_open_cfg(const struct jrnl_config *c);
struct jrnl *tj_open(struct tb *b, enum jrnl_mode mode);
/* Close a journal; tj_teardown closes those a failed case left open. */
void	tj_close(struct jrnl *j);
struct jrnl_job tj_job(const char *tenant, const char *topic, const char *id,
	    const char *state, int64_t at_ms);
struct jrnl_transition tj_trans(const char *tenant, const char *id,
	    const char *from, const char *to, int64_t at_ms, int attempt);
/* Poll cond until it holds or timeout_ms pass: 1, or 0 at the deadline. */
int	tj_wait_until(int (*cond)(struct jrnl *), struct jrnl *j,
	    int64_t timeout_ms);
int	tj_is_ready(struct jrnl *j);
int	tj_not_ready(struct jrnl *j);
/* A jrnl_job_fn appending "tenant/id" to a struct ids. */
int	tj_collect_id(const struct jrnl_job *job, void *arg);
struct one_job tj_get_one(struct jrnl *j, const char *tenant, const char *id);

/* test_journal_outage.c */
void	test_outage_hook(void **state);
void	test_outage_server(void **state);
void	test_start_unavailable(void **state);
void	test_async_queue(void **state);
void	test_trans_order(void **state);
void	test_refused_row(void **state);
void	test_ticket_dropped(void **state);

/* test_journal_mysql.c */
/* Start (or find) the server; sets available/skip/why/url. */
void	tbm_setup(struct tb *b);
/* Stop and remove a server we started. */
void	tbm_teardown(struct tb *b);
/* Stop / start again our server (same port and data). 0 or -1. */
int	tbm_stop(struct tb *b);
int	tbm_start(struct tb *b);
/* Run sql on the server; 0 or -1.  tbm_query_int: first column, or -1. */
int	tbm_exec(struct tb *b, const char *sql);
int64_t	tbm_query_int(struct tb *b, const char *sql);

#endif
