#!/usr/bin/env python3
"""test_api_pull_batch.py - pull consumers in batches: reserve?max=N hands
out up to N jobs at once, POST /v1/jobs:ack and /v1/jobs:nack finish many;
each item is answered as the single route answers it, and a bad request is
refused whole."""

import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, expect_error  # noqa: E402

BATCH = 5           # limits.batch: items per jobs:ack or jobs:nack
HOUR = 3600000
UNKNOWN_ID = "0000000000000000"

t = harness.Tap()
E = Env(config={"limits": {"max_wait": "60s", "batch": BATCH}})
NAME, KEY = E.tenant()


def now_ms():
    return int(time.time() * 1000)


def pull_topic(key=KEY, **kw):
    conf = {"mode": "pull"}
    conf.update(kw)
    return E.topic(key, **conf)["name"]


def ready_count(q, key=KEY):
    st, _, b = E.req("GET", "/v1/topics/" + q, key=key)
    assert st == 200, (st, b)
    return b["counts"]["ready"]


def wait_ready(q, n, key=KEY):
    """Jobs due now are scheduled until the timer's next pass."""
    harness.wait_for(lambda: ready_count(q, key) == n,
                     what="%d ready jobs" % n)


def reserve_max(q, n, wait_ms=0, key=KEY, **kw):
    return E.req("GET", "/v1/topics/%s/reserve?wait_ms=%d&max=%s" %
                 (q, wait_ms, n), key=key, **kw)


def reserve_jobs(q, n, wait_ms=0, key=KEY, **kw):
    """A batch reserve that must answer jobs: its list."""
    st, _, b = reserve_max(q, n, wait_ms, key, **kw)
    assert st == 200, (st, b)
    assert isinstance(b, dict) and list(b) == ["jobs"], b
    jobs = b["jobs"]
    assert isinstance(jobs, list) and 1 <= len(jobs) <= n, b
    for j in jobs:
        assert j["state"] == "in_flight" and j["token"], j
    assert len({j["token"] for j in jobs}) == len(jobs), jobs
    return jobs


def reserve_ready(q, n, key=KEY):
    """Wait for n ready jobs, then take them all in one batch reserve."""
    wait_ready(q, n, key)
    jobs = reserve_jobs(q, n, key=key)
    assert len(jobs) == n, (n, jobs)
    return jobs


def item(job):
    return {"id": job["id"], "token": job["token"]}


def batch(verb, body, key=KEY):
    return E.req("POST", "/v1/jobs:" + verb, body, key=key)


def results(verb, items, key=KEY):
    """A batch ack or nack that must answer 200: one result per item."""
    st, _, b = batch(verb, {"jobs": items}, key)
    assert st == 200, (st, b)
    assert isinstance(b, dict) and list(b) == ["results"], b
    res = b["results"]
    assert len(res) == len(items), (items, res)
    for r, it in zip(res, items):
        assert r["id"] == it["id"], (r, it)
    return res


def single(verb, jid, token, key=KEY):
    return E.req("POST", "/v1/jobs/%s/%s" % (jid, verb), {"token": token},
                 key=key)


def applied(r, state):
    assert r["status"] == 200 and r["state"] == state, r
    want = {"id", "status", "state"}
    if state == "retrying":
        want.add("next_attempt_ms")
    assert set(r) == want, r


def refused(r, status, code=None):
    assert r["status"] == status, r
    assert set(r) == {"id", "status", "error"}, r
    e = r["error"]
    assert isinstance(e.get("message"), str) and e["message"], r
    if code is not None:
        assert e["code"] == code, r
    return e["code"]


def as_single(r, verb, it, key=KEY):
    """A refused item has the status and code the single route answers
    for it alone (asked after the batch: a refusal changed nothing)."""
    st, _, b = single(verb, it["id"], it["token"], key)
    assert st != 200, (st, b)
    assert (r["status"], r["error"]["code"]) == (st, b["error"]["code"]), \
        (r, st, b)


