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

#include <stdint.h>

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
