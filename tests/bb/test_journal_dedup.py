#!/usr/bin/env python3
"""test_journal_dedup.py - deduplication that the journal keeps when Redis
does not: a client-given id pushed again after Redis lost its data is the
same job, not a second delivery (at the tenant's quota too); one whose
push was cut off between its journal commit and Redis is not answered,
pushed again, read, cancelled or rescheduled, as a job nothing runs or as
none (503 while a push of it could be in flight, then made from the
journal); a push refused for want of Redis leaves nothing behind, so its
retry makes the job; a push deduplicated by its bizkey leaves no second
job in the journal's listings; a tenant made again with a deleted one's
name has none of its jobs, and a deleted tenant leaves no row at all.
Each case runs on SQLite and on MySQL (a private mariadbd).
"""

import contextlib
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


def opush(d, key, body):
    return d.request("POST", "/push", body, key=key)


@contextlib.contextmanager
def daemon(drv, **topic_conf):
    """A Redis, a retryd journaling to a fresh journal of driver drv,
    a tenant and a topic: (redis, retryd, tenant, key, topic)."""
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(D.url(drv))) as d:
        L.ready(d)
        name, key = L.tenant(d)
        yield r, d, name, key, L.topic(d, key, **topic_conf)


def case_client_id_after_loss(drv):
    with harness.Receiver(script="200") as rcv, \
            daemon(drv, callback_url=rcv.url("/hook")) as (r, d, name, key, q):
        b = L.ok(opush(d, key, {"topic": q, "id": "order-1",
                                "body": "first"}), 200)
        assert b["id"] == "order-1" and not b.get("deduplicated"), b
        rcv.wait_count(1)
        harness.wait_for(lambda: d.request(
            "GET", "/v1/jobs/order-1", key=key)[2].get("state") ==
            "delivered", what="order-1 delivered")
        mark = d.log_mark()
        r.cmd("FLUSHALL")
        # Before the rebuild, or after it (which brings back only what is
        # unfinished): the id is the delivered job's either way.
        b = L.ok(opush(d, key, {"topic": q, "id": "order-1",
                                "body": "second"}), 200)
        assert b["id"] == "order-1" and b.get("deduplicated"), b
        L.wait_restore(d, mark)
        # At the tenant's quota too, the id is the delivered job's; a new
        # one is refused and makes nothing.
        L.ok(d.admin("PATCH", "/v1/tenants/" + name, {"max_pending": 1}),
             200)
        L.ok(d.request("POST", "/v1/topics/%s/jobs" % q,
                       {"delay_ms": 3 * L.HOUR}, key=key), 201)
        b = L.ok(opush(d, key, {"topic": q, "id": "order-1",
                                "body": "third"}), 200)
        assert b["id"] == "order-1" and b.get("deduplicated"), b
        st, _, b = opush(d, key, {"topic": q, "id": "order-2"})
        assert st == 429 and b["error"]["code"] == "quota_exceeded", b
        c = L.counts(d, key, q)
        assert c["scheduled"] == 1 and c["ready"] + c["in_flight"] == 0, c
        # Whatever was due has been looked at: still one delivery.
        L.advance(d, 2 * L.HOUR)
        assert len(rcv.requests) == 1, [x.body for x in rcv.requests]
        assert rcv.requests[0].body == b"first", rcv.requests[0].body
        st, _, j = d.request("GET", "/v1/jobs?state=delivered", key=key)
        assert st == 200 and [x["id"] for x in j["jobs"]] == ["order-1"] \
            and j["jobs"][0]["body"] == "first", j


def case_client_ids_together_after_loss(drv):
    """Pushes with ids arriving together are looked up together, the
    journal's rows of all the ids Redis lacks read at once: each answered
    as it would be alone."""
    with daemon(drv, mode="pull") as (r, d, _, key, q):
        q2 = L.topic(d, key, mode="pull")
        old = ["c-%02d" % i for i in range(30)]
        for i in old:
            L.ok(opush(d, key, {"topic": q, "id": i, "delay": L.HOUR}), 200)
        L.ok(opush(d, key, {"topic": q2, "id": "other-1",
                            "delay": L.HOUR}), 200)
        # Cancelled, finished: a rebuild does not bring them back, so
        # only the journal knows them once Redis has lost its data.
        for i in old + ["other-1"]:
            L.ok(d.request("DELETE", "/v1/jobs/" + i, key=key), 204)
        r.cmd("FLUSHALL")
        new = ["n-%02d" % i for i in range(15)]
        ask = old + ["c-05", "c-05", "other-1"] + new
        got = {}

        def one(k, i):
            got[k] = opush(d, key, {"topic": q, "id": i, "delay": L.HOUR})

        th = [threading.Thread(target=one, args=(k, i))
              for k, i in enumerate(ask)]
        for x in th:
            x.start()
        for x in th:
            x.join()
        for k, i in enumerate(ask):
            st, _, b = got[k]
            if i == "other-1":
                assert st == 409, (i, st, b)
                continue
            assert st == 200 and b["id"] == i, (i, st, b)
            assert bool(b.get("deduplicated")) == (i not in new), (i, b)
        st, _, j = d.request("GET", "/v1/jobs?topic=%s&state=scheduled" % q,
                             key=key)
        assert st == 200 and sorted(x["id"] for x in j["jobs"]) == new, j


