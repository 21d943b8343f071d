#!/usr/bin/env python3
"""test_dashboard_api.py - what the dashboard stands on, without a browser:
its static files (where they are found, content types, cache headers, no
path traversal), and the JSON routes it reads (per-topic stats, the
tenant's overview, whoami, the schedule check), tenant isolation on each,
and per-minute stats that add up across two instances.
"""

import os
import socket
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, expect_error, unique  # noqa: E402

t = harness.Tap()
E = Env()
NAME, KEY = E.tenant()
OTHER, OKEY = E.tenant()
WEB = os.path.join(harness.srcdir(), "web")


def raw_get(env, target):
    """A request line sent as is (no client normalisation): (status, body)."""
    s = socket.create_connection((env.d.host, env.d.port), 5)
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                   % target).encode())
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    finally:
        s.close()
    head, _, body = out.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@t.test("GET / serves web/index.html from the source tree when uninstalled")
def _():
    st, h, body = E.req("GET", "/")
    assert st == 200, (st, body)
    with open(os.path.join(WEB, "index.html"), "rb") as f:
        assert body == f.read()
    assert h["Content-Type"] == "text/html; charset=utf-8", h
    assert h["Cache-Control"] == "no-cache" and h["ETag"], h
    assert h["X-Content-Type-Options"] == "nosniff", h
    csp = h["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp, csp
    assert h["X-Frame-Options"] == "DENY", h
    E.d.wait_log(r"dashboard: files from \S*/web \(the source tree")


@t.test("scripts and styles with their types; ETag revalidation is 304")
def _():
    for name, ctype in (("app.js", "text/javascript; charset=utf-8"),
                        ("style.css", "text/css; charset=utf-8")):
        st, h, body = E.req("GET", "/static/" + name)
        assert st == 200 and h["Content-Type"] == ctype, (st, h)
        with open(os.path.join(WEB, name), "rb") as f:
            assert body == f.read()
        st, h2, body = E.req("GET", "/static/" + name,
                             headers={"If-None-Match": h["ETag"]})
        assert st == 304 and body == b"" and h2["ETag"] == h["ETag"], st
        st, _, _ = E.req("GET", "/static/" + name,
                         headers={"If-None-Match": '"other"'})
        assert st == 200


@t.test("no path traversal, no hidden or unlisted files")
def _():
    bad = ["/static/..", "/static/.gitignore", "/static/..%2fMakefile.am",
           "/static/%2e%2e%2fMakefile.am", "/static/%2e%2e/Makefile.am",
           "/static/../Makefile.am", "/static/../../etc/passwd",
           "/static/web/index.html", "/static/app.js%00.css",
           "/static/Makefile.am", "/static/index.html.bak",
           "/static/%2fetc%2fpasswd", "/static/..%5cMakefile.am",
           "/static/nothere.js", "/static/", "/static"]
    for target in bad:
        st, body = raw_get(E, target)
        assert st in (404, 400), (target, st, body[:200])
        assert b"retryd" not in body.lower() or b"not_found" in body, \
            (target, body[:200])
        assert b"AM_CPPFLAGS" not in body and b"root:" not in body, target


@t.test("web.dir: a directory of one's own; links and directories refused")
def _():
    d = harness.mkdtemp("retryd-bb-web-")
    with open(os.path.join(d, "index.html"), "w") as f:
        f.write("<p>custom</p>")
    with open(os.path.join(d, "x.js"), "w") as f:
        f.write("1;")
    os.symlink("/etc/passwd", os.path.join(d, "link.js"))
    os.symlink(os.path.join(d, "x.js"), os.path.join(d, "alias.js"))
    os.mkdir(os.path.join(d, "dir.css"))
    G = Env(config={"web": {"dir": d}})
    try:
        st, _, body = G.req("GET", "/")
        assert st == 200 and body == b"<p>custom</p>", (st, body)
        st, _, body = G.req("GET", "/static/x.js")
        assert st == 200 and body == b"1;"
        for name in ("link.js", "alias.js", "dir.css", "app.js"):
            st, _, body = G.req("GET", "/static/" + name)
            assert st == 404 and body["error"]["code"] == "not_found", \
                (name, st, body)
        G.d.wait_log(r"dashboard: files from \S+ \(web.dir\)")
        os.unlink(os.path.join(d, "index.html"))
        st, _, body = G.req("GET", "/")
        assert st == 404 and body["error"]["code"] == "not_found", body
    finally:
        G.stop()


def topic_with(script, **conf):
    rcv = harness.Receiver(script=script)
    q = unique("q")
    c = {"callback_url": rcv.url("/hook")}
    c.update(conf)
    E.topic(KEY, q, **c)
    return rcv, q


def stats(env, key, topic, query=""):
    st, _, b = env.req("GET", "/v1/topics/%s/stats%s" % (topic, query),
                       key=key)
    assert st == 200, (st, b)
    return b


@t.test("topic stats: deliveries, failures and lateness of the last hour")
def _():
    rcv, q = topic_with("200")
    bad, qf = topic_with("500", retry_schedule="<0,0>")
    for i in range(4):
        E.push(KEY, q, {"i": i})
    E.push(KEY, qf, {"x": 1})
    rcv.wait_count(4)
    b = harness.wait_for(lambda: (lambda s: s if s["total"]["delivered"] == 4
                                  else None)(stats(E, KEY, q)),
                         what="4 deliveries in the stats")
    assert len(b["minutes"]) == 60 and b["minute_ms"] == 60000, b
    starts = [m["start_ms"] for m in b["minutes"]]
    assert starts == sorted(starts) and starts[-1] <= b["now_ms"] < \
        starts[-1] + 60000, starts[-3:]
    assert sum(m["delivered"] for m in b["minutes"]) == 4
    assert b["total"]["failed"] == 0 and b["total"]["started"] == 4, b
    p50, p99 = b["total"]["lateness_p50_ms"], b["total"]["lateness_p99_ms"]
    assert isinstance(p50, int) and isinstance(p99, int) and \
        0 <= p50 <= p99, b["total"]
    assert b["lateness_bounds_ms"][0] == 10, b
    f = harness.wait_for(lambda: (lambda s: s if s["total"]["failed"] == 2
                                  else None)(stats(E, KEY, qf)),
                         what="2 failures in the stats")
    assert f["total"]["delivered"] == 0, f
    assert len(stats(E, KEY, q, "?minutes=5")["minutes"]) == 5
    for bad_q in ("?minutes=0", "?minutes=121", "?minutes=x"):
        expect_error(E.req("GET", "/v1/topics/%s/stats%s" % (q, bad_q),
                           key=KEY), 400, field="minutes")
    rcv.stop()
    bad.stop()


@t.test("a deleted topic's or tenant's stats go with it: made again with "
        "the name, it starts with none")
def _():
    name, key = E.tenant()
    rcv = harness.Receiver(script="200")
    topics = [unique("q"), unique("q")]
    for q in topics:
        E.topic(key, q, callback_url=rcv.url("/hook"))
        E.push(key, q, {"q": q})
    rcv.wait_count(2)

    def delivered(k, q):
        return stats(E, k, q)["total"]["delivered"]

    def overview(k):
        st, _, b = E.req("GET", "/v1/stats", key=k)
        assert st == 200, (st, b)
        return {x["name"]: x["last_hour"]["delivered"] for x in b["topics"]}
    for q in topics:
        harness.wait_for(lambda: delivered(key, q) == 1,
                         what="the delivery in the stats")
    st, _, _ = E.req("DELETE", "/v1/topics/" + topics[0], key=key)
    assert st == 204, st
    E.topic(key, topics[0], callback_url=rcv.url("/hook"))
    assert delivered(key, topics[0]) == 0
    assert delivered(key, topics[1]) == 1
    st, _, _ = E.admin("DELETE", "/v1/tenants/" + name)
    assert st == 204, st
    st, _, b = E.admin("POST", "/v1/tenants", {"name": name})
    assert st == 201, (st, b)
    key = b["api_key"]
    for q in topics:
        E.topic(key, q, mode="pull")
        assert delivered(key, q) == 0
    assert overview(key) == {q: 0 for q in topics}, overview(key)
    rcv.stop()


@t.test("isolation: another tenant's topic is 404; /v1/stats shows only "
        "one's own")
def _():
    rcv, q = topic_with("200")
    expect_error(E.req("GET", "/v1/topics/%s/stats" % q, key=OKEY), 404,
                 "topic_not_found")
    expect_error(E.req("GET", "/v1/topics/nope/stats", key=KEY), 404,
                 "topic_not_found")
    expect_error(E.req("GET", "/v1/topics/%s/stats" % q), 401)
    st, _, mine = E.req("GET", "/v1/stats", key=KEY)
    assert st == 200 and mine["tenant"] == NAME, mine
    names = [x["name"] for x in mine["topics"]]
    assert q in names and names == sorted(names), names
    row = [x for x in mine["topics"] if x["name"] == q][0]
    assert row["mode"] == "push" and set(row["counts"]) == {
        "scheduled", "ready", "in_flight", "retrying", "delivered", "dead",
        "cancelled"}, row
    assert set(row["last_hour"]) >= {"delivered", "failed",
                                     "lateness_p50_ms"}, row
    st, _, theirs = E.req("GET", "/v1/stats", key=OKEY)
    assert st == 200 and theirs["topics"] == [], theirs
    st, _, adm = E.admin("GET", "/v1/stats", headers={"X-Tenant": NAME})
    assert st == 200 and q in [x["name"] for x in adm["topics"]], adm
    rcv.stop()


@t.test("whoami: a tenant key, the admin key, with and without X-Tenant")
def _():
    st, _, b = E.req("GET", "/v1/whoami", key=KEY)
    assert st == 200 and b == {"tenant": NAME, "admin": False}, b
    st, _, b = E.req("GET", "/v1/whoami", key=KEY,
                     headers={"X-Tenant": OTHER})
    assert st == 200 and b == {"tenant": NAME, "admin": False}, b
    st, _, b = E.admin("GET", "/v1/whoami")
    assert st == 200 and b == {"tenant": None, "admin": True}, b
    st, _, b = E.admin("GET", "/v1/whoami", headers={"X-Tenant": OTHER})
    assert st == 200 and b == {"tenant": OTHER, "admin": True}, b
    expect_error(E.admin("GET", "/v1/whoami",
                         headers={"X-Tenant": "nobody"}), 404,
                 "tenant_not_found")
    expect_error(E.req("GET", "/v1/whoami"), 401, "unauthorized")
    expect_error(E.req("GET", "/v1/whoami", key="rk_" + "x" * 43), 401)


def check(body, key=KEY):
    return E.req("POST", "/v1/schedules:validate", body, key=key)


@t.test("schedule check: canonical form, or valid false with where and why")
def _():
    st, _, b = check({"retry_schedule": "<0, 120s,1h,500ms>"})
    assert st == 200 and b["valid"] is True, b
    assert b["retry_schedule"] == "<0,2m,1h,500ms>", b
    assert b["waits_ms"] == [0, 120000, 3600000, 500], b
    assert b["attempt_offsets_ms"] == [0, 120000, 3720000, 3720500], b
    assert b["attempts"] == 4 and b["total_ms"] == 3720500, b
    st, _, b = check({"retry_schedule": [0, 1000, 60000]})
    assert st == 200 and b["retry_schedule"] == "<0,1s,1m>", b
    for bad, pos in (("<0,2m,x>", 6), ("<0,2m", None), ("", None),
                     ("<0,2y>", None), ("<1000d>", None)):
        st, _, b = check({"retry_schedule": bad})
        assert st == 200 and b["valid"] is False, (bad, b)
        e = b["error"]
        assert e["code"] == "invalid_schedule" and e["reason"] and \
            e["field"] == "retry_schedule", b
        assert isinstance(e["position"], int), b
        if pos is not None:
            assert e["position"] == pos, (bad, b)
    for bad, pos in (([0, "1s"], 1), ([], 0), ([0, -5], 1)):
        st, _, b = check({"retry_schedule": bad})
        assert st == 200 and b["valid"] is False and \
            b["error"]["position"] == pos, (bad, b)
    expect_error(check({}), 400, "missing_field", "retry_schedule")
    expect_error(check({"retry_schedule": 5}), 400, "invalid_field",
                 "retry_schedule")
    expect_error(check({"retry_schedule": "<0>", "x": 1}), 400,
                 "unknown_field")
    expect_error(E.req("POST", "/v1/schedules:validate", "not json",
                       key=KEY), 400, "invalid_json")
    expect_error(E.req("POST", "/v1/schedules:validate",
                       {"retry_schedule": "<0>"}), 401)


@t.test("stats add up across instances sharing Redis")
def _():
    B = harness.Retryd(redis=E.redis, admin_key=E.d.admin_key,
                       config={"scheduler": {"lease": "1s"}})
    B.wait_ready()
    try:
        rcv, q = topic_with("200")
        n = 12
        for i in range(n):
            E.push(KEY, q, {"i": i}, bizkey="k%d" % i)
        rcv.wait_count(n)
        for d in (E.d, B):
            harness.wait_for(
                lambda: d.request("GET", "/v1/topics/%s/stats" % q,
                                  key=KEY)[2]["total"]["delivered"] == n,
                what="both instances to count %d deliveries" % n)
        st, _, b = B.request("GET", "/v1/stats", key=KEY)
        assert st == 200 and q in [x["name"] for x in b["topics"]], b
        rcv.stop()
    finally:
        B.stop()


E.stop()
t.done()
