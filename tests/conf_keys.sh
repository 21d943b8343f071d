#!/bin/sh
# Every key of the configuration table (retryd -K) must be documented in
# etc/retryd.conf and in man/retryd.conf.5; the example file must pass
# `retryd -n`.  TAP output, one test per key and file.
src=${RETRYD_SRCDIR:-$(dirname "$0")/..}
bin=${RETRYD_BIN:-./retryd}
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fail=1; echo "not ok $n - $1"; }

keys=$("$bin" -K) || { echo "1..1"; echo "not ok 1 - retryd -K failed"; exit 1; }
for k in $keys; do
	leaf=${k##*.}
	group=${k%.*}
	# In the example file: "leaf =" inside "group: {" (or at top level).
	if [ "$group" = "$k" ]; then
		grep -Eq "^${leaf}[[:space:]]*=" "$src/etc/retryd.conf" &&
		    ok "etc/retryd.conf documents $k" ||
		    notok "etc/retryd.conf documents $k"
	else
		awk -v g="$group" -v l="$leaf" '
		    $0 ~ "^" g ":[[:space:]]*\\{" { in_g = 1; next }
		    in_g && /^};/ { in_g = 0 }
		    in_g && $0 ~ "^[[:space:]]+" l "[[:space:]]*=" { found = 1 }
		    END { exit !found }' "$src/etc/retryd.conf" &&
		    ok "etc/retryd.conf documents $k" ||
		    notok "etc/retryd.conf documents $k"
	fi
	# In the man page, as a tagged paragraph naming the full key.
	grep -Eq "^\\.B[IR]? \"?$(printf '%s' "$k" | sed 's/\./\\./g')" \
	    "$src/man/retryd.conf.5" &&
	    ok "retryd.conf.5 documents $k" ||
	    notok "retryd.conf.5 documents $k"
done
if "$bin" -n -c "$src/etc/retryd.conf" 2>/dev/null; then
	ok "retryd -n accepts etc/retryd.conf"
else
	notok "retryd -n accepts etc/retryd.conf"
fi
echo "1..$n"
exit $fail
