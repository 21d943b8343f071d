#!/usr/bin/env python3
"""test_api_topics.py - topics: create/replace/read/list/delete, the signing
secret, and every bad input of PUT /v1/topics/{topic}."""

import contextlib
import os
import sqlite3
import sys
import threading

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, expect_error, signature_ok, unique  # noqa

t = harness.Tap()
E = Env()
NAME, KEY = E.tenant()
URL = "http://127.0.0.1:9/hook"


def put(name, body, expect=None):
    r = E.req("PUT", "/v1/topics/" + name, body, key=KEY)
    if expect is not None:
        assert r[0] == expect, r
    return r


@t.test("PUT creates (201) with defaults and a secret; PUT again is 200")
def _():
    q = unique("q")
    st, _, b = put(q, {"callback_url": URL})
    assert st == 201, b
    assert b["name"] == q and b["mode"] == "push" and b["callback_url"] == URL
    assert b["retry_schedule"] == "<0,0,2m,10m,10m,1h,2h,6h,15h>", b
    assert b["timeout_ms"] == 10000 and b["ttr_ms"] == 30000, b
    assert b["max_in_flight"] == 256 and b["headers"] == {}, b
    assert b["secret"].startswith("whsec_"), b
    st, _, b2 = put(q, {"callback_url": URL + "2", "timeout_ms": 5000,
                        "retry_schedule": [0, 1000, 60000],
                        "headers": {"X-Foo": "bar"}, "max_in_flight": 7})
    assert st == 200, b2
    assert b2["secret"] == b["secret"], "PUT must keep the secret"
    assert b2["created_ms"] == b["created_ms"], b2
    assert b2["retry_schedule"] == "<0,1s,1m>", b2
    assert b2["headers"] == {"X-Foo": "bar"} and b2["max_in_flight"] == 7
    st, _, g = E.req("GET", "/v1/topics/" + q, key=KEY)
    assert st == 200 and g["timeout_ms"] == 5000 and g["secret"], g
    assert g["counts"] == {"scheduled": 0, "ready": 0, "in_flight": 0,
                           "retrying": 0, "delivered": 0, "dead": 0,
                           "cancelled": 0}, g


@t.test("mode: push with a callback_url, else pull; push needs a URL")
def _():
    st, _, b = put(unique("q"), {})
    assert st == 201 and b["mode"] == "pull" and b["callback_url"] is None
    st, _, b = put(unique("q"), {"mode": "pull", "ttr_ms": 5000})
    assert st == 201 and b["ttr_ms"] == 5000
    expect_error(put(unique("q"), {"mode": "push"}), 400, "missing_field",
                 "callback_url")
    expect_error(put(unique("q"), {"mode": "fast"}), 400, "invalid_field",
                 "mode")
    expect_error(put(unique("q"), {"mode": 1}), 400, "invalid_field", "mode")


@t.test("GET /v1/topics lists the tenant's topics without secrets")
def _():
    n, k = E.tenant()
    for q in ("b-topic", "a-topic"):
        st, _, _ = E.req("PUT", "/v1/topics/" + q, {}, key=k)
        assert st == 201
    st, _, b = E.req("GET", "/v1/topics", key=k)
    assert st == 200 and [x["name"] for x in b["topics"]] == \
        ["a-topic", "b-topic"], b
    assert all("secret" not in x for x in b["topics"])


@t.test("bad callback URLs are 400 invalid_url")
def _():
    for bad in ["ftp://x/", "http://user:pw@example.com/", "not a url",
                "http://", "http://example.com:0/", "", "h" * 5000]:
        r = put(unique("q"), {"callback_url": bad})
        assert r[0] == 400, (bad, r)
        assert r[2]["error"]["field"] == "callback_url", r
    expect_error(put(unique("q"), {"callback_url": 5}), 400, "invalid_field",
                 "callback_url")


