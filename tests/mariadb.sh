#!/bin/bash
# mariadb.sh - a private, throwaway mariadbd for the journal tests.
#
#   tests/mariadb.sh start DIR    initialise DIR (once), start mariadbd on a
#                                 free 127.0.0.1 port with its socket in DIR,
#                                 create the database and user, print the URL
#   tests/mariadb.sh stop DIR     shut it down (DIR is kept, so start again
#                                 brings the same data back on the same port)
#   tests/mariadb.sh destroy DIR  stop and remove DIR
#
# With MARIADB_SH_OWNER=PID in the environment, start also leaves a watcher
# that destroys DIR once process PID is gone, so a test that crashes does
# not leave a server behind.
#
# Key decision: everything lives in DIR and the server reads no option file
# (--no-defaults), so it never touches a system MariaDB, and a second start of
# the same DIR reuses its port: a test can stop the server to see the journal
# fail and start it again to see it recover at the same URL.  Only the URL goes
# to stdout; progress and errors go to stderr.  Every wait has a deadline.
set -eu
# bash, not sh: free_port probes with /dev/tcp.

DB=retryd_test
DBUSER=retryd
DBPASS='t%st:p@ss'		# exercises percent-decoding in the URL
DBPASS_URL='t%25st%3Ap%40ss'
DEADLINE=60			# seconds for install, start and stop

die() {
	echo "mariadb.sh: $*" >&2
	exit 1
}

find_prog() {
	for p in "$@"; do
		if command -v "$p" >/dev/null 2>&1; then
			command -v "$p"
			return 0
		fi
		for d in /usr/sbin /usr/local/sbin /usr/bin; do
			if [ -x "$d/$p" ]; then
				echo "$d/$p"
				return 0
			fi
		done
	done
	return 1
}

MARIADBD=$(find_prog mariadbd mysqld) || die "mariadbd is not installed"
INSTALL_DB=$(find_prog mariadb-install-db mysql_install_db) ||
	die "mariadb-install-db is not installed"
ADMIN=$(find_prog mariadb-admin mysqladmin) ||
	die "mariadb-admin is not installed"
CLIENT=$(find_prog mariadb mysql) || die "the mariadb client is not installed"

user_opt=
if [ "$(id -u)" = 0 ]; then
	user_opt=--user=root
fi

# A port nobody listens on now (the server may still lose a race for it;
# start retries with another).
free_port() {
	i=0
	while [ $i -lt 50 ]; do
		r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
		p=$(( r % 30000 + 20000 ))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
		i=$((i + 1))
	done
	return 1
}

ping_ok() {
	"$ADMIN" --no-defaults --socket="$1/sock" -uroot --connect-timeout=2 \
	    ping >/dev/null 2>&1
}

is_running() {
	[ -f "$1/pid" ] && kill -0 "$(cat "$1/pid")" 2>/dev/null
}

do_stop() {
	dir=$1
	is_running "$dir" || return 0
	pid=$(cat "$dir/pid")
	"$ADMIN" --no-defaults --socket="$dir/sock" -uroot shutdown \
	    >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
	end=$(( $(date +%s) + DEADLINE ))
	while kill -0 "$pid" 2>/dev/null; do
		[ "$(date +%s)" -lt "$end" ] || {
			kill -9 "$pid" 2>/dev/null || true
			break
		}
		sleep 0.05
	done
	rm -f "$dir/pid"
}

# Once per DIR: destroy it when $MARIADB_SH_OWNER exits.
start_watcher() {
	owner=${MARIADB_SH_OWNER:-}
	[ -n "$owner" ] || return 0
	if [ -f "$1/watcher" ] && kill -0 "$(cat "$1/watcher")" 2>/dev/null
	then
		return 0
	fi
	(
		trap '' HUP
		while kill -0 "$owner" 2>/dev/null && [ -d "$1" ]; do
			sleep 1
		done
		[ -d "$1" ] && do_stop "$1" && rm -rf "$1"
	) </dev/null >/dev/null 2>&1 &
	echo $! >"$1/watcher"
}

do_start() {
	dir=$1
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	# A private tmpdir: bootstraps running at once (parallel tests) would
	# otherwise collide on their temporary tables in /tmp.
	mkdir -p "$dir/tmp"
	if [ ! -d "$dir/data/mysql" ]; then
		"$INSTALL_DB" --no-defaults --datadir="$dir/data" $user_opt \
		    --tmpdir="$dir/tmp" \
		    --auth-root-authentication-method=normal \
		    --skip-test-db >"$dir/install.log" 2>&1 ||
			die "mariadb-install-db failed:" \
			    "$(grep -E 'ERROR|Error' "$dir/install.log" | head -5)"
	fi
	if is_running "$dir" && ping_ok "$dir"; then
		:
	else
		tries=0
		while :; do
			if [ -f "$dir/port" ]; then
				port=$(cat "$dir/port")
			else
				port=$(free_port) || die "no free port"
			fi
			"$MARIADBD" --no-defaults $user_opt \
			    --datadir="$dir/data" --tmpdir="$dir/tmp" \
			    --socket="$dir/sock" --port="$port" \
			    --skip-networking=0 --bind-address=127.0.0.1 \
			    --pid-file="$dir/mariadbd.pid" \
			    --log-error="$dir/error.log" \
			    --innodb-buffer-pool-size=32M \
			    --innodb-log-file-size=16M \
			    --skip-name-resolve </dev/null >/dev/null 2>&1 &
			echo $! >"$dir/pid"
			end=$(( $(date +%s) + DEADLINE ))
			while ! ping_ok "$dir"; do
				if ! is_running "$dir"; then
					break
				fi
				[ "$(date +%s)" -lt "$end" ] || {
					do_stop "$dir"
					die "mariadbd did not answer within" \
					    "${DEADLINE}s, see $dir/error.log"
				}
				sleep 0.05
			done
			if is_running "$dir"; then
				echo "$port" >"$dir/port"
				break
			fi
			rm -f "$dir/pid"
			tries=$((tries + 1))
			# A reused port we cannot get back is an error; a
			# fresh one may have been taken: try another.
			if [ -f "$dir/port" ] || [ $tries -ge 5 ]; then
				die "mariadbd failed to start" \
				    "($tries tries); the end of" \
				    "$dir/error.log:" \
				    "$(tail -n 15 "$dir/error.log" 2>/dev/null)"
			fi
		done
	fi
	port=$(cat "$dir/port")
	start_watcher "$dir"
	"$CLIENT" --no-defaults --socket="$dir/sock" -uroot <<EOF ||
CREATE DATABASE IF NOT EXISTS $DB;
CREATE USER IF NOT EXISTS '$DBUSER'@'127.0.0.1' IDENTIFIED BY '$DBPASS';
CREATE USER IF NOT EXISTS '$DBUSER'@'localhost' IDENTIFIED BY '$DBPASS';
GRANT ALL ON $DB.* TO '$DBUSER'@'127.0.0.1';
GRANT ALL ON $DB.* TO '$DBUSER'@'localhost';
EOF
		die "could not create the test database"
	echo "mysql://$DBUSER:$DBPASS_URL@127.0.0.1:$port/$DB"
}

[ $# -eq 2 ] || die "usage: mariadb.sh start|stop|destroy DIR"
case $1 in
start)	do_start "$2" ;;
stop)	do_stop "$2" ;;
destroy)
	do_stop "$2"
	rm -rf "$2"
	;;
*)	die "unknown command: $1" ;;
esac
