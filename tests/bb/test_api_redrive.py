#!/usr/bin/env python3
"""test_api_redrive.py - a dead job run again: POST /v1/jobs/{id}/retry
and POST /v1/topics/{topic}/dead:redrive.  A job whose bizkey another
unfinished job of its topic holds stays dead (a retry answers 409
bizkey_taken, a redrive counts it in "skipped"), every dead job is looked
at once per redrive however many stay dead at the front of the dead set,
the first attempt comes the first wait of the job's schedule after now (as
a push's after its due time), and a body that is not empty or {} is a 400
that changes nothing.

Key decision: the fake clock, one shard and scheduler.batch 2, so the
order of the dead set (time of death) and a redrive's steps are the
test's own: the clock moves by 1 ms between deaths, and the jobs left dead
are at the front of the set, ahead of several batches of others."""

import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, expect_error, unique  # noqa: E402

HOUR = 3600000
JSON = {"Content-Type": "application/json"}

t = harness.Tap()
DBDIR = harness.mkdtemp("retryd-bb-redrive-")
E = Env(config={"debug": {"fake_clock": True},
                "scheduler": {"shards": 1, "batch": 2},
                "journal": {"url": "sqlite://%s/journal.db" % DBDIR}})
NAME, KEY = E.tenant()


def now():
    st, _, b = E.admin("GET", "/v1/debug/clock")
    assert st == 200, (st, b)
    return b["now_ms"]


def tick():
    """1 ms later: the next death sorts after the last."""
    st, _, b = E.admin("POST", "/v1/debug/clock", {"advance_ms": 1})
    assert st == 200, (st, b)


def advance(ms):
    """Move the clock; two whole timer passes at the new time after."""
    return E.d.advance_clock(ms)["now_ms"]


def topic(schedule):
    return E.topic(KEY, mode="pull", retry_schedule=schedule,
                   ttr_ms=HOUR)["name"]


def job(jid):
    return E.job(KEY, jid)


def reserve_none(q):
    st, _, b = E.reserve(KEY, q, 0)
    assert st == 204, ("a job was reservable", st, b)


def reserve(q, jid):
    """Reserve job jid of q (once the timer made it ready): its reserve."""
    st, _, r = E.reserve(KEY, q, 2000)
    assert st == 200 and r["id"] == jid, (st, r, jid)
    return r


def nack(r):
    st, _, n = E.req("POST", "/v1/jobs/%s/nack" % r["id"],
                     {"token": r["token"]}, key=KEY)
    assert st == 200, (st, n)
    return n


def kill(q, jid):
    """Job jid, due now and alone ready in q with its last attempt next,
    dies: reserved and nacked."""
    n = nack(reserve(q, jid))
    assert n["state"] == "dead", n
    tick()


def dead_job(q, **push):
    """A new job of q (schedule <0>) made dead."""
    jid = E.push(KEY, q, {"n": 1}, **push)["id"]
    kill(q, jid)
    return jid


def dead_ids(q):
    st, _, b = E.req("GET", "/v1/topics/%s/dead?limit=100" % q, key=KEY)
    assert st == 200, (st, b)
    return [x["id"] for x in b["jobs"]]


def counts(q):
    st, _, b = E.req("GET", "/v1/topics/" + q, key=KEY)
    assert st == 200, (st, b)
    return b["counts"]


def retry(jid, body=None, headers=None):
    return E.req("POST", "/v1/jobs/%s/retry" % jid, body, key=KEY,
                 headers=headers)


def redrive(q, body=None, headers=None):
    return E.req("POST", "/v1/topics/%s/dead:redrive" % q, body, key=KEY,
                 headers=headers)


def same(a, b):
    """The parts of a job a refused change must leave as they were."""
    keys = ("state", "next_attempt_ms", "attempt_count", "bizkey")
    return all(a[k] == b[k] for k in keys)


@t.test("retry of a dead job whose bizkey another job holds: 409 "
        "bizkey_taken naming the holder, nothing changed")
def _():
    q = topic("<0>")
    bk = unique("noshow")
    x = dead_job(q, bizkey=bk)
    y = E.push(KEY, q, {"n": 2}, bizkey=bk, delay_ms=HOUR)
    assert y["id"] != x and "deduplicated" not in y, y
    x0, y0, c0 = job(x), job(y["id"]), counts(q)
    b = expect_error(retry(x), 409, "bizkey_taken", "bizkey")
    assert y["id"] in b["error"]["message"], b
    assert same(job(x), x0) and job(x)["state"] == "dead", job(x)
    assert same(job(y["id"]), y0), job(y["id"])
    assert counts(q) == c0, (counts(q), c0)
    assert dead_ids(q) == [x]
    # The holder cancelled by its bizkey: x may run again, and holds it.
    st, _, _ = E.req("DELETE", "/v1/topics/%s/bizkeys/%s" % (q, bk),
                     key=KEY)
    assert st == 204, st
    assert job(y["id"])["state"] == "cancelled"
    st, _, r = retry(x)
    assert st == 200 and r["state"] in ("scheduled", "ready"), (st, r)
    z = E.push(KEY, q, {"n": 3}, expect=200, bizkey=bk)
    assert z["id"] == x and z["deduplicated"] is True, z
    st, _, _ = E.req("DELETE", "/v1/topics/%s/bizkeys/%s" % (q, bk),
                     key=KEY)
    assert st == 204 and job(x)["state"] == "cancelled", job(x)


@t.test("redrive leaves dead the jobs whose bizkey is held, counts them "
        "as skipped, and runs every other dead job once")