@t.test("private targets are refused unless allowed")
def _():
    with harness.RedisServer() as r, harness.Retryd(redis=r, config={
            "dispatcher": {"allow_private_targets": False}}) as d:
        d.wait_ready()
        st, _, b = d.admin("POST", "/v1/tenants", {"name": "p"})
        k = b["api_key"]
        for url in ["http://127.0.0.1:8080/x", "http://10.0.0.1/",
                    "http://169.254.169.254/latest", "http://[::1]/",
                    "http://localhost/"]:
            st, _, b = d.request("PUT", "/v1/topics/x",
                                 {"callback_url": url}, key=k)
            assert st == 400 and b["error"]["code"] == "invalid_url", \
                (url, b)
        st, _, b = d.request("PUT", "/v1/topics/x",
                             {"callback_url": "https://example.com/h"}, key=k)
        assert st == 201, b


@t.test("bad schedules are 400 invalid_schedule naming retry_schedule")
def _():
    for bad in ["<0,x>", "<>", "0,1s", "<-1>", [], [-1], ["1s"], [1.5],
                {"a": 1}, 5, "<400d>", [0] * 101, [10 ** 30],
                "<1,2,\u0000>"]:
        r = put(unique("q"), {"retry_schedule": bad})
        expect_error(r, 400, "invalid_schedule", "retry_schedule")


@t.test("numbers: wrong types, out of range, overflow are 400 naming them")
def _():
    for field, bads in [
            ("timeout_ms", [0, -1, "10", 1.5, 10 ** 20, 99999999999, None]),
            ("max_in_flight", [0, -5, 100001, "1", 2.0, 10 ** 40]),
            ("ttr_ms", [0, -1, "1000", 1e3, 2 ** 63, -2 ** 63 - 1])]:
        for bad in bads:
            if bad is None:
                continue
            expect_error(put(unique("q"), {field: bad}), 400,
                         "invalid_field", field)
    # null means "the default".
    st, _, b = put(unique("q"), {"timeout_ms": None})
    assert st == 201 and b["timeout_ms"] == 10000


@t.test("headers: reserved, bad names, bad values, too many: 400")
def _():
    bads = [{"webhook-id": "x"}, {"Retryd-Attempt": "1"},
            {"Content-Length": "3"}, {"Host": "h"}, {"a b": "x"},
            {"": "x"}, {"X-A": "a\r\nX-B: b"}, {"X-A": "a\nb"},
            {"X-A": "a\u0000b"}, {"X-A": 5}, {"X-A": None},
            {"X-%d" % i: "v" for i in range(33)}, ["X-A"], "X-A: b",
            {"X-A": "v" * 5000}, {"Transfer-Encoding": "chunked"},
            {"Connection": "close"}, {"X-\u00e9": "v"}]
    for h in bads:
        r = put(unique("q"), {"headers": h})
        st, _, b = r
        assert st == 400 and b["error"]["code"] == "invalid_header", (h, b)
        assert b["error"]["field"].startswith("headers"), b
    # A bad name is named (as much of it as is safe to show).
    for name, field in [("a b", "headers.a b"), ("", "headers."),
                        ("X-\u00e9", "headers.X-\u00e9"),
                        ('a"b', "headers.a"), ("x\ty", "headers.x"),
                        ("\u00e9" * 100, "headers." + "\u00e9" * 32),
                        ("a" * 300, "headers." + "a" * 64)]:
        q = unique("q")
        expect_error(put(q, {"headers": {"X-A": "v", name: "v"}}),
                     400, "invalid_header", field)
        assert E.req("GET", "/v1/topics/" + q, key=KEY)[0] == 404, q
    st, _, b = put(unique("q"), {"headers": {"X-%d" % i: "v"
                                             for i in range(32)}})
    assert st == 201 and len(b["headers"]) == 32


@t.test("topic names: bad ones are 400 invalid_name (%00 stays undecoded)")
def _():
    for bad in ["a%20b", "a%00b", "%00", "x" * 129, "caf%C3%A9", "a*b",
                "%FF", "a%0D%0Ab"]:
        expect_error(E.req("PUT", "/v1/topics/" + bad, {}, key=KEY), 400,
                     "invalid_name", "topic")
        expect_error(E.req("GET", "/v1/topics/" + bad, key=KEY), 400,
                     "invalid_name", "topic")
    # An encoded slash splits the path: no such route.
    expect_error(E.req("PUT", "/v1/topics/a%2Fb", {}, key=KEY), 404,
                 "not_found")
    assert put("x" * 128, {})[0] in (200, 201)
    assert put("A.b_c-9", {})[0] in (200, 201)


