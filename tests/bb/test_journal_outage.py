"""test_journal_outage.py - the journal's database goes away in sync mode:
every push (one, a batch, the original /push) and every registry change is
answered 503 journal_unavailable and leaves nothing in Redis, /readyz says
why; when the database is back, pushes succeed and nothing was lost (a
FLUSHALL afterwards brings every accepted job back from the journal).

MySQL: the private mariadbd is stopped and started again.  SQLite: a file
cannot be taken away from root, so another connection holds the database's
write lock (BEGIN EXCLUSIVE) for the length of the outage.

Then a database that answers but takes no write (a full disk, a read-only
server): the same 503s, and /readyz says the journal cannot write for as
long as it lasts, not "ready" between two failed commits.  MySQL: the
server in read-only mode (a replica after a failover).  SQLite: a full
disk needs a filesystem of its own, so retryd's file size limit is set to
one byte instead (prlimit on the running process): every write of the
journal's files fails, as every write that needs room does on a full disk.

Then Redis out of memory (maxmemory, noeviction): pushes 507, the journal
keeps none of the refused jobs, the log says it once a second; and a Redis
that may evict is named in the log at start.
"""

import os
import resource
import sqlite3
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_journal_lib as L  # noqa: E402

t = harness.Tap()
D = L.Drivers(t)


class Outage:
    """Take the journal's database away and give it back."""

    def __init__(self, drv, url):
        self.drv = drv
        self.path = url[len("sqlite://"):] if drv == "sqlite" else None
        self.conn = None

    def begin(self):
        if self.drv == "mysql":
            D.db.stop()
            return
        self.conn = sqlite3.connect(self.path, timeout=10,
                                    isolation_level=None,
                                    check_same_thread=False)
        self.conn.execute("BEGIN EXCLUSIVE")

    def end(self):
        if self.drv == "mysql":
            D.db.start()
            return
        self.conn.execute("ROLLBACK")
        self.conn.close()
        self.conn = None


def expect_503(resp):
    st, _, b = resp
    assert st == 503, (st, b)
    assert b["error"]["code"] == "journal_unavailable", b


def outage(drv):
    url = D.url(drv)
    with harness.RedisServer() as r, harness.Receiver() as rcv, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        L.ready(d)
        name, key = L.tenant(d)
        q = L.topic(d, key, callback_url=rcv.url("/hook"))
        ids = L.push_batches(d, key, q, 5)
        out = Outage(drv, url)
        mark = d.log_mark()
        out.begin()
        try:
            one = "/v1/topics/%s/jobs" % q
            # The requests that must fail, at once from several clients.
            calls = [
                ("POST", one, {"delay_ms": L.HOUR}, key),
                ("POST", one + ":batch", {"jobs": [{"delay_ms": L.HOUR}] * 3},
                 key),
                ("POST", "/push", {"topic": q, "delay": L.HOUR}, key),
                ("POST", "/push", {"topic": q, "id": "c-1", "delay": L.HOUR},
                 key),
                ("PUT", "/v1/topics/new", {}, key),
                ("POST", "/v1/tenants", {"name": L.unique("t")},
                 d.admin_key),
                ("PATCH", "/v1/tenants/" + name, {"max_pending": 77},
                 d.admin_key),
            ]
            # Single pushes at once: they wait on one commit and would be
            # pushed to Redis together; all of them fail.
            calls += [("POST", one, {"delay_ms": L.HOUR,
                                     "bizkey": "group-%d" % (i % 4)}, key)
                      for i in range(16)]
            res = harness.at_once([
                lambda c=c: d.request(c[0], c[1], c[2], key=c[3],
                                      timeout=30) for c in calls])
            for i, resp in enumerate(res):
                assert resp is not None, calls[i]
                expect_503(resp)
            st, _, b = d.request("GET", "/readyz")
            assert st == 503 and "journal" in str(b), (st, b)
            # Twenty pushes refused, not twenty lines in the log: one a
            # second at most, with a count of those since.
            lines = d.log(since=mark).count(" refused")
            assert 1 <= lines < 10, d.log(since=mark)
            # Nothing half-done in Redis.
            c = L.counts(d, key, q)
            assert c["scheduled"] == 5, c
            # Redis does not hold it; then GET asks the journal, which
            # may be the one down (503 journal_unavailable, not 404).
            st, _, b = d.request("GET", "/v1/jobs/c-1", key=key)
            assert st == 404 or (st == 503 and b["error"]["code"] ==
                                 "journal_unavailable"), (st, b)
            assert d.request("GET", "/v1/topics/new", key=key)[0] == 404
            # The refused PATCH set its member back in Redis.  A read of
            # the tenant may come from a registry cache filled while the
            # PATCH's value was there (it holds it a second at most).
            mp = r.cmd("HGET", "rd:{registry}:tenant:" + name,
                       "max_pending")
            assert mp in (None, "0"), mp
            harness.wait_for(lambda: L.ok(d.admin(
                "GET", "/v1/tenants/" + name), 200)["max_pending_override"]
                is None, what="the PATCH's undo read back")
        finally:
            out.end()
        d.wait_ready(timeout=30)
        ids += L.push_batches(d, key, q, 5)
        assert L.counts(d, key, q)["scheduled"] == 10
        # The journal holds every accepted job: lose Redis, get them back.
        _, _, _, restored, _ = L.lose_redis(d, r)
        assert restored == 10, restored
        L.advance(d, 2 * L.HOUR)
        rcv.wait_count(10, timeout=20)
        got = L.delivered_ids(rcv)
        assert sorted(got) == sorted(ids), (got, ids)


