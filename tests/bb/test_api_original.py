#!/usr/bin/env python3
"""test_api_original.py - the routes of the original design: /push,
/delete, /get/{topic}, /finish, /restore, /restore/{id}."""

import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, expect_error, unique  # noqa: E402

t = harness.Tap()
E = Env()
NAME, KEY = E.tenant()
Q = E.topic(KEY, mode="pull", retry_schedule="<0,0>")["name"]


def opush(body, key=KEY):
    return E.req("POST", "/push", body, key=key)


def get(topic=Q, wait_ms=2000):
    def once():
        r = E.req("GET", "/get/%s?wait_ms=%d" % (topic, wait_ms), key=KEY)
        return r if r[0] == 200 else None
    return harness.wait_for(once, what="a job from /get")[2]


@t.test("/push -> {id}; /get reserves it; /finish without a token acks it")
def _():
    st, _, b = opush({"topic": Q, "body": {"x": 1}, "priority": 2,
                      "ttl": 20000})
    assert st == 200 and b["id"], b
    r = get()
    assert r["id"] == b["id"] and r["body"] == {"x": 1} and r["token"], r
    assert r["ttr_ms"] == 20000 and r["priority"] == 2, r
    st, _, f = E.req("GET", "/finish?id=" + b["id"], key=KEY)
    assert st == 200 and f["state"] == "delivered", f
    assert E.job(KEY, b["id"])["state"] == "delivered"
    expect_error(E.req("GET", "/finish?id=" + b["id"], key=KEY), 409,
                 "job_not_reserved")


@t.test("/finish with a token fences like ack")
def _():
    b = opush({"topic": Q, "body": 2})[2]
    r1 = get()
    st, _, _ = E.req("POST", "/v1/jobs/%s/nack" % b["id"],
                     {"token": r1["token"]}, key=KEY)
    assert st == 200
    r2 = get()
    expect_error(E.req("GET", "/finish?id=%s&token=%s" %
                       (b["id"], r1["token"]), key=KEY), 409, "stale_token")
    st, _, f = E.req("GET", "/finish?id=%s&token=%s" % (b["id"], r2["token"]),
                     key=KEY)
    assert st == 200 and f["state"] == "delivered", f


@t.test("/push with a client id: that id; pushing it again deduplicates")
def _():
    st, _, b = opush({"topic": Q, "id": "order:42", "delay": 3600000})
    assert st == 200 and b["id"] == "order:42", b
    st, _, b2 = opush({"topic": Q, "id": "order:42", "delay": 5})
    assert st == 200 and b2["id"] == "order:42" and b2["deduplicated"], b2
    g = E.job(KEY, "order:42")
    assert g["state"] == "scheduled", g
    st, _, d = E.req("GET", "/delete?id=order:42", key=KEY)
    assert st == 200 and d["state"] == "cancelled", d


@t.test("/push of a client id another topic's job has: 409, nothing changed")
def _():
    q2 = E.topic(KEY, mode="pull", retry_schedule="<0,0>")["name"]
    st, _, b = opush({"topic": Q, "id": "order:43", "delay": 3600000})
    assert st == 200 and b["id"] == "order:43", b
    before = E.job(KEY, "order:43")
    expect_error(opush({"topic": q2, "id": "order:43", "delay": 5}), 409,
                 "conflict")
    after = E.job(KEY, "order:43")
    assert after == before and after["topic"] == Q, (before, after)
    st, _, g = E.req("GET", "/v1/topics/" + q2, key=KEY)
    assert st == 200 and not any(g["counts"].values()), g


@t.test("/push with client ids at once (looked up together): one job per "
        "id, the repeats deduplicated, another topic's id 409")
def _():
    q2 = E.topic(KEY, mode="pull", retry_schedule="<0,0>")["name"]
    q3 = E.topic(KEY, mode="pull", retry_schedule="<0,0>")["name"]
    st, _, b = opush({"topic": q2, "id": "many:other", "delay": 3600000})
    assert st == 200, b
    ids = ["many:%d" % i for i in range(16)]
    bodies = [{"topic": q3, "id": i, "delay": 3600000 + n}
              for n, i in enumerate(ids)]
    bodies += [{"topic": q3, "id": i, "delay": 7200000} for i in ids]
    bodies.append({"topic": q3, "id": "many:other", "delay": 5})
    got = harness.at_once([lambda b=b: opush(b) for b in bodies])
    made = {}
    for body, (st, _, r) in zip(bodies, got):
        if body["id"] == "many:other":
            assert st == 409 and r["error"]["code"] == "conflict", (st, r)
            continue
        assert st == 200 and r["id"] == body["id"], (st, r)
        if not r.get("deduplicated"):
            assert body["id"] not in made, (body, r)
            made[body["id"]] = body["delay"]
    # Each id made once, by either of its two pushes (they race).
    assert sorted(made) == sorted(ids), made
    for i in ids:
        g = E.job(KEY, i)
        assert g["state"] == "scheduled" and g["topic"] == q3, g
        # The winner's delay (the two differ by about an hour).
        assert abs(g["next_attempt_ms"] - g["created_ms"] - made[i]) < 1000, \
            (g, made)
    assert E.job(KEY, "many:other")["topic"] == q2
    st, _, g = E.req("GET", "/v1/topics/" + q3, key=KEY)
    assert st == 200 and g["counts"]["scheduled"] == 16, g


