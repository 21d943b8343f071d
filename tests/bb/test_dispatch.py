#!/usr/bin/env python3
"""test_dispatch.py - push topics end to end: the real daemon, a real
redis-server and the scripted receiver.  Retries follow the schedule exactly
(checked with the injected clock, so "exactly" means to the millisecond and
no test sleeps), 410 and exhausted schedules dead-letter, timeouts and
refused targets are failed attempts, the signature verifies with openssl, a
hanging tenant does not hold up another, nor can it take another's share
of the instance's callbacks, SIGTERM hands back what is in flight
without counting an attempt, and a target answering garbage gets a
failed attempt, never a crash or a record that is not JSON."""

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, expect_error, unique  # noqa: E402

t = harness.Tap()

# One daemon on the injected clock for the exact-timing tests.
F = Env(config={"debug": {"fake_clock": True}})
FNAME, FKEY = F.tenant()


def clock(env=F):
    st, _, b = env.admin("GET", "/v1/debug/clock")
    assert st == 200, (st, b)
    return b


def advance(ms, env=F):
    """Move the injected clock; wait for two whole timer passes at the new
    time (so what did not happen, will not).  The new time."""
    return env.d.advance_clock(ms)["now_ms"]


def push_topic(env, key, receiver, **conf):
    c = {"callback_url": receiver.url("/hook")}
    c.update(conf)
    return env.topic(key, **c)


def job(env, key, jid):
    return env.job(key, jid)


def wait_state(env, key, jid, state, timeout=15):
    return harness.wait_for(
        lambda: (lambda j: j if j["state"] == state else None)(
            job(env, key, jid)),
        timeout=timeout, what="job %s to be %s" % (jid, state))


@t.test("<0,1s,2s> against 500,500,200: delivered at attempt 3, spaced "
        "exactly 1 s and 2 s, never early")
def _():
    rcv = harness.Receiver(script="500,500,200")
    q = push_topic(F, FKEY, rcv, retry_schedule="<0,1s,2s>")["name"]
    t0 = clock()["now_ms"]
    j = F.push(FKEY, q, {"n": 1}, run_at_ms=t0)
    rcv.wait_count(1)
    st = wait_state(F, FKEY, j["id"], "retrying")
    assert st["next_attempt_ms"] == t0 + 1000, st
    advance(999)
    assert job(F, FKEY, j["id"])["state"] == "retrying"
    assert len(rcv.requests) == 1, "an attempt came early"
    advance(1)
    rcv.wait_count(2)
    st = wait_state(F, FKEY, j["id"], "retrying")
    assert st["next_attempt_ms"] == t0 + 1000 + 2000, st
    advance(1999)
    assert job(F, FKEY, j["id"])["state"] == "retrying"
    assert len(rcv.requests) == 2, "an attempt came early"
    advance(1)
    rcv.wait_count(3)
    done = wait_state(F, FKEY, j["id"], "delivered")
    at = [a["at_ms"] for a in done["attempts"]]
    assert at == [t0, t0 + 1000, t0 + 3000], at
    assert [a["status"] for a in done["attempts"]] == [500, 500, 200], done
    assert done["attempt_count"] == 3, done
    assert [r.headers["retryd-attempt"] for r in rcv.requests] == \
        ["1", "2", "3"]


@t.test("500 forever: dead after the last wait, every attempt logged")
def _():
    rcv = harness.Receiver(script="500")
    q = push_topic(F, FKEY, rcv, retry_schedule="<0,1s,2s>")["name"]
    t0 = clock()["now_ms"]
    j = F.push(FKEY, q, {"n": 2}, run_at_ms=t0)
    rcv.wait_count(1)
    wait_state(F, FKEY, j["id"], "retrying")
    advance(1000)
    rcv.wait_count(2)
    wait_state(F, FKEY, j["id"], "retrying")
    advance(2000)
    rcv.wait_count(3)
    dead = wait_state(F, FKEY, j["id"], "dead")
    assert [a["status"] for a in dead["attempts"]] == [500, 500, 500], dead
    assert [a["at_ms"] for a in dead["attempts"]] == \
        [t0, t0 + 1000, t0 + 3000], dead
    advance(60000)
    assert len(rcv.requests) == 3, "a dead job was called again"
    st, _, b = F.req("GET", "/v1/topics/%s/dead" % q, key=FKEY)
    assert st == 200 and [x["id"] for x in b["jobs"]] == [j["id"]], b


