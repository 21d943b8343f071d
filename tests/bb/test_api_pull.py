#!/usr/bin/env python3
"""test_api_pull.py - pull consumers: reserve (immediate and long-polled),
ack, nack, fencing tokens, the time to run, and 10,000 waiting consumers
held without a thread each."""

import json
import os
import resource
import selectors
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, expect_error, unique  # noqa: E402

t = harness.Tap()
E = Env(config={"http": {"threads": 2}, "limits": {"max_wait": "60s"}})
NAME, KEY = E.tenant()


def pull_topic(**kw):
    conf = {"mode": "pull"}
    conf.update(kw)
    return E.topic(KEY, **conf)["name"]


def reserve_until(q, wait_ms=1000):
    """Reserve until a job comes (jobs become ready through the timer)."""
    def once():
        r = E.reserve(KEY, q, wait_ms)
        return r if r[0] == 200 else None
    return harness.wait_for(once, what="a job to reserve")[2]


@t.test("reserve answers at once with a ready job and its token")
def _():
    q = pull_topic(ttr_ms=20000)
    j = E.push(KEY, q, {"task": 1}, priority=3)
    r = reserve_until(q)
    assert r["id"] == j["id"] and r["body"] == {"task": 1}, r
    assert r["token"] and r["attempt"] == 1 and r["ttr_ms"] == 20000, r
    assert r["state"] == "in_flight" and r["priority"] == 3, r
    assert r["deadline_ms"] >= int(time.time() * 1000) + 15000, r
    st, _, a = E.req("POST", "/v1/jobs/%s/ack" % r["id"],
                     {"token": r["token"]}, key=KEY)
    assert st == 200 and a["state"] == "delivered", a
    assert E.job(KEY, r["id"])["state"] == "delivered"
    expect_error(E.req("POST", "/v1/jobs/%s/ack" % r["id"],
                       {"token": r["token"]}, key=KEY), 409)


@t.test("an empty wait ends with 204 after wait_ms")
def _():
    q = pull_topic()
    t0 = time.monotonic()
    st, _, b = E.reserve(KEY, q, 300)
    dt = time.monotonic() - t0
    assert st == 204 and b == b"", (st, b)
    assert 0.25 <= dt < 5, dt
    st, _, _ = E.reserve(KEY, q, 0)
    assert st == 204


@t.test("a long-poll is answered when a job becomes ready")
def _():
    q = pull_topic()
    # Due in 1.5 s: the consumer parks first, then is woken for it.
    j = E.push(KEY, q, {"late": True}, delay_ms=1500)
    t0 = time.monotonic()
    st, _, r = E.reserve(KEY, q, 20000)
    dt = time.monotonic() - t0
    assert st == 200 and r["id"] == j["id"], (st, r)
    assert 1.0 <= dt < 10, dt
    # Several parked consumers, several jobs: each job reaches one.
    out = []

    def waiter():
        out.append(E.reserve(KEY, q, 20000))
    ths = [threading.Thread(target=waiter) for _ in range(5)]
    for th in ths:
        th.start()
    ids = {E.push(KEY, q, i, delay_ms=500)["id"] for i in range(5)}
    for th in ths:
        th.join(20)
    got = {r[2]["id"] for r in out if r[0] == 200}
    assert got == ids, (got, ids, [r[0] for r in out])


# Bodies a reserve answer copies as stored (plain JSON) and those it
# parses and prints again, side by side: each must come back as the job's
# own GET shows it, the value when the body is JSON, else the string.
BODIES = [
    {"a": [1, -2.5, 0, True, False, None, "x/y"], "b": {}, "c": []},
    {"esc": "q\"b\\s\n\t/"}, [[[[1]]]], "plain text", "", 42, -0.75,
    '{"a":1,}', "[1 2]", '{"a"}', "01", "-", "tru", "-0", '"abc',
    "{} {}", "[1]x", '  {"sp" : [ 1 , 2 ] }  ', "[" * 40 + "]" * 40,
    '{"u":"\\u00e9"}', {"u": "\u00e9t\u00e9"}, "caf\u00e9", "1e3",
    "12345678901234567890", '{"a":1,"a":2}', '"a\tb"', "null", "1.",
    "NaN", "[1.]",
]


