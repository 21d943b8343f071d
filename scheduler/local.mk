# scheduler: the Redis delay core (see Makefile.am and
# docs/internals/SCHEDULER.md).  The Lua scripts under scheduler/scripts/ are
# the source of truth; scripts_gen.c is made from them at build time.
noinst_LIBRARIES += libscheduler.a
libscheduler_a_SOURCES = \
	scheduler/conn.c scheduler/conn.h scheduler/cluster.c scheduler/url.c \
	scheduler/scripts.c scheduler/scripts.h \
	scheduler/record.c scheduler/store.c scheduler/query.c \
	scheduler/heads.c \
	scheduler/lease.c scheduler/timer.c scheduler/sub.c \
	scheduler/sched.c scheduler/sched.h scheduler/sched_int.h
nodist_libscheduler_a_SOURCES = scheduler/scripts_gen.c
libscheduler_a_CFLAGS = $(AM_CFLAGS) $(HIREDIS_CFLAGS)

SCHED_LUA = \
	scheduler/scripts/lib.lua scheduler/scripts/push.lua \
	scheduler/scripts/push_many.lua \
	scheduler/scripts/cancel.lua scheduler/scripts/reschedule.lua \
	scheduler/scripts/promote.lua scheduler/scripts/reserve.lua \
	scheduler/scripts/finish.lua scheduler/scripts/restore.lua \
	scheduler/scripts/redrive.lua scheduler/scripts/purge.lua \
	scheduler/scripts/lease.lua scheduler/scripts/heartbeat.lua \
	scheduler/scripts/schema.lua scheduler/scripts/drop.lua
EXTRA_DIST += $(SCHED_LUA)
CLEANFILES += scheduler/scripts_gen.c

# Each .lua file becomes one C string, sched_lua_NAME (sed escapes \ and ").
scheduler/scripts_gen.c: $(SCHED_LUA) scheduler/local.mk
	$(AM_V_GEN)$(MKDIR_P) scheduler && { \
	  echo '/* Generated from scheduler/scripts/: do not edit. */'; \
	  echo '#include "config.h"'; \
	  echo '#include "scheduler/scripts.h"'; \
	  for f in $(SCHED_LUA); do \
	    test -f "$$f" || f="$(srcdir)/$$f"; \
	    n=`basename "$$f" .lua`; \
	    echo "const char sched_lua_$$n[] ="; \
	    $(SED) -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/	"/' \
	      -e 's/$$/\\n"/' "$$f" || exit 1; \
	    echo '	"";'; \
	  done; } > $@-t && mv -f $@-t $@

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_sched
TESTS += tests/unit/test_sched
tests_unit_test_sched_SOURCES = tests/unit/test_sched.c \
	tests/unit/test_sched_multi.c tests/unit/test_sched_util.c \
	tests/unit/test_sched.h tests/unit/redisfix.c tests/unit/redisfix.h
tests_unit_test_sched_CFLAGS = $(AM_CFLAGS) $(HIREDIS_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_sched_LDADD = libscheduler.a libschedules.a libutil.a \
	$(HIREDIS_LIBS) $(JSONC_LIBS) $(CMOCKA_LIBS) -lpthread
endif

# The libFuzzer target of the packed record and attempt log needs CC=clang:
# ./configure --enable-fuzz --enable-asan CC=clang, then
# ./tests/fuzz/fuzz_record RUN tests/fuzz/corpus_record (HACKING.md)
if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz_record
tests_fuzz_fuzz_record_SOURCES = tests/fuzz/fuzz_record.c
tests_fuzz_fuzz_record_CFLAGS = $(AM_CFLAGS) $(HIREDIS_CFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_record_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_record_LDADD = $(tests_fuzz_replay_record_LDADD)
endif
EXTRA_DIST += tests/fuzz/fuzz_record.c tests/fuzz/corpus_record
# make check runs the corpus through the target without libFuzzer.
check_PROGRAMS += tests/fuzz/replay_record
tests_fuzz_replay_record_SOURCES = tests/fuzz/fuzz_record.c tests/fuzz/replay.c
tests_fuzz_replay_record_CFLAGS = $(AM_CFLAGS) $(HIREDIS_CFLAGS) \
	-DREPLAY_CORPUS='"tests/fuzz/corpus_record"'
tests_fuzz_replay_record_LDADD = libscheduler.a libschedules.a libutil.a \
	$(HIREDIS_LIBS) $(JSONC_LIBS) -lpthread
TESTS += tests/fuzz/replay_record

libscheduler_a_SOURCES += scheduler/registry.c scheduler/registry.h
libscheduler_a_SOURCES += scheduler/registry_restore.c scheduler/registry_int.h
libscheduler_a_SOURCES += scheduler/sched_batch.h