@t.test("unknown members and malformed bodies are 400")
def _():
    expect_error(put(unique("q"), {"callback": URL}), 400, "unknown_field",
                 "callback")
    expect_error(E.req("PUT", "/v1/topics/x", b"{", key=KEY), 400,
                 "invalid_json")
    expect_error(E.req("PUT", "/v1/topics/x", b"[]", key=KEY), 400,
                 "invalid_json")
    expect_error(E.req("PUT", "/v1/topics/x", b"", key=KEY), 400,
                 "invalid_json")


@t.test("GET/DELETE unknown topic: 404 topic_not_found")
def _():
    q = unique("none")
    for m, p in [("GET", ""), ("DELETE", ""), ("POST", "/secret"),
                 ("GET", "/dead"), ("POST", "/dead:redrive"),
                 ("DELETE", "/bizkeys/b1")]:
        expect_error(E.req(m, "/v1/topics/" + q + p, key=KEY), 404,
                     "topic_not_found")


@t.test("DELETE: 204, then gone; 409 with unfinished jobs unless force")
def _():
    q = E.topic(KEY)["name"]
    st, _, _ = E.req("DELETE", "/v1/topics/" + q, key=KEY)
    assert st == 204
    expect_error(E.req("GET", "/v1/topics/" + q, key=KEY), 404)
    q = E.topic(KEY)["name"]
    j = E.push(KEY, q, {"x": 1}, delay_ms=3600000)
    expect_error(E.req("DELETE", "/v1/topics/" + q, key=KEY), 409,
                 "topic_not_empty")
    st, _, _ = E.req("DELETE", "/v1/jobs/" + j["id"], key=KEY)
    assert st == 204
    st, _, _ = E.req("DELETE", "/v1/topics/" + q, key=KEY)
    assert st == 204
    q = E.topic(KEY)["name"]
    E.push(KEY, q, {"x": 1}, delay_ms=3600000)
    st, _, _ = E.req("DELETE", "/v1/topics/%s?force=true" % q, key=KEY)
    assert st == 204


ZERO = {"scheduled": 0, "ready": 0, "in_flight": 0, "retrying": 0,
        "delivered": 0, "dead": 0, "cancelled": 0}


def reserve_until(key, q):
    """Reserve a job of pull topic q (it becomes ready through the timer)."""
    def once():
        r = E.reserve(key, q, 1000)
        return r if r[0] == 200 else None
    return harness.wait_for(once, what="a job to reserve")[2]


@t.test("DELETE ?force=true takes every job of a pull topic out of Redis")
def _():
    name, key = E.tenant()
    q = E.topic(key, mode="pull", retry_schedule="<0>", ttr_ms=60000)["name"]
    ids = [E.push(key, q, {"n": i})["id"] for i in range(4)]
    flight = reserve_until(key, q)
    dead = reserve_until(key, q)
    st, _, b = E.req("POST", "/v1/jobs/%s/nack" % dead["id"],
                     {"token": dead["token"]}, key=key)
    assert st == 200 and b["state"] == "dead", b
    ids.append(E.push(key, q, {"late": 1}, delay_ms=3600000)["id"])
    ids.append(E.push(key, q, {"biz": 1}, bizkey="order-1",
                      delay_ms=3600000)["id"])
    g = E.tenant_when_ready(name, 2)
    assert g["counts"]["in_flight"] == 1, g
    # Bad input changes nothing.
    expect_error(E.req("DELETE", "/v1/topics/%s?force=maybe" % q, key=key),
                 400, "invalid_field", "force")
    st, _, g = E.req("GET", "/v1/topics/" + q, key=key)
    assert st == 200 and g["counts"]["scheduled"] == 2, g
    st, _, _ = E.req("DELETE", "/v1/topics/%s?force=true" % q, key=key)
    assert st == 204
    for jid in ids:
        expect_error(E.req("GET", "/v1/jobs/" + jid, key=key), 404,
                     "job_not_found")
    st, _, g = E.admin("GET", "/v1/tenants/" + name)
    assert st == 200 and g["counts"] == ZERO, g
    expect_error(E.req("POST", "/v1/jobs/%s/ack" % flight["id"],
                       {"token": flight["token"]}, key=key), 404)
    # The same name again: a topic with nothing in it.
    E.topic(key, name=q, mode="pull", retry_schedule="<0>")
    st, _, g = E.req("GET", "/v1/topics/" + q, key=key)
    assert st == 200 and g["counts"] == ZERO, g
    st, _, b = E.reserve(key, q, 300)
    assert st == 204, (st, b)
    st, _, b = E.req("GET", "/v1/topics/%s/dead" % q, key=key)
    assert st == 200 and b["jobs"] == [], b
    j = E.push(key, q, {"biz": 2}, bizkey="order-1")
    assert j["id"] not in ids and not j.get("deduplicated"), j
    assert reserve_until(key, q)["id"] == j["id"]
    # Nothing left to stop a plain delete once that job is done.
    st, _, _ = E.req("DELETE", "/v1/jobs/" + j["id"], key=key)
    assert st == 204
    st, _, _ = E.req("DELETE", "/v1/topics/" + q, key=key)
    assert st == 204