def case_cut_off_push(drv):
    """Pushes journaled and cut off before Redis made them (retryd killed
    between the two, their clients answered nothing): such an id pushed
    again, read, cancelled or rescheduled is not answered as a job nothing
    will run, or as no job at all.  While a push of it could still be in
    flight it is 503 push_unsettled; after that the job is made from its
    row (by the push of cut-1, the read of cut-2, the cancel of cut-3, the
    reschedule of cut-4) and the request answered as for any job."""
    url = D.url(drv)
    ids = ["cut-1", "cut-2", "cut-3", "cut-4"]
    later = ("cut-3", "cut-4")  # due in an hour: nothing races the change
    rows_q = ("SELECT id, state FROM {db}jobs WHERE id LIKE 'cut-%' "
              "ORDER BY id")
    with harness.Receiver(script="200") as rcv, harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        L.ready(d)
        _, key = L.tenant(d)
        q = L.topic(d, key, callback_url=rcv.url("/hook"))
        # Redis takes reads (the id's lookup) but holds writes: the put is
        # committed, the push to Redis waits (the journal's writer with
        # it), retryd is killed.  Once per id.
        for i in ids:
            r.cmd("CLIENT", "PAUSE", "60000", "WRITE")
            got = []
            job = {"topic": q, "id": i, "body": "first " + i,
                   "delay": L.HOUR if i in later else 0}

            def cut():
                try:
                    got.append(opush(d, key, job))
                except OSError as e:  # the answer that never came
                    got.append(e)

            th = threading.Thread(target=cut)
            th.start()
            harness.wait_for(lambda: [i, "scheduled"] in sql_rows(
                drv, url, rows_q), what=i + " journaled")
            d.signal(signal.SIGKILL)
            assert d.wait_exit() == -signal.SIGKILL
            th.join()
            r.cmd("CLIENT", "UNPAUSE")
            assert not isinstance(got[0], tuple), got
            d.start()
            L.ready(d)
        assert sql_rows(drv, url, rows_q) == [[i, "scheduled"] for i in ids]

        def unsettled(resp):
            st, h, b = resp
            assert st == 503 and b["error"]["code"] == "push_unsettled", \
                (st, b)
            assert b["error"]["field"] == "id", b
            assert h["Retry-After"] == "1", dict(h)

        def patch(i):
            return d.request("PATCH", "/v1/jobs/" + i,
                             {"delay_ms": 2 * L.HOUR}, key=key)

        for i in ids:
            unsettled(d.request("GET", "/v1/jobs/" + i, key=key))
            unsettled(opush(d, key, {"topic": q, "id": i,
                                     "body": "second"}))
        unsettled(d.request("DELETE", "/v1/jobs/cut-3", key=key))
        unsettled(patch("cut-4"))
        c = L.counts(d, key, q)
        assert sum(c.values()) == 0, c
        # No push of them can be in flight any more: made from the rows.
        L.advance(d, 2 * 60 * 1000)
        mark = d.log_mark()
        b = L.ok(opush(d, key, {"topic": q, "id": "cut-1",
                                "body": "second"}), 200)
        assert b["id"] == "cut-1" and b["deduplicated"], b
        b = L.ok(d.request("GET", "/v1/jobs/cut-2", key=key), 200)
        assert b["id"] == "cut-2" and b["body"] == "first cut-2", b
        assert "updated_ms" not in b, b  # Redis's answer, not the journal's
        L.ok(d.request("DELETE", "/v1/jobs/cut-3", key=key), 204)
        b = L.ok(patch("cut-4"), 200)
        assert b["state"] == "scheduled" and b["body"] == "first cut-4", b
        for what, i in zip(("push", "read", "cancel", "reschedule"), ids):
            d.wait_log(r"%s of \S+/%s: journaled at \d+ ms and never made "
                       r"in Redis" % (what, i), since=mark)
        rcv.wait_count(2)
        for i, state in zip(ids, ("delivered", "delivered", "cancelled",
                                  "scheduled")):
            b = L.ok(opush(d, key, {"topic": q, "id": i}), 200)
            assert b["deduplicated"], b
            harness.wait_for(lambda: d.request(
                "GET", "/v1/jobs/" + i, key=key)[2].get("state") ==
                state, what=i + " " + state)
        assert sql_rows(drv, url, "SELECT state FROM {db}jobs WHERE id = "
                        "'cut-3'") == [["cancelled"]]
        L.advance(d, L.HOUR + 60 * 1000)
        assert len(rcv.requests) == 2, rcv.requests
        L.advance(d, L.HOUR)
        rcv.wait_count(3)
        # Its outcome applied before the clock moves on: moved while the
        # attempt is in flight, its deadline passes and it runs again.
        harness.wait_for(lambda: d.request(
            "GET", "/v1/jobs/cut-4", key=key)[2].get("state") ==
            "delivered", what="cut-4 delivered")
        L.advance(d, L.HOUR)
        assert sorted(x.body for x in rcv.requests) == \
            [b"first cut-1", b"first cut-2", b"first cut-4"], rcv.requests