def nan_refused(name):
    raise ValueError("not JSON: " + name)


def dup_refused(pairs):
    """A text naming a member twice reads back as the string it is."""
    names = [k for k, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError("a member named twice")
    return dict(pairs)


@t.test("reserve answers each body as GET /v1/jobs/{id} shows it")
def _():
    q = pull_topic(ttr_ms=20000)
    jobs = {}
    for i, body in enumerate(BODIES):
        extra = {}
        if i == 1:
            extra = {"bizkey": "k:%d@x" % i, "headers": {"X-A": 'b"c/'}}
        elif i == 2:
            extra = {"bizkey": "plain-%d" % i, "headers": {"X-B": "d"},
                     "retry_schedule": "<0,1s>"}
        jobs[E.push(KEY, q, body, **extra)["id"]] = body
    got = {}
    while len(got) < len(jobs):
        r = reserve_until(q)
        got[r["id"]] = r
    for jid, r in got.items():
        g = E.job(KEY, jid)
        for k in ("body", "headers", "bizkey", "retry_schedule",
                  "priority", "created_ms", "attempt_count", "topic"):
            assert r[k] == g[k], (k, r, g)
        assert r["state"] == "in_flight" and r["attempt"] == 1, r
        assert r["ttr_ms"] == 20000 and r["token"], r
        assert r["next_attempt_ms"] == g["next_attempt_ms"], (r, g)
        body = jobs[jid]
        if isinstance(body, str):
            try:        # RFC 8259: no raw control characters, no NaN
                want = json.loads(body, parse_constant=nan_refused,
                                  object_pairs_hook=dup_refused)
            except ValueError:
                want = body
        else:
            want = body
        assert r["body"] == want, (body, r["body"])


@t.test("acks and nacks written compactly or not get the same answers")
def _():
    q = pull_topic(retry_schedule="<0,1h>")
    for verb, state in (("ack", "delivered"), ("nack", "retrying")):
        for compact in (True, False):
            j = E.push(KEY, q, {"verb": verb, "compact": compact})
            r = reserve_until(q)
            assert r["id"] == j["id"], (r, j)
            sep = (",", ":") if compact else (", ", " : ")
            good = json.dumps({"token": r["token"]}, separators=sep)
            # A stale token, one of characters no token has, another key.
            stale = good.replace(r["token"], r["token"][:-1] + (
                "A" if r["token"][-1] != "A" else "B"))
            bad = good.replace(r["token"], "a b")
            extra = good[:-1] + sep[0] + '"x"' + sep[1] + "1}"
            path = "/v1/jobs/%s/%s" % (j["id"], verb)
            expect_error(E.req("POST", path, stale, key=KEY), 409,
                         "stale_token")
            expect_error(E.req("POST", path, bad, key=KEY), 400)
            expect_error(E.req("POST", path, extra, key=KEY), 400)
            st, _, a = E.req("POST", path, good, key=KEY)
            assert st == 200 and a["id"] == j["id"], (st, a)
            assert a["state"] == state, a
            assert ("next_attempt_ms" in a) == (verb == "nack"), a
            expect_error(E.req("POST", path, good, key=KEY), 409)


@t.test("higher priority first among due jobs, then earlier due time")
def _():
    q = pull_topic()
    now = int(time.time() * 1000)
    low = E.push(KEY, q, "low", priority=-5, run_at_ms=now - 3000)
    mid2 = E.push(KEY, q, "mid2", run_at_ms=now - 1000)
    mid1 = E.push(KEY, q, "mid1", run_at_ms=now - 2000)
    high = E.push(KEY, q, "high", priority=100)
    harness.wait_for(lambda: E.req("GET", "/v1/topics/" + q, key=KEY)[2]
                     ["counts"]["ready"] == 4, what="four ready jobs")
    got = [E.reserve(KEY, q, 0)[2]["id"] for _ in range(4)]
    assert got == [high["id"], mid1["id"], mid2["id"], low["id"]], got


@t.test("nack applies the schedule; an earlier token is refused with 409")
def _():
    q = pull_topic(retry_schedule="<0,0,0>")
    j = E.push(KEY, q, {"n": 1})
    r1 = reserve_until(q)
    st, _, n = E.req("POST", "/v1/jobs/%s/nack" % j["id"],
                     {"token": r1["token"]}, key=KEY)
    assert st == 200 and n["state"] == "retrying", n
    assert "next_attempt_ms" in n
    r2 = reserve_until(q)
    assert r2["id"] == j["id"] and r2["token"] != r1["token"], r2
    assert r2["attempt"] == 2, r2
    expect_error(E.req("POST", "/v1/jobs/%s/ack" % j["id"],
                       {"token": r1["token"]}, key=KEY), 409, "stale_token")
    expect_error(E.req("POST", "/v1/jobs/%s/nack" % j["id"],
                       {"token": r1["token"]}, key=KEY), 409, "stale_token")
    st, _, a = E.req("POST", "/v1/jobs/%s/ack" % j["id"],
                     {"token": r2["token"]}, key=KEY)
    assert st == 200 and a["state"] == "delivered", a


@t.test("a job neither acked nor nacked within its ttr comes back")
def _():
    q = pull_topic(ttr_ms=300, retry_schedule="<0,0>")
    j = E.push(KEY, q, {"slow": 1})
    r1 = reserve_until(q)
    r2 = reserve_until(q, 2000)
    assert r2["id"] == j["id"] and r2["attempt"] == 2, r2
    assert r2["token"] != r1["token"]
    expect_error(E.req("POST", "/v1/jobs/%s/ack" % j["id"],
                       {"token": r1["token"]}, key=KEY), 409, "stale_token")
    g = E.job(KEY, j["id"])
    assert g["attempt_count"] >= 1 and len(g["attempts"]) >= 1, g


@t.test("reserve: bad inputs and wrong topics")
def _():
    q = pull_topic()
    push_q = E.topic(KEY, callback_url="http://127.0.0.1:9/x")["name"]
    expect_error(E.reserve(KEY, push_q, 0), 409, "wrong_mode", "topic")
    expect_error(E.reserve(KEY, unique("none"), 0), 404, "topic_not_found")
    for bad in ["-1", "x", "61000", "1e3", "", "99999999999999999999"]:
        expect_error(E.req("GET", "/v1/topics/%s/reserve?wait_ms=%s" %
                           (q, bad), key=KEY), 400, "invalid_field",
                     "wait_ms")
    expect_error(E.req("GET", "/v1/topics/a%00b/reserve", key=KEY), 400,
                 "invalid_name")
    expect_error(E.req("POST", "/v1/topics/%s/reserve" % q, key=KEY), 405,
                 "method_not_allowed")


@t.test("ack/nack: bad inputs")
def _():
    q = pull_topic()
    j = E.push(KEY, q, 1)
    for path in ("ack", "nack"):
        u = "/v1/jobs/%s/%s" % (j["id"], path)
        expect_error(E.req("POST", u, {}, key=KEY), 400, "missing_field",
                     "token")
        expect_error(E.req("POST", u, {"token": 5}, key=KEY), 400,
                     "invalid_field", "token")
        expect_error(E.req("POST", u, {"token": "a b"}, key=KEY), 400,
                     "invalid_field", "token")
        expect_error(E.req("POST", u, {"token": "x" * 100}, key=KEY), 400,
                     "invalid_field", "token")
        expect_error(E.req("POST", u, {"token": "abc", "x": 1}, key=KEY),
                     400, "unknown_field")
        expect_error(E.req("POST", u, b"nope", key=KEY), 400, "invalid_json")
        expect_error(E.req("POST", u, {"token": "abc"}, key=KEY), 409)
        expect_error(E.req("POST", "/v1/jobs/0000000000000000/" + path,
                           {"token": "abc"}, key=KEY), 404, "job_not_found")


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, n) if hard != resource.RLIM_INFINITY else n
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@t.test("10,000 waiting consumers hold no thread each")
def _():
    n = 10000
    limit = raise_nofile(n + 1000)
    if limit < n + 200:
        harness.skip("RLIMIT_NOFILE is %d here" % limit)
    q = pull_topic()
    req = ("GET /v1/topics/%s/reserve?wait_ms=50000 HTTP/1.1\r\n"
           "Host: x\r\nAuthorization: Bearer %s\r\n\r\n" % (q, KEY)).encode()
    sel = selectors.DefaultSelector()
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex((E.d.host, E.d.port))
            socks.append(s)
            sel.register(s, selectors.EVENT_WRITE)
        pending = set(socks)
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            for k, _ in sel.select(1):
                s = k.fileobj
                try:
                    s.send(req)
                except (BlockingIOError, ConnectionError, OSError):
                    continue
                sel.unregister(s)
                pending.discard(s)
        assert not pending, "%d consumers could not send" % len(pending)
        # Every one of them is parked, and the server still answers
        # (with 2 HTTP threads: none is held by a waiter).
        assert E.healthy()
        st, _, b = E.req("GET", "/v1/topics/" + q, key=KEY)
        assert st == 200
        # Jobs arriving now are handed to waiting consumers.
        ids = {E.push(KEY, q, {"i": i})["id"] for i in range(20)}
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        got = set()
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            for k, _ in sel.select(1):
                s = k.fileobj
                try:
                    data = s.recv(65536)
                except (BlockingIOError, OSError):
                    continue
                sel.unregister(s)
                if data.startswith(b"HTTP/1.1 200"):
                    body = data.split(b"\r\n\r\n", 1)[1]
                    for jid in ids:
                        if jid.encode() in body:
                            got.add(jid)
        assert got == ids, "%d of 20 jobs reached a consumer" % len(got)
        assert E.healthy()
    finally:
        for s in socks:
            s.close()
        sel.close()
    # The waiters' slots are freed: the server still serves.
    harness.wait_for(E.healthy, what="the server after 10,000 clients left",
                     ignore=(OSError,))


