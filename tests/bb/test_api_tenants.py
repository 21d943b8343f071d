#!/usr/bin/env python3
"""test_api_tenants.py - the admin API: tenants, keys, rotation, revocation,
the admin key acting as a tenant, quotas and the per-key rate."""

import hashlib
import os
import re
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, expect_error, unique  # noqa: E402

t = harness.Tap()
E = Env()
KEY_RE = re.compile(r"^rk_[A-Za-z0-9_-]{43}$")


@t.test("POST /v1/tenants creates a tenant with its first key, shown once")
def _():
    name = unique("acme")
    st, _, b = E.admin("POST", "/v1/tenants", {"name": name})
    assert st == 201, (st, b)
    assert b["name"] == name and KEY_RE.match(b["api_key"]), b
    assert b["key_id"] and b["created_ms"] > 0 and b["keys"] == 1, b
    # The key works at once and is never shown again.
    st, _, _ = E.req("GET", "/v1/topics", key=b["api_key"])
    assert st == 200
    st, _, g = E.admin("GET", "/v1/tenants/" + name)
    assert st == 200 and "api_key" not in str(g), g
    assert [k["key_id"] for k in g["keys"]] == [b["key_id"]], g


@t.test("only the SHA-256 of a key is stored in Redis")
def _():
    name, key = E.tenant()
    h = hashlib.sha256(key.encode()).hexdigest()
    dump = []
    for k in E.redis.cmd("KEYS", "*"):
        ty = E.redis.cmd("TYPE", k)
        if ty == "hash":
            dump.append(str(E.redis.cmd("HGETALL", k)))
        elif ty == "string":
            dump.append(str(E.redis.cmd("GET", k)))
        elif ty == "set":
            dump.append(str(E.redis.cmd("SMEMBERS", k)))
    text = "\n".join(dump)
    assert key not in text and key[3:] not in text
    assert h in text


@t.test("tenant names: bad ones are 400 naming the field")
def _():
    for bad in ["Acme", "a" * 65, "", "a/b", "a b", "é", "a\u0000b",
                "a.b", 5, None, ["x"], {"x": 1}, True]:
        expect_error(E.admin("POST", "/v1/tenants", {"name": bad}), 400,
                     field="name")
    expect_error(E.admin("POST", "/v1/tenants", {}), 400, "missing_field",
                 "name")
    expect_error(E.admin("POST", "/v1/tenants", {"name": "ok", "nmae": 1}),
                 400, "unknown_field", "nmae")
    expect_error(E.admin("POST", "/v1/tenants", b"[1]"), 400, "invalid_json")
    expect_error(E.admin("POST", "/v1/tenants", b""), 400, "invalid_json")
    name = "a" * 64
    st, _, b = E.admin("POST", "/v1/tenants", {"name": name})
    assert st == 201, b


@t.test("a name that exists is 409 tenant_exists")
def _():
    name, _ = E.tenant()
    expect_error(E.admin("POST", "/v1/tenants", {"name": name}), 409,
                 "tenant_exists", "name")


@t.test("the admin API wants the admin key: 401 without, 403 for a tenant")
def _():
    name, key = E.tenant()
    for m, p in [("POST", "/v1/tenants"), ("GET", "/v1/tenants"),
                 ("GET", "/v1/tenants/" + name),
                 ("PATCH", "/v1/tenants/" + name),
                 ("DELETE", "/v1/tenants/" + name),
                 ("POST", "/v1/tenants/%s/keys" % name),
                 ("GET", "/v1/tenants/%s/keys" % name),
                 ("DELETE", "/v1/tenants/%s/keys/abc" % name)]:
        expect_error(E.req(m, p, {"name": "zz"}), 401, "unauthorized")
        expect_error(E.req(m, p, {"name": "zz"}, key="rk_" + "A" * 43), 401,
                     "unauthorized")
        expect_error(E.req(m, p, {"name": "zz"}, key="nope"), 401)
        expect_error(E.req(m, p, {"name": "zz"}, key=key), 403, "forbidden")
    st, h, _ = E.req("GET", "/v1/tenants",
                     headers={"Authorization": "Basic x"})
    assert st == 401 and "Bearer" in h.get("WWW-Authenticate", "")