@t.test("410 Gone: dead after one attempt")
def _():
    rcv = harness.Receiver(script="410")
    q = push_topic(F, FKEY, rcv, retry_schedule="<0,0,2m,10m>")["name"]
    j = F.push(FKEY, q, {"n": 3}, run_at_ms=clock()["now_ms"])
    dead = wait_state(F, FKEY, j["id"], "dead")
    assert [a["status"] for a in dead["attempts"]] == [410], dead
    advance(3600 * 1000)
    assert len(rcv.requests) == 1


@t.test("429 with Retry-After later than the next wait is honoured")
def _():
    rcv = harness.Receiver(script="429:ra=5,200")
    q = push_topic(F, FKEY, rcv, retry_schedule="<0,1s,1s>")["name"]
    t0 = clock()["now_ms"]
    j = F.push(FKEY, q, {"n": 4}, run_at_ms=t0)
    st = wait_state(F, FKEY, j["id"], "retrying")
    assert st["next_attempt_ms"] == t0 + 5000, st
    advance(4999)
    assert len(rcv.requests) == 1
    advance(1)
    wait_state(F, FKEY, j["id"], "delivered")


@t.test("a job's own schedule overrides the topic's; the first wait counts "
        "from the due time")
def _():
    rcv = harness.Receiver(script="200")
    q = push_topic(F, FKEY, rcv, retry_schedule="<0>")["name"]
    t0 = clock()["now_ms"]
    j = F.push(FKEY, q, {"n": 5}, run_at_ms=t0, retry_schedule="<3s,1s>")
    assert j["next_attempt_ms"] == t0 + 3000, j
    advance(2999)
    assert len(rcv.requests) == 0, "the first attempt came early"
    advance(1)
    wait_state(F, FKEY, j["id"], "delivered")


@t.test("the request: body byte for byte, topic and job headers, retryd-* "
        "headers, and a signature openssl verifies")
def _():
    rcv = harness.Receiver(script="200")
    tp = push_topic(F, FKEY, rcv, headers={"X-Topic": "t1", "X-Both": "t"})
    body = {"patient": 42, "note": "caf\u00e9 \u2603", "list": [1, 2.5, None]}
    j = F.push(FKEY, tp["name"], body, run_at_ms=clock()["now_ms"],
               headers={"X-Job": "j1", "X-Both": "j"})
    rcv.wait_count(1)
    r = rcv.requests[0]
    assert r.method == "POST" and r.path == "/hook", r
    assert json.loads(r.body) == body, r.body
    h = r.headers
    assert h["x-topic"] == "t1" and h["x-job"] == "j1", h
    assert h["x-both"] == "j", h
    assert h["retryd-topic"] == tp["name"], h
    assert h["retryd-tenant"] == FNAME, h
    assert h["retryd-attempt"] == "1", h
    assert h["webhook-id"] == j["id"], h
    assert h["content-type"].startswith("application/json"), h
    # Recompute the signature with openssl, independently of our code.
    key = base64.b64decode(tp["secret"][len("whsec_"):])
    msg = ("%s.%s." % (h["webhook-id"], h["webhook-timestamp"])).encode() + \
        r.body
    out = subprocess.run(
        ["openssl", "dgst", "-sha256", "-mac", "HMAC", "-macopt",
         "hexkey:" + key.hex(), "-binary"],
        input=msg, capture_output=True, check=True).stdout
    want = "v1," + base64.b64encode(out).decode()
    assert want in h["webhook-signature"].split(), \
        (want, h["webhook-signature"])
    assert abs(int(h["webhook-timestamp"]) * 1000 -
               clock()["now_ms"]) < 5000, h
    # Settled before the next test moves the clock past its deadline.
    wait_state(F, FKEY, j["id"], "delivered")


