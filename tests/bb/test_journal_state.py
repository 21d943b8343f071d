"""test_journal_state.py - what a rebuild from the journal brings back, and
what it must not: delivered and cancelled jobs never return, dead ones
return dead, a push deduplicated by bizkey or by its id is not a second
job, tenants, key hashes and topics come back exactly (revoked keys and
deleted topics do not), `retryd --recover` does it as a one-shot, and the
retention purge removes finished jobs from the journal.  Each case runs on
SQLite and on MySQL (a private mariadbd).
"""

import os
import sqlite3
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_journal_lib as L  # noqa: E402

t = harness.Tap()
D = L.Drivers(t)
DAY = 24 * L.HOUR


def get(d, key, path):
    return d.request("GET", path, key=key)


def job_state(d, key, jid):
    st, _, b = get(d, key, "/v1/jobs/" + jid)
    return b["state"] if st == 200 else st


def case_finished(drv):
    with harness.RedisServer() as r, \
            harness.Receiver(path_scripts={"/ok": "200",
                                           "/gone": "410"}) as rcv, \
            harness.Retryd(redis=r, config=L.config(D.url(drv))) as d:
        L.ready(d)
        _, key = L.tenant(d)
        # The journal has no ready or in_flight rows: listing by them is
        # refused, not answered empty; a waiting state lists.
        for st in ("ready", "in_flight"):
            code, _, b = get(d, key, "/v1/jobs?state=" + st)
            assert code == 400 and b["error"]["code"] == "invalid_field" \
                and b["error"]["field"] == "state" \
                and "cannot be listed" in b["error"]["message"], (st, b)
        L.ok(get(d, key, "/v1/jobs?state=retrying"), 200)
        qa = L.topic(d, key, callback_url=rcv.url("/ok"))
        qd = L.topic(d, key, callback_url=rcv.url("/gone"))
        push = "/v1/topics/%s/jobs"
        # A: delivered.  B: cancelled.  C: dead (410).
        a = L.ok(d.request("POST", push % qa, {"body": "a"}, key=key))["id"]
        b = L.ok(d.request("POST", push % qa, {"delay_ms": L.HOUR},
                           key=key))["id"]
        assert d.request("DELETE", "/v1/jobs/" + b, key=key)[0] == 204
        c = L.ok(d.request("POST", push % qd, {"body": "c"}, key=key))["id"]
        harness.wait_for(lambda: job_state(d, key, a) == "delivered" and
                         job_state(d, key, c) == "dead", 20,
                         "A delivered and C dead")
        # D, then E with D's bizkey: deduplicated, not a second job.
        dd = L.ok(d.request("POST", push % qa, {"delay_ms": L.HOUR,
                                                "bizkey": "k", "body": "d"},
                            key=key), 201)["id"]
        e = L.ok(d.request("POST", push % qa, {"delay_ms": L.HOUR,
                                               "bizkey": "k", "body": "e"},
                           key=key), 200)
        assert e["deduplicated"] and e["id"] == dd, e
        # The original /push with a client id, twice: the first body wins.
        o1 = L.ok(d.request("POST", "/push", {"topic": qa, "id": "order-1",
                                              "delay": L.HOUR, "body": "x"},
                            key=key), 200)
        o2 = L.ok(d.request("POST", "/push", {"topic": qa, "id": "order-1",
                                              "delay": L.HOUR, "body": "y"},
                            key=key), 200)
        assert o1["id"] == o2["id"] == "order-1" and \
            o2.get("deduplicated"), (o1, o2)
        _, _, _, restored, present = L.lose_redis(d, r)
        assert restored == 3 and present == 0, (restored, present)
        # A and B are not back in Redis; GET answers them from the
        # journal.
        assert L.redis_job(d, key, a) == 404, "a delivered job came back"
        assert L.redis_job(d, key, b) == 404, "a cancelled job came back"
        assert job_state(d, key, a) == "delivered"
        assert job_state(d, key, b) == "cancelled"
        # C is back dead, its attempt (410) from the journal: Redis's
        # record came back without its log.
        g = L.ok(get(d, key, "/v1/jobs/" + c), 200)
        assert g["state"] == "dead" and g["attempt_count"] == 1 and \
            [x["status"] for x in g["attempts"]] == [410], g
        assert job_state(d, key, dd) == "scheduled"
        g = L.ok(get(d, key, "/v1/jobs/order-1"), 200)
        assert g["body"] == "x", g
        assert L.counts(d, key, qa)["scheduled"] == 2
        # The journal lists D alone: E's row went with its push.
        rows = L.ok(get(d, key, "/v1/jobs?bizkey=k"), 200)["jobs"]
        assert [(x["id"], x["state"]) for x in rows] == \
            [(dd, "scheduled")], rows
        # Again: nothing more.
        b2 = L.ok(d.admin("POST", "/v1/restore"), 200)
        assert b2["restored"] == 0 and b2["present"] == 3, b2
        # A restore of one job never revives a finished one.
        b3 = L.ok(d.request("POST", "/v1/jobs/%s/restore" % a, key=key))
        assert b3["restored"] == 0 and b3["skipped"] == 1, b3
        assert L.redis_job(d, key, a) == 404
        L.advance(d, 2 * L.HOUR)
        rcv.wait_count(4, timeout=20)
        ok_ids = [x.headers["webhook-id"] for x in rcv.requests
                  if x.path == "/ok"]
        assert sorted(ok_ids) == sorted([a, dd, "order-1"]), ok_ids
        gone = [x for x in rcv.requests if x.path == "/gone"]
        assert len(gone) == 1, gone