@t.test("GET /v1/tenants lists; GET /v1/tenants/{name} shows keys and counts")
def _():
    a, _ = E.tenant()
    b, _ = E.tenant()
    st, _, body = E.admin("GET", "/v1/tenants")
    names = [x["name"] for x in body["tenants"]]
    assert st == 200 and a in names and b in names, body
    assert names == sorted(names)
    st, _, g = E.admin("GET", "/v1/tenants/" + a)
    assert st == 200 and g["name"] == a and len(g["keys"]) == 1, g
    assert g["counts"]["scheduled"] == 0, g
    expect_error(E.admin("GET", "/v1/tenants/" + unique("none")), 404,
                 "tenant_not_found")
    expect_error(E.admin("GET", "/v1/tenants/Bad%20Name"), 400,
                 "invalid_name")
    expect_error(E.admin("GET", "/v1/tenants/a%00b"), 400, "invalid_name")


@t.test("a tenant's GET whose counts Redis cannot give answers the error, "
        "as a topic's does; a PATCH then still answers its change")
def _():
    name, key = E.tenant()
    q = E.topic(key)["name"]
    E.push(key, q, {"n": 1}, delay_ms=600000)
    # A counts hash that is not a hash: Redis refuses the read of it.
    ckeys = [k for k in E.redis.cmd("KEYS", "rd:{%s:*}:c" % name)]
    assert ckeys, "no counts hash for the tenant"
    ck = ckeys[0]
    saved = ck + ":saved"
    assert E.redis.cmd("RENAME", ck, saved) == "OK"
    assert E.redis.cmd("SET", ck, "not a hash") == "OK"
    try:
        st, _, tb = E.admin("GET", "/v1/tenants/" + name)
        qs, _, qb = E.req("GET", "/v1/topics/" + q, key=key)
        assert st >= 500 and qs == st, (st, tb, qs, qb)
        assert tb["error"]["code"] == qb["error"]["code"], (tb, qb)
        st, _, b = E.admin("PATCH", "/v1/tenants/" + name,
                           {"max_pending": 7})
        assert st == 200 and b["max_pending"] == 7, (st, b)
        assert "counts" not in b, b
    finally:
        E.redis.cmd("DEL", ck)
        E.redis.cmd("RENAME", saved, ck)
    st, _, g = E.admin("GET", "/v1/tenants/" + name)
    assert st == 200 and g["max_pending"] == 7, g
    assert g["counts"]["scheduled"] == 1, g


@t.test("rotation: a new key works beside the old one until it is revoked")
def _():
    name, k1 = E.tenant()
    st, _, nk = E.admin("POST", "/v1/tenants/%s/keys" % name)
    assert st == 201 and KEY_RE.match(nk["api_key"]) and nk["key_id"], nk
    k2 = nk["api_key"]
    assert k1 != k2
    for k in (k1, k2):
        assert E.req("GET", "/v1/topics", key=k)[0] == 200
    st, _, ks = E.admin("GET", "/v1/tenants/%s/keys" % name)
    assert st == 200 and len(ks["keys"]) == 2, ks
    old = [k["key_id"] for k in ks["keys"] if k["key_id"] != nk["key_id"]][0]
    st, _, _ = E.admin("DELETE", "/v1/tenants/%s/keys/%s" % (name, old))
    assert st == 204
    expect_error(E.req("GET", "/v1/topics", key=k1), 401, "unauthorized")
    assert E.req("GET", "/v1/topics", key=k2)[0] == 200
    expect_error(E.admin("DELETE", "/v1/tenants/%s/keys/%s" % (name, old)),
                 404, "key_not_found")
    expect_error(E.admin("DELETE", "/v1/tenants/%s/keys/BAD!" % name), 400,
                 "invalid_id")
    expect_error(E.admin("POST", "/v1/tenants/%s/keys" % unique("no")), 404,
                 "tenant_not_found")
    expect_error(E.admin("POST", "/v1/tenants/%s/keys" % name, {"x": 1}),
                 400, "unknown_field")


@t.test("a key of one tenant cannot be revoked through another")
def _():
    a, ka = E.tenant()
    b, _ = E.tenant()
    st, _, ks = E.admin("GET", "/v1/tenants/%s/keys" % a)
    kid = ks["keys"][0]["key_id"]
    expect_error(E.admin("DELETE", "/v1/tenants/%s/keys/%s" % (b, kid)),
                 404)
    assert E.req("GET", "/v1/topics", key=ka)[0] == 200