@t.test("a string body is sent as its text, exactly")
def _():
    rcv = harness.Receiver(script="200")
    q = push_topic(F, FKEY, rcv)["name"]
    text = "a=1&b=two\r\n\u00e9"
    j = F.push(FKEY, q, text, run_at_ms=clock()["now_ms"])
    rcv.wait_count(1)
    assert rcv.requests[0].body == text.encode(), rcv.requests[0].body
    wait_state(F, FKEY, j["id"], "delivered")


@t.test("the debug clock refuses bad moves and tenant keys; it never goes "
        "back")
def _():
    before = clock()["now_ms"]
    for body, field in (({}, "advance_ms"), ({"advance_ms": -1}, "advance_ms"),
                        ({"advance_ms": "5"}, "advance_ms"),
                        ({"now_ms": before - 1}, "now_ms"),
                        ({"now_ms": 2 ** 63 - 1}, "now_ms"),
                        ({"now_ms": 4000000000001}, "now_ms"),
                        ({"advance_ms": 4000000000001 - before},
                         "advance_ms")):
        expect_error(F.admin("POST", "/v1/debug/clock", body), 400,
                     field=field)
    st, _, _ = F.req("POST", "/v1/debug/clock", {"advance_ms": 1}, key=FKEY)
    assert st in (401, 403, 404), st
    assert clock()["now_ms"] == before, "a refused move moved the clock"
    # The latest time it takes still lets jobs be pushed and read.
    q = F.topic(FKEY, mode="pull")["name"]
    st, _, b = F.admin("POST", "/v1/debug/clock", {"now_ms": 4000000000000})
    assert st == 200 and b["now_ms"] == 4000000000000, (st, b)
    j = F.push(FKEY, q, {"late": True}, delay_ms=1000)
    assert job(F, FKEY, j["id"])["state"] == "scheduled"


F.stop()

# Real time from here: timeouts and refusals happen in libcurl's clock.
R = Env()
RNAME, RKEY = R.tenant()


@t.test("a timeout is a failed attempt, and the next one follows")
def _():
    rcv = harness.Receiver(script="hang,200")
    q = push_topic(R, RKEY, rcv, retry_schedule="<0,0>",
                   timeout_ms=300)["name"]
    j = R.push(RKEY, q, {"n": 6}, delay_ms=0)
    done = wait_state(R, RKEY, j["id"], "delivered")
    a = done["attempts"]
    assert len(a) == 2 and a[0]["status"] == 0, a
    assert "time" in (a[0]["error"] or "").lower(), a
    assert a[1]["status"] == 200, a


@t.test("connection refused is a failed attempt; the schedule runs out "
        "into the dead letters")
def _():
    port = harness.free_port()
    q = R.topic(RKEY, callback_url="http://127.0.0.1:%d/x" % port,
                retry_schedule="<0,0>")["name"]
    j = R.push(RKEY, q, {"n": 7}, delay_ms=0)
    dead = wait_state(R, RKEY, j["id"], "dead")
    assert [a["status"] for a in dead["attempts"]] == [0, 0], dead
    assert all(a["error"] for a in dead["attempts"]), dead


@t.test("a TLS failure is a failed attempt (https to a plain-HTTP port)")
def _():
    rcv = harness.Receiver(script="200")
    url = rcv.url("/tls").replace("http://", "https://", 1)
    q = R.topic(RKEY, callback_url=url, retry_schedule="<0>")["name"]
    j = R.push(RKEY, q, {"n": 9}, delay_ms=0)
    dead = wait_state(R, RKEY, j["id"], "dead")
    a = dead["attempts"]
    assert len(a) == 1 and a[0]["status"] == 0, a
    assert any(w in (a[0]["error"] or "").lower()
               for w in ("ssl", "tls")), a


