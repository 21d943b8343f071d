# scheduler: the Redis delay core (see Makefile.am and docs/internals/SCHEDULER.md)
noinst_LIBRARIES += libscheduler.a
libscheduler_a_SOURCES = \
	scheduler/conn.c scheduler/conn.h
libscheduler_a_CFLAGS = $(AM_CFLAGS) $(HIREDIS_CFLAGS)
libscheduler_a_SOURCES += scheduler/registry.c scheduler/registry.h
