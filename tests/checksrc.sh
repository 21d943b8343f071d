#!/bin/sh
#
# checksrc.sh - fail `make check` on calls the house style bans (curl's
# scripts/checksrc.pl in miniature): sprintf, vsprintf, strcpy, strcat,
# strtok, atoi, gets, scanf and sscanf.
#
# Key decision: a plain grep with identifier boundaries, not a parser.  A name
# only counts when no identifier character precedes it and "(" follows, so
# snprintf, vsnprintf, xasprintf, fgets or my_strcat_x never match, and lines
# that start as a comment (" * ...", "// ...", "/* ...") are skipped so prose
# may name the banned calls.  Sources are found under $RETRYD_SRCDIR (set by
# make check; default: this script's parent directory), so the check works in
# a git checkout and in an unpacked distribution alike.  Output is TAP, one
# test per file.

: "${RETRYD_SRCDIR:=$(dirname "$0")/..}"
cd "$RETRYD_SRCDIR" || {
	echo "1..0 # SKIP cannot enter source directory $RETRYD_SRCDIR"
	exit 0
}

calls='sprintf|vsprintf|strcpy|strcat|strtok|atoi|gets|scanf|sscanf'
banned="(^|[^A-Za-z0-9_])($calls)[[:space:]]*\\("
comment='[[:space:]]*(\*|//|/\*)'

files=$(
	{
		for d in util schedules scheduler dispatcher journal api bench \
		    tests; do
			test -d "$d" && find "$d" -type f \( -name '*.c' -o \
			    -name '*.h' \)
		done
		for f in ./*.c; do
			test -f "$f" && echo "${f#./}"
		done
	} | LC_ALL=C sort
)

n=0
failed=0
for f in $files; do
	n=$((n + 1))
	hits=$(grep -nE "$banned" "$f" | grep -vE "^[0-9]+:$comment")
	if [ -z "$hits" ]; then
		echo "ok $n - $f"
	else
		failed=1
		first=1
		echo "$hits" | while IFS= read -r line; do
			num=${line%%:*}
			call=$(printf '%s\n' "${line#*:}" |
			    grep -oE "$banned" | head -n 1 |
			    sed -E 's/^[^A-Za-z_]//; s/[[:space:]]*\($//')
			if [ "$first" = 1 ]; then
				echo "not ok $n - $f: $num: $call"
				first=0
			else
				echo "# $f: $num: $call"
			fi
		done
	fi
done
echo "1..$n"
exit $failed