@t.test("reserve?max=N answers {\"jobs\": [...]}, up to N, the best first")
def _():
    q = pull_topic(ttr_ms=20000)
    now = now_ms()
    low = E.push(KEY, q, "low", priority=-5, run_at_ms=now - 3000)
    mid2 = E.push(KEY, q, "mid2", run_at_ms=now - 1000)
    mid1 = E.push(KEY, q, "mid1", run_at_ms=now - 2000)
    high = E.push(KEY, q, "high", priority=100)
    p7 = E.push(KEY, q, "p7", priority=7)
    p3 = E.push(KEY, q, "p3", priority=3)
    wait_ready(q, 6)
    t0 = now_ms()
    first = reserve_jobs(q, 4)
    want = [high["id"], p7["id"], p3["id"], mid1["id"]]
    assert [j["id"] for j in first] == want, first
    for j in first:
        assert j["attempt"] == 1 and j["ttr_ms"] == 20000, j
        assert j["deadline_ms"] >= t0 + 15000, j
    assert ready_count(q) == 2
    rest = reserve_jobs(q, 4)
    assert [j["id"] for j in rest] == [mid2["id"], low["id"]], rest
    assert not {j["token"] for j in first} & {j["token"] for j in rest}
    # max=1 is a batch too: a list of one.
    one = E.push(KEY, q, "one")
    wait_ready(q, 1)
    got = reserve_jobs(q, 1)
    assert [j["id"] for j in got] == [one["id"]], got


@t.test("each job of a batch reserve is the object a single reserve gives")
def _():
    q = pull_topic(ttr_ms=20000)
    E.push(KEY, q, {"first": 1}, priority=10)
    wait_ready(q, 1)
    st, _, alone = E.reserve(KEY, q, 0)
    assert st == 200 and "jobs" not in alone, (st, alone)
    # Bodies and headers printed as stored and ones parsed and printed
    # again, side by side in one answer.
    bodies = [{"a": [1, -2.5, True, None], "b": {}}, "plain text",
              '{"a":1,}', {"u": "\u00e9t\u00e9"}, 42]
    extras = [{}, {"bizkey": "k:1@x", "headers": {"X-A": 'b"c/'}},
              {"retry_schedule": "<0,1s>"}, {"headers": {"X-B": "d"}}, {}]
    ids = {E.push(KEY, q, body, **extra)["id"]
           for body, extra in zip(bodies, extras)}
    t0 = now_ms()
    jobs = reserve_ready(q, len(ids))
    assert {j["id"] for j in jobs} == ids, jobs
    for j in jobs:
        assert set(j) == set(alone), (sorted(j), sorted(alone))
        g = E.job(KEY, j["id"])
        for k in ("id", "topic", "body", "headers", "bizkey",
                  "retry_schedule", "priority", "created_ms",
                  "attempt_count", "next_attempt_ms"):
            assert j[k] == g[k], (k, j, g)
        assert g["state"] == "in_flight", g
        assert j["attempt"] == 1 and j["ttr_ms"] == 20000, j
        assert j["deadline_ms"] >= t0 + 15000, j
        assert j["token"] != alone["token"], j


@t.test("a batch reserve answers with the jobs ready, not waiting for more")
def _():
    q = pull_topic(ttr_ms=30000)
    ids = {E.push(KEY, q, i)["id"] for i in range(3)}
    wait_ready(q, 3)
    # wait_ms is a minute: an answer within the request's timeout is one
    # that did not wait to fill max.
    jobs = reserve_jobs(q, 10, 60000, timeout=30)
    assert {j["id"] for j in jobs} == ids, jobs
    assert len(jobs) == 3, jobs
    # A parked batch reserve is answered by the first job to get ready.
    late = E.push(KEY, q, "late", delay_ms=1000)
    jobs = reserve_jobs(q, 10, 60000, timeout=30)
    assert [j["id"] for j in jobs] == [late["id"]], jobs


@t.test("an empty batch reserve ends with 204")
def _():
    q = pull_topic()
    for n, wait_ms in ((5, 200), (1, 0), (100, 0)):
        st, _, b = reserve_max(q, n, wait_ms)
        assert st == 204 and b == b"", (n, st, b)


@t.test("without max a reserve answers one job object, as before")
def _():
    q = pull_topic(ttr_ms=20000)
    E.push(KEY, q, {"n": 1}, priority=1)
    E.push(KEY, q, {"n": 2})
    wait_ready(q, 2)
    st, _, r = E.reserve(KEY, q, 0)
    assert st == 200 and isinstance(r, dict), (st, r)
    assert "jobs" not in r and r["body"] == {"n": 1}, r
    assert r["state"] == "in_flight" and r["token"], r
    assert r["attempt"] == 1 and r["ttr_ms"] == 20000, r
    assert ready_count(q) == 1
    st, _, a = single("ack", r["id"], r["token"])
    assert st == 200 and a["state"] == "delivered", (st, a)


