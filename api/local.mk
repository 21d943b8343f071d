# api: the REST API over libmicrohttpd (see docs/internals/API.md and
# docs/openapi.yaml).
noinst_LIBRARIES += libapi.a
libapi_a_SOURCES = \
	api/api.h api/internal.h \
	api/http.c api/http.h \
	api/defer.c \
	api/health.c \
	api/routes.c \
	api/auth.c \
	api/validate.c api/validate.h \
	api/tenants.c \
	api/topics.c \
	api/jobs.c \
	api/pull.c api/pull_batch.c api/pull_batch.h \
	api/original.c \
	api/debug.c \
	api/obs.h api/metrics.c api/stats.c api/dashboard.c
libapi_a_CFLAGS = $(AM_CFLAGS) $(MHD_CFLAGS) $(JSONC_CFLAGS) \
	$(HIREDIS_CFLAGS) $(CURL_CFLAGS)

# make check fails when the router table and docs/openapi.yaml disagree.
check_PROGRAMS += tests/route_list
tests_route_list_SOURCES = tests/route_list.c
tests_route_list_CFLAGS = $(AM_CFLAGS) $(MHD_CFLAGS) $(JSONC_CFLAGS)
tests_route_list_LDADD = libapi.a libjournal.a libdispatcher.a \
	libscheduler.a libschedules.a libutil.a \
	$(HIREDIS_LIBS) $(CURL_LIBS) $(MHD_LIBS) $(JSONC_LIBS) \
	$(LIBCONFIG_LIBS) $(SQLITE_LIBS) $(MARIADB_LIBS)
TESTS += tests/openapi_check.sh
EXTRA_DIST += tests/openapi_check.sh

# The libFuzzer target of the request bodies' JSON check needs CC=clang:
# ./configure --enable-fuzz --enable-asan CC=clang, then
# ./tests/fuzz/fuzz_json RUN tests/fuzz/corpus_json (HACKING.md)
if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz_json
tests_fuzz_fuzz_json_SOURCES = tests/fuzz/fuzz_json.c
tests_fuzz_fuzz_json_CFLAGS = $(AM_CFLAGS) $(MHD_CFLAGS) $(JSONC_CFLAGS) \
	-fsanitize=fuzzer
tests_fuzz_fuzz_json_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_json_LDADD = $(tests_route_list_LDADD)
endif
EXTRA_DIST += tests/fuzz/fuzz_json.c tests/fuzz/corpus_json
# make check runs the corpus through the target without libFuzzer.
check_PROGRAMS += tests/fuzz/replay_json
tests_fuzz_replay_json_SOURCES = tests/fuzz/fuzz_json.c tests/fuzz/replay.c
tests_fuzz_replay_json_CFLAGS = $(AM_CFLAGS) $(MHD_CFLAGS) $(JSONC_CFLAGS) \
	-DREPLAY_CORPUS='"tests/fuzz/corpus_json"'
tests_fuzz_replay_json_LDADD = $(tests_route_list_LDADD)
TESTS += tests/fuzz/replay_json

# Black-box tests of the REST API (test_api_lib.py is their shared helper).
TESTS += tests/bb/test_api_tenants.py tests/bb/test_api_topics.py \
	tests/bb/test_api_jobs.py tests/bb/test_api_pull.py \
	tests/bb/test_api_pull_batch.py tests/bb/test_api_pull_gone.py \
	tests/bb/test_api_original.py tests/bb/test_api_isolation.py \
	tests/bb/test_api_malformed.py tests/bb/test_api_mutate.py \
	tests/bb/test_api_redrive.py
EXTRA_DIST += tests/bb/test_api_lib.py tests/bb/test_api_tenants.py \
	tests/bb/test_api_topics.py tests/bb/test_api_jobs.py \
	tests/bb/test_api_pull.py tests/bb/test_api_pull_batch.py \
	tests/bb/test_api_pull_gone.py tests/bb/test_api_original.py \
	tests/bb/test_api_isolation.py tests/bb/test_api_malformed.py \
	tests/bb/test_api_mutate.py tests/bb/test_api_redrive.py
libapi_a_SOURCES += api/jobs_journal.c api/jobs_journal.h

# Metrics, the dashboard's routes and files, and its browser test
# (tests/browser/run.sh: headless Chromium through playwright-core; see
# tests/browser/README.md).
TESTS += tests/bb/test_metrics.py tests/bb/test_dashboard_api.py \
	tests/browser/run.sh
EXTRA_DIST += tests/bb/test_metrics.py tests/bb/test_dashboard_api.py \
	tests/bb/test_dashboard_browser.py tests/browser/run.sh \
	tests/browser/dashboard.test.mjs tests/browser/package.json \
	tests/browser/package-lock.json tests/browser/README.md