def case_refused_then_retried(drv):
    with daemon(drv, mode="pull") as (r, d, _, key, q):
        r.stop()
        st, _, b = opush(d, key, {"topic": q, "id": "pay-7",
                                  "delay": L.HOUR})
        assert st == 503, (st, b)
        st, _, b = d.request("POST", "/v1/topics/%s/jobs" % q,
                             {"delay_ms": L.HOUR, "bizkey": "bk-7"}, key=key)
        assert st == 503, (st, b)
        # It comes back empty: the rebuild brings back the topic.
        mark = d.log_mark()
        r.start()
        L.wait_restore(d, mark)
        # Not taken the first time: the retry makes it, as if new.
        b = L.ok(opush(d, key, {"topic": q, "id": "pay-7",
                                "delay": L.HOUR}), 200)
        assert b["id"] == "pay-7" and not b.get("deduplicated"), b
        b = L.ok(d.request("POST", "/v1/topics/%s/jobs" % q,
                           {"delay_ms": L.HOUR, "bizkey": "bk-7"},
                           key=key), 201)
        st, _, j = d.request("GET", "/v1/jobs?topic=" + q, key=key)
        assert st == 200 and sorted(x["id"] for x in j["jobs"]) == \
            sorted(["pay-7", b["id"]]), j
        assert all(x["state"] == "scheduled" for x in j["jobs"]), j


def case_bizkey_dedup_listing(drv):
    with daemon(drv, mode="pull") as (r, d, _, key, q):
        push = "/v1/topics/%s/jobs" % q
        first = L.ok(d.request("POST", push, {"delay_ms": L.HOUR,
                                              "bizkey": "ph1",
                                              "body": 0}, key=key), 201)
        for i in (1, 2):
            b = L.ok(d.request("POST", push, {"delay_ms": L.HOUR,
                                              "bizkey": "ph1",
                                              "body": i}, key=key), 200)
            assert b["deduplicated"] and b["id"] == first["id"], b
        b = L.ok(d.request("POST", push + ":batch", {"jobs": [
            {"delay_ms": L.HOUR, "bizkey": "ph1"},
            {"delay_ms": L.HOUR, "bizkey": "ph2"},
            {"delay_ms": L.HOUR, "bizkey": "ph2"}]}, key=key), 200)
        assert [x["status"] for x in b["results"]] == [200, 201, 200], b
        # The journal lists one job per bizkey, in any state.
        for bk in ("ph1", "ph2"):
            st, _, j = d.request("GET", "/v1/jobs?bizkey=" + bk, key=key)
            assert st == 200 and len(j["jobs"]) == 1 and \
                j["jobs"][0]["state"] == "scheduled", (bk, j)
        st, _, j = d.request("GET", "/v1/jobs?state=cancelled", key=key)
        assert st == 200 and j["jobs"] == [], j


def remade(d, name, key, q, cid_job):
    """Tenant name (key) pushes client id cid-1 (with cid_job's members)
    and a job to pull topic q, is deleted with its jobs, and is made
    again with a topic q: the new tenant's key."""
    L.ok(opush(d, key, dict(cid_job, topic=q, id="cid-1")), 200)
    L.ok(d.request("POST", "/v1/topics/%s/jobs" % q,
                   {"delay_ms": L.HOUR, "body": "old"}, key=key), 201)
    st, _, _ = d.admin("DELETE", "/v1/tenants/%s?force=true" % name)
    assert st == 204
    _, k2 = L.tenant(d, name)
    L.topic(d, k2, q, mode="pull")
    return k2


