#!/usr/bin/env python3
"""test_api_pull_gone.py - a job reserved for a consumer that can no longer
get it goes back to ready with no attempt counted: the consumer left while
its reserve was in progress, or the server stopped with the reserve in
progress.  The reserve worker is held at its batch by the test route
/v1/debug/pull-hold (debug.fake_clock only), so the window is made, not
waited for; the fake clock stands still, so no time to run can run out and
bring the job back by itself."""

import os
import signal
import socket
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, expect_error  # noqa: E402

TTR = 60000

t = harness.Tap()
E = Env(config={"debug": {"fake_clock": True},
                "shutdown": {"grace": "1s"}})
NAME, KEY = E.tenant()


def hold(on):
    st, _, b = E.admin("POST", "/v1/debug/pull-hold", {"hold": on})
    assert st == 200 and b["hold"] is on, (st, b)


def waiting():
    st, _, b = E.admin("GET", "/v1/debug/pull-hold")
    assert st == 200, (st, b)
    return b["waiting"]


def ready_job():
    """A new pull topic and a job pushed to it, once the timer has made
    the job ready: (topic, job id)."""
    q = E.topic(KEY, mode="pull", ttr_ms=TTR)["name"]
    j = E.push(KEY, q, {"gone": True})

    def ready():
        return E.job(KEY, j["id"])["state"] == "ready"
    harness.wait_for(ready, what="the job to be ready")
    return q, j["id"]


def reserve_held(q, let_go=True):
    """A reserve of q on a socket of its own, held at the worker; the
    worker is let go before returning unless let_go is False."""
    hold(True)
    try:
        s = socket.create_connection((E.d.host, E.d.port), 5)
        s.sendall(("GET /v1/topics/%s/reserve?wait_ms=0 HTTP/1.1\r\n"
                   "Host: x\r\nAuthorization: Bearer %s\r\n\r\n" %
                   (q, KEY)).encode())
        harness.wait_for(lambda: waiting() == 1,
                         what="the reserve to be held")
    except BaseException:
        hold(False)
        raise
    if let_go:
        hold(False)
    return s


def given_back(q, jid):
    """Waits until the job is ready again, then reserves it: its first
    attempt.  The reserve may wait: the worker that gave the job back
    tells this instance's reserves just after Redis has it ready."""
    harness.wait_for(lambda: E.job(KEY, jid)["state"] == "ready",
                     what="the job to be given back")
    st, _, r = E.reserve(KEY, q, 10000)
    assert st == 200 and r["id"] == jid and r["attempt"] == 1, (st, r)
    return r


@t.test("the debug hold exists only with the fake clock, and takes a bool")
def _():
    expect_error(E.admin("POST", "/v1/debug/pull-hold", {"hold": 1}), 400,
                 "invalid_field", "hold")
    expect_error(E.admin("POST", "/v1/debug/pull-hold", {}), 400,
                 "invalid_field", "hold")
    expect_error(E.req("GET", "/v1/debug/pull-hold", key=KEY), 403)
    st, _, b = E.admin("GET", "/v1/debug/pull-hold")
    assert st == 200 and b == {"hold": False, "waiting": 0}, (st, b)
    with harness.Retryd(redis=E.redis) as d:
        st, _, b = d.admin("GET", "/v1/debug/pull-hold")
        assert st == 404, (st, b)


@t.test("a consumer that leaves during its reserve does not take the job")
def _():
    q, jid = ready_job()
    s = reserve_held(q, let_go=False)
    s.close()
    hold(False)
    r = given_back(q, jid)
    st, _, b = E.req("POST", "/v1/jobs/%s/ack" % jid, {"token": r["token"]},
                     key=KEY)
    assert st == 200 and b["state"] == "delivered", (st, b)


@t.test("a consumer still there gets the job the held reserve took")
def _():
    q, jid = ready_job()
    s = reserve_held(q)
    try:
        s.settimeout(10)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
    finally:
        s.close()
    assert got.startswith(b"HTTP/1.1 200"), got
    assert jid.encode() in got, got
    assert E.job(KEY, jid)["state"] == "in_flight"


@t.test("a reserve in progress when the server stops gives its job back")
def _():
    q, jid = ready_job()
    s = reserve_held(q, let_go=False)
    try:
        mark = E.d.log_mark()
        E.d.signal(signal.SIGTERM)
        assert E.d.wait_exit() == 0
        assert "given back" in E.d.log(since=mark), E.d.log(since=mark)
    finally:
        s.close()
    E.d.start()
    E.d.wait_ready()
    st, _, b = E.admin("GET", "/v1/debug/pull-hold")
    assert st == 200 and b == {"hold": False, "waiting": 0}, (st, b)
    given_back(q, jid)


t.done()
E.stop()