@t.test("the admin key acts as a tenant with X-Tenant")
def _():
    name, key = E.tenant()
    E.topic(key, "shared")
    st, _, b = E.admin("GET", "/v1/topics", headers={"X-Tenant": name})
    assert st == 200 and [x["name"] for x in b["topics"]] == ["shared"], b
    expect_error(E.admin("GET", "/v1/topics"), 400, "tenant_required",
                 "X-Tenant")
    expect_error(E.admin("GET", "/v1/topics",
                         headers={"X-Tenant": unique("ghost")}), 404,
                 "tenant_not_found")
    expect_error(E.admin("GET", "/v1/topics", headers={"X-Tenant": "B A"}),
                 400, "invalid_name", "X-Tenant")
    # A tenant key's X-Tenant is ignored: it cannot reach another tenant.
    other, okey = E.tenant()
    st, _, b = E.req("GET", "/v1/topics", key=okey,
                     headers={"X-Tenant": name})
    assert st == 200 and b["topics"] == [], b


@t.test("PATCH max_pending sets and clears the tenant's quota")
def _():
    name, key = E.tenant()
    st, _, b = E.admin("PATCH", "/v1/tenants/" + name, {"max_pending": 2})
    assert st == 200 and b["max_pending"] == 2, b
    assert b["max_pending_override"] == 2, b
    q = E.topic(key)["name"]
    E.push(key, q, {"n": 1}, delay_ms=60000)
    E.push(key, q, {"n": 2}, delay_ms=60000)
    r = expect_error(E.req("POST", "/v1/topics/%s/jobs" % q,
                           {"body": 3, "delay_ms": 60000}, key=key),
                     429, "quota_exceeded")
    assert "2" in r["error"]["message"]
    st, _, b = E.admin("PATCH", "/v1/tenants/" + name, {"max_pending": None})
    assert st == 200 and b["max_pending_override"] is None, b
    harness.wait_for(lambda: E.req("POST", "/v1/topics/%s/jobs" % q,
                                   {"delay_ms": 60000}, key=key)[0] == 201,
                     what="the quota to be lifted")
    for bad in [0, -1, "3", 1.5, 10 ** 30, True]:
        expect_error(E.admin("PATCH", "/v1/tenants/" + name,
                             {"max_pending": bad}), 400, "invalid_field",
                     "max_pending")
    expect_error(E.admin("PATCH", "/v1/tenants/" + name, {"x": 1}), 400,
                 "unknown_field")
    expect_error(E.admin("PATCH", "/v1/tenants/" + unique("n"),
                         {"max_pending": 3}), 404, "tenant_not_found")


@t.test("pushes of a fresh tenant together, each filling its quota: "
        "one is made, the others are 429, none gets past it")
def _():
    # Each push that finds the quota's count stale reads it from Redis;
    # one that read it while the others' jobs were on their way to Redis
    # used to write that count over theirs, and so let more in.
    quota, n = 100, 10
    for _round in range(3):
        name, key = E.tenant(max_pending=quota)
        q = E.topic(key)["name"]
        batch = {"jobs": [{"delay_ms": 3600000, "body": i}
                          for i in range(quota)]}

        def push():
            return E.req("POST", "/v1/topics/%s/jobs:batch" % q, batch,
                         key=key)[0]
        got = sorted(harness.at_once([push] * n))
        assert got == [200] + [429] * (n - 1), got
        st, _, b = E.admin("GET", "/v1/tenants/" + name)
        assert st == 200 and b["counts"]["scheduled"] == quota, b


@t.test("max_in_flight: at creation, set and cleared by PATCH, shown in "
        "force and as the override; bad values 400 naming it")
