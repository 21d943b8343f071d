# journal: the SQL journal (SQLite, MySQL/MariaDB) and its unit test.
noinst_LIBRARIES += libjournal.a
libjournal_a_SOURCES = \
	journal/journal.c journal/journal.h journal/internal.h \
	journal/writer.c \
	journal/read.c journal/schema.c journal/url.c \
	journal/sqlite.c journal/mysql.c
libjournal_a_CFLAGS = $(AM_CFLAGS) $(SQLITE_CFLAGS) $(MARIADB_CFLAGS)

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_journal
TESTS += tests/unit/test_journal
tests_unit_test_journal_SOURCES = tests/unit/test_journal.c \
	tests/unit/test_journal_fixture.c tests/unit/test_journal_outage.c \
	tests/unit/test_journal_mysql.c tests/unit/test_journal.h
tests_unit_test_journal_CFLAGS = $(AM_CFLAGS) $(SQLITE_CFLAGS) \
	$(MARIADB_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_journal_LDADD = libjournal.a libutil.a $(SQLITE_LIBS) \
	$(MARIADB_LIBS) $(CMOCKA_LIBS) -lpthread
endif
EXTRA_DIST += tests/mariadb.sh
