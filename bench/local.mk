# bench: the benchmark tools (see bench/README.md).  Not installed: they are
# built with the tree and driven by bench/run.  They link libutil.a only (buf,
# xmalloc, log): the bench speaks to retryd through its public HTTP API.
noinst_PROGRAMS += bench/retryd-bench bench/bench-receiver

bench_retryd_bench_SOURCES = \
	%reldir%/bench.c %reldir%/bench.h \
	%reldir%/workloads.c \
	%reldir%/report.c \
	%reldir%/stats.c %reldir%/stats.h \
	%reldir%/hclient.c %reldir%/hclient.h \
	%reldir%/http1.c %reldir%/http1.h
bench_retryd_bench_CFLAGS = $(AM_CFLAGS) $(JSONC_CFLAGS) $(HIREDIS_CFLAGS)
bench_retryd_bench_LDADD = libutil.a $(JSONC_LIBS) $(HIREDIS_LIBS)

bench_bench_receiver_SOURCES = \
	%reldir%/receiver.c \
	%reldir%/http1.c %reldir%/http1.h
bench_bench_receiver_CFLAGS = $(AM_CFLAGS)
bench_bench_receiver_LDADD = libutil.a

# make check runs only a smoke of the tool (bench/run --smoke): tiny sizes,
# correctness checks, never a timing assertion.
TESTS += bench/smoke.sh
EXTRA_DIST += bench/run bench/ratio bench/isolation bench/smoke.sh