@t.test("consumers that leave while waiting lose no job")
def _():
    # A consumer may leave after the server took a job for it; its ttr
    # brings the job back.  Most are noticed before that.
    q = pull_topic(ttr_ms=1000, retry_schedule="<0,0,0,0,0>")
    for _ in range(50):
        s = socket.create_connection((E.d.host, E.d.port))
        s.sendall(("GET /v1/topics/%s/reserve?wait_ms=500 HTTP/1.1\r\n"
                   "Host: x\r\nAuthorization: Bearer %s\r\n\r\n" %
                   (q, KEY)).encode())
        s.close()
    j = E.push(KEY, q, "x")
    r = reserve_until(q, 2000)
    assert r["id"] == j["id"]
    assert E.healthy()


def ready_count(q):
    st, _, b = E.req("GET", "/v1/topics/" + q, key=KEY)
    assert st == 200, (st, b)
    return b["counts"]["ready"]


@t.test("consumers asking together get distinct jobs, the best first")
def _():
    q = pull_topic(ttr_ms=30000)
    high = {E.push(KEY, q, i, priority=5)["id"] for i in range(8)}
    low = {E.push(KEY, q, i, priority=-5)["id"] for i in range(8)}
    harness.wait_for(lambda: ready_count(q) == 16, what="16 ready jobs")
    got = harness.at_once([lambda: E.reserve(KEY, q, 1000)] * 8)
    assert all(st == 200 for st, _, _ in got), [g[0] for g in got]
    ids = [r["id"] for _, _, r in got]
    assert len(set(ids)) == 8, ids
    assert set(ids) == high, "a low-priority job went before a high one"
    assert len({r["token"] for _, _, r in got}) == 8
    rest = harness.at_once([lambda: E.reserve(KEY, q, 0)] * 9)
    ids2 = [r["id"] for st, _, r in rest if st == 200]
    assert sorted(st for st, _, _ in rest) == [200] * 8 + [204], rest
    assert set(ids2) == low, ids2


