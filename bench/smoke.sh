#!/bin/sh
#
# smoke.sh - the make-check smoke of the bench tools: bench/run --smoke runs
# every workload at tiny sizes against a private Redis, retryd and receiver,
# bench/ratio one tiny round of W1 with the journal in sync mode and off,
# and bench/isolation each of a tiny tenant's works (a topic's and the
# tenant's delete, a restore, a redrive, a storm of batches).
#
# Key decision: this test fails when the tool fails or a correctness check
# fails (a job early, missing or delivered twice, W4 not delivered at attempt
# 3, a pull job not acked exactly once), and never on a timing figure: the
# figures of a smoke on a loaded CI machine mean nothing.  TAP: one test for
# the run, then one per workload line with its correctness verdict.

: "${RETRYD_SRCDIR:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${RETRYD_BUILDDIR:=$RETRYD_SRCDIR}"
export RETRYD_BUILDDIR

if [ "${REDIS_SERVER:-}" = no ] ||
    ! command -v "${REDIS_SERVER:-redis-server}" >/dev/null 2>&1; then
	echo "1..0 # SKIP no redis-server"
	exit 0
fi

out=$(mktemp -d "${TMPDIR:-/tmp}/retryd-bench-smoke.XXXXXX") || exit 1
trap 'rm -rf "$out"' EXIT
trap 'exit 1' HUP INT TERM

"$RETRYD_SRCDIR/bench/run" --smoke --out "$out" >"$out/run.out" 2>&1
rc=$?

n=1
if [ $rc = 0 ]; then
	echo "ok 1 - bench/run --smoke"
else
	echo "not ok 1 - bench/run --smoke exited $rc"
	sed 's/^/# /' "$out/run.out" | tail -n 60
fi
fail=0
[ $rc = 0 ] || fail=1
want="w1_single w1_batch w1_ids w2 w3 w4 w5 w5_batch w6_preload w6_w2
    w6_w1_single w6_w1_batch"
for w in $want; do
	n=$((n + 1))
	line=$(grep "\"workload\":\"$w\"" "$out/results.jsonl" 2>/dev/null |
	    tail -n 1)
	case $line in
	*'"ok_check":true'*)
		echo "ok $n - $w: correctness checks" ;;
	'')
		echo "not ok $n - $w: no result"
		fail=1 ;;
	*)
		echo "not ok $n - $w: correctness checks"
		echo "# $line"
		fail=1 ;;
	esac
done
# The CPU figures: retryd's and Redis's pids reach the load generator, and
# retryd's threads are read from /proc.  cpu_figures WORKLOAD PER (job or
# delivery).
cpu_figures() {
	n=$((n + 1))
	line=$(grep "\"workload\":\"$1\"" "$out/results.jsonl" 2>/dev/null |
	    tail -n 1)
	case $line in
	*"\"retryd_cpu_us_per_$2\":"*"\"redis_cpu_us_per_$2\":"*"\"retryd_thread_cpu_us_per_$2\":{"*)
		echo "ok $n - $1: CPU per $2 of retryd, its threads and Redis" ;;
	*)
		echo "not ok $n - $1: no CPU per $2 figures"
		fail=1 ;;
	esac
}
cpu_figures w1_single job
cpu_figures w2 delivery
# bench/ratio: one round of W1 with the journal in sync mode and off; the
# ratios are reported (never judged here: a smoke's rates mean nothing).
n=$((n + 1))
"$RETRYD_SRCDIR/bench/ratio" --rounds 1 --w1-jobs 200 --out "$out/ratio" \
    >"$out/ratio.out" 2>&1
rc=$?
line=$(grep '"workload":"journal_ratio"' "$out/ratio/ratio.jsonl" 2>/dev/null)
case $rc:$line in
0:*'"single_ratio_median":'[0-9]*'"batch_ratio_median":'[0-9]*)
	echo "ok $n - bench/ratio: a round's ratios and their medians" ;;
*)
	echo "not ok $n - bench/ratio exited $rc"
	sed 's/^/# /' "$out/ratio.out" | tail -n 30
	fail=1 ;;
esac
# bench/isolation: each of a tiny tenant's works while another tenant
# pushes; its correctness checks, never its latencies.
n=$((n + 1))
"$RETRYD_SRCDIR/bench/isolation" --jobs 2000 --builddir "$RETRYD_BUILDDIR" \
    --out "$out/isolation" >"$out/isolation.out" 2>&1
rc=$?
lines=$(grep -c '"ok_check": true' "$out/isolation/results.jsonl" \
    2>/dev/null)
if [ $rc = 0 ] && [ "$lines" = 5 ]; then
	echo "ok $n - bench/isolation: the checks of all five works"
else
	echo "not ok $n - bench/isolation exited $rc"
	sed 's/^/# /' "$out/isolation.out" | tail -n 30
	fail=1
fi
# retryd's logs, as bench/run and bench/ratio keep them in $out (a log per
# workload, read after retryd stopped): a sanitizer report in one (a build
# with --enable-asan or --enable-ubsan) fails the smoke.  bench/isolation
# fails by itself on one (tests/bb/harness.py reads its daemons' logs).
n=$((n + 1))
san='ERROR: (AddressSanitizer|LeakSanitizer)|'
san="$san"'SUMMARY: UndefinedBehaviorSanitizer|: runtime error: '
logs=$(find "$out" -name retryd.log | wc -l)
found=$(find "$out" -name retryd.log -exec grep -l -E "$san" {} + \
    2>/dev/null)
if [ "$logs" -gt 0 ] && [ -z "$found" ]; then
	echo "ok $n - no sanitizer reports in retryd's $logs logs"
elif [ "$logs" = 0 ]; then
	echo "not ok $n - no retryd logs kept to read"
	fail=1
else
	echo "not ok $n - sanitizer reports in retryd's logs"
	for f in $found; do
		grep -E -A 30 "$san" "$f" | head -n 40 | sed 's/^/# /'
	done
	fail=1
fi
echo "1..$n"
exit $fail
