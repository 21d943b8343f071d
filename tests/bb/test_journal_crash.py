"""test_journal_crash.py - retryd is killed (SIGKILL) in the middle of a
push storm from several client threads; after a restart every push that was
answered 2xx is delivered, once.  Twice per driver: with Redis intact, and
with Redis flushed as well (the journal alone brings the jobs back, through
the rebuild at start).  SQLite and MySQL (a private mariadbd).

Then the changes: in sync mode a cancel, a reschedule, an ack, a nack, a
retry from dead and a redrive answered 2xx are journaled before the answer.
With a long flush interval and the clock stopped (no batch of transitions
would be written by itself), retryd is killed right after the answers: after
a restart the journal holds every change, and after a FLUSHALL the jobs come
back as changed (cancelled and acked ones do not come back).  With the
database down, a change is answered 503 journal_unavailable, stands in Redis,
and is journaled once the database is back.
"""

import http.client
import os
import signal
import sqlite3
import sys
import threading

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_journal_lib as L  # noqa: E402

t = harness.Tap()
D = L.Drivers(t)
THREADS = 8
BEFORE_KILL = 400       # 2xx answers before the kill


class Storm:
    """THREADS clients pushing one job per request until told to stop;
    the ids of the 2xx answers."""

    def __init__(self, d, key, topic):
        self.d, self.key, self.topic = d, key, topic
        self.acked = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,))
                        for i in range(THREADS)]
        for th in self.threads:
            th.start()

    def _run(self, i):
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                st, _, b = self.d.request(
                    "POST", "/v1/topics/%s/jobs" % self.topic,
                    {"delay_ms": L.HOUR, "body": {"t": i, "n": n}},
                    key=self.key, timeout=5)
            except (OSError, http.client.HTTPException):
                continue
            if st in (200, 201):
                with self.lock:
                    self.acked.append(b["id"])

    def count(self):
        with self.lock:
            return len(self.acked)

    def join(self):
        self.stop.set()
        for th in self.threads:
            th.join(30)
        with self.lock:
            return list(self.acked)


def crash(drv, flush_redis):
    cfg = L.config(D.url(drv), scheduler={"lease": "1s"})
    with harness.RedisServer() as r, harness.Receiver() as rcv, \
            harness.Retryd(redis=r, config=cfg) as d:
        L.ready(d)
        _, key = L.tenant(d)
        q = L.topic(d, key, callback_url=rcv.url("/hook"))
        storm = Storm(d, key, q)
        try:
            harness.wait_for(lambda: storm.count() >= BEFORE_KILL, 60,
                             "%d pushes answered" % BEFORE_KILL)
            d.signal(signal.SIGKILL)
            assert d.wait_exit() == -signal.SIGKILL
        finally:
            acked = storm.join()
        assert len(acked) >= BEFORE_KILL and len(set(acked)) == len(acked)
        if flush_redis:
            r.cmd("FLUSHALL")
        mark = d.log_mark()
        d.start()
        L.ready(d, mark)
        if flush_redis:
            assert "will be rebuilt" in d.log(mark)
        L.advance(d, 2 * L.HOUR)
        got = harness.wait_for(
            lambda: (lambda s: s if set(acked) <= s else None)(
                set(L.delivered_ids(rcv))), 60,
            "every acknowledged push delivered")
        ids = L.delivered_ids(rcv)
        assert len(ids) == len(set(ids)), "a job was delivered twice"
        t.diag("%d pushes acknowledged, %d jobs delivered" %
               (len(acked), len(got)))


def change_config(url):
    """Sync mode; a batch of transitions waits a second (far longer than
    from an answer to the kill), and the fake clock, stopped, never gets
    there: only what a route waits for is written.  (Not longer: a rebuild
    waits two intervals for other instances' batches.)"""
    return L.config(url, journal={"flush_interval": "1s"})


def journal_rows(d, key, topic):
    """The journal's rows of a topic's jobs, by id (GET /v1/jobs reads the
    journal)."""
    b = L.ok(d.request("GET", "/v1/jobs?limit=1000&topic=" + topic, key=key),
             200)
    return {j["id"]: j for j in b["jobs"]}


def reserve(d, key, topic):
    return L.ok(d.request("GET", "/v1/topics/%s/reserve?wait_ms=5000" % topic,
                          key=key), 200)