@t.test("acks and nacks sent together are each answered for themselves")
def _():
    q = pull_topic(ttr_ms=30000, retry_schedule="<0,0>")
    for i in range(12):
        E.push(KEY, q, i)
    harness.wait_for(lambda: ready_count(q) == 12, what="12 ready jobs")
    rs = [reserve_until(q) for _ in range(12)]
    assert len({r["id"] for r in rs}) == 12

    def post(verb, jid, token):
        return lambda: E.req("POST", "/v1/jobs/%s/%s" % (jid, verb),
                             {"token": token}, key=KEY)
    fns = [post("ack", r["id"], r["token"]) for r in rs[:8]]
    fns.append(post("ack", rs[8]["id"], rs[8]["token"]))    # twice
    fns.append(post("ack", rs[8]["id"], rs[8]["token"]))
    fns.append(post("ack", rs[9]["id"], rs[10]["token"]))   # not its own
    fns.append(post("nack", rs[10]["id"], rs[10]["token"]))
    fns.append(post("nack", rs[11]["id"], rs[11]["token"]))
    fns.append(post("ack", "0000000000000000", rs[11]["token"]))
    got = harness.at_once(fns)
    for st, _, b in got[:8]:
        assert st == 200 and b["state"] == "delivered", (st, b)
    twice = sorted([got[8][0], got[9][0]])
    assert twice == [200, 409], twice
    expect_error(got[10], 409, "stale_token")
    for st, _, b in got[11:13]:
        assert st == 200 and b["state"] == "retrying", (st, b)
        assert "next_attempt_ms" in b, b
    expect_error(got[13], 404, "job_not_found")
    for r in rs[:9]:
        assert E.job(KEY, r["id"])["state"] == "delivered", r["id"]
    assert E.job(KEY, rs[9]["id"])["state"] == "in_flight"
    # The nacked come back for a second attempt; the stale ack changed
    # nothing: rs[9] is still held with its own token.
    again = {reserve_until(q)["id"] for _ in range(2)}
    assert again == {rs[10]["id"], rs[11]["id"]}, again
    st, _, b = E.req("POST", "/v1/jobs/%s/ack" % rs[9]["id"],
                     {"token": rs[9]["token"]}, key=KEY)
    assert st == 200 and b["state"] == "delivered", (st, b)