def _():
    cap = E.admin("GET", "/v1/tenants/" + E.tenant()[0])[2]["max_in_flight"]
    assert cap == 9000, cap             # max_total_in_flight less a tenth
    name, _ = E.tenant(max_in_flight=3)
    st, _, g = E.admin("GET", "/v1/tenants/" + name)
    assert st == 200 and g["max_in_flight"] == 3, g
    assert g["max_in_flight_override"] == 3, g
    assert g["max_pending_override"] is None, g
    st, _, b = E.admin("GET", "/v1/tenants")
    (row,) = [x for x in b["tenants"] if x["name"] == name]
    assert row["max_in_flight"] == 3, row
    assert row["max_in_flight_override"] == 3, row
    # Each PATCH changes what it names: the quota leaves the cap as it is.
    st, _, b = E.admin("PATCH", "/v1/tenants/" + name, {"max_pending": 7})
    assert st == 200 and b["max_in_flight_override"] == 3, b
    assert b["max_pending_override"] == 7, b
    st, _, b = E.admin("PATCH", "/v1/tenants/" + name, {"max_in_flight": 5})
    assert st == 200 and b["max_in_flight"] == 5, b
    assert b["max_in_flight_override"] == 5 and b["max_pending"] == 7, b
    # Above the instance's total: kept, and in force up to the total.
    st, _, b = E.admin("PATCH", "/v1/tenants/" + name,
                       {"max_in_flight": 1000000})
    assert st == 200 and b["max_in_flight_override"] == 1000000, b
    assert b["max_in_flight"] == 10000, b
    st, _, b = E.admin("PATCH", "/v1/tenants/" + name,
                       {"max_in_flight": None})
    assert st == 200 and b["max_in_flight_override"] is None, b
    assert b["max_in_flight"] == 9000 and b["max_pending_override"] == 7, b
    st, _, g = E.admin("GET", "/v1/tenants/" + name)
    assert g["max_in_flight_override"] is None, g
    for bad in [0, -1, "3", 1.5, 10 ** 30, 1000001, True, [], {}]:
        expect_error(E.admin("PATCH", "/v1/tenants/" + name,
                             {"max_in_flight": bad}), 400, "invalid_field",
                     "max_in_flight")
        other = unique("n")
        expect_error(E.admin("POST", "/v1/tenants",
                             {"name": other, "max_in_flight": bad}), 400,
                     "invalid_field", "max_in_flight")
        assert E.admin("GET", "/v1/tenants/" + other)[0] == 404, other
    # A refused PATCH changes nothing, the quota included.
    expect_error(E.admin("PATCH", "/v1/tenants/" + name,
                         {"max_pending": 2, "max_in_flight": 0}), 400,
                 "invalid_field", "max_in_flight")
    expect_error(E.admin("PATCH", "/v1/tenants/" + name,
                         {"max_in_flight": 2, "max_in_flght": 1}), 400,
                 "unknown_field", "max_in_flght")
    st, _, g = E.admin("GET", "/v1/tenants/" + name)
    assert g["max_pending_override"] == 7, g
    assert g["max_in_flight_override"] is None, g
    expect_error(E.admin("PATCH", "/v1/tenants/" + unique("n"),
                         {"max_in_flight": 3}), 404, "tenant_not_found")


@t.test("PATCHes of different members never undo each other: at once on "
        "one instance, or one after the other on two")
def _():
    name, _ = E.tenant()
    path = "/v1/tenants/" + name

    def patch(member, v, d=E.d):
        return lambda: d.request("PATCH", path, {member: v},
                                 key=d.admin_key)[0]
    fns = [patch("max_pending", 10 + i) for i in range(8)] + \
        [patch("max_in_flight", 20 + i) for i in range(8)]
    assert harness.at_once(fns) == [200] * 16
    st, _, g = E.admin("GET", path)
    assert st == 200, (st, g)
    assert g["max_pending_override"] in range(10, 18), g
    assert g["max_in_flight_override"] in range(20, 28), g
    # A second instance that read the tenant a moment ago (its registry
    # cache holds it for a second) changes the other member.
    with harness.Retryd(redis=E.redis) as d2:
        d2.wait_ready()
        st, _, seen = d2.request("GET", path, key=d2.admin_key)
        assert st == 200, (st, seen)
        assert E.admin("PATCH", path, {"max_pending": 99})[0] == 200
        assert patch("max_in_flight", 77, d2)() == 200
        for d in (E.d, d2):
            harness.wait_for(lambda: d.request(
                "GET", path, key=d.admin_key)[2].get("max_in_flight") == 77,
                what="the change seen by both")
            st, _, g = d.request("GET", path, key=d.admin_key)
            assert g["max_pending_override"] == 99, g
            assert g["max_in_flight_override"] == 77, g


@t.test("max_pending at creation; a batch over the quota is refused whole")
def _():
    name, key = E.tenant(max_pending=3)
    q = E.topic(key)["name"]
    jobs = [{"delay_ms": 60000, "body": i} for i in range(4)]
    expect_error(E.req("POST", "/v1/topics/%s/jobs:batch" % q,
                       {"jobs": jobs}, key=key), 429, "quota_exceeded")
    st, _, b = E.req("POST", "/v1/topics/%s/jobs:batch" % q,
                     {"jobs": jobs[:3]}, key=key)
    assert st == 200 and len(b["results"]) == 3, b


