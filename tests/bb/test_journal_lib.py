"""test_journal_lib.py - helpers shared by the journal black-box tests
(tests/bb/test_journal_*.py).  Not a test itself: it is only imported.

Key decision: every test file runs its cases once per journal driver:
SQLite always, MySQL/MariaDB through a private mariadbd that the file starts
with tests/mariadb.sh (left out, with a SKIP line, only when mariadbd is not
installed).  Each case gets a journal of its own (a new SQLite file, a new
MySQL database), so the counts a case checks are its own.  The mariadbd is
the file's, not the case's that happened to start it: a case that fails
does not take it down with its own daemons, and the next case finds it
running again even when the failing one had stopped it, so each case's
result is its own.
"""

import itertools
import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

HOUR = 3600 * 1000
_seq = itertools.count(1)

RESTORE_DONE = (r"restore: done in \d+ ms: (\d+) tenants, (\d+) keys, "
                r"(\d+) topics, (\d+) jobs restored; (\d+) jobs present")


def unique(prefix="t"):
    return "%s%d-%s" % (prefix, next(_seq), os.urandom(3).hex())


def mariadb_sh():
    return os.path.join(harness.srcdir(), "tests", "mariadb.sh")


def have_mariadb():
    for d in ["/usr/sbin", "/usr/local/sbin", "/usr/bin"] + \
            os.environ.get("PATH", "").split(os.pathsep):
        for p in ("mariadbd", "mysqld"):
            if os.access(os.path.join(d, p), os.X_OK):
                return True
    return False