D.each("the database down in sync mode: 503 and nothing half-done; back: "
       "nothing lost", outage)


class NoWrites:
    """Have the journal's database take no write, then take them again."""

    def __init__(self, drv, pid):
        self.drv = drv
        self.pid = pid

    def begin(self):
        if self.drv == "mysql":
            D.db.sql("SET GLOBAL read_only = 1")
            return
        resource.prlimit(self.pid, resource.RLIMIT_FSIZE,
                         (1, resource.RLIM_INFINITY))

    def end(self):
        if self.drv == "mysql":
            D.db.sql("SET GLOBAL read_only = 0")
            return
        resource.prlimit(self.pid, resource.RLIMIT_FSIZE,
                         (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def no_writes(drv):
    url = D.url(drv)
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        L.ready(d)
        _, key, q = L.pull_tenant(d)
        ids = L.push_batches(d, key, q, 5)
        one = "/v1/topics/%s/jobs" % q
        fault = NoWrites(drv, d.pid)
        fault.begin()
        try:
            # The first push meets the failed commit, the next ones a
            # journal that stays away: all 503, whatever their size.
            for body in ("x", "y" * 100000, "z", "w"):
                expect_503(d.request("POST", one, {"delay_ms": L.HOUR,
                                                   "body": body},
                                     key=key, timeout=30))
            expect_503(d.request("POST", one + ":batch",
                                 {"jobs": [{"delay_ms": L.HOUR}] * 3},
                                 key=key, timeout=30))
            # SQLite connects and ensures its schema without a write: the
            # writer's probe fails.  MariaDB refuses the schema's DDL first.
            st, _, b = d.request("GET", "/readyz")
            assert st == 503, (st, b)
            assert b["reason"].startswith("journal: cannot write: ") \
                if drv == "sqlite" else \
                b["reason"].startswith("journal: journal schema: ") and \
                "read-only" in b["reason"], b
            assert L.counts(d, key, q)["scheduled"] == 5
            st, _, b = d.request("GET", "/readyz")
            assert st == 503, (st, b)
        finally:
            fault.end()
        d.wait_ready(timeout=30)
        ids += L.push_batches(d, key, q, 5)
        ids.append(L.ok(d.request("POST", one, {"delay_ms": L.HOUR},
                                  key=key), 201)["id"])
        assert L.counts(d, key, q)["scheduled"] == 11
        # The journal holds every accepted job, and only those.
        _, _, _, restored, _ = L.lose_redis(d, r)
        assert restored == 11, restored
        L.advance(d, 2 * L.HOUR)
        got = []
        reserve = "/v1/topics/%s/reserve?max=100&wait_ms=" % q
        while len(got) < len(ids):
            b = L.ok(d.request("GET", reserve + "10000", key=key,
                               timeout=30), 200)
            got += [j["id"] for j in b["jobs"]]
        assert sorted(got) == sorted(ids), (got, ids)
        assert d.request("GET", reserve + "0", key=key)[0] == 204


D.each("a database that takes no write (disk full, read-only): 503, "
       "/readyz says it cannot write; writable again: nothing lost",
       no_writes)


def redis_full(drv):
    url = D.url(drv)
    with harness.RedisServer(args=["--maxmemory", "4mb",
                                   "--maxmemory-policy",
                                   "noeviction"]) as r, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        L.ready(d)
        _, key, q = L.pull_tenant(d)
        one = "/v1/topics/%s/jobs" % q
        big = "x" * 4000
        accepted = 0
        mark = d.log_mark()
        for _ in range(4000):
            st, _, b = d.request("POST", one, {"delay_ms": L.HOUR,
                                               "body": big}, key=key)
            if st != 201:
                break
            accepted += 1
        else:
            assert False, "Redis never filled"
        refused = 1
        # 507 redis_full, not 503: Redis answers, it has no room.
        assert st == 507 and b["error"]["code"] == "redis_full", (st, b)
        # At its limit within a few KB: Redis shrinks an idle client's
        # buffers (tens of KB, after 2 s), and a job may fit again.  Keep
        # it well over its limit for the refusals below.
        used = int(r.cmd("INFO", "memory").split("used_memory:")[1]
                   .split()[0])
        r.cmd("CONFIG", "SET", "maxmemory", str(used // 2))
        for _ in range(20):
            st, _, b = d.request("POST", one, {"delay_ms": L.HOUR,
                                               "body": big}, key=key)
            assert st == 507 and b["error"]["code"] == "redis_full", \
                (st, b)
            refused += 1
        st, _, b = d.request("POST", "/push", {"topic": q, "delay": L.HOUR,
                                               "body": big}, key=key)
        assert st == 507 and b["error"]["code"] == "redis_full", (st, b)
        b = L.ok(d.request("POST", one + ":batch",
                           {"jobs": [{"delay_ms": L.HOUR,
                                      "body": big}] * 3}, key=key), 200)
        assert [(x["status"], x["error"]["code"]) for x in b["results"]] \
            == [(507, "redis_full")] * 3, b
        # Each refusal logged Redis's OOM; one line a second says it.
        lines = d.log(since=mark).count("redis: script ")
        assert 1 <= lines < 10 and "OOM" in d.log(since=mark), \
            d.log(since=mark)
        # Redis answers: this instance is still ready (it delivers, takes
        # acks); a full Redis is for the metrics and the log.
        assert d.request("GET", "/readyz")[0] == 200
        assert L.counts(d, key, q)["scheduled"] == accepted
        r.cmd("CONFIG", "SET", "maxmemory", "0")
        L.ok(d.request("POST", one, {"delay_ms": L.HOUR}, key=key), 201)
        accepted += 1
        # The journal kept the accepted jobs and none of the refused.
        _, _, _, restored, _ = L.lose_redis(d, r)
        assert restored == accepted, (restored, accepted, refused)
        assert L.counts(d, key, q)["scheduled"] == accepted


D.each("Redis out of memory: pushes 507, the journal keeps none of them, "
       "the log says it once a second; memory back: nothing lost",
       redis_full)


def rebuild_full(drv):
    url = D.url(drv)
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        L.ready(d)
        _, key, q = L.pull_tenant(d)
        ids = L.push_batches(d, key, q, 600, size=100, body="x" * 4000)
        used = int(r.cmd("INFO", "memory").split("used_memory:")[1]
                   .split()[0])
        # Room for about half of the jobs once Redis is empty again.
        r.cmd("CONFIG", "SET", "maxmemory", str(used - 1200 * 1000))
        mark = d.log_mark()
        r.cmd("FLUSHALL")
        d.wait_log(r"restore: the rebuild did not complete: .*out of "
                   r"memory", since=mark, timeout=60)
        # It stopped at the first job Redis had no room for, not skipped
        # it and the ones after: with room it completes, all of them.
        mark = d.log_mark()
        r.cmd("CONFIG", "SET", "maxmemory", "0")
        L.wait_restore(d, mark)
        assert L.counts(d, key, q)["scheduled"] == len(ids)


D.each("a rebuild that fills Redis stops and runs again, skipping no job",
       rebuild_full)


@t.test("the journal's file removed while open: it is made again at its "
        "path and what is accepted after is in it [sqlite]")
def _():
    url = D.url("sqlite")
    path = url[len("sqlite://"):]
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        L.ready(d)
        _, key, q = L.pull_tenant(d)
        L.push_batches(d, key, q, 5)
        mark = d.log_mark()
        for suffix in ("", "-wal", "-shm"):
            os.unlink(path + suffix)
        # The round that finds the file gone refuses its pushes (not
        # accepted, 503); the ones after go to the new file.  The writer's
        # idle ping may find it first: then none is refused.
        after, refused = [], 0
        while len(after) < 3:
            st, _, b = d.request("POST", "/v1/topics/%s/jobs" % q,
                                 {"delay_ms": L.HOUR}, key=key)
            if st == 503:
                assert b["error"]["code"] == "journal_unavailable", b
                refused += 1
                assert refused == 1, b
                continue
            after.append(L.ok((st, _, b), 201)["id"])
        assert "removed or replaced while open" in d.log(since=mark)
        db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
        try:
            got = [x[0] for x in db.execute("SELECT id FROM jobs")]
        finally:
            db.close()
        assert sorted(got) == sorted(after), (got, after)
        # The reader reads the new file too.
        b = L.ok(d.request("GET", "/v1/jobs?topic=%s&limit=100" % q,
                           key=key), 200)
        assert sorted(j["id"] for j in b["jobs"]) == sorted(after), b


@t.test("a Redis that may evict is named once at start; noeviction, or "
        "no maxmemory, is not")
def _():
    for policy, limit, warned in (("allkeys-lru", "1gb", True),
                                  ("volatile-lru", "1gb", True),
                                  ("noeviction", "1gb", False),
                                  ("allkeys-lru", "0", False)):
        with harness.RedisServer(args=["--maxmemory-policy", policy,
                                       "--maxmemory", limit]) as r, \
                harness.Retryd(redis=r) as d:
            d.wait_ready()
            said = "maxmemory-policy is %s: Redis may evict jobs" % policy
            assert d.log().count(said) == warned, (policy, limit, d.log())
t.done()