# What a broken or hostile callback target may answer, and whether it
# counts as delivered (a 2xx read whole) or a failed attempt.
RAW_ANSWERS = [
    (b"HTTP/1.1 500 Oops\r\nContent-Length: 8\r\n\r\n\x00\xff\xfe\x80abc\x00",
     "dead"),
    (b"HTTP/1.1 503 \xff\xfe\r\nContent-Length: 0\r\n\r\n", "dead"),
    (b"HTTP/1.1 99 X\r\nContent-Length: 0\r\n\r\n", "dead"),
    (b"HTTP/1.1 600 X\r\nContent-Length: 0\r\n\r\n", "dead"),
    (b"\x16\x03\x01garbage\r\n\r\n", "dead"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc", "dead"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
     "dead"),
    (b"HTTP/1.1 200 OK\r\nX-A: " + b"a" * 200000 +
     b"\r\nContent-Length: 0\r\n\r\n", "dead"),
    (b"HTTP/1.1 503 X\r\nRetry-After: \xff\x00 9999999999999999999\r\n"
     b"Content-Length: 0\r\n\r\n", "dead"),
    (b"HTTP/1.1 100 Continue\r\n\r\n", "dead"),
    (b"HTTP/1.1 200 OK\r\nHTTP/1.1 500 X\r\nContent-Length: 0\r\n\r\n",
     "dead"),
    (b"", "dead"),
    (b"HTTP/1.1 302 X\r\nLocation: http://169.254.169.254/\r\n"
     b"Content-Length: 0\r\n\r\n", "dead"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n\x00\x00\x00",
     "delivered"),
]


