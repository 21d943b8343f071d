#!/usr/bin/env python3
"""test_api_jobs.py - jobs: push one or a batch, look up, cancel (by id or
bizkey), reschedule, the dead-letter list, retry, redrive, listing and the
restore routes without a journal; every bad input of a push."""

import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, expect_error, unique  # noqa: E402

t = harness.Tap()
E = Env(config={"limits": {"job_body": 1024, "batch": 50,
                           "horizon": "30d"}})
NAME, KEY = E.tenant()
Q = E.topic(KEY, retry_schedule="<5s,1m>")["name"]
HOUR = 3600000


def push(body, topic=Q, key=KEY):
    return E.req("POST", "/v1/topics/%s/jobs" % topic, body, key=key)


def now_ms():
    return int(time.time() * 1000)


@t.test("push: 201 with id, the due time and the first attempt's time")
def _():
    t0 = now_ms()
    st, _, b = push({"delay_ms": HOUR, "body": {"a": [1, 2]}})
    assert st == 201 and b["state"] == "scheduled", b
    assert list(b) == ["id", "state", "run_at_ms", "next_attempt_ms"], b
    assert len(b["id"]) == 16, b
    assert t0 + HOUR <= b["run_at_ms"] <= now_ms() + HOUR, b
    assert b["next_attempt_ms"] == b["run_at_ms"] + 5000, b
    g = E.job(KEY, b["id"])
    assert g["state"] == "scheduled" and g["body"] == {"a": [1, 2]}, g
    assert g["topic"] == Q and g["attempts"] == [], g
    assert g["next_attempt_ms"] == b["next_attempt_ms"], g
    run_at = now_ms() + 2 * HOUR
    st, _, b = push({"run_at_ms": run_at})
    assert st == 201 and b["run_at_ms"] == run_at, b
    # A job's own schedule overrides the topic's.
    st, _, b = push({"run_at_ms": run_at, "retry_schedule": "<1m>"})
    assert b["next_attempt_ms"] == run_at + 60000, b
    assert E.job(KEY, b["id"])["retry_schedule"] == "<1m>"


@t.test("a string body json-c alone would take for JSON (1., NaN, -01) "
        "reads back as that string, in valid JSON; JSON bodies as JSON")
def _():
    for s in ["1.", "-1.", "1.e3", "NaN", "Infinity", "-Infinity", "[1.]",
              '{"a": NaN}', "-01", "[1,]"]:
        st, _, b = push({"delay_ms": HOUR, "body": s})
        assert st == 201, (s, st, b)
        g = E.job(KEY, b["id"])
        assert g["body"] == s, (s, g["body"])
    for s, v in [("1.5", 1.5), ("[1, 2.0e3]", [1, 2000.0]), ("-0", 0),
                 ('{"a": -1.25E-2}', {"a": -0.0125})]:
        st, _, b = push({"delay_ms": HOUR, "body": s})
        assert E.job(KEY, b["id"])["body"] == v, (s, v)


@t.test("ids are unique and sort by creation time")
def _():
    ids = [push({"delay_ms": HOUR})[2]["id"] for _ in range(20)]
    assert len(set(ids)) == 20 and ids == sorted(ids), ids


@t.test("pushes at once (pushed to Redis together): each its own answer; "
        "one job per bizkey")
def _():
    bodies = [{"delay_ms": HOUR, "body": i} for i in range(24)]
    for i in range(8):
        bodies[3 * i]["bizkey"] = "together"
    res = harness.at_once([lambda b=b: push(b) for b in bodies])
    dup = [res[i] for i in range(len(bodies)) if "bizkey" in bodies[i]]
    own = [res[i] for i in range(len(bodies)) if "bizkey" not in bodies[i]]
    assert sorted(r[0] for r in dup) == [200] * 7 + [201], dup
    assert len(set(r[2]["id"] for r in dup)) == 1, dup
    assert all(r[0] == 201 for r in own), own
    assert len(set(r[2]["id"] for r in own)) == len(own), own
    for i, r in enumerate(res):
        if "bizkey" not in bodies[i]:
            assert E.job(KEY, r[2]["id"])["body"] == i