def case_tenant_made_again(drv):
    with daemon(drv, mode="pull") as (r, d, name, key, q):
        k2 = remade(d, name, key, q, {"body": "old"})
        # The journal has nothing of the old tenant to list or to match.
        st, _, j = d.request("GET", "/v1/jobs", key=k2)
        assert st == 200 and j["jobs"] == [], j
        b = L.ok(opush(d, k2, {"topic": q, "id": "cid-1", "body": "new"}),
                 200)
        assert not b.get("deduplicated"), b
        st, _, r_ = d.request("GET", "/v1/topics/%s/reserve?wait_ms=5000" %
                              q, key=k2)
        assert st == 200 and r_["id"] == "cid-1" and r_["body"] == "new", r_


def sql_rows(drv, url, q):
    """The rows of q, whose {db} names the journal's database, as lists
    of strings."""
    if drv == "sqlite":
        with sqlite3.connect(url[len("sqlite://"):], timeout=10) as db:
            return [[str(v) for v in x] for x in db.execute(
                q.format(db=""))]
    name = url.rsplit("/", 1)[1].split("?")[0]
    return [line.split("\t") for line in
            D.db.sql(q.format(db=name + ".")).splitlines()]


def case_tenant_delete_rows(drv):
    """A tenant deleted with its jobs leaves no row in jobs or
    transitions, not even the transitions its jobs' drop from Redis
    reports after the journal deleted the rest; a topic deleted with its
    jobs leaves them cancelled, with no transition of no job."""
    url = D.url(drv)
    jobs_q = "SELECT id, state FROM {db}jobs WHERE tenant = '%s' ORDER BY id"
    trans_q = ("SELECT job_id, from_state, to_state FROM {db}transitions "
               "WHERE tenant = '%s' ORDER BY id")
    orphans_q = ("SELECT COUNT(*) FROM {db}transitions t WHERE tenant = "
                 "'%s' AND NOT EXISTS (SELECT 1 FROM {db}jobs j WHERE "
                 "j.tenant = t.tenant AND j.id = t.job_id)")
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        L.ready(d)
        name, key = L.tenant(d)
        q = L.topic(d, key, mode="pull")
        k2 = remade(d, name, key, q, {"delay": L.HOUR})
        L.ok(opush(d, k2, {"topic": q, "id": "cid-1", "delay": L.HOUR}),
             200)
        # Answered once its transition is committed, and with it every
        # transition queued before it: the drop's among them.
        L.ok(d.request("DELETE", "/v1/jobs/cid-1", key=k2), 204)
        assert sql_rows(drv, url, jobs_q % name) == \
            [["cid-1", "cancelled"]], sql_rows(drv, url, jobs_q % name)
        assert sql_rows(drv, url, trans_q % name) == \
            [["cid-1", "scheduled", "cancelled"]], \
            sql_rows(drv, url, trans_q % name)

        # A topic deleted: its jobs stay the tenant's history, finished.
        q2 = L.topic(d, k2, mode="pull")
        ids = [L.ok(d.request("POST", "/v1/topics/%s/jobs" % q2,
                              {"delay_ms": L.HOUR}, key=k2), 201)["id"]
               for _ in range(2)]
        st, _, _ = d.request("DELETE", "/v1/topics/%s?force=true" % q2,
                             key=k2)
        assert st == 204
        cid = L.ok(d.request("POST", "/v1/topics/%s/jobs" % q,
                             {"delay_ms": L.HOUR}, key=k2), 201)["id"]
        L.ok(d.request("DELETE", "/v1/jobs/" + cid, key=k2), 204)
        rows = dict(sql_rows(drv, url, jobs_q % name))
        assert all(rows[i] == "cancelled" for i in ids), rows
        assert sql_rows(drv, url, orphans_q % name) == [["0"]], \
            sql_rows(drv, url, trans_q % name)


D.each("a client id pushed again after Redis lost its data is the "
       "delivered job, at the tenant's quota too", case_client_id_after_loss)
D.each("pushes with ids arriving together after Redis lost its data: "
       "each the journal's job, another topic's 409, or new",
       case_client_ids_together_after_loss)
D.each("pushes cut off between their journal and Redis: the ids pushed "
       "again, read, cancelled or rescheduled are 503 push_unsettled, then "
       "made from the journal and changed, delivered once",
       case_cut_off_push)
D.each("a push refused while Redis is away leaves nothing: its retry "
       "makes the job", case_refused_then_retried)
D.each("a push deduplicated by its bizkey leaves no second job in the "
       "journal", case_bizkey_dedup_listing)
D.each("a tenant made again with a deleted one's name has none of its "
       "jobs in the journal", case_tenant_made_again)
D.each("a deleted tenant leaves no job or transition row; a deleted "
       "topic's jobs stay, cancelled", case_tenant_delete_rows)
t.done()
