noinst_LIBRARIES += libutil.a
libutil_a_SOURCES = \
	%reldir%/log.c %reldir%/log.h \
	%reldir%/clock.c %reldir%/clock.h \
	%reldir%/buf.c %reldir%/buf.h \
	%reldir%/strutil.c %reldir%/strutil.h \
	%reldir%/xmalloc.c %reldir%/xmalloc.h \
	%reldir%/crypto.c %reldir%/crypto.h \
	%reldir%/id.c %reldir%/id.h \
	%reldir%/metrics.c %reldir%/metrics.h \
	%reldir%/jsonout.c %reldir%/jsonout.h
libutil_a_CFLAGS = $(AM_CFLAGS)

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_util
TESTS += tests/unit/test_util
tests_unit_test_util_SOURCES = tests/unit/test_util.c
tests_unit_test_util_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_util_LDADD = libutil.a $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_metrics
TESTS += tests/unit/test_metrics
tests_unit_test_metrics_SOURCES = tests/unit/test_metrics.c
tests_unit_test_metrics_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_metrics_LDADD = libutil.a $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_jsonout
TESTS += tests/unit/test_jsonout
tests_unit_test_jsonout_SOURCES = tests/unit/test_jsonout.c
tests_unit_test_jsonout_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_jsonout_LDADD = libutil.a $(JSONC_LIBS) $(CMOCKA_LIBS)
endif