class MariaDB:
    """A private mariadbd (tests/mariadb.sh) for one test file.  With
    register=False its owner cleans it up (Drivers, which outlives the
    cases)."""

    def __init__(self, register=True):
        self.dir = harness.mkdtemp("retryd-bb-mysql-")
        self.url = self._sh("start")
        if register:
            harness._register(self)

    def _sh(self, cmd, timeout=120):
        env = dict(os.environ, MARIADB_SH_OWNER=str(os.getpid()))
        p = subprocess.run(["bash", mariadb_sh(), cmd, self.dir], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout)
        if p.returncode != 0:
            raise AssertionError("mariadb.sh %s: %s" %
                                 (cmd, p.stderr.decode(errors="replace")))
        return p.stdout.decode().strip()

    def stop(self):
        self._sh("stop")

    def start(self):
        self.url = self._sh("start")

    def _client(self):
        for p in ("mariadb", "mysql"):
            for d in ("/usr/bin", "/usr/local/bin"):
                if os.access(os.path.join(d, p), os.X_OK):
                    return [os.path.join(d, p), "--no-defaults",
                            "--socket=" + os.path.join(self.dir, "sock"),
                            "-uroot", "-N"]
        raise AssertionError("no mariadb client")

    def hold(self, text):
        """Run text (e.g. LOCK TABLES) in a session kept open until the
        returned process is killed; returns once text has run."""
        p = subprocess.Popen(self._client() + ["-e", text +
                                               "; SELECT SLEEP(600)"],
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        harness.wait_for(lambda: "SLEEP(600)" in self.sql(
            "SHOW PROCESSLIST"), what="the holding session's sleep")
        return p

    def sql(self, text):
        p = subprocess.run(self._client() + ["-e", text],
                           stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        if p.returncode != 0:
            raise AssertionError("mariadb: %s" %
                                 p.stderr.decode(errors="replace"))
        return p.stdout.decode()

    def new_db(self):
        """A fresh database for one case; its URL."""
        name = "j_" + os.urandom(4).hex()
        self.sql("CREATE DATABASE %s; GRANT ALL ON %s.* TO "
                 "'retryd'@'127.0.0.1'; GRANT ALL ON %s.* TO "
                 "'retryd'@'localhost';" % (name, name, name))
        return re.sub(r"/[^/?]+$", "/" + name, self.url)

    def _cleanup(self):
        try:
            self._sh("destroy")
        except Exception:
            pass
        harness._unregister(self)

    def _diag_lines(self):
        try:
            with open(os.path.join(self.dir, "error.log")) as f:
                lines = f.read().splitlines()[-10:]
        except OSError:
            return []
        return ["mariadbd error log tail:"] + ["  " + s for s in lines]


class Drivers:
    """The journal drivers of this run: ("sqlite", None) always,
    ("mysql", MariaDB) when mariadbd is installed.

    The MariaDB is started by the first case that asks for it, but is
    registered for cleanup here, before any case: a failing case cleans up
    what it started, and the file's mariadbd is not part of that."""

    def __init__(self, t):
        self.t = t
        self.db = None
        self.names = ["sqlite"]
        if have_mariadb():
            self.names.append("mysql")
        harness._register(self)

    def url(self, driver):
        """A fresh journal URL for one case."""
        if driver == "sqlite":
            return "sqlite://%s/journal.db" % harness.mkdtemp("retryd-bb-j-")
        if self.db is None:
            self.db = MariaDB(register=False)
        else:
            # An earlier case may have failed with the server stopped.
            self.db.start()
        return self.db.new_db()

    def _cleanup(self):
        if self.db is not None:
            self.db._cleanup()
        harness._unregister(self)

    def _diag_lines(self):
        return self.db._diag_lines() if self.db is not None else []

    def each(self, name, fn):
        """Run fn(driver) as one test per driver."""
        for drv in ("sqlite", "mysql"):
            if drv not in self.names:
                self.t.run("%s [%s]" % (name, drv), harness.skip,
                           "mariadbd is not installed")
                continue
            self.t.run("%s [%s]" % (name, drv), fn, drv)


def config(url, **extra):
    c = {"journal": {"url": url, "mode": "sync", "flush_interval": "50ms",
                     "purge_interval": "100ms"},
         "scheduler": {"sweep": "100ms"},
         "debug": {"fake_clock": True}}
    for k, v in extra.items():
        c.setdefault(k, {}).update(v)
    return c


# -- requests

def ok(resp, *status):
    st, _, b = resp
    assert st in (status or (200, 201)), (st, b)
    return b


def tenant(d, name=None):
    name = name or unique("t")
    b = ok(d.admin("POST", "/v1/tenants", {"name": name}), 201)
    return name, b["api_key"]


def pull_tenant(d):
    """A new tenant with a pull topic: (name, key, topic)."""
    name, key = tenant(d)
    return name, key, topic(d, key, mode="pull")


def topic(d, key, name=None, **conf):
    name = name or unique("q")
    ok(d.request("PUT", "/v1/topics/" + name, conf, key=key), 201)
    return name


def push_batches(d, key, topic_name, n, delay_ms=HOUR, size=1000, **job):
    """Push n jobs in batches; their ids in order."""
    ids = []
    i = 0
    while i < n:
        k = min(size, n - i)
        jobs = []
        for x in range(i, i + k):
            j = {"delay_ms": delay_ms, "body": {"n": x}}
            j.update(job)
            jobs.append(j)
        b = ok(d.request("POST", "/v1/topics/%s/jobs:batch" % topic_name,
                         {"jobs": jobs}, key=key, timeout=60), 200)
        for r in b["results"]:
            assert r["status"] == 201, r
            ids.append(r["id"])
        i += k
    return ids


def advance(d, ms):
    return ok(d.admin("POST", "/v1/debug/clock", {"advance_ms": ms}), 200)


def counts(d, key, topic_name):
    return ok(d.request("GET", "/v1/topics/" + topic_name, key=key),
              200)["counts"]


def wait_restore(d, since, timeout=60):
    """Wait for the automatic rebuild's summary line after log offset
    since: (tenants, keys, topics, restored, present)."""
    m = d.wait_log(RESTORE_DONE, since=since, timeout=timeout)
    return tuple(int(x) for x in m.groups())


def lose_redis(d, r, timeout=60):
    """FLUSHALL r under d, then wait for d's rebuild: wait_restore()."""
    mark = d.log_mark()
    r.cmd("FLUSHALL")
    return wait_restore(d, mark, timeout)


def ready(d, since=0):
    """Wait for /readyz, and for the rebuild a Redis without the schema
    marker gets at start (so later counts are the test's own)."""
    d.wait_ready()
    if re.search(r"it will be rebuilt from the journal", d.log(since)):
        wait_restore(d, since)
    return d


def redis_job(d, key, jid):
    """GET /v1/jobs/{id} as Redis holds the job: the job, or 404 when
    Redis does not hold it (a job Redis let go is answered from the
    journal, with the listing's updated_ms besides, which Redis's answer
    does not have)."""
    st, _, b = d.request("GET", "/v1/jobs/" + jid, key=key)
    if st == 200 and "updated_ms" in b:
        return 404
    return b if st == 200 else st


def delivered_ids(receiver):
    return [r.headers["webhook-id"] for r in receiver.requests]


def dumps(o):
    return json.dumps(o).encode()