def case_history(drv):
    """GET /v1/jobs/{id} once Redis let a finished job go (sched.retention,
    an hour): the journal's row and every attempt, as Redis showed them;
    another tenant's id and an unknown one stay 404."""
    with harness.RedisServer() as r, \
            harness.Receiver(script="500,500,200") as rcv, \
            harness.Retryd(redis=r, config=L.config(D.url(drv))) as d:
        L.ready(d)
        _, key = L.tenant(d)
        _, other = L.tenant(d)
        q = L.topic(d, key, callback_url=rcv.url("/hook"),
                    retry_schedule="<0,1s,1s>")
        a = L.ok(d.request("POST", "/v1/topics/%s/jobs" % q,
                           {"body": {"x": 1}, "bizkey": "k1"},
                           key=key))["id"]
        for n in (1, 2):
            # The clock moves once the attempt's outcome is in: its retry
            # is due a second after it.
            harness.wait_for(lambda: L.ok(get(d, key, "/v1/jobs/" + a))[
                "attempt_count"] == n and job_state(d, key, a) ==
                "retrying", 20, "attempt %d failed" % n)
            L.advance(d, 1000)
        harness.wait_for(lambda: job_state(d, key, a) == "delivered", 20,
                         "the job delivered at attempt 3")
        live = L.ok(get(d, key, "/v1/jobs/" + a), 200)
        assert [x["status"] for x in live["attempts"]] == [500, 500, 200], \
            live
        assert "updated_ms" not in live, live
        # The outcome's transition is written within a flush interval;
        # then an hour on (sched.retention) Redis lets the job go.
        harness.wait_for(lambda: [x["state"] for x in L.ok(get(
            d, key, "/v1/jobs?bizkey=k1"))["jobs"]] == ["delivered"], 20,
            "the journal to hold the job delivered")
        L.advance(d, 2 * L.HOUR)

        def from_journal():
            st, _, b = get(d, key, "/v1/jobs/" + a)
            return b if st == 200 and "updated_ms" in b else None
        old = harness.wait_for(from_journal, 20,
                               "Redis to let the finished job go")
        for f in ("id", "topic", "state", "bizkey", "priority",
                  "created_ms", "attempt_count", "body", "headers",
                  "retry_schedule", "next_attempt_ms", "attempts"):
            assert old[f] == live[f], (f, old[f], live[f])
        assert old["finished_ms"] == live["attempts"][-1]["at_ms"], old
        # A change to it is refused as to a finished job, as GET shows it
        # (not 404): a cancel, a reschedule, the original /delete.
        for m, path, body, code in [
                ("DELETE", "/v1/jobs/" + a, None, "job_finished"),
                ("PATCH", "/v1/jobs/" + a, {"delay_ms": 1000},
                 "job_not_waiting"),
                ("GET", "/delete?id=" + a, None, "job_finished")]:
            st, _, b = d.request(m, path, body, key=key)
            assert st == 409 and b["error"]["code"] == code, (path, st, b)
        assert L.ok(get(d, key, "/v1/jobs/" + a))["state"] == "delivered"
        # The journal's answer is the tenant's own, as Redis's is.
        st, _, b = get(d, other, "/v1/jobs/" + a)
        assert st == 404 and b["error"]["code"] == "job_not_found", (st, b)
        st, _, b = d.request("DELETE", "/v1/jobs/" + a, key=other)
        assert st == 404 and b["error"]["code"] == "job_not_found", (st, b)
        st, _, b = get(d, key, "/v1/jobs/0000000000000000")
        assert st == 404 and b["error"]["code"] == "job_not_found", (st, b)