def raw_target():
    """A TCP server answering a request for /N with RAW_ANSWERS[N], then
    closing.  (port, its thread's stop event)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    srv.settimeout(0.2)
    stop = threading.Event()

    def one(c):
        data = b""
        try:
            c.settimeout(5)
            while b"\r\n\r\n" not in data:
                d = c.recv(65536)
                if not d:
                    return
                data += d
            n = int(data.split(b" ", 2)[1].rsplit(b"/", 1)[1])
            c.sendall(RAW_ANSWERS[n][0])
            c.shutdown(socket.SHUT_WR)
            while c.recv(65536):
                pass
        except (OSError, ValueError, IndexError):
            pass
        finally:
            c.close()

    def loop():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except socket.timeout:
                continue
            threading.Thread(target=one, args=(c,), daemon=True).start()
        srv.close()
    threading.Thread(target=loop, daemon=True).start()
    return srv.getsockname()[1], stop


@t.test("a callback target answering garbage (binary bodies, status 99 and "
        "600, a cut body, bad chunks, a 200 KB header, a NUL in a header, "
        "a redirect, nothing): each attempt delivered or failed as its "
        "answer says, its record valid JSON, the daemon whole")
def _():
    port, stop = raw_target()
    try:
        jobs = []
        for i, (_, want) in enumerate(RAW_ANSWERS):
            q = R.topic(RKEY, callback_url="http://127.0.0.1:%d/%d" %
                        (port, i), retry_schedule="<0>",
                        timeout_ms=5000)["name"]
            jobs.append((i, want, R.push(RKEY, q, {"i": i})["id"]))
        for i, want, jid in jobs:
            j = harness.wait_for(
                lambda: (lambda b: b if b["state"] in ("delivered", "dead")
                         else None)(job(R, RKEY, jid)),
                timeout=20, what="answer %d's job to finish" % i)
            a = j["attempts"]
            assert j["state"] == want and len(a) == 1, (i, j)
            assert isinstance(a[0]["status"], int), (i, a)
            assert a[0]["response"] is None or \
                len(a[0]["response"].encode()) <= 4 * 1024, (i, a)
            if want == "dead" and a[0]["status"] in (0, None):
                assert a[0]["error"], (i, a)
        assert R.healthy()
    finally:
        stop.set()


@t.test("real time: retries are never early (<0,300ms,600ms>)")
def _():
    rcv = harness.Receiver(script="500,500,200")
    q = push_topic(R, RKEY, rcv, retry_schedule="<0,300ms,600ms>")["name"]
    j = R.push(RKEY, q, {"n": 8}, delay_ms=0)
    rcv.wait_count(3)
    wait_state(R, RKEY, j["id"], "delivered")
    att = job(R, RKEY, j["id"])["attempts"]
    gaps = [att[1]["at_ms"] - att[0]["at_ms"],
            att[2]["at_ms"] - att[1]["at_ms"]]
    arr = [r.t_ms for r in rcv.requests]
    t.diag("spacing of attempt starts: %s ms (schedule 300, 600); at the "
           "receiver: %.1f, %.1f ms" % (gaps, arr[1] - arr[0],
                                         arr[2] - arr[1]))
    # A retry counts from the failure, which ends after the start: the
    # start-to-start spacing is at least the wait, never less.
    assert gaps[0] >= 300 and gaps[1] >= 600, gaps


@t.test("fairness: a tenant whose endpoint hangs does not hold up another "
        "tenant's callbacks")
def _():
    slow = harness.Receiver(script="hang")
    fast = harness.Receiver(script="200")
    _, skey = R.tenant()
    sq = push_topic(R, skey, slow, timeout_ms=8000, max_in_flight=20,
                    retry_schedule="<0>")["name"]
    fq = push_topic(R, RKEY, fast, retry_schedule="<0>")["name"]
    for i in range(100):
        R.push(skey, sq, {"slow": i}, delay_ms=0)
    slow.wait_count(20)                  # its cap is in flight, hanging
    due = int(time.time() * 1000) + 500     # all pushed before they fall due
    for i in range(50):
        R.push(RKEY, fq, {"fast": i}, run_at_ms=due)
    fast.wait_count(50, timeout=6)
    late = sorted(r.t_ms - due for r in fast.requests)
    t.diag("healthy tenant's lateness while the other hangs: p50 %.1f ms, "
           "max %.1f ms" % (late[len(late) // 2], late[-1]))
    # Every healthy callback arrived while the hanging ones were still
    # hanging: none of them had timed out yet.
    assert len(slow.requests) == 20, len(slow.requests)
    st, _, b = R.req("GET", "/v1/topics/" + sq, key=skey)
    assert b["counts"]["in_flight"] == 20, b["counts"]


def capped_env(dispatcher):
    """A daemon on the injected clock with these dispatcher keys; callbacks
    still hanging at the end are handed back at once when it stops."""
    return Env(config={"debug": {"fake_clock": True},
                       "dispatcher": dispatcher,
                       "shutdown": {"grace": "100ms"}})


def hog(env, receiver, ntopics, per_topic, **tenant):
    """A tenant (made with these settings) with ntopics push topics calling
    receiver (which hangs), each with per_topic jobs due now and room for
    all of them: (key, topics, job ids)."""
    _, key = env.tenant(**tenant)
    topics = [push_topic(env, key, receiver, timeout_ms=60000,
                         max_in_flight=per_topic,
                         retry_schedule="<0,0>")["name"]
              for _ in range(ntopics)]
    now = clock(env)["now_ms"]
    ids = [env.push(key, q, {"i": i}, run_at_ms=now)["id"]
           for q in topics for i in range(per_topic)]
    return key, topics, ids


def topic_counts(env, key, topics):
    """Sum of the topics' counts by state."""
    tot = {}
    for q in topics:
        st, _, b = env.req("GET", "/v1/topics/" + q, key=key)
        assert st == 200, (st, b)
        for k, v in b["counts"].items():
            tot[k] = tot.get(k, 0) + v
    return tot


def held_back_uncounted(env, hog_, in_flight):
    """in_flight of the hog's jobs are in flight, the rest ready, and none
    has an attempt counted (waiting for room is not an attempt)."""
    key, topics, ids = hog_
    c = topic_counts(env, key, topics)
    assert c.get("in_flight") == in_flight, c
    assert c.get("ready") == len(ids) - in_flight, c
    states = {}
    for jid in ids:
        j = job(env, key, jid)
        assert j["attempt_count"] == 0, j
        states[j["state"]] = states.get(j["state"], 0) + 1
    assert states == {"in_flight": in_flight,
                      "ready": len(ids) - in_flight}, states


