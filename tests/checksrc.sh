#!/bin/sh
#
# checksrc.sh - fail `make check` on what the house style bans (curl's
# scripts/checksrc.pl in miniature): calls to sprintf, vsprintf, strcpy,
# strcat, strtok, atoi, gets, scanf and sscanf, and lines wider than 80
# columns.
#
# Key decision: a plain grep with identifier boundaries, not a parser.  A name
# only counts when no identifier character precedes it and "(" follows, so
# snprintf, vsnprintf, xasprintf, fgets or my_strcat_x never match, and lines
# that start as a comment (" * ...", "// ...", "/* ...") are skipped so prose
# may name the banned calls.  A line's width is measured as an editor shows
# it: tabs stop every 8 columns and a UTF-8 character is one column (its
# continuation bytes are not counted).  Sources are found under
# $RETRYD_SRCDIR (set by make check; default: this script's parent
# directory), so the check works in a git checkout and in an unpacked
# distribution alike.  Files the build makes (scheduler/scripts_gen.c, the
# Lua scripts as C strings) are not checked: a build in the source
# directory, `./configure && make` there as a packager does, puts them
# beside the sources.  Output is TAP, one test per file, its first finding
# on the "not ok" line and the others as comments.

: "${RETRYD_SRCDIR:=$(dirname "$0")/..}"
cd "$RETRYD_SRCDIR" || {
	echo "1..0 # SKIP cannot enter source directory $RETRYD_SRCDIR"
	exit 0
}

calls='sprintf|vsprintf|strcpy|strcat|strtok|atoi|gets|scanf|sscanf'
banned="(^|[^A-Za-z0-9_])($calls)[[:space:]]*\\("
comment='[[:space:]]*(\*|//|/\*)'

generated='scheduler/scripts_gen.c'
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
	} | grep -vxF "$generated" | LC_ALL=C sort
)

maxcol=80

# "LINE: what" for each finding in file $1, in line order.
findings() {
	grep -nE "$banned" "$1" | grep -vE "^[0-9]+:$comment" |
	    while IFS= read -r line; do
		call=$(printf '%s\n' "${line#*:}" | grep -oE "$banned" |
		    head -n 1 | sed -E 's/^[^A-Za-z_]//; s/[[:space:]]*\($//')
		echo "${line%%:*}: $call"
	done
	LC_ALL=C tr -d '\200-\277' <"$1" | LC_ALL=C expand |
	    LC_ALL=C awk -v max="$maxcol" 'length > max {
		print NR ": " length " columns, over " max }'
}

n=0
failed=0
for f in $files; do
	n=$((n + 1))
	hits=$(findings "$f" | LC_ALL=C sort -t: -k1,1n)
	if [ -z "$hits" ]; then
		echo "ok $n - $f"
		continue
	fi
	failed=1
	echo "not ok $n - $f: $(echo "$hits" | head -n 1)"
	echo "$hits" | sed '1d; s|^|# '"$f"': |'
done
echo "1..$n"
exit $failed
