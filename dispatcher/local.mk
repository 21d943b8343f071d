# dispatcher: outbound webhook callbacks, libcurl multi on epoll; see
# docs/internals/DISPATCHER.md.  Its unit tests link only libdispatcher.a,
# libschedules.a and libutil.a, which proves the module depends on nothing
# else.
noinst_LIBRARIES += libdispatcher.a
libdispatcher_a_SOURCES = \
	dispatcher/dispatcher.h dispatcher/disp_int.h \
	dispatcher/disp.c \
	dispatcher/loop.c \
	dispatcher/transfer.c \
	dispatcher/sign.c \
	dispatcher/request.c \
	dispatcher/policy.c \
	dispatcher/inflight.c
libdispatcher_a_CFLAGS = $(AM_CFLAGS) $(CURL_CFLAGS)

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_disp_policy tests/unit/test_dispatcher
TESTS += tests/unit/test_disp_policy tests/unit/test_dispatcher

tests_unit_test_disp_policy_SOURCES = tests/unit/test_disp_policy.c
tests_unit_test_disp_policy_CFLAGS = $(AM_CFLAGS) $(CURL_CFLAGS) \
	$(CMOCKA_CFLAGS)
tests_unit_test_disp_policy_LDADD = libdispatcher.a libschedules.a \
	libutil.a $(CURL_LIBS) $(CMOCKA_LIBS) -lpthread

tests_unit_test_dispatcher_SOURCES = tests/unit/test_dispatcher.c \
	tests/unit/test_disp_server.c tests/unit/test_disp_server.h
tests_unit_test_dispatcher_CFLAGS = $(AM_CFLAGS) $(CURL_CFLAGS) \
	$(CMOCKA_CFLAGS)
tests_unit_test_dispatcher_LDADD = libdispatcher.a libschedules.a \
	libutil.a $(CURL_LIBS) $(CMOCKA_LIBS) -lpthread
endif
