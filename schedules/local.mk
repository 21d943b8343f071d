# schedules: retry schedules, pure (no I/O, no clock reads); see
# docs/internals/SCHEDULES.md.  Its unit test links only libschedules.a and
# libutil.a, which proves the module depends on nothing else.
noinst_LIBRARIES += libschedules.a
libschedules_a_SOURCES = \
	schedules/schedule.c schedules/schedule.h \
	schedules/decide.c \
	schedules/retry_after.c
libschedules_a_CFLAGS = $(AM_CFLAGS)

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_schedule
TESTS += tests/unit/test_schedule
tests_unit_test_schedule_SOURCES = tests/unit/test_schedule.c
tests_unit_test_schedule_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_schedule_LDADD = libschedules.a libutil.a $(CMOCKA_LIBS)
endif

# The libFuzzer target needs CC=clang: ./configure --enable-fuzz CC=clang,
# then ./tests/fuzz/fuzz_schedule RUN tests/fuzz/corpus_schedule (HACKING.md)
if ENABLE_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz_schedule
tests_fuzz_fuzz_schedule_SOURCES = tests/fuzz/fuzz_schedule.c
tests_fuzz_fuzz_schedule_CFLAGS = $(AM_CFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_schedule_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_schedule_LDADD = libschedules.a libutil.a
endif
EXTRA_DIST += tests/fuzz/fuzz_schedule.c tests/fuzz/corpus_schedule \
	tests/fuzz/fuzz.h \
	tests/fuzz/replay.c
# make check runs the corpus through the target without libFuzzer
# (tests/fuzz/replay.c).
check_PROGRAMS += tests/fuzz/replay_schedule
tests_fuzz_replay_schedule_SOURCES = tests/fuzz/fuzz_schedule.c \
	tests/fuzz/replay.c
tests_fuzz_replay_schedule_CFLAGS = $(AM_CFLAGS) \
	-DREPLAY_CORPUS='"tests/fuzz/corpus_schedule"'
tests_fuzz_replay_schedule_LDADD = libschedules.a libutil.a
TESTS += tests/fuzz/replay_schedule