def case_due(drv):
    """A rescheduled job and a retrying one come back at their next
    attempt, not their first."""
    with harness.RedisServer() as r, \
            harness.Receiver(path_scripts={"/ok": "200",
                                           "/fail": "500"}) as rcv, \
            harness.Retryd(redis=r, config=L.config(D.url(drv))) as d:
        L.ready(d)
        _, key = L.tenant(d)
        qa = L.topic(d, key, callback_url=rcv.url("/ok"))
        qf = L.topic(d, key, callback_url=rcv.url("/fail"),
                     retry_schedule="<0,3h>")
        now = L.ok(d.admin("GET", "/v1/debug/clock"))["now_ms"]
        f = L.ok(d.request("POST", "/v1/topics/%s/jobs" % qa,
                           {"delay_ms": L.HOUR}, key=key))["id"]
        L.ok(d.request("PATCH", "/v1/jobs/" + f,
                       {"run_at_ms": now + 5 * L.HOUR}, key=key), 200)
        g = L.ok(d.request("POST", "/v1/topics/%s/jobs" % qf, {},
                           key=key))["id"]
        harness.wait_for(lambda: job_state(d, key, g) == "retrying", 20,
                         "the first attempt of g to fail")
        before = {j: L.ok(get(d, key, "/v1/jobs/" + j)) for j in (f, g)}
        _, _, _, restored, _ = L.lose_redis(d, r)
        assert restored == 2, restored
        for j in (f, g):
            after = L.ok(get(d, key, "/v1/jobs/" + j))
            for k in ("state", "next_attempt_ms", "attempt_count"):
                assert after[k] == before[j][k], (j, k, before[j], after)
        assert before[f]["next_attempt_ms"] == now + 5 * L.HOUR
        # Two hours on, neither is due yet: nothing more was attempted.
        passes = L.advance(d, 2 * L.HOUR)["passes"]
        harness.wait_for(lambda: L.ok(d.admin("GET", "/v1/debug/clock"))[
            "passes"] > passes + 1, 10, "two timer passes")
        assert len(rcv.requests) == 1, rcv.requests
        assert job_state(d, key, f) == "scheduled"


def trans_rows(drv, url, jid):
    """(from_state, to_state, attempt) of a job's transitions, in order."""
    q = ("SELECT from_state, to_state, attempt FROM %stransitions "
         "WHERE job_id = '%s' ORDER BY id" % ("%s", jid))
    if drv == "sqlite":
        with sqlite3.connect(url[len("sqlite://"):]) as db:
            return [tuple(x) for x in db.execute(q % "")]
    name = url.rsplit("/", 1)[1].split("?")[0]
    out = D.db.sql(q % (name + "."))
    return [(None if a == "NULL" else a, b, int(c)) for a, b, c in
            (line.split("\t") for line in out.splitlines())]


