noinst_LIBRARIES += libutil.a
libutil_a_SOURCES = \
	%reldir%/log.c %reldir%/log.h \
	%reldir%/clock.c %reldir%/clock.h \
	%reldir%/buf.c %reldir%/buf.h \
	%reldir%/xmalloc.c %reldir%/xmalloc.h
libutil_a_CFLAGS = $(AM_CFLAGS)