@t.test("DELETE ?force=true of a push topic: its jobs are never delivered")
def _():
    rcv = harness.Receiver(script="200")
    try:
        name, key = E.tenant()
        q = E.topic(key, callback_url=rcv.url("/hook"),
                    retry_schedule="<0>")["name"]
        old = [E.push(key, q, {"old": i}, delay_ms=1000)["id"]
               for i in range(3)]
        st, _, _ = E.req("DELETE", "/v1/topics/%s?force=true" % q, key=key)
        assert st == 204
        E.topic(key, name=q, callback_url=rcv.url("/hook"),
                retry_schedule="<0>")
        new = E.push(key, q, {"new": 1}, delay_ms=1500)["id"]
        rcv.wait_count(1)
        harness.wait_for(lambda: E.job(key, new)["state"] == "delivered",
                         what="the new job to be delivered")
        got = [r.headers["webhook-id"] for r in rcv.requests]
        assert got == [new], (got, old)
        st, _, g = E.req("GET", "/v1/topics/" + q, key=key)
        assert g["counts"]["delivered"] == 1, g
        assert sum(g["counts"].values()) == 1, g
    finally:
        rcv.stop()


@t.test("DELETE ?force=true with callbacks in flight: their outcomes are "
        "not recorded, said at info level, not warned of one by one")
def _():
    rcv = harness.Receiver(script="hold=200")
    try:
        name, key = E.tenant()
        q = E.topic(key, callback_url=rcv.url("/hook"),
                    retry_schedule="<0>")["name"]
        for i in range(3):
            E.push(key, q, {"n": i})
        rcv.wait_count(3)
        mark = E.d.log_mark()
        st, _, _ = E.req("DELETE", "/v1/topics/%s?force=true" % q, key=key)
        assert st == 204
        rcv.release()
        harness.wait_for(lambda: E.d.log(mark).count(
            "outcome not recorded: the job is no longer in Redis") == 3,
            what="three outcomes not recorded")
        assert "cannot record the outcome" not in E.d.log(mark)
    finally:
        rcv.stop()


@t.test("POST /secret rotates; a given secret is taken; bad ones are 400")
def _():
    q = E.topic(KEY, callback_url=URL)
    st, _, b = E.req("POST", "/v1/topics/%s/secret" % q["name"], key=KEY)
    assert st == 200 and b["secret"] != q["secret"], b
    assert b["secret"].startswith("whsec_")
    mine = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="
    st, _, b = E.req("POST", "/v1/topics/%s/secret" % q["name"],
                     {"secret": mine}, key=KEY)
    assert st == 200 and b["secret"] == mine, b
    st, _, g = E.req("GET", "/v1/topics/" + q["name"], key=KEY)
    assert g["secret"] == mine
    for bad in ["whsec_!!!", "whsec_", "whsec_QUJD", 5, "x" * 200]:
        r = E.req("POST", "/v1/topics/%s/secret" % q["name"],
                  {"secret": bad}, key=KEY)
        expect_error(r, 400, None, "secret")
    st, _, b = put(unique("q"), {"secret": mine})
    assert st == 201 and b["secret"] == mine