def case_rows_per_attempt(drv):
    """No job's ready or in_flight is journaled, of a push or a pull
    topic: one row per attempt (in_flight -> its outcome); a restore from
    those rows brings a retrying job back at its next attempt, never a
    delivered one; a pull job reserved comes back ready after Redis loses
    it, acked (one row) it does not.  A job's creation is its jobs row."""
    url = D.url(drv)
    with harness.RedisServer() as r, \
            harness.Receiver(path_scripts={"/ok": "200",
                                           "/fail": "500"}) as rcv, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        L.ready(d)
        _, key = L.tenant(d)
        qa = L.topic(d, key, callback_url=rcv.url("/ok"))
        qf = L.topic(d, key, callback_url=rcv.url("/fail"),
                     retry_schedule="<0,3h,3h>")
        qp = L.topic(d, key, mode="pull")
        push = "/v1/topics/%s/jobs"
        a = L.ok(d.request("POST", push % qa, {}, key=key))["id"]
        g = L.ok(d.request("POST", push % qf, {}, key=key))["id"]
        p = L.ok(d.request("POST", push % qp, {}, key=key))["id"]
        harness.wait_for(lambda: job_state(d, key, a) == "delivered" and
                         job_state(d, key, g) == "retrying", 20,
                         "a delivered and g retrying")
        st, _, res = d.request("GET", "/v1/topics/%s/reserve?wait_ms=5000" %
                               qp, key=key)
        assert st == 200 and res["id"] == p, (st, res)
        # A job's creation is its jobs row (written by the put), not a
        # transitions row.
        want = {a: [("in_flight", "delivered", 1)],
                g: [("in_flight", "retrying", 1)],
                p: []}
        harness.wait_for(lambda: all(trans_rows(drv, url, j) == w
                                     for j, w in want.items()), 20,
                         "the journal's rows")
        # The API's attempts come from Redis, as before.
        ga = L.ok(get(d, key, "/v1/jobs/" + g))
        assert [x["status"] for x in ga["attempts"]] == [500], ga
        _, _, _, restored, _ = L.lose_redis(d, r)
        assert restored == 2, restored
        assert L.redis_job(d, key, a) == 404, "a delivered job came back"
        after = L.ok(get(d, key, "/v1/jobs/" + g))
        for k in ("state", "next_attempt_ms", "attempt_count"):
            assert after[k] == ga[k], (k, ga, after)
        # Reserved, scheduled and due in the journal: ready again.
        harness.wait_for(lambda: job_state(d, key, p) == "ready", 20,
                         "p ready again")
        assert len(rcv.requests) == 2, rcv.requests
        # Reserved again and acked: one row (a ready or a reservation
        # written would precede it), and a second loss does not bring p
        # back.
        st, _, res = d.request("GET", "/v1/topics/%s/reserve?wait_ms=5000" %
                               qp, key=key)
        assert st == 200 and res["id"] == p, (st, res)
        st, _, ack = d.request("POST", "/v1/jobs/%s/ack" % p,
                               {"token": res["token"]}, key=key)
        assert st == 200 and ack["state"] == "delivered", (st, ack)
        want[p] = [("in_flight", "delivered", 1)]
        harness.wait_for(lambda: ("in_flight", "delivered", 1) in
                         trans_rows(drv, url, p), 20, "p's ack row")
        assert trans_rows(drv, url, p) == want[p], trans_rows(drv, url, p)
        _, _, _, restored, _ = L.lose_redis(d, r)
        assert restored == 1, restored
        assert L.redis_job(d, key, p) == 404, "an acked job came back"
        assert job_state(d, key, g) == "retrying"


