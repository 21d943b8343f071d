#!/bin/sh
#
# run.sh - the dashboard's browser test, as make check runs it (TAP).
#
# Needs node, Debian's chromium (or $CHROMIUM) and playwright-core in
# tests/browser/node_modules (`npm ci --prefix tests/browser`; nothing is
# installed or downloaded here).  When one is missing the test fails in CI
# (CI=true) with what to install, and is skipped elsewhere.  The work is
# done by tests/bb/test_dashboard_browser.py (Redis, retryd, the data),
# which runs tests/browser/dashboard.test.mjs.

: "${RETRYD_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${PYTHON3:=python3}"
: "${CHROMIUM:=/usr/bin/chromium}"
export CHROMIUM

missing=""
command -v "${NODE:-node}" >/dev/null 2>&1 || missing="$missing node (apt-get install nodejs);"
[ -x "$CHROMIUM" ] || missing="$missing $CHROMIUM (apt-get install chromium);"
[ -f "$RETRYD_SRCDIR/tests/browser/node_modules/playwright-core/package.json" ] ||
	missing="$missing playwright-core (npm ci --prefix tests/browser);"

if [ -n "$missing" ]; then
	if [ "${CI:-}" = "true" ]; then
		echo "1..1"
		echo "not ok 1 - browser test: missing$missing"
		exit 1
	fi
	echo "1..0 # SKIP browser test: missing$missing"
	exit 0
fi

exec "$PYTHON3" "$RETRYD_SRCDIR/tests/bb/test_dashboard_browser.py"