def _():
    q = topic("<0>")
    keys = [unique("k") for _ in range(4)]
    # Oldest first in the dead set: three whose bizkey is then taken
    # (more than a batch), then three to run again.
    held = [dead_job(q, bizkey=k) for k in keys[:3]]
    holders = [E.push(KEY, q, {"h": i}, bizkey=k, delay_ms=HOUR)["id"]
               for i, k in enumerate(keys[:3])]
    free = [dead_job(q), dead_job(q), dead_job(q, bizkey=keys[3])]
    h0 = [job(h) for h in holders]
    st, _, r = redrive(q)
    assert st == 200 and r == {"redriven": 3, "skipped": 3}, (st, r)
    assert dead_ids(q) == held[::-1], (dead_ids(q), held)
    for h, before in zip(holders, h0):
        assert same(job(h), before), (job(h), before)
    for f in free:
        g = job(f)
        assert g["state"] in ("scheduled", "ready"), g
        assert g["attempt_count"] == 0, g
    # The redriven job with a bizkey holds it again.
    z = E.push(KEY, q, {"n": 4}, expect=200, bizkey=keys[3])
    assert z["id"] == free[2] and z["deduplicated"] is True, z
    assert counts(q)["dead"] == 3, counts(q)
    # Again: nothing to run, the same three left.
    st, _, r = redrive(q)
    assert st == 200 and r == {"redriven": 0, "skipped": 3}, (st, r)
    assert dead_ids(q) == held[::-1]
    assert counts(q)["dead"] == 3, counts(q)


@t.test("retry: the first attempt waits the topic's first wait from now")
def _():
    q = topic("<3s>")
    x = E.push(KEY, q, {"n": 1})["id"]
    advance(3000)
    kill(q, x)
    st, _, r = retry(x)
    t0 = now()
    assert st == 200 and r["state"] == "scheduled", (st, r)
    assert r["next_attempt_ms"] == t0 + 3000, (r, t0)
    assert r["attempt_count"] == 0, r
    advance(2999)
    reserve_none(q)
    assert job(x)["state"] == "scheduled", job(x)
    advance(1)
    res = reserve(q, x)
    assert res["attempt"] == 1, res


@t.test("retry: a job's own schedule gives its first wait")
def _():
    q = topic("<0>")
    x = E.push(KEY, q, {"n": 1}, retry_schedule="<5s>")
    assert x["next_attempt_ms"] == x["run_at_ms"] + 5000, x
    advance(5000)
    kill(q, x["id"])
    st, _, r = retry(x["id"])
    t0 = now()
    assert st == 200 and r["next_attempt_ms"] == t0 + 5000, (r, t0)
    advance(4999)
    reserve_none(q)
    advance(1)
    reserve(q, x["id"])


@t.test("redrive: each job's first attempt waits its schedule's first "
        "wait from now (its own, else its topic's)")
def _():
    q = topic("<3s>")
    a = E.push(KEY, q, {"n": "a"})["id"]
    b = E.push(KEY, q, {"n": "b"}, delay_ms=2000,
               retry_schedule="<2s>")["id"]
    advance(3000)
    kill(q, a)
    advance(1000)
    kill(q, b)
    st, _, r = redrive(q)
    t0 = now()
    assert st == 200 and r == {"redriven": 2, "skipped": 0}, (st, r)
    ga, gb = job(a), job(b)
    assert ga["state"] == "scheduled", ga
    assert ga["next_attempt_ms"] == t0 + 3000, (ga, t0)
    assert gb["next_attempt_ms"] == t0 + 2000, (gb, t0)
    advance(1999)
    reserve_none(q)
    advance(1)
    reserve(q, b)
    advance(999)
    reserve_none(q)
    advance(1)
    reserve(q, a)


@t.test("retry with a body other than none or {}: 400, the job still dead")
def _():
    q = topic("<0>")
    x = dead_job(q)
    x0, c0 = job(x), counts(q)
    for body, code in (('{"oops', "invalid_json"), ("{", "invalid_json"),
                       ("[]", "invalid_json"), ("null", "invalid_json"),
                       ('{"x":1}', "unknown_field"),
                       ('{"token":"t"}', "unknown_field")):
        expect_error(retry(x, body, JSON), 400, code)
        assert same(job(x), x0), (body, job(x))
        assert counts(q) == c0 and dead_ids(q) == [x], body
    st, _, r = retry(x, "{}", JSON)
    assert st == 200 and r["state"] in ("scheduled", "ready"), (st, r)
    kill(q, x)
    st, _, r = retry(x, " { } ", JSON)
    assert st == 200 and r["state"] in ("scheduled", "ready"), (st, r)


@t.test("redrive with a body other than none or {}: 400, nothing run")
def _():
    q = topic("<0>")
    x = dead_job(q)
    c0 = counts(q)
    for body, code in (("{", "invalid_json"), ('{"oops', "invalid_json"),
                       ("[1]", "invalid_json"),
                       ('{"x":1}', "unknown_field")):
        expect_error(redrive(q, body, JSON), 400, code)
        assert counts(q) == c0 and dead_ids(q) == [x], body
        assert job(x)["state"] == "dead"
    st, _, r = redrive(q, "{}", JSON)
    assert st == 200 and r == {"redriven": 1, "skipped": 0}, (st, r)
    kill(q, x)
    st, _, r = redrive(q)
    assert st == 200 and r == {"redriven": 1, "skipped": 0}, (st, r)


E.stop()
t.done()