@t.test("a PUT keeps a secret rotated a moment ago on another instance, a "
        "rotation keeps settings put there, and never brings back a topic "
        "deleted there")
def _():
    q = E.topic(KEY, callback_url=URL, ttr_ms=5000)["name"]
    path = "/v1/topics/" + q
    with harness.Retryd(redis=E.redis) as d2:
        d2.wait_ready()

        def here():
            """The topic as this instance reads it now (its registry
            cache holds it for a second)."""
            st, _, b = E.req("GET", path, key=KEY)
            assert st == 200, (st, b)
            return b
        here()
        st, _, rot = d2.request("POST", path + "/secret", key=KEY)
        assert st == 200, (st, rot)
        st, _, b = E.req("PUT", path, {"callback_url": URL, "ttr_ms": 6000},
                         key=KEY)
        assert st == 200 and b["secret"] == rot["secret"], (b, rot)
        assert b["ttr_ms"] == 6000, b
        # The other way round: settings put there, a rotation here.
        here()
        st, _, b = d2.request("PUT", path, {"callback_url": URL,
                                            "ttr_ms": 7000}, key=KEY)
        assert st == 200 and b["ttr_ms"] == 7000, (st, b)
        st, _, rot = E.req("POST", path + "/secret", key=KEY)
        assert st == 200 and rot["ttr_ms"] == 7000, (st, rot)
        for d in (E.d, d2):
            harness.wait_for(lambda: d.request("GET", path, key=KEY)[2].get(
                "secret") == rot["secret"], what="the last secret")
            g = d.request("GET", path, key=KEY)[2]
            assert g["ttr_ms"] == 7000, g
        # Deleted there: a rotation here finds no topic.
        here()
        assert d2.request("DELETE", path, key=KEY)[0] == 204
        expect_error(E.req("POST", path + "/secret", key=KEY), 404,
                     "topic_not_found")
        assert d2.request("GET", path, key=KEY)[0] == 404
        harness.wait_for(lambda: E.req("GET", path, key=KEY)[0] == 404,
                         what="the delete seen here")


@t.test("end to end: a push topic's callback arrives signed with its secret")
def _():
    rcv = harness.Receiver(script="200")
    try:
        q = E.topic(KEY, callback_url=rcv.url("/hook"),
                    headers={"X-Topic": "yes"}, retry_schedule="<0>")
        j = E.push(KEY, q["name"], {"hello": "world"},
                   headers={"X-Job": "1"})
        reqs = rcv.wait_count(1)
        rq = reqs[0]
        assert rq.body == b'{"hello":"world"}', rq.body
        assert rq.headers["webhook-id"] == j["id"]
        assert rq.headers["X-Topic"] == "yes" and rq.headers["X-Job"] == "1"
        assert rq.headers["retryd-tenant"] == NAME
        assert signature_ok(q["secret"], rq.headers, rq.body)
        harness.wait_for(lambda: E.job(KEY, j["id"])["state"] ==
                         "delivered", what="the job to be delivered")
        g = E.job(KEY, j["id"])
        assert len(g["attempts"]) == 1 and g["attempts"][0]["status"] == 200
    finally:
        rcv.stop()


@t.test("a JSON string body is sent as its content")
def _():
    rcv = harness.Receiver(script="200")
    try:
        q = E.topic(KEY, callback_url=rcv.url("/form"), retry_schedule="<0>",
                    headers={"Content-Type":
                             "application/x-www-form-urlencoded"})
        E.push(KEY, q["name"], "a=1&b=%C3%A9")
        rq = rcv.wait_count(1)[0]
        assert rq.body == b"a=1&b=%C3%A9", rq.body
        assert rq.headers["Content-Type"] == \
            "application/x-www-form-urlencoded"
    finally:
        rcv.stop()


@contextlib.contextmanager
def journal_daemon(threads, tenants):
    """A daemon with `threads` HTTP threads and an SQLite journal, and the
    tenants named: (redis, daemon, the journal's path, {tenant: key})."""
    path = "%s/j.db" % harness.mkdtemp()
    with harness.RedisServer() as r, harness.Retryd(redis=r, config={
            "http": {"threads": threads},
            "journal": {"url": "sqlite://" + path, "mode": "sync"}}) as d:
        d.wait_ready()
        keys = {}
        for name in tenants:
            st, _, b = d.admin("POST", "/v1/tenants", {"name": name})
            assert st == 201, b
            keys[name] = b["api_key"]
        yield r, d, path, keys


