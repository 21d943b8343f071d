#!/bin/sh
#
# openapi_check.sh - fail `make check` when the router table and
# docs/openapi.yaml disagree: a route served but not documented, or
# documented but not served.
#
# Key decision: the routes come from the server's own table (tests/route_list
# links libapi.a and prints api_all_routes); the spec is read with awk, which
# works because docs/openapi.yaml keeps its paths section in one simple
# layout: "paths:" at the left margin, each path at two spaces ("  /v1/x:"),
# each operation at four ("    get:").  Output is TAP.

: "${RETRYD_SRCDIR:=$(dirname "$0")/..}"
: "${RETRYD_BUILDDIR:=$(pwd)}"

spec="$RETRYD_SRCDIR/docs/openapi.yaml"
lister="$RETRYD_BUILDDIR/tests/route_list"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/openapi_check.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

echo "1..3"
if [ ! -r "$spec" ] || [ ! -x "$lister" ]; then
	echo "not ok 1 - inputs: need $spec and $lister"
	echo "not ok 2 - # SKIP no inputs"
	echo "not ok 3 - # SKIP no inputs"
	exit 1
fi

"$lister" | LC_ALL=C sort -u >"$tmp/routes" || {
	echo "not ok 1 - $lister failed"
	exit 1
}
awk '
	/^[^ #]/ { inpaths = ($0 ~ /^paths:[ \t]*$/); next }
	!inpaths { next }
	/^  \/[^ ]*:[ \t]*$/ {
		path = $0
		sub(/^  /, "", path)
		sub(/:[ \t]*$/, "", path)
		next
	}
	/^    (get|put|post|delete|patch|head|options):[ \t]*$/ {
		m = $0
		sub(/^    /, "", m)
		sub(/:.*$/, "", m)
		print toupper(m) " " path
	}
' "$spec" | LC_ALL=C sort -u >"$tmp/spec"

fail=0
if [ -s "$tmp/routes" ] && [ -s "$tmp/spec" ]; then
	echo "ok 1 - both lists are non-empty ($(wc -l <"$tmp/routes") routes)"
else
	echo "not ok 1 - an empty list (routes or spec)"
	fail=1
fi
missing=$(LC_ALL=C comm -23 "$tmp/routes" "$tmp/spec")
if [ -z "$missing" ]; then
	echo "ok 2 - every route is in docs/openapi.yaml"
else
	echo "not ok 2 - routes missing from docs/openapi.yaml"
	echo "$missing" | sed 's/^/#   /'
	fail=1
fi
extra=$(LC_ALL=C comm -13 "$tmp/routes" "$tmp/spec")
if [ -z "$extra" ]; then
	echo "ok 3 - every path of docs/openapi.yaml is served"
else
	echo "not ok 3 - documented but not served"
	echo "$extra" | sed 's/^/#   /'
	fail=1
fi
exit $fail