def changes(drv):
    url = D.url(drv)
    with harness.RedisServer() as r, harness.Receiver() as rcv, \
            harness.Retryd(redis=r, config=change_config(url)) as d:
        L.ready(d)
        _, key = L.tenant(d)
        qp = L.topic(d, key, callback_url=rcv.url("/hook"))
        qq = L.topic(d, key, mode="pull", retry_schedule="<0,1h>")
        qd = L.topic(d, key, mode="pull", retry_schedule="<0>")
        push = "/v1/topics/%s/jobs"
        now = L.ok(d.admin("GET", "/v1/debug/clock"))["now_ms"]
        a, c, p = (L.ok(d.request("POST", push % qp, {"delay_ms": L.HOUR},
                                  key=key))["id"] for _ in range(3))
        b = L.ok(d.request("POST", push % qp, {"delay_ms": L.HOUR,
                                               "bizkey": "bk"},
                           key=key))["id"]
        pulls = {L.ok(d.request("POST", push % qq, {}, key=key))["id"]
                 for _ in range(2)}
        dead = {L.ok(d.request("POST", push % qd, {}, key=key))["id"]
                for _ in range(2)}
        tokens = {}
        for q in (qq, qq, qd, qd):
            res = reserve(d, key, q)
            tokens[res["id"]] = res["token"]
        assert set(tokens) == pulls | dead, (tokens, pulls, dead)
        k, n = sorted(pulls)
        x, y = sorted(dead)
        for j in (x, y):
            L.ok(d.request("POST", "/v1/jobs/%s/nack" % j,
                           {"token": tokens[j]}, key=key), 200)
            assert L.redis_job(d, key, j)["state"] == "dead"
        # A push writes what is queued with it: the journal says dead.
        L.ok(d.request("POST", push % qp, {"delay_ms": L.HOUR}, key=key))
        rows = journal_rows(d, key, qd)
        assert rows[x]["state"] == rows[y]["state"] == "dead", rows

        # The changes, each answered 2xx; nothing else is written between.
        run_at = now + 5 * L.HOUR
        L.ok(d.request("DELETE", "/v1/jobs/" + a, key=key), 204)
        L.ok(d.request("DELETE", "/v1/topics/%s/bizkeys/bk" % qp, key=key),
             204)
        L.ok(d.request("GET", "/delete?id=" + c, key=key), 200)
        L.ok(d.request("PATCH", "/v1/jobs/" + p, {"run_at_ms": run_at},
                       key=key), 200)
        L.ok(d.request("POST", "/v1/jobs/%s/ack" % k, {"token": tokens[k]},
                       key=key), 200)
        nb = L.ok(d.request("POST", "/v1/jobs/%s/nack" % n,
                            {"token": tokens[n]}, key=key), 200)
        assert nb["state"] == "retrying", nb
        L.ok(d.request("POST", "/v1/jobs/%s/retry" % x, key=key), 200)
        rd = L.ok(d.request("POST", "/v1/topics/%s/dead:redrive" % qd,
                            key=key), 200)
        assert rd["redriven"] == 1, rd
        d.signal(signal.SIGKILL)
        assert d.wait_exit() == -signal.SIGKILL

        want = {a: "cancelled", b: "cancelled", c: "cancelled",
                p: "scheduled", k: "delivered", n: "retrying",
                x: "scheduled", y: "scheduled"}
        mark = d.log_mark()
        d.start()
        L.ready(d, mark)
        rows = {}
        for q in (qp, qq, qd):
            rows.update(journal_rows(d, key, q))
        wrong = ["%s: journal says %s, not %s" % (j, rows[j]["state"], s)
                 for j, s in sorted(want.items()) if rows[j]["state"] != s]
        if rows[p]["due_ms"] != run_at:
            wrong.append("rescheduled job due %d in the journal, not %d" %
                         (rows[p]["due_ms"], run_at))
        assert not wrong, "after kill -9, Redis intact: " + "; ".join(wrong)

        L.lose_redis(d, r)
        for j in (a, b, c, k):
            g = L.redis_job(d, key, j)
            if g != 404:
                wrong.append("%s (%s) came back %s" %
                             (j, want[j], g["state"]))
        g = L.redis_job(d, key, p)
        if g == 404 or g["state"] != "scheduled" or \
                g["next_attempt_ms"] != run_at:
            wrong.append("the rescheduled job came back as %r" % (g,))
        g = L.redis_job(d, key, n)
        if g == 404 or g["state"] != "retrying":
            wrong.append("the nacked job came back as %r" % (g,))
        for j in (x, y):
            g = L.redis_job(d, key, j)
            if g == 404 or g["state"] not in ("scheduled", "ready"):
                wrong.append("%s, run again, came back as %r" % (j, g))
        assert not wrong, "after FLUSHALL: " + "; ".join(wrong)
        # Nothing of qq comes out: the acked job is finished, the nacked
        # one is due in an hour.
        assert d.request("GET", "/v1/topics/%s/reserve?wait_ms=0" % qq,
                         key=key)[0] == 204


def change_outage(drv):
    """The database down: a cancel is made in Redis but answered 503 (not
    journaled yet); back, the journal gets it."""
    url = D.url(drv)
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=change_config(url)) as d:
        L.ready(d)
        _, key = L.tenant(d)
        q = L.topic(d, key, mode="pull")
        j = L.ok(d.request("POST", "/v1/topics/%s/jobs" % q,
                           {"delay_ms": L.HOUR}, key=key))["id"]
        conn = None
        if drv == "mysql":
            D.db.stop()
        else:
            conn = sqlite3.connect(url[len("sqlite://"):], timeout=10,
                                   isolation_level=None)
            conn.execute("BEGIN EXCLUSIVE")
        try:
            st, _, b = d.request("DELETE", "/v1/jobs/" + j, key=key,
                                 timeout=30)
            assert st == 503, (st, b)
            assert b["error"]["code"] == "journal_unavailable", b
            assert "not journaled yet" in b["error"]["message"], b
            assert L.redis_job(d, key, j)["state"] == "cancelled"
        finally:
            if conn is not None:
                conn.execute("ROLLBACK")
                conn.close()
            else:
                D.db.start()
        d.wait_ready(timeout=30)
        # The transition waited in the queue; a push writes it with its own.
        L.ok(d.request("POST", "/v1/topics/%s/jobs" % q, {"delay_ms": L.HOUR},
                       key=key))
        rows = journal_rows(d, key, q)
        assert rows[j]["state"] == "cancelled", rows[j]


D.each("kill -9 during a push storm: every 2xx push is delivered",
       lambda drv: crash(drv, False))
D.each("kill -9 and FLUSHALL: the journal alone brings every 2xx push back",
       lambda drv: crash(drv, True))
D.each("kill -9 right after a cancel, reschedule, ack, nack, retry and "
       "redrive: the journal has every change, FLUSHALL brings none back",
       changes)
D.each("a change with the database down: 503 journal_unavailable, "
       "journaled once it is back", change_outage)
t.done()