def in_thread(out, name, fn, *args, **kw):
    """fn(*args, **kw) started on a thread, its result in out[name]."""
    def run():
        out[name] = fn(*args, **kw)
    th = threading.Thread(target=run)
    th.start()
    return th


@contextlib.contextmanager
def journal_locked(path):
    """The journal's database locked for writing (every write waits, up
    to the journal's timeout, 2 s, then fails 503) while inside."""
    lock = sqlite3.connect(path, isolation_level=None, timeout=10)
    lock.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        lock.execute("ROLLBACK")
        lock.close()


@t.test("a topic's and a tenant's deletion wait off the HTTP thread")
def _():
    # One HTTP thread, and the journal's database locked: a deletion,
    # whose first step writes the journal, waits there.  Done on the
    # HTTP thread it would hold every other request of that thread; done
    # in the background, the thread answers the rest.
    with journal_daemon(1, ("del1", "del2")) as (r, d, path, keys):
        k = keys["del1"]
        d.request("PUT", "/v1/topics/big", {}, key=k)
        for i in range(3):
            st, _, j = d.request("POST", "/v1/topics/big/jobs",
                                 {"delay_ms": 3600000, "body": i}, key=k)
            assert st == 201, j
        done = {}
        for what, path_, key in (
                ("topic del1/big", "/v1/topics/big?force=true", k),
                ("tenant del2", "/v1/tenants/del2", d.admin_key)):
            out = {}
            mark = d.log_mark()
            with journal_locked(path):
                th = in_thread(out, "r", d.request, "DELETE", path_,
                               key=key)
                d.wait_log("api: %s: deleting" % what, since=mark)
                st, _, _ = d.request("GET", "/healthz")
                st2, _, _ = d.request("GET", "/v1/topics", key=k)
                pending = th.is_alive()
            th.join()
            assert st == 200 and st2 == 200, (st, st2)
            assert pending, "the deletion was answered before /healthz"
            # Released in time, deleted; else 503 and nothing changed.
            assert out["r"][0] in (204, 503), out["r"]
            if out["r"][0] == 503:
                assert out["r"][2]["error"]["code"] == \
                    "journal_unavailable", out["r"]
            done[what] = out["r"][0] == 204
        st, _, _ = d.request("GET", "/v1/topics/big", key=k)
        assert st == (404 if done["topic del1/big"] else 200), st
        st, _, _ = d.admin("GET", "/v1/tenants/del2")
        assert st == (404 if done["tenant del2"] else 200), st


@t.test("a change of another entry does not wait for a deletion")
def _():
    # The deletion of del1/big waits on the locked journal, holding its
    # entry's write lock.  A PUT of del3/x7 (whose name fell on the same
    # lock as del1/big when the locks were 64 stripes by a CRC-32 of the
    # name) takes its own lock: it writes the topic to Redis, then waits
    # for the journal in turn.
    with journal_daemon(2, ("del1", "del3")) as (r, d, path, keys):
        st, _, _ = d.request("PUT", "/v1/topics/big", {}, key=keys["del1"])
        assert st == 201, st
        out = {}
        mark = d.log_mark()
        with journal_locked(path):
            th1 = in_thread(out, "del", d.request, "DELETE",
                            "/v1/topics/big", key=keys["del1"])
            d.wait_log("api: topic del1/big: deleting", since=mark)
            th3 = in_thread(out, "put", d.request, "PUT", "/v1/topics/x7",
                            {}, key=keys["del3"])
            harness.wait_for(lambda: r.cmd("HEXISTS",
                                           "rd:{registry}:topics:del3",
                                           "x7") == 1,
                             what="del3/x7 written to Redis")
            deleting = th1.is_alive()
        th1.join()
        th3.join()
        assert deleting, "the deletion ended before the PUT got through"
        assert out["del"][0] in (204, 503), out["del"]
        assert out["put"][0] in (201, 503), out["put"]

E.stop()
t.done()