@t.test("a bad max is 400 invalid_field max, and nothing is reserved")
def _():
    q = pull_topic()
    ids = {E.push(KEY, q, i)["id"] for i in range(2)}
    wait_ready(q, 2)
    for bad in ["0", "-1", "101", "x", "1.5", "", "1e1",
                "99999999999999999999"]:
        expect_error(reserve_max(q, bad, 0), 400, "invalid_field", "max")
    assert ready_count(q) == 2
    for g in ids:
        assert E.job(KEY, g)["state"] == "ready", g
    jobs = reserve_jobs(q, 5)
    assert {j["id"] for j in jobs} == ids, jobs


@t.test("jobs:ack of every job of a batch: each 200 delivered")
def _():
    q = pull_topic(ttr_ms=30000)
    for i in range(4):
        E.push(KEY, q, i)
    jobs = reserve_ready(q, 4)
    res = results("ack", [item(j) for j in jobs])
    for r in res:
        applied(r, "delivered")
    for j in jobs:
        assert E.job(KEY, j["id"])["state"] == "delivered", j["id"]
    assert ready_count(q) == 0


@t.test("jobs:nack: retrying at next_attempt_ms, or dead")
def _():
    q = pull_topic(ttr_ms=30000, retry_schedule="<0,1h>")
    again = E.push(KEY, q, "again")
    last = E.push(KEY, q, "last", retry_schedule="<0>")
    jobs = reserve_ready(q, 2)
    t0 = now_ms()
    res = results("nack", [item(j) for j in jobs])
    t1 = now_ms()
    by_id = {r["id"]: r for r in res}
    r = by_id[again["id"]]
    applied(r, "retrying")
    assert t0 + HOUR <= r["next_attempt_ms"] <= t1 + HOUR, r
    g = E.job(KEY, again["id"])
    assert g["state"] == "retrying", g
    assert g["next_attempt_ms"] == r["next_attempt_ms"], (g, r)
    applied(by_id[last["id"]], "dead")
    assert E.job(KEY, last["id"])["state"] == "dead"
    assert ready_count(q) == 0


@t.test("one batch, each item for itself: stale, unknown, another tenant's")
def _():
    _, okey = E.tenant()
    q = pull_topic(ttr_ms=30000)
    oq = pull_topic(key=okey, ttr_ms=30000)
    for i in range(2):
        E.push(KEY, q, i)
    mine = reserve_ready(q, 2)
    st, _, b = single("ack", mine[1]["id"], mine[1]["token"])
    assert st == 200 and b["state"] == "delivered", (st, b)
    E.push(okey, oq, "theirs")
    theirs = reserve_ready(oq, 1, key=okey)[0]
    items = [item(mine[0]), item(mine[1]),
             {"id": UNKNOWN_ID, "token": mine[0]["token"]}, item(theirs)]
    res = results("ack", items)
    applied(res[0], "delivered")
    refused(res[1], 409, "stale_token")
    refused(res[2], 404, "job_not_found")
    refused(res[3], 404, "job_not_found")
    for r, it in zip(res[1:], items[1:]):
        as_single(r, "ack", it)
    assert E.job(KEY, mine[0]["id"])["state"] == "delivered"
    expect_error(E.req("GET", "/v1/jobs/" + theirs["id"], key=KEY), 404,
                 "job_not_found")
    # The other tenant's job is untouched, still held by its token.
    g = E.job(okey, theirs["id"])
    assert g["state"] == "in_flight", g
    res = results("ack", [item(theirs)], key=okey)
    applied(res[0], "delivered")
    assert E.job(okey, theirs["id"])["state"] == "delivered"


@t.test("an item repeated in one batch: the first applies, the repeat 409")
def _():
    q = pull_topic(ttr_ms=30000, retry_schedule="<0,1h>")
    for verb, state in (("ack", "delivered"), ("nack", "retrying")):
        E.push(KEY, q, verb)
        it = item(reserve_ready(q, 1)[0])
        res = results(verb, [it, it])
        applied(res[0], state)
        refused(res[1], 409)
        as_single(res[1], verb, it)
        assert E.job(KEY, it["id"])["state"] == state


