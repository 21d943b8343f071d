#!/usr/bin/env python3
"""test_api_isolation.py - a tenant key reaching another tenant's topic or
job gets 404 on every route, the original ones included, and changes
nothing; the admin key acting as a tenant (X-Tenant) is held to the same."""

import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, unique  # noqa: E402

t = harness.Tap()
DB = harness.mkdtemp()
E = Env(config={"journal": {"url": "sqlite://%s/j.db" % DB}})
A, KA = E.tenant()
B, KB = E.tenant()

# A's world: a pull topic with a waiting job (with a bizkey), a reserved job,
# and a topic with a dead job.
QA = E.topic(KA, "orders", mode="pull", retry_schedule="<0,0>")
QD = E.topic(KA, "dead-ones", mode="pull", retry_schedule="<0>")["name"]
JA = E.push(KA, "orders", {"a": 1}, delay_ms=3600000, bizkey="bk-1")["id"]


def _reserve(key, q):
    def once():
        r = E.reserve(key, q, 1000)
        return r[2] if r[0] == 200 else None
    return harness.wait_for(once, what="a reservable job")


JR = E.push(KA, "orders", {"r": 1})["id"]
RES = _reserve(KA, "orders")
assert RES["id"] == JR
JD = E.push(KA, QD, {"d": 1})["id"]
_d = _reserve(KA, QD)
E.req("POST", "/v1/jobs/%s/nack" % JD, {"token": _d["token"]}, key=KA)
JOURNAL = E.req("GET", "/v1/jobs", key=KA)[0] == 200


def snapshot():
    return {j: E.job(KA, j) for j in (JA, JR, JD)}


BEFORE = snapshot()


def routes():
    tok = RES["token"]
    return [
        ("GET", "/v1/topics/orders", None),
        ("DELETE", "/v1/topics/orders?force=true", None),
        ("POST", "/v1/topics/orders/secret", None),
        ("DELETE", "/v1/topics/orders/bizkeys/bk-1", None),
        ("GET", "/v1/topics/%s/dead" % QD, None),
        ("POST", "/v1/topics/%s/dead:redrive" % QD, None),
        ("POST", "/v1/topics/orders/jobs", {"body": 1}),
        ("POST", "/v1/topics/orders/jobs:batch", {"jobs": [{"body": 1}]}),
        ("GET", "/v1/topics/orders/reserve?wait_ms=0", None),
        ("GET", "/v1/jobs/" + JA, None),
        ("DELETE", "/v1/jobs/" + JA, None),
        ("PATCH", "/v1/jobs/" + JA, {"delay_ms": 1}),
        ("POST", "/v1/jobs/%s/retry" % JD, None),
        ("POST", "/v1/jobs/%s/ack" % JR, {"token": tok}),
        ("POST", "/v1/jobs/%s/nack" % JR, {"token": tok}),
        ("POST", "/v1/jobs/%s/restore" % JA, None),
        ("POST", "/push", {"topic": "orders", "body": 1}),
        ("POST", "/push", {"topic": "orders", "id": "x-" + JA}),
        ("GET", "/delete?id=" + JA, None),
        ("GET", "/get/orders?wait_ms=0", None),
        ("GET", "/finish?id=" + JR, None),
        ("GET", "/finish?id=%s&token=%s" % (JR, tok), None),
        ("GET", "/restore/" + JA, None),
    ]


def check_all(key, headers=None):
    for m, p, body in routes():
        st, _, b = E.req(m, p, body, key=key, headers=headers)
        if not JOURNAL and "restore" in p:
            assert st == 501, (m, p, st, b)
            continue
        assert st == 404, (m, p, st, b)
        assert b["error"]["code"].endswith("not_found"), (m, p, b)
        # Nothing in the answer names the other tenant's things.
        text = str(b)
        assert A not in text and JA not in text, (m, p, b)


@t.test("another tenant's key gets 404 on every route")
def _():
    check_all(KB)


@t.test("the admin key acting as another tenant gets 404 too")
def _():
    check_all(E.d.admin_key, headers={"X-Tenant": B})


@t.test("nothing of A changed")
def _():
    after = snapshot()
    assert after == BEFORE, (BEFORE, after)
    st, _, g = E.req("GET", "/v1/topics/orders", key=KA)
    assert st == 200 and g["secret"] == QA["secret"], g
    # A's reservation still holds: its token acks.
    st, _, a = E.req("POST", "/v1/jobs/%s/ack" % JR,
                     {"token": RES["token"]}, key=KA)
    assert st == 200 and a["state"] == "delivered", a


@t.test("lists show only the caller's own things")
def _():
    st, _, b = E.req("GET", "/v1/topics", key=KB)
    assert st == 200 and b["topics"] == [], b
    st, _, b = E.req("GET", "/v1/jobs?topic=orders", key=KB)
    if JOURNAL:
        assert st == 200 and b["jobs"] == [], b
    else:
        assert st == 501
    st, _, b = E.admin("GET", "/v1/tenants/" + B)
    assert b["counts"]["scheduled"] == 0 and b["counts"]["dead"] == 0, b


@t.test("same names in two tenants are two things")
def _():
    st, _, b = E.req("PUT", "/v1/topics/orders", {"mode": "pull"}, key=KB)
    assert st == 201 and b["secret"] != QA["secret"], b
    j = E.push(KB, "orders", {"b": 1}, delay_ms=3600000, bizkey="bk-1")
    assert j["id"] != JA and "deduplicated" not in j, j
    st, _, g = E.req("GET", "/v1/jobs/" + j["id"], key=KA)
    assert st == 404
    st, _, g = E.req("GET", "/v1/topics/orders", key=KA)
    assert g["secret"] == QA["secret"] and g["counts"]["scheduled"] == 1, g
    # B's reserve cannot see A's ready jobs in A's "orders".
    E.push(KA, "orders", {"only": "A"})
    st, _, r = E.req("GET", "/v1/topics/orders/reserve?wait_ms=300", key=KB)
    assert st == 204, (st, r)


@t.test("ids and keys of another tenant cannot be guessed into access")
def _():
    for jid in (JA, JR, JD, unique("j")):
        for key in (KB, "rk_" + "A" * 43, "x"):
            st, _, b = E.req("GET", "/v1/jobs/" + jid, key=key)
            assert st in (401, 404), (jid, st, b)


E.stop()
t.done()