@t.test("bizkey: an unfinished job with it is returned, deduplicated")
def _():
    st, _, a = push({"delay_ms": HOUR, "bizkey": "order-42"})
    assert st == 201
    st, _, b = push({"delay_ms": 5, "bizkey": "order-42", "body": 1})
    assert st == 200 and b["id"] == a["id"] and b["deduplicated"], b
    st, _, _ = E.req("DELETE", "/v1/jobs/" + a["id"], key=KEY)
    assert st == 204
    st, _, c = push({"delay_ms": HOUR, "bizkey": "order-42"})
    assert st == 201 and c["id"] != a["id"], c
    for bad in ["a/b", "", "x" * 129, "a b", "\u00e9", 5, ["x"]]:
        r = push({"bizkey": bad})
        assert r[0] == 400 and r[2]["error"]["field"] == "bizkey", (bad, r)


@t.test("delay and due time: bad values are 400 naming the field")
def _():
    for body, field, code in [
            ({"delay_ms": -1}, "delay_ms", "invalid_field"),
            ({"delay_ms": "5"}, "delay_ms", "invalid_field"),
            ({"delay_ms": 1.5}, "delay_ms", "invalid_field"),
            ({"delay_ms": 1e300}, "delay_ms", "invalid_field"),
            ({"delay_ms": 10 ** 30}, "delay_ms", "invalid_field"),
            ({"delay_ms": 2 ** 63}, "delay_ms", "invalid_field"),
            ({"delay_ms": -2 ** 63}, "delay_ms", "invalid_field"),
            ({"delay_ms": True}, "delay_ms", "invalid_field"),
            ({"delay_ms": 31 * 86400000}, "delay_ms", "beyond_horizon"),
            ({"run_at_ms": now_ms() + 31 * 86400000}, "run_at_ms",
             "beyond_horizon"),
            ({"run_at_ms": -5}, "run_at_ms", "invalid_field"),
            ({"run_at_ms": 1, "delay_ms": 1}, "run_at_ms", "invalid_field"),
            ({"priority": 1001}, "priority", "invalid_field"),
            ({"priority": -1001}, "priority", "invalid_field"),
            ({"priority": "high"}, "priority", "invalid_field"),
            ({"ttr_ms": 0}, "ttr_ms", "invalid_field"),
            ({"retry_schedule": "<x>"}, "retry_schedule",
             "invalid_schedule"),
            ({"retry_schedule": "<31d>"}, "retry_schedule",
             "invalid_schedule"),
            ({"headers": {"webhook-signature": "x"}},
             "headers.webhook-signature", "invalid_header"),
            ({"headers": {"X-A": "1\r\n2"}}, "headers.X-A",
             "invalid_header"),
            ({"headers": {"X-A": "1", "X Bad": "2"}}, "headers.X Bad",
             "invalid_header"),
            ({"delay": 5}, "delay", "unknown_field"),
            ({"id": "my-id"}, "id", "unknown_field")]:
        expect_error(push(body), 400, code, field)
    # The message names the bound that applies: no upper one where the
    # horizon (its own error) is the limit.
    for body, msg in [({"delay_ms": -1}, "delay_ms must be 0 or more"),
                      ({"run_at_ms": -5}, "run_at_ms must be 0 or more"),
                      ({"delay_ms": 2 ** 63},
                       "delay_ms overflows a 64-bit integer"),
                      ({"priority": 1001},
                       "priority must be between -1000 and 1000")]:
        b = expect_error(push(body), 400, "invalid_field")
        assert b["error"]["message"] == msg, (body, b)
    # A time in the past means now.
    st, _, b = push({"run_at_ms": 1000})
    assert st == 201, b
    st, _, b = push({"priority": 1000, "delay_ms": 0})
    assert st == 201, b