def case_registry(drv):
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(D.url(drv))) as d:
        L.ready(d)
        name = L.unique("t")
        k1 = L.ok(d.admin("POST", "/v1/tenants", {"name": name,
                                                  "max_pending": 40,
                                                  "max_in_flight": 3}),
                  201)["api_key"]
        # Each PATCH writes both settings: neither loses the other.
        L.ok(d.admin("PATCH", "/v1/tenants/" + name, {"max_in_flight": 4}),
             200)
        L.ok(d.admin("PATCH", "/v1/tenants/" + name, {"max_pending": 50}),
             200)
        k2 = L.ok(d.admin("POST", "/v1/tenants/%s/keys" % name), 201)
        k3 = L.ok(d.admin("POST", "/v1/tenants/%s/keys" % name), 201)
        assert d.admin("DELETE", "/v1/tenants/%s/keys/%s" %
                       (name, k3["key_id"]))[0] == 204
        secret = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="
        p = L.ok(d.request("PUT", "/v1/topics/p", {
            "mode": "pull", "ttr_ms": 7000, "headers": {"X-A": "b"},
            "secret": secret}, key=k1), 201)
        L.topic(d, k1, "gone")
        assert d.request("DELETE", "/v1/topics/gone", key=k1)[0] == 204
        other, _ = L.tenant(d)
        assert d.admin("DELETE", "/v1/tenants/" + other)[0] == 204
        tb = L.ok(d.admin("GET", "/v1/tenants/" + name), 200)
        for loss in range(2):
            got = L.lose_redis(d, r)
            assert got[:3] == (1, 2, 1), got
            for k in (k1, k2["api_key"]):
                assert get(d, k, "/v1/topics")[0] == 200
            assert get(d, k3["api_key"], "/v1/topics")[0] == 401
            ta = L.ok(d.admin("GET", "/v1/tenants/" + name), 200)
            assert ta["created_ms"] == tb["created_ms"], (ta, tb)
            assert ta["max_pending"] == 50, ta
            assert ta["max_in_flight_override"] == 4, ta
            assert ta["max_in_flight"] == 4, ta
            pa = L.ok(get(d, k1, "/v1/topics/p"), 200)
            for f in ("secret", "mode", "ttr_ms", "headers", "created_ms",
                      "retry_schedule"):
                assert pa[f] == p[f], (f, p[f], pa[f])
            assert pa["secret"] == secret
            assert get(d, k1, "/v1/topics/gone")[0] == 404
            assert d.admin("GET", "/v1/tenants/" + other)[0] == 404


def case_recover(drv):
    with harness.RedisServer() as r, harness.Receiver() as rcv, \
            harness.Retryd(redis=r, config=L.config(D.url(drv))) as d:
        L.ready(d)
        _, key = L.tenant(d)
        q = L.topic(d, key, callback_url=rcv.url("/hook"))
        ids = L.push_batches(d, key, q, 10)
        assert d.stop() == 0
        r.cmd("FLUSHALL")
        rc, out, err = harness.run_retryd(["--recover", "-c", d.conffile])
        assert rc == 0, (rc, out, err)
        assert "restored: 1 tenants, 1 keys, 1 topics, 10 jobs;" in out, out
        rc, out, err = harness.run_retryd(["-r", "-c", d.conffile])
        assert rc == 0, (rc, out, err)
        assert "restored: 0 tenants, 0 keys, 0 topics, 0 jobs; present " \
            "already: 10 jobs" in out, out
        mark = d.log_mark()
        d.start()
        L.ready(d, mark)
        assert "will be rebuilt" not in d.log(mark)
        assert L.counts(d, key, q)["scheduled"] == 10
        L.advance(d, 2 * L.HOUR)
        rcv.wait_count(10, timeout=20)
        assert sorted(L.delivered_ids(rcv)) == sorted(ids)


def case_retention(drv):
    with harness.RedisServer() as r, \
            harness.Receiver(path_scripts={"/ok": "200",
                                           "/gone": "410"}) as rcv, \
            harness.Retryd(redis=r, config=L.config(D.url(drv))) as d:
        L.ready(d)
        _, key = L.tenant(d)
        qa = L.topic(d, key, callback_url=rcv.url("/ok"))
        qd = L.topic(d, key, callback_url=rcv.url("/gone"))
        a = L.ok(d.request("POST", "/v1/topics/%s/jobs" % qa, {},
                           key=key))["id"]
        c = L.ok(d.request("POST", "/v1/topics/%s/jobs" % qd, {},
                           key=key))["id"]
        b = L.ok(d.request("POST", "/v1/topics/%s/jobs" % qa,
                           {"delay_ms": 20 * DAY}, key=key))["id"]

        def listed():
            rows = L.ok(get(d, key, "/v1/jobs?limit=100"), 200)["jobs"]
            return {x["id"]: x["state"] for x in rows}
        harness.wait_for(lambda: listed() == {a: "delivered", b: "scheduled",
                                              c: "dead"}, 20,
                         "the journal to list a delivered, b scheduled, "
                         "c dead")
        # 29 days on: b is delivered (day 20); nothing is old enough yet.
        L.advance(d, 29 * DAY)
        harness.wait_for(lambda: listed().get(b) == "delivered", 20,
                         "b delivered")
        assert a in listed(), "a was purged before its time"
        # Day 31: a (finished on day 0) is past the 30-day retention.
        L.advance(d, 2 * DAY)
        harness.wait_for(lambda: a not in listed(), 20,
                         "the purge to remove a")
        assert listed() == {b: "delivered", c: "dead"}, listed()