def others_delivered(env, n):
    """A new tenant's n jobs due now are delivered, each at attempt 1."""
    ok = harness.Receiver(script="200")
    _, key = env.tenant()
    q = push_topic(env, key, ok, retry_schedule="<0>")["name"]
    now = clock(env)["now_ms"]
    jobs = [env.push(key, q, {"c": i}, run_at_ms=now)["id"]
            for i in range(n)]
    ok.wait_count(n)
    for jid in jobs:
        done = wait_state(env, key, jid, "delivered")
        assert done["attempt_count"] == 1, done


@t.test("one tenant's hanging receivers take at most max_total_in_flight "
        "less a tenth (9 of 10): the rest is another tenant's, whose job is "
        "delivered while all of those callbacks still hang")
def _():
    env = capped_env({"max_total_in_flight": 10})
    try:
        hang = harness.Receiver(script="hang")
        a = hog(env, hang, 3, 5)        # 15 due, room for 15 by topic
        hang.wait_count(9)
        env.d.advance_clock(0)          # two more passes: no 10th
        assert len(hang.requests) == 9, len(hang.requests)
        held_back_uncounted(env, a, 9)

        others_delivered(env, 1)
        # Delivered while every one of the hog's callbacks still hung: none
        # timed out, none was answered, no tenth was started.
        assert len(hang.requests) == 9, len(hang.requests)
        held_back_uncounted(env, a, 9)
    finally:
        env.stop()


@t.test("dispatcher.max_tenant_in_flight = 4: two tenants with hanging "
        "receivers hold 4 each, a third's jobs are delivered meanwhile")
def _():
    env = capped_env({"max_total_in_flight": 10,
                      "max_tenant_in_flight": 4})
    try:
        hang = harness.Receiver(script="hang")
        a = hog(env, hang, 2, 5)
        hang.wait_count(4)
        b = hog(env, hang, 3, 3)
        hang.wait_count(8)
        env.d.advance_clock(0)
        assert len(hang.requests) == 8, len(hang.requests)
        held_back_uncounted(env, a, 4)
        held_back_uncounted(env, b, 4)

        others_delivered(env, 6)
        assert len(hang.requests) == 8, len(hang.requests)
        held_back_uncounted(env, a, 4)
        held_back_uncounted(env, b, 4)
    finally:
        env.stop()


@t.test("a tenant's max_in_flight 2 replaces max_tenant_in_flight 4 for it "
        "alone: its hanging callbacks stop at 2, another's at 4, a third's "
        "jobs are delivered; raised by PATCH to 3, one more starts")
def _():
    env = capped_env({"max_total_in_flight": 10,
                      "max_tenant_in_flight": 4})
    try:
        hang = harness.Receiver(script="hang")
        a = hog(env, hang, 2, 5, max_in_flight=2)
        hang.wait_count(2)
        b = hog(env, hang, 2, 5)
        hang.wait_count(6)
        env.d.advance_clock(0)
        assert len(hang.requests) == 6, len(hang.requests)
        held_back_uncounted(env, a, 2)
        held_back_uncounted(env, b, 4)

        others_delivered(env, 4)
        assert len(hang.requests) == 6, len(hang.requests)
        held_back_uncounted(env, a, 2)

        name = env.admin("GET", "/v1/tenants")[2]["tenants"]
        (aname,) = [x["name"] for x in name
                    if x["max_in_flight_override"] == 2]
        st, _, g = env.admin("PATCH", "/v1/tenants/" + aname,
                             {"max_in_flight": 3})
        assert st == 200 and g["max_in_flight"] == 3, g
        env.d.advance_clock(0)
        hang.wait_count(7)
        env.d.advance_clock(0)
        assert len(hang.requests) == 7, len(hang.requests)
        held_back_uncounted(env, a, 3)
        held_back_uncounted(env, b, 4)
    finally:
        env.stop()