@t.test("/push: bad inputs are 400 naming the field")
def _():
    for body, code, field in [
            ({}, "missing_field", "topic"),
            ({"topic": 5}, "invalid_field", "topic"),
            ({"topic": "a b"}, "invalid_name", "topic"),
            ({"topic": Q, "id": "0123456789ABCDEF"}, "invalid_id", "id"),
            ({"topic": Q, "id": "a/b"}, "invalid_id", "id"),
            ({"topic": Q, "id": "x" * 65}, "invalid_field", "id"),
            ({"topic": Q, "id": "a", "bizkey": "b"}, "invalid_field", "id"),
            ({"topic": Q, "delay": -1}, "invalid_field", "delay"),
            ({"topic": Q, "delay": 10 ** 20}, "invalid_field", "delay"),
            ({"topic": Q, "delay": 400 * 86400000}, "beyond_horizon",
             "delay"),
            ({"topic": Q, "ttl": 0}, "invalid_field", "ttl"),
            ({"topic": Q, "priority": 5000}, "invalid_field", "priority"),
            ({"topic": Q, "delay_ms": 5}, "unknown_field", "delay_ms")]:
        expect_error(opush(body), 400, code, field)
    expect_error(opush({"topic": unique("none")}), 404, "topic_not_found")
    expect_error(E.req("POST", "/push", b"{", key=KEY), 400, "invalid_json")
    expect_error(E.req("GET", "/push", key=KEY), 405, "method_not_allowed")


@t.test("/push with a bizkey deduplicates like v1")
def _():
    a = opush({"topic": Q, "bizkey": "bk-1", "delay": 3600000})[2]
    b = opush({"topic": Q, "bizkey": "bk-1"})[2]
    assert a["id"] == b["id"] and b["deduplicated"], (a, b)


@t.test("/delete: cancels; 409 when finished; 404 unknown; 400 bad id")
def _():
    b = opush({"topic": Q, "delay": 3600000})[2]
    st, _, d = E.req("GET", "/delete?id=" + b["id"], key=KEY)
    assert st == 200 and d == {"id": b["id"], "state": "cancelled"}, d
    expect_error(E.req("GET", "/delete?id=" + b["id"], key=KEY), 409,
                 "job_finished")
    expect_error(E.req("GET", "/delete?id=0000000000000000", key=KEY), 404,
                 "job_not_found")
    expect_error(E.req("GET", "/delete", key=KEY), 400, "missing_field",
                 "id")
    expect_error(E.req("GET", "/delete?id=a%00b", key=KEY), 400,
                 "invalid_id", "id")


@t.test("/get: 204 when empty; 404 unknown topic; 409 push topic")
def _():
    q = E.topic(KEY, mode="pull")["name"]
    st, _, _ = E.req("GET", "/get/%s?wait_ms=100" % q, key=KEY)
    assert st == 204
    expect_error(E.req("GET", "/get/" + unique("none"), key=KEY), 404,
                 "topic_not_found")
    pq = E.topic(KEY, callback_url="http://127.0.0.1:9/")["name"]
    expect_error(E.req("GET", "/get/" + pq, key=KEY), 409, "wrong_mode")
    expect_error(E.req("GET", "/get/%s?wait_ms=-5" % q, key=KEY), 400,
                 "invalid_field", "wait_ms")


@t.test("/restore and /restore/{id} need the journal (501 without)")
def _():
    expect_error(E.req("GET", "/restore?expire=true", key=KEY), 501,
                 "not_supported")
    expect_error(E.admin("GET", "/restore?expire=false"), 501,
                 "not_supported")
    expect_error(E.req("GET", "/restore?expire=maybe", key=KEY), 400,
                 "invalid_field", "expire")
    expect_error(E.req("GET", "/restore/some-id", key=KEY), 501,
                 "not_supported")
    expect_error(E.req("GET", "/restore/a%00", key=KEY), 400, "invalid_id")


@t.test("every original route wants a key (401)")
def _():
    for m, p in [("POST", "/push"), ("GET", "/delete?id=x"),
                 ("GET", "/restore"), ("GET", "/restore/x"),
                 ("GET", "/get/" + Q), ("GET", "/finish?id=x")]:
        expect_error(E.req(m, p, {"topic": Q}), 401, "unauthorized")
        expect_error(E.req(m, p, {"topic": Q}, key="rk_" + "x" * 43), 401,
                     "unauthorized")


@t.test("the admin key with X-Tenant works on the original routes")
def _():
    h = {"X-Tenant": NAME}
    st, _, b = E.admin("POST", "/push", {"topic": Q, "delay": 3600000},
                       headers=h)
    assert st == 200, b
    st, _, d = E.admin("GET", "/delete?id=" + b["id"], headers=h)
    assert st == 200, d
    expect_error(E.admin("POST", "/push", {"topic": Q}), 400,
                 "tenant_required")


# Last: if the daemon cannot hold such an id, only this test fails.
@t.test("/push with the longest client id (64 characters)")
def _():
    cid = "L" * 40 + ".:-_" + "9" * 20
    st, _, b = opush({"topic": Q, "id": cid, "delay": 3600000})
    assert st == 200 and b["id"] == cid, b
    g = E.job(KEY, cid)
    assert g["id"] == cid and g["state"] == "scheduled", g
    assert E.healthy()


E.stop()
t.done()