def case_redrive(drv):
    """A dead job retried (POST /v1/jobs/{id}/retry) or redriven (POST
    /v1/topics/{t}/dead:redrive) runs its schedule again from attempt 0,
    and comes back so after Redis loses it: its journal row's attempts
    start over too."""
    fail = "500,500,500,hang"       # three attempts die, the next hangs
    with harness.RedisServer() as r, \
            harness.Receiver(path_scripts={"/fa": fail,
                                           "/fb": fail}) as rcv, \
            harness.Retryd(redis=r, config=L.config(D.url(drv))) as d:
        L.ready(d)
        _, key = L.tenant(d)
        qa = L.topic(d, key, callback_url=rcv.url("/fa"),
                     retry_schedule="<0,0,0>")
        qb = L.topic(d, key, callback_url=rcv.url("/fb"),
                     retry_schedule="<0,0,0>")
        push = "/v1/topics/%s/jobs"
        a = L.ok(d.request("POST", push % qa, {}, key=key))["id"]
        b = L.ok(d.request("POST", push % qb, {}, key=key))["id"]
        harness.wait_for(lambda: job_state(d, key, a) == "dead" and
                         job_state(d, key, b) == "dead", 20, "a and b dead")
        assert L.ok(get(d, key, "/v1/jobs/" + a))["attempt_count"] == 3
        L.ok(d.request("POST", "/v1/jobs/%s/retry" % a, key=key), 200)
        L.ok(d.request("POST", "/v1/topics/%s/dead:redrive" % qb, key=key),
             200)

        def attempts(path):
            return [x.headers.get("retryd-attempt") for x in rcv.requests
                    if x.path == path]
        # The first attempt of each new run is in flight (it hangs).
        harness.wait_for(lambda: len(attempts("/fa")) == 4 and
                         len(attempts("/fb")) == 4, 20, "a new attempt each")
        for j in (a, b):
            assert L.ok(get(d, key, "/v1/jobs/" + j))["attempt_count"] == 0
        _, _, _, restored, _ = L.lose_redis(d, r)
        assert restored == 2, restored
        for j in (a, b):
            after = L.ok(get(d, key, "/v1/jobs/" + j))
            assert after["attempt_count"] == 0, (j, after)
        # Restored, each runs its first attempt again (not its fourth).
        harness.wait_for(lambda: len(attempts("/fa")) == 5 and
                         len(attempts("/fb")) == 5, 20, "a's and b's again")
        assert attempts("/fa") == ["1", "2", "3", "1", "1"], attempts("/fa")
        assert attempts("/fb") == ["1", "2", "3", "1", "1"], attempts("/fb")


D.each("delivered and cancelled never come back; dead comes back dead; "
       "a deduplicated push is not a second job", case_finished)
D.each("GET /v1/jobs/{id} of a job Redis let go answers from the journal; "
       "a cancel or reschedule of it is 409, as of a finished job",
       case_history)
D.each("rescheduled and retrying jobs come back at their next attempt",
       case_due)
D.each("a push or pull job's journal has one row per attempt; "
       "restored from them", case_rows_per_attempt)
D.each("a dead job retried or redriven comes back from attempt 0",
       case_redrive)
D.each("tenants, keys and topics survive Redis losing its data, twice",
       case_registry)
D.each("retryd --recover rebuilds Redis and exits, twice creates nothing",
       case_recover)
D.each("finished jobs are purged from the journal after the retention",
       case_retention)
t.done()