@t.test("SIGTERM: callbacks in flight past the grace are handed back "
        "without counting an attempt; retryd exits 0")
def _():
    redis = harness.RedisServer()
    d = harness.Retryd(redis=redis, config={"shutdown": {"grace": "200ms"}})
    d.wait_ready()
    st, _, b = d.admin("POST", "/v1/tenants", {"name": unique("t")})
    key = b["api_key"]
    rcv = harness.Receiver(script="hang")
    q = unique("q")
    st, _, b = d.request("PUT", "/v1/topics/" + q,
                         {"callback_url": rcv.url("/h"),
                          "retry_schedule": "<0,0>", "timeout_ms": 30000},
                         key=key)
    assert st == 201, b
    st, _, j = d.request("POST", "/v1/topics/%s/jobs" % q,
                         {"delay_ms": 0, "body": 1}, key=key)
    assert st == 201, j
    rcv.wait_count(1)
    d.signal(15)
    assert d.wait_exit(timeout=10) == 0
    d2 = harness.Retryd(redis=redis, config={"shutdown": {"grace": "200ms"}})
    d2.wait_ready()
    st, _, b = d2.request("GET", "/v1/jobs/" + j["id"], key=key)
    assert st == 200, b
    assert b["attempt_count"] == 0, b          # handed back, not counted
    assert b["state"] in ("ready", "in_flight", "scheduled"), b
    rcv.wait_count(2, timeout=15)               # and it is tried again
    d2.stop()
    redis.stop()


@t.test("SSRF: a literal loopback callback is refused at registration "
        "when private targets are not allowed")
def _():
    redis = harness.RedisServer()
    d = harness.Retryd(redis=redis, config={
        "dispatcher": {"allow_private_targets": False}})
    d.wait_ready()
    st, _, b = d.admin("POST", "/v1/tenants", {"name": unique("t")})
    key = b["api_key"]
    for url in ("http://127.0.0.1:9/x", "http://[::1]/x",
                "http://169.254.169.254/latest", "http://10.1.2.3/",
                "http://localhost:8080/"):
        expect_error(d.request("PUT", "/v1/topics/" + unique("q"),
                               {"callback_url": url}, key=key),
                     400, field="callback_url")
    d.stop()
    redis.stop()


@t.test("SSRF: the address actually connected is checked too (a topic "
        "registered while allowed, then refused at connect time)")
def _():
    redis = harness.RedisServer()
    rcv = harness.Receiver(script="200")
    d = harness.Retryd(redis=redis, config={})
    d.wait_ready()
    st, _, b = d.admin("POST", "/v1/tenants", {"name": unique("t")})
    key = b["api_key"]
    q = unique("q")
    st, _, b = d.request("PUT", "/v1/topics/" + q,
                         {"callback_url": rcv.url("/h"),
                          "retry_schedule": "<0>"}, key=key)
    assert st == 201, b
    d.stop()
    d2 = harness.Retryd(redis=redis, config={
        "dispatcher": {"allow_private_targets": False}})
    d2.wait_ready()
    st, _, j = d2.request("POST", "/v1/topics/%s/jobs" % q,
                          {"delay_ms": 0, "body": 1}, key=key)
    assert st == 201, j

    def dead():
        st, _, b = d2.request("GET", "/v1/jobs/" + j["id"], key=key)
        return b if b["state"] == "dead" else None
    b = harness.wait_for(dead, what="the refused job to be dead")
    assert "refused" in b["attempts"][0]["error"], b
    assert len(rcv.requests) == 0, "a refused target was called"
    d2.stop()
    redis.stop()


@t.test("without debug.fake_clock the debug clock does not exist (404)")
def _():
    expect_error(R.admin("GET", "/v1/debug/clock"), 404)
    expect_error(R.admin("POST", "/v1/debug/clock", {"advance_ms": 1}), 404)


R.stop()
t.done()