@t.test("a bad body is 400 naming the item, and nothing is applied")
def _():
    q = pull_topic(ttr_ms=30000)
    E.push(KEY, q, "held")
    r = reserve_ready(q, 1)[0]
    good = item(r)

    def with_item(**kw):
        it = dict(good)
        it.update(kw)
        return {"jobs": [good, it]}
    cases = [
        (b"nope", 400, "invalid_json", None),
        (b'{"jobs": [', 400, "invalid_json", None),
        ([good], 400, "invalid_json", None),
        (b'"jobs"', 400, "invalid_json", None),
        (b"", 400, "invalid_json", None),
        ({}, 400, "missing_field", "jobs"),
        ({"jobs": []}, 400, "invalid_field", "jobs"),
        ({"jobs": [good] * (BATCH + 1)}, 413, "batch_too_large", "jobs"),
        ({"jobs": [good], "x": 1}, 400, "unknown_field", "x"),
        ({"jobs": [good, 5]}, 400, "invalid_field", "jobs[1]"),
        ({"jobs": [good, [good]]}, 400, "invalid_field", "jobs[1]"),
        ({"jobs": [good, {"id": r["id"]}]}, 400, "missing_field",
         "jobs[1].token"),
        ({"jobs": [good, {"token": r["token"]}]}, 400, "missing_field",
         "jobs[1].id"),
        # An id that no job may have: the single route's invalid_id.
        (with_item(id="a b"), 400, "invalid_id", "jobs[1].id"),
        (with_item(id=5), 400, "invalid_field", "jobs[1].id"),
        (with_item(id="x" * 65), 400, "invalid_field", "jobs[1].id"),
        (with_item(token="a b"), 400, "invalid_field", "jobs[1].token"),
        (with_item(token=5), 400, "invalid_field", "jobs[1].token"),
        (with_item(token="x" * 100), 400, "invalid_field",
         "jobs[1].token"),
        (with_item(x=1), 400, "unknown_field", "jobs[1].x"),
    ]
    for verb in ("ack", "nack"):
        for body, status, code, field in cases:
            try:
                expect_error(batch(verb, body), status, code, field)
            except AssertionError as e:
                raise AssertionError("%s %r: %s" % (verb, body, e))
        # "jobs" of another type than an array: invalid_field (a wrong
        # type), as jobs:batch answers it.
        for jobs in ({}, good, "x", 1):
            expect_error(batch(verb, {"jobs": jobs}), 400, "invalid_field",
                         "jobs")
    # None of them applied the good item: the job is still held.
    g = E.job(KEY, r["id"])
    assert g["state"] == "in_flight", g
    res = results("ack", [good])
    applied(res[0], "delivered")


@t.test("the single routes finish jobs a batch reserve handed out")
def _():
    q = pull_topic(ttr_ms=30000, retry_schedule="<0,1h>")
    for i in range(3):
        E.push(KEY, q, i)
    jobs = reserve_ready(q, 3)
    st, _, a = single("ack", jobs[0]["id"], jobs[0]["token"])
    assert st == 200 and a["state"] == "delivered", (st, a)
    st, _, n = single("nack", jobs[1]["id"], jobs[1]["token"])
    assert st == 200 and n["state"] == "retrying", (st, n)
    assert "next_attempt_ms" in n, n
    # Once finished by a single route, a batch item is refused for it.
    res = results("ack", [item(jobs[0]), item(jobs[2])])
    refused(res[0], 409, "stale_token")
    applied(res[1], "delivered")
    want = ["delivered", "retrying", "delivered"]
    assert [E.job(KEY, j["id"])["state"] for j in jobs] == want


@t.test("a push topic's job or a job not reserved is refused 409")
def _():
    q = pull_topic(ttr_ms=30000)
    push_q = E.topic(KEY, callback_url="http://127.0.0.1:9/x")["name"]
    pushed = E.push(KEY, push_q, "push", delay_ms=HOUR)
    waiting = E.push(KEY, q, "waiting", delay_ms=HOUR)
    E.push(KEY, q, "now")
    r = reserve_ready(q, 1)[0]
    for verb in ("ack", "nack"):
        items = [{"id": pushed["id"], "token": r["token"]},
                 {"id": waiting["id"], "token": r["token"]}]
        res = results(verb, items)
        for x, it in zip(res, items):
            # The single routes answer stale_token for such a token
            # (job_not_reserved is the other code the spec names).
            code = refused(x, 409)
            assert code in ("job_not_reserved", "stale_token"), x
            as_single(x, verb, it)
    assert E.job(KEY, pushed["id"])["state"] == "scheduled"
    assert E.job(KEY, waiting["id"])["state"] == "scheduled"
    res = results("ack", [{"id": waiting["id"], "token": r["token"]},
                          item(r)])
    refused(res[0], 409)
    applied(res[1], "delivered")


E.stop()
t.done()