@t.test("limits.max_waiting: a tenant's reserves past it are 429 with "
        "Retry-After and the connection closed; another tenant's are not")
def _():
    e = Env(config={"limits": {"max_waiting": 3}})
    try:
        _, ka = e.tenant()
        _, kb = e.tenant()
        qa = e.topic(ka)["name"]
        qa2 = e.topic(ka)["name"]
        qb = e.topic(kb)["name"]
        got = []

        def wait(q):
            # Refused while a probe below was counted: ask again.
            while True:
                r = e.reserve(ka, q, 30000)
                if r[0] != 429:
                    got.append(r)
                    return
        ths = [threading.Thread(target=wait, args=(q,))
               for q in (qa, qa, qa2)]
        for th in ths:
            th.start()
        # Its three wait; a fourth, on either topic, is refused at once.
        st, h, b = harness.wait_for(
            lambda: (lambda r: r if r[0] == 429 else None)(
                e.reserve(ka, qa2, 0)), what="the fourth refused")
        assert b["error"]["code"] == "too_many_waiting", b
        assert h.get("Retry-After") == "1", h
        assert h.get("Connection", "").lower() == "close", h
        st, _, _ = e.reserve(kb, qb, 0)
        assert st == 204, st
        # One of them gets a job and ends: room for one again.
        j = e.push(ka, qa, {"n": 1})
        harness.wait_for(lambda: len(got) == 1, what="a waiter served")
        assert got[0][0] == 200 and got[0][2]["id"] == j["id"], got
        # Its count goes when the server is done with the request, which
        # may be just after the client has the answer.
        harness.wait_for(lambda: e.reserve(ka, qa2, 0)[0] == 204,
                         what="room for one reserve again")
        e.push(ka, qa, {"n": 2})
        e.push(ka, qa2, {"n": 3})
        for th in ths:
            th.join(30)
        assert sorted(r[0] for r in got) == [200, 200, 200], got
    finally:
        e.stop()


E.stop()
t.done()