def _pending(key, q):
    st, _, b = E.req("GET", "/v1/topics/" + q, key=key)
    assert st == 200, b
    c = b["counts"]
    return c["scheduled"] + c["ready"] + c["in_flight"] + c["retrying"]


@t.test("at the quota a push repeating a bizkey or a client id is the "
        "duplicate it is (200, the same id); a new one is 429 and changes "
        "nothing")
def _():
    name, key = E.tenant(max_pending=3)
    q = E.topic(key)["name"]
    jobs = "/v1/topics/%s/jobs" % q
    a = E.push(key, q, {"n": 1}, delay_ms=60000, bizkey="order-1")
    b = E.push(key, q, {"n": 2}, delay_ms=60000)
    st, _, c = E.req("POST", "/push", {"topic": q, "id": "order:2",
                                       "delay": 60000}, key=key)
    assert st == 200 and c["id"] == "order:2", (st, c)
    assert _pending(key, q) == 3
    # The retries of a push that timed out: the first answer again.
    for _i in range(2):
        st, _, d = E.req("POST", jobs, {"delay_ms": 60000, "body": 9,
                                        "bizkey": "order-1"}, key=key)
        assert st == 200 and d["id"] == a["id"] and d["deduplicated"], d
        assert d["state"] == "scheduled", d
        st, _, d = E.req("POST", "/push", {"topic": q, "id": "order:2",
                                           "delay": 5}, key=key)
        assert st == 200 and d["id"] == "order:2" and d["deduplicated"], d
        st, _, d = E.req("POST", "/push", {"topic": q, "bizkey": "order-1",
                                           "delay": 5}, key=key)
        assert st == 200 and d["id"] == a["id"] and d["deduplicated"], d
    # New pushes are refused and make nothing.
    for body in [{"delay_ms": 60000}, {"delay_ms": 60000,
                                       "bizkey": "order-3"}]:
        expect_error(E.req("POST", jobs, body, key=key), 429,
                     "quota_exceeded")
    for body in [{"topic": q, "id": "order:4"}, {"topic": q},
                 {"topic": q, "bizkey": "order-5"}]:
        expect_error(E.req("POST", "/push", body, key=key), 429,
                     "quota_exceeded")
    assert _pending(key, q) == 3
    for bk in ("order-3", "order-5"):
        expect_error(E.req("DELETE", "/v1/topics/%s/bizkeys/%s" % (q, bk),
                           key=key), 404, "job_not_found")
    expect_error(E.req("GET", "/v1/jobs/order:4", key=key), 404)
    # A finished job's bizkey is free again: a new job, refused.
    assert E.req("DELETE", "/v1/jobs/" + b["id"], key=key)[0] == 204
    E.push(key, q, {"n": 3}, delay_ms=60000)
    assert E.req("DELETE", "/v1/jobs/" + a["id"], key=key)[0] == 204
    E.push(key, q, {"n": 4}, delay_ms=60000)
    expect_error(E.req("POST", jobs, {"delay_ms": 60000,
                                      "bizkey": "order-1"}, key=key),
                 429, "quota_exceeded")


@t.test("a batch at the quota: its duplicates 200 and take no room; its "
        "new jobs 429 each when they do not fit (the batch 200), made "
        "when they do")