@t.test("job body limit: 413 body_too_large naming body")
def _():
    expect_error(push({"body": "x" * 1025}), 413, "body_too_large", "body")
    expect_error(push({"body": {"k": "x" * 1020}}), 413, "body_too_large",
                 "body")
    st, _, b = push({"body": "x" * 1024, "delay_ms": HOUR})
    assert st == 201, b


@t.test("request body limit: 413 before the body is read")
def _():
    head = ("POST /v1/topics/%s/jobs HTTP/1.1\r\nHost: x\r\n"
            "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (Q, KEY, 2 << 20)).encode()
    resp = E.raw(head + b'{"body": "xxxx')
    assert resp.startswith(b"HTTP/1.1 413"), resp[:200]
    assert b"body_too_large" in resp, resp


@t.test("unknown topic is 404; a bad topic name is 400")
def _():
    expect_error(push({}, topic=unique("none")), 404, "topic_not_found")
    expect_error(push({}, topic="bad%20name"), 400, "invalid_name", "topic")


@t.test("batch: one result per job in order; bad jobs refuse the batch")
def _():
    jobs = [{"delay_ms": HOUR, "body": i} for i in range(5)]
    jobs.append({"delay_ms": HOUR, "bizkey": "batch-dup"})
    jobs.append({"delay_ms": HOUR, "bizkey": "batch-dup"})
    st, _, b = E.req("POST", "/v1/topics/%s/jobs:batch" % Q,
                     {"jobs": jobs}, key=KEY)
    assert st == 200 and len(b["results"]) == 7, b
    assert [r["status"] for r in b["results"]] == [201] * 6 + [200], b
    assert b["results"][6]["id"] == b["results"][5]["id"]
    assert b["results"][6]["deduplicated"] is True
    # Each item as the single push answers, with its status.
    new = ["id", "state", "run_at_ms", "next_attempt_ms", "status"]
    dup = ["id", "state", "deduplicated", "next_attempt_ms", "status"]
    assert [list(r) for r in b["results"]] == [new] * 6 + [dup], b
    st, _, one = push({"delay_ms": HOUR, "bizkey": "batch-dup"})
    assert st == 200 and list(one) == dup[:-1], one
    assert one["next_attempt_ms"] == b["results"][6]["next_attempt_ms"]
    for i in range(5):
        assert E.job(KEY, b["results"][i]["id"])["body"] == i
    bad = [{"delay_ms": HOUR, "bizkey": "batch-refused"}, {"delay_ms": -1}]
    expect_error(E.req("POST", "/v1/topics/%s/jobs:batch" % Q,
                       {"jobs": bad}, key=KEY), 400, "invalid_field",
                 "jobs[1].delay_ms")
    # Nothing of the refused batch went in: its bizkey is free.
    st, _, b = push({"delay_ms": HOUR, "bizkey": "batch-refused"})
    assert st == 201 and "deduplicated" not in b, (st, b)
    expect_error(E.req("POST", "/v1/topics/%s/jobs:batch" % Q,
                       {"jobs": [{}, {"headers": {"X:Y": "v"}}]}, key=KEY),
                 400, "invalid_header", "jobs[1].headers.X:Y")
    expect_error(E.req("POST", "/v1/topics/%s/jobs:batch" % Q,
                       {"jobs": [{}, 5]}, key=KEY), 400, None, "jobs[1]")
    expect_error(E.req("POST", "/v1/topics/%s/jobs:batch" % Q,
                       {"jobs": []}, key=KEY), 400, None, "jobs")
    expect_error(E.req("POST", "/v1/topics/%s/jobs:batch" % Q,
                       {"jobs": {}}, key=KEY), 400, "invalid_field", "jobs")
    expect_error(E.req("POST", "/v1/topics/%s/jobs:batch" % Q,
                       {"job": []}, key=KEY), 400, "unknown_field", "job")
    expect_error(E.req("POST", "/v1/topics/%s/jobs:batch" % Q,
                       {}, key=KEY), 400, "missing_field", "jobs")
    expect_error(E.req("POST", "/v1/topics/%s/jobs:batch" % Q,
                       {"jobs": [{}] * 51}, key=KEY), 413,
                 "batch_too_large", "jobs")
    expect_error(E.req("POST", "/v1/topics/%s/jobs:batch" % Q,
                       {"jobs": [{}], "x": 1}, key=KEY), 400,
                 "unknown_field", "x")
    expect_error(E.req("POST", "/v1/topics/%s/jobs:batch" % Q,
                       {"jobs": [{"body": "x" * 2000}]}, key=KEY), 413,
                 "body_too_large", "jobs[0].body")


@t.test("GET /v1/jobs/{id}: 404 for unknown ids, 400 for malformed ones")
def _():
    expect_error(E.req("GET", "/v1/jobs/0000000000000000", key=KEY), 404,
                 "job_not_found")
    expect_error(E.req("GET", "/v1/jobs/no-such-job", key=KEY), 404,
                 "job_not_found")
    for bad in ["a%00b", "a%20b", "x" * 65, "%FF"]:
        expect_error(E.req("GET", "/v1/jobs/" + bad, key=KEY), 400,
                     "invalid_id", "id")


@t.test("DELETE /v1/jobs/{id}: 204, then 409 job_finished")
def _():
    j = push({"delay_ms": HOUR})[2]
    st, _, _ = E.req("DELETE", "/v1/jobs/" + j["id"], key=KEY)
    assert st == 204
    assert E.job(KEY, j["id"])["state"] == "cancelled"
    expect_error(E.req("DELETE", "/v1/jobs/" + j["id"], key=KEY), 409,
                 "job_finished")
    expect_error(E.req("DELETE", "/v1/jobs/0000000000000000", key=KEY), 404,
                 "job_not_found")


@t.test("DELETE by bizkey: 204, then 404")
def _():
    j = push({"delay_ms": HOUR, "bizkey": "noshow-7"})[2]
    st, _, _ = E.req("DELETE", "/v1/topics/%s/bizkeys/noshow-7" % Q, key=KEY)
    assert st == 204
    assert E.job(KEY, j["id"])["state"] == "cancelled"
    expect_error(E.req("DELETE", "/v1/topics/%s/bizkeys/noshow-7" % Q,
                       key=KEY), 404, "job_not_found")
    expect_error(E.req("DELETE", "/v1/topics/%s/bizkeys/a%%00b" % Q,
                       key=KEY), 400, "invalid_bizkey", "bizkey")


@t.test("PATCH reschedules a waiting job; not a finished one")
def _():
    j = push({"delay_ms": HOUR})[2]
    at = now_ms() + 2 * HOUR
    st, _, b = E.req("PATCH", "/v1/jobs/" + j["id"], {"run_at_ms": at},
                     key=KEY)
    assert st == 200 and b["next_attempt_ms"] == at, b
    st, _, b = E.req("PATCH", "/v1/jobs/" + j["id"], {"delay_ms": 1000},
                     key=KEY)
    assert st == 200 and b["next_attempt_ms"] <= now_ms() + 1000, b
    for body, code, field in [({}, "missing_field", "run_at_ms"),
                              ({"run_at_ms": 1, "delay_ms": 1},
                               "invalid_field", "run_at_ms"),
                              ({"delay_ms": -1}, "invalid_field",
                               "delay_ms"),
                              ({"delay_ms": 40 * 86400000},
                               "beyond_horizon", "delay_ms"),
                              ({"run_at": 1}, "unknown_field", "run_at")]:
        expect_error(E.req("PATCH", "/v1/jobs/" + j["id"], body, key=KEY),
                     400, code, field)
    E.req("DELETE", "/v1/jobs/" + j["id"], key=KEY)
    expect_error(E.req("PATCH", "/v1/jobs/" + j["id"], {"delay_ms": 5},
                       key=KEY), 409, "job_not_waiting")
    expect_error(E.req("PATCH", "/v1/jobs/0000000000000000",
                       {"delay_ms": 5}, key=KEY), 404, "job_not_found")


def make_dead(q):
    """A job of pull topic q, failed once with a one-attempt schedule."""
    j = push({"body": {"dead": True}}, topic=q)[2]
    st, _, r = harness.wait_for(
        lambda: (lambda x: x if x[0] == 200 else None)(
            E.reserve(KEY, q, 1000)), what="the job to be reservable")
    st, _, n = E.req("POST", "/v1/jobs/%s/nack" % r["id"],
                     {"token": r["token"]}, key=KEY)
    assert st == 200 and n["state"] == "dead", n
    return j["id"]


@t.test("dead letters: listed newest first; retry one; redrive all")
def _():
    q = E.topic(KEY, mode="pull", retry_schedule="<0>")["name"]
    ids = [make_dead(q) for _ in range(3)]
    st, _, b = E.req("GET", "/v1/topics/%s/dead" % q, key=KEY)
    assert st == 200 and [x["id"] for x in b["jobs"]] == ids[::-1], b
    assert all(x["state"] == "dead" for x in b["jobs"])
    st, _, p1 = E.req("GET", "/v1/topics/%s/dead?limit=2" % q, key=KEY)
    assert len(p1["jobs"]) == 2 and p1["next_cursor"], p1
    st, _, p2 = E.req("GET", "/v1/topics/%s/dead?limit=2&cursor=%s" %
                      (q, p1["next_cursor"]), key=KEY)
    assert [x["id"] for x in p2["jobs"]] == [ids[0]], p2
    expect_error(E.req("GET", "/v1/topics/%s/dead?limit=0" % q, key=KEY),
                 400, "invalid_field", "limit")
    expect_error(E.req("GET", "/v1/topics/%s/dead?limit=x" % q, key=KEY),
                 400, "invalid_field", "limit")
    for bad in ("garbage", "-1", "%00"):
        expect_error(E.req("GET", "/v1/topics/%s/dead?cursor=%s" % (q, bad),
                           key=KEY), 400, "invalid_field", "cursor")
    st, _, r = E.req("POST", "/v1/jobs/%s/retry" % ids[0], key=KEY)
    assert st == 200 and r["state"] in ("scheduled", "ready"), r
    expect_error(E.req("POST", "/v1/jobs/%s/retry" % ids[0], key=KEY), 409,
                 "job_not_dead")
    st, _, r = E.req("POST", "/v1/topics/%s/dead:redrive" % q, key=KEY)
    assert st == 200 and r["redriven"] == 2, r
    st, _, b = E.req("GET", "/v1/topics/%s/dead" % q, key=KEY)
    assert b["jobs"] == [], b
    expect_error(E.req("POST", "/v1/jobs/0000000000000000/retry", key=KEY),
                 404, "job_not_found")


@t.test("listing and restore need the journal: 501 without it")
def _():
    expect_error(E.req("GET", "/v1/jobs?topic=" + Q, key=KEY), 501,
                 "not_supported")
    expect_error(E.req("GET", "/v1/jobs?state=bogus", key=KEY), 400,
                 "invalid_field", "state")
    expect_error(E.req("GET", "/v1/jobs?topic=a%20b", key=KEY), 400,
                 "invalid_name")
    expect_error(E.req("POST", "/v1/restore", key=KEY), 501, "not_supported")
    expect_error(E.admin("POST", "/v1/restore?expired=false"), 501,
                 "not_supported")
    expect_error(E.req("POST", "/v1/restore"), 401, "unauthorized")
    j = push({"delay_ms": HOUR})[2]
    expect_error(E.req("POST", "/v1/jobs/%s/restore" % j["id"], key=KEY),
                 501, "not_supported")


@t.test("with the journal: list newest first with filters and a cursor")
def _():
    dbdir = harness.mkdtemp()
    with harness.RedisServer() as r, harness.Retryd(redis=r, config={
            "journal": {"url": "sqlite://%s/j.db" % dbdir,
                        "mode": "sync"}}) as d:
        d.wait_ready()
        st, _, b = d.admin("POST", "/v1/tenants", {"name": "jr"})
        k = b["api_key"]
        d.request("PUT", "/v1/topics/a", {}, key=k)
        d.request("PUT", "/v1/topics/b", {}, key=k)
        ids = []
        for i in range(5):
            st, _, j = d.request("POST", "/v1/topics/%s/jobs" %
                                 ("a" if i % 2 == 0 else "b"),
                                 {"delay_ms": HOUR, "body": i,
                                  "bizkey": "k%d" % i}, key=k)
            assert st == 201, j
            ids.append(j["id"])
        st, _, l = d.request("GET", "/v1/jobs", key=k)
        if st == 501:
            harness.skip("the daemon does not hand the journal to the API")
        assert st == 200 and [x["id"] for x in l["jobs"]] == ids[::-1], l
        st, _, l = d.request("GET", "/v1/jobs?topic=a", key=k)
        assert [x["id"] for x in l["jobs"]] == [ids[4], ids[2], ids[0]], l
        st, _, l = d.request("GET", "/v1/jobs?bizkey=k3", key=k)
        assert [x["id"] for x in l["jobs"]] == [ids[3]], l
        st, _, l = d.request("GET", "/v1/jobs?limit=2", key=k)
        assert [x["id"] for x in l["jobs"]] == ids[4:2:-1], l
        st, _, l2 = d.request("GET", "/v1/jobs?limit=2&cursor=" +
                              l["next_cursor"], key=k)
        assert [x["id"] for x in l2["jobs"]] == ids[2:0:-1], l2
        expect_error(d.request("GET", "/v1/jobs?cursor=" + "a" * 65, key=k),
                     400, "invalid_field", "cursor")
        st, _, l = d.request("GET", "/v1/jobs?state=scheduled&limit=100",
                             key=k)
        assert len(l["jobs"]) == 5 and l["next_cursor"] is None, l
        st, _, l = d.request("GET", "/v1/jobs?state=scheduled&topic=a"
                             "&limit=2", key=k)
        assert [x["id"] for x in l["jobs"]] == [ids[4], ids[2]], l
        st, _, l2 = d.request("GET", "/v1/jobs?state=scheduled&topic=a"
                              "&limit=2&cursor=" + l["next_cursor"], key=k)
        assert [x["id"] for x in l2["jobs"]] == [ids[0]], l2
        assert l2["next_cursor"] is None, l2
        # A cancelled job moves from the scheduled listing to the
        # cancelled one (its transition is written in the next batch).
        st, _, _ = d.request("DELETE", "/v1/jobs/" + ids[1], key=k)
        assert st == 204

        def cancelled():
            st, _, l = d.request("GET", "/v1/jobs?state=cancelled", key=k)
            return l if st == 200 and l["jobs"] else None
        l = harness.wait_for(cancelled, what="the cancel's transition")
        assert [x["id"] for x in l["jobs"]] == [ids[1]], l
        st, _, l = d.request("GET", "/v1/jobs?state=scheduled&topic=b",
                             key=k)
        assert [x["id"] for x in l["jobs"]] == [ids[3]], l
        # Restore of a job Redis still has: present, nothing made.
        st, _, rr = d.request("POST", "/v1/jobs/%s/restore" % ids[0], key=k)
        assert st == 200 and rr["present"] == 1 and rr["restored"] == 0, rr
        expect_error(d.request("POST", "/v1/jobs/nope/restore", key=k), 404,
                     "job_not_found")
        # Redis loses everything: the daemon rebuilds it from the journal
        # by itself (tenant, key, topics, jobs); the route then finds every
        # job present and makes nothing twice.
        r.cmd("FLUSHALL")

        def back():
            # Back in Redis: the journal's answer (GET of a job Redis
            # does not hold) has the listing's updated_ms.
            st, _, g = d.request("GET", "/v1/jobs/" + ids[3], key=k)
            return g if st == 200 and "updated_ms" not in g else None
        g = harness.wait_for(back, what="the automatic restore")
        assert g["body"] == 3 and g["bizkey"] == "k3", g
        d.wait_ready()
        st, _, rr = d.request("POST", "/v1/restore", key=k)
        assert st == 200 and rr["restored"] == 0, rr

E.stop()
t.done()