def _():
    name, key = E.tenant(max_pending=4)
    q = E.topic(key)["name"]
    path = "/v1/topics/%s/jobs:batch" % q
    first = [{"delay_ms": 60000, "bizkey": "bk%d" % i, "body": i}
             for i in range(3)]
    st, _, b = E.req("POST", path, {"jobs": first}, key=key)
    assert st == 200 and [r["status"] for r in b["results"]] == \
        [201] * 3, b
    ids = [r["id"] for r in b["results"]]
    E.push(key, q, {"n": 9}, delay_ms=60000)
    assert _pending(key, q) == 4
    # The whole batch again: every job the duplicate it is.
    st, _, b = E.req("POST", path, {"jobs": first}, key=key)
    assert st == 200, b
    assert [(r["status"], r["id"], r["deduplicated"])
            for r in b["results"]] == [(200, i, True) for i in ids], b
    # Duplicates and new jobs: the new ones are refused one by one.
    mixed = [first[1], {"delay_ms": 60000, "bizkey": "bk7"},
             {"delay_ms": 60000}, first[0]]
    st, _, b = E.req("POST", path, {"jobs": mixed}, key=key)
    assert st == 200, b
    res = b["results"]
    assert [r["status"] for r in res] == [200, 429, 429, 200], b
    assert res[0]["id"] == ids[1] and res[3]["id"] == ids[0], b
    for r in (res[1], res[2]):
        assert r["error"]["code"] == "quota_exceeded" and "id" not in r, r
    assert _pending(key, q) == 4
    expect_error(E.req("DELETE", "/v1/topics/%s/bizkeys/bk7" % q,
                       key=key), 404, "job_not_found")
    # Only new jobs: refused whole, as before.
    expect_error(E.req("POST", path, {"jobs": mixed[1:3]}, key=key), 429,
                 "quota_exceeded")
    # Room for the new job once the duplicates take none.
    assert E.req("DELETE", "/v1/jobs/" + ids[2], key=key)[0] == 204
    st, _, b = E.req("POST", path, {"jobs": mixed}, key=key)
    assert st == 200, b
    assert [r["status"] for r in b["results"]] == [200, 429, 429, 200], b
    st, _, b = E.req("POST", path, {"jobs": mixed[:2] + mixed[3:]},
                     key=key)
    assert st == 200, b
    assert [r["status"] for r in b["results"]] == [200, 201, 200], b
    assert _pending(key, q) == 4


@t.test("a batch at the quota: jobs sharing a bizkey take the room of one "
        "(the first made, the rest its duplicates), and no more is given "
        "back after the push")
def _():
    name, key = E.tenant(max_pending=3)
    q = E.topic(key)["name"]
    path = "/v1/topics/%s/jobs:batch" % q
    E.push(key, q, {"n": 1}, delay_ms=60000)
    E.push(key, q, {"n": 2}, delay_ms=60000)
    # Room for one: three jobs of one bizkey are one new job.
    same = [{"delay_ms": 60000, "bizkey": "r1", "body": i} for i in range(3)]
    st, _, b = E.req("POST", path, {"jobs": same}, key=key)
    assert st == 200, b
    res = b["results"]
    assert [r["status"] for r in res] == [201, 200, 200], b
    assert res[1]["id"] == res[0]["id"] == res[2]["id"], b
    assert res[1]["deduplicated"] and res[2]["deduplicated"], b
    assert _pending(key, q) == 3
    # The repeats were given no room, so none is given back: still full.
    expect_error(E.req("POST", "/v1/topics/%s/jobs" % q,
                       {"delay_ms": 60000}, key=key), 429, "quota_exceeded")
    assert E.req("DELETE", "/v1/jobs/" + res[0]["id"], key=key)[0] == 204
    # Two bizkeys are two new jobs: over the room of one, refused whole.
    two = [{"delay_ms": 60000, "bizkey": "r2"},
           {"delay_ms": 60000, "bizkey": "r3"},
           {"delay_ms": 60000, "bizkey": "r2"}]
    expect_error(E.req("POST", path, {"jobs": two}, key=key), 429,
                 "quota_exceeded")
    for bk in ("r2", "r3"):
        expect_error(E.req("DELETE", "/v1/topics/%s/bizkeys/%s" % (q, bk),
                           key=key), 404, "job_not_found")
    st, _, b = E.req("POST", path, {"jobs": [two[0], two[2]]}, key=key)
    assert st == 200, b
    assert [r["status"] for r in b["results"]] == [201, 200], b
    assert _pending(key, q) == 3


@t.test("DELETE a tenant: its keys stop working; 409 while it has jobs")
def _():
    name, key = E.tenant()
    q = E.topic(key)["name"]
    E.push(key, q, {"x": 1}, delay_ms=60000)
    expect_error(E.admin("DELETE", "/v1/tenants/" + name), 409,
                 "tenant_not_empty")
    expect_error(E.admin("DELETE", "/v1/tenants/%s?force=maybe" % name),
                 400, "invalid_field", "force")
    st, _, _ = E.admin("DELETE", "/v1/tenants/%s?force=true" % name)
    assert st == 204
    expect_error(E.req("GET", "/v1/topics", key=key), 401)
    expect_error(E.admin("GET", "/v1/tenants/" + name), 404)
    expect_error(E.admin("DELETE", "/v1/tenants/" + name), 404)
    # The name can be taken again, with fresh keys and no old topics.
    st, _, b = E.admin("POST", "/v1/tenants", {"name": name})
    assert st == 201
    st, _, tl = E.req("GET", "/v1/topics", key=b["api_key"])
    assert st == 200 and tl["topics"] == [], tl
    n2, k2 = E.tenant()
    assert E.admin("DELETE", "/v1/tenants/" + n2)[0] == 204


def _reserve(key, q):
    def once():
        r = E.req("GET", "/v1/topics/%s/reserve?wait_ms=1000" % q, key=key)
        return r if r[0] == 200 else None
    return harness.wait_for(once, what="a job to reserve")[2]


@t.test("DELETE ?force=true: a tenant made again with the name starts empty")
def _():
    name, key = E.tenant(max_pending=4)
    q = E.topic(key, mode="pull", ttr_ms=60000)["name"]
    gone = E.topic(key, mode="pull")["name"]
    ids = [E.push(key, q, {"n": i})["id"] for i in range(3)]
    ids.append(E.push(key, gone, {"g": 1}, delay_ms=3600000)["id"])
    flight = _reserve(key, q)
    # A topic deleted first leaves nothing behind either.
    st, _, _ = E.req("DELETE", "/v1/topics/%s?force=true" % gone, key=key)
    assert st == 204
    expect_error(E.admin("DELETE", "/v1/tenants/%s?force=maybe" % name),
                 400, "invalid_field", "force")
    g = E.tenant_when_ready(name, 2)
    assert g["counts"]["in_flight"] == 1, g
    st, _, _ = E.admin("DELETE", "/v1/tenants/%s?force=true" % name)
    assert st == 204
    st, _, b = E.admin("POST", "/v1/tenants",
                       {"name": name, "max_pending": 4})
    assert st == 201, b
    k2 = b["api_key"]
    st, _, g = E.admin("GET", "/v1/tenants/" + name)
    assert st == 200 and all(v == 0 for v in g["counts"].values()), g
    for jid in ids:
        expect_error(E.req("GET", "/v1/jobs/" + jid, key=k2), 404,
                     "job_not_found")
    for t_ in (q, gone):
        E.topic(k2, name=t_, mode="pull")
        st, _, b = E.req("GET", "/v1/topics/%s/reserve?wait_ms=300" % t_,
                         key=k2)
        assert st == 204, (st, b)
    expect_error(E.req("POST", "/v1/jobs/%s/ack" % flight["id"],
                       {"token": flight["token"]}, key=k2), 404)
    # The whole quota is the new tenant's.
    jobs = [{"delay_ms": 60000, "body": i} for i in range(4)]
    st, _, b = E.req("POST", "/v1/topics/%s/jobs:batch" % q,
                     {"jobs": jobs}, key=k2)
    assert st == 200 and all(r["status"] == 201 for r in b["results"]), b
    # A plain delete finds it empty once those are cancelled.
    for r in b["results"]:
        assert E.req("DELETE", "/v1/jobs/" + r["id"], key=k2)[0] == 204
    assert E.admin("DELETE", "/v1/tenants/" + name)[0] == 204


@t.test("an empty admin_key disables the admin API (401)")
def _():
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config={"admin_key": ""}) as d:
        st, _, b = d.request("GET", "/v1/tenants", key="")
        assert st == 401, b
        st, _, b = d.request("GET", "/v1/tenants", key="anything")
        assert st == 401, b


@t.test("limits.rate: a key over its rate gets 429 rate_limited")
def _():
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config={"limits": {"rate": 3}}) as d:
        d.wait_ready()
        st, _, b = d.admin("POST", "/v1/tenants", {"name": "rl"})
        key = b["api_key"]
        codes = [d.request("GET", "/v1/topics", key=key)[0]
                 for _ in range(10)]
        assert codes[0] == 200 and 429 in codes, codes
        st, h, b = d.request("GET", "/v1/topics", key=key)
        if st == 429:
            assert b["error"]["code"] == "rate_limited", b
            assert int(h["Retry-After"]) >= 1
        # The admin key is not limited.
        assert all(d.admin("GET", "/v1/tenants")[0] == 200
                   for _ in range(10))


E.stop()
t.done()
