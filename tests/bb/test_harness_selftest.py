"""test_harness_selftest.py - tests of the black-box harness itself.

No retryd here: RedisServer, the scripted Receiver, wait_for, the config
writer and the TAP runner, so that a failing retryd test can be trusted to
be about retryd.
"""

import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import http.client  # noqa: E402
import io  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

import harness  # noqa: E402
import receiver  # noqa: E402

t = harness.Tap()


def post(url, body=b"x", timeout=5):
    """POST with urllib: (status, headers, body); HTTP errors are answers."""
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "text/plain"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


@t.test("RedisServer: start, PING, SET/GET, FLUSHALL, KEYS")
def _():
    with harness.RedisServer() as r:
        assert r.url == "redis://127.0.0.1:%d/0" % r.port
        assert r.cmd("PING") == "PONG"
        assert r.cmd("SET", "k", "v") == "OK"
        assert r.cmd("GET", "k") == "v"
        assert r.cmd("GET", "k", raw=True) == b"v"
        assert r.cmd("GET", "nosuch") is None
        assert r.cmd("ZADD", "z", 1, "a", 2, "b") == 2
        assert r.cmd("ZCARD", "z") == 2
        assert sorted(r.cmd("KEYS", "*")) == ["k", "z"]
        assert r.cmd("FLUSHALL") == "OK"
        assert r.cmd("KEYS", "*") == []
        assert r.info("server")["tcp_port"] == str(r.port)
        assert isinstance(r.cmd("SLOWLOG", "GET"), list)
        try:
            r.cmd("NOSUCHCOMMAND")
        except harness.RedisError:
            pass
        else:
            raise AssertionError("an unknown command did not raise")
        # The config is the throwaway one.
        assert r.cmd("CONFIG", "GET", "save") == ["save", ""]
        assert r.cmd("CONFIG", "GET", "appendonly") == ["appendonly", "no"]


@t.test("RedisServer: restart keeps the port and starts empty; stop frees it")
def _():
    r = harness.RedisServer()
    port, pid = r.port, r.proc.pid
    r.cmd("SET", "k", "v")
    r.restart()
    assert r.port == port and r.proc.pid != pid
    assert r.cmd("PING") == "PONG"
    assert r.cmd("GET", "k") is None, "no persistence: restart is empty"
    r.stop()
    assert not r.running()
    assert not harness.port_open(port)
    try:
        r.cmd("PING", timeout=1)
    except OSError:
        pass
    else:
        raise AssertionError("PING answered after stop")


@t.test("RedisServer(start=False) reserves a URL; start() later")
def _():
    r = harness.RedisServer(start=False)
    assert not harness.port_open(r.port)
    r.start()
    assert r.cmd("PING") == "PONG"
    r.stop()


@t.test("Receiver follows 500,500,200 and records the requests")
def _():
    with harness.Receiver(script="500,500,200") as rv:
        got = [post(rv.url("/hook"), b"body-%d" % i)[0] for i in range(4)]
        assert got == [500, 500, 200, 200], got
        reqs = rv.requests
        assert [q.body for q in reqs] == [b"body-0", b"body-1", b"body-2",
                                          b"body-3"]
        assert [q.entry for q in reqs] == ["500", "500", "200", "200"]
        assert [q.index for q in reqs] == [0, 1, 2, 2]
        assert all(q.method == "POST" and q.path == "/hook" for q in reqs)
        assert reqs[0].headers["content-type"] == "text/plain"
        assert reqs[0].headers["CONTENT-TYPE"] == "text/plain"
        now = time.time() * 1000
        assert all(now - 60000 < q.t_ms <= now for q in reqs)
        assert reqs == sorted(reqs, key=lambda q: q.t_ms)


@t.test("Receiver: per-path scripts, JSON and chunked bodies, keep-alive")
def _():
    with harness.Receiver(script="200",
                          path_scripts={"/a": "410", "/b": "500,204"}) as rv:
        c = http.client.HTTPConnection("127.0.0.1", rv.port, timeout=5)
        statuses = []
        for path in ("/a", "/b", "/b", "/c?x=1", "/a"):
            c.request("POST", path, body=b'{"n": 1}',
                      headers={"Content-Type": "application/json"})
            resp = c.getresponse()
            resp.read()
            statuses.append(resp.status)
        # Chunked body on the same connection.
        c.request("POST", "/c", body=iter([b"he", b"llo", b" world"]),
                  encode_chunked=True,
                  headers={"Transfer-Encoding": "chunked"})
        resp = c.getresponse()
        resp.read()
        statuses.append(resp.status)
        c.close()
        assert statuses == [410, 500, 204, 200, 410, 200], statuses
        reqs = rv.wait_count(6)
        assert reqs[0].json() == {"n": 1}
        assert reqs[3].path == "/c?x=1"
        assert reqs[5].body == b"hello world"


@t.test("Receiver: 429:ra=2 sends Retry-After: 2; ra=date+N an HTTP-date")
def _():
    import email.utils
    with harness.Receiver(script="429:ra=2,503:ra=date+60,"
                                 "503:ra=@1767225600") as rv:
        st, h, _ = post(rv.url())
        assert st == 429 and h["Retry-After"] == "2", (st, dict(h))
        st, h, _ = post(rv.url())
        assert st == 503
        when = email.utils.parsedate_to_datetime(h["Retry-After"])
        assert abs(when.timestamp() - time.time() - 60) < 5, h["Retry-After"]
        st, h, _ = post(rv.url())
        assert h["Retry-After"] == "Thu, 01 Jan 2026 00:00:00 GMT", \
            h["Retry-After"]
    # List form: an entry may contain commas.
    with harness.Receiver(script=["503:ra=Wed, 21 Oct 2015 07:28:00 GMT"]) \
            as rv:
        st, h, _ = post(rv.url())
        assert h["Retry-After"] == "Wed, 21 Oct 2015 07:28:00 GMT"


@t.test("Receiver: hang times out on the client side; it is recorded")
def _():
    with harness.Receiver(script="hang,200") as rv:
        t0 = time.monotonic()
        try:
            post(rv.url(), timeout=0.5)
        except (socket.timeout, TimeoutError, urllib.error.URLError) as e:
            reason = getattr(e, "reason", e)
            assert isinstance(reason, (socket.timeout, TimeoutError)), e
        else:
            raise AssertionError("a hanging receiver answered")
        dt = time.monotonic() - t0
        assert 0.4 < dt < 3, dt
        assert rv.wait_count(1)[0].entry == "hang"
        assert post(rv.url())[0] == 200


@t.test("Receiver: close gives a connection error; sleep=MS answers late")
def _():
    with harness.Receiver(script="close,reset,sleep=300,200") as rv:
        for what in ("close", "reset"):
            try:
                post(rv.url())
            except (ConnectionError, http.client.HTTPException,
                    urllib.error.URLError):
                pass
            else:
                raise AssertionError("%s: the receiver answered" % what)
        t0 = time.monotonic()
        assert post(rv.url())[0] == 200
        assert time.monotonic() - t0 >= 0.29
        assert [q.entry for q in rv.wait_count(3)] == ["close", "reset",
                                                      "sleep=300"]


@t.test("Receiver: hold=STATUS answers STATUS once released, not before")
def _():
    with harness.Receiver(script="hold=500,200") as rv:
        got = []
        th = threading.Thread(target=lambda: got.append(post(rv.url())[0]))
        th.start()
        assert rv.wait_count(1)[0].entry == "hold=500"
        th.join(0.3)
        assert th.is_alive() and not got
        rv.release()
        th.join(10)
        assert got == [500], got
        assert post(rv.url())[0] == 200


@t.test("Receiver: a bad script entry is refused; stop closes the port")
def _():
    for bad in ("", "abc", "99", "200:x=1", "sleep=x", "hold=x", "hold=99"):
        try:
            receiver.Receiver(script=bad).stop()
        except ValueError:
            pass
        else:
            raise AssertionError("script %r accepted" % bad)
    rv = harness.Receiver()
    port = rv.port
    rv.stop()
    assert not harness.port_open(port)


@t.test("receiver.py runs as a program and prints its port")
def _():
    d = harness.mkdtemp()
    logf = os.path.join(d, "recv.log")
    p = subprocess.Popen([sys.executable, receiver.__file__, "--port", "0",
                          "--script", "500,200", "--log", logf],
                         stdout=subprocess.PIPE)
    try:
        port = int(p.stdout.readline())
        url = "http://127.0.0.1:%d/x" % port
        assert [post(url)[0] for _ in range(3)] == [500, 200, 200]
        harness.wait_for(lambda: len(open(logf).readlines()) == 3,
                         what="3 lines in the receiver log")
    finally:
        p.terminate()
        assert p.wait(5) == 0


@t.test("wait_for returns the value, raises at the deadline naming it")
def _():
    assert harness.wait_for(lambda: 42, what="x") == 42
    t0 = time.monotonic()
    try:
        harness.wait_for(lambda: False, timeout=0.2, what="the impossible")
    except harness.WaitTimeout as e:
        assert "the impossible" in str(e)
    else:
        raise AssertionError("no timeout")
    assert 0.19 < time.monotonic() - t0 < 1.0
    # Ignored exceptions are retried and reported.
    try:
        harness.wait_for(lambda: 1 / 0, timeout=0.1,
                         ignore=(ZeroDivisionError,))
    except harness.WaitTimeout as e:
        assert "ZeroDivisionError" in str(e)
    # Others propagate at once.
    try:
        harness.wait_for(lambda: 1 / 0, timeout=5)
    except ZeroDivisionError:
        pass


@t.test("render_config: groups, quoting, bools, ints, merge and delete")
def _():
    base = {"listen": "127.0.0.1:0", "redis": {"url": "u", "timeout": "2s"},
            "log": {"level": "debug"}}
    over = {"scheduler": {"shards": 4}, "redis": {"timeout": None},
            "log": None, "admin_key": 'a"b\\c',
            "x": {"on": True, "n": 2 ** 40}}
    text = harness.render_config(harness.merge_config(base, over))
    assert 'listen = "127.0.0.1:0";\n' in text
    assert "scheduler: { shards = 4; };\n" in text
    assert 'redis: { url = "u"; };\n' in text
    assert "log" not in text
    assert r'admin_key = "a\"b\\c";' in text
    assert "x: { on = true; n = 1099511627776L; };\n" in text
    nested = harness.render_config({"a": {"b": {"c": [1, 2]}, "d": "e"}})
    assert nested == 'a: {\n  b: { c = [ 1, 2 ]; };\n  d = "e";\n};\n', \
        nested


def finish(tap, out):
    """Run tap.done(): its exit status and what it printed, as lines."""
    try:
        tap.done()
    except SystemExit as e:
        return e.code, out.getvalue().splitlines()
    raise AssertionError("Tap.done() did not exit")


@t.test("Tap: ok / not ok with a traceback / SKIP, plan at the end")
def _():
    out = io.StringIO()
    tap = harness.Tap(out=out)
    tap.run("passes", lambda: None)

    def fails():
        assert 1 == 2, "one is not two"
    tap.run("fails # hash", fails)
    tap.run("skipped", lambda: harness.skip("no reason"))
    code, lines = finish(tap, out)
    assert code == 1, code
    assert lines[0] == "ok 1 - passes", lines
    assert lines[1] == "not ok 2 - fails \\# hash", lines
    assert any(x.startswith("# ") and "one is not two" in x for x in lines)
    assert "ok 3 - skipped # SKIP no reason" in lines
    assert lines[-1] == "1..3"


@t.test("Tap: a failure prints the log tail of a retryd it started, without "
        "the shards' taken and handed back lines")
def _():
    out = io.StringIO()
    tap = harness.Tap(out=out)

    def fails():
        d = harness.Retryd(start=False)
        with open(d.logfile, "w") as f:
            for i in range(60):
                f.write("T vm:1 info line %d\n" % i)
                f.write("T vm:1 debug scheduler: shard %d taken\n" % i)
                f.write("T vm:1 debug scheduler: shard %d handed back "
                        "(3 live)\n" % i)
        raise AssertionError("it failed")
    tap.run("fails", fails)
    lines = out.getvalue().splitlines()
    i = [n for n, x in enumerate(lines) if "log tail" in x]
    assert len(i) == 1, lines
    tail = [x[4:] for x in lines[i[0] + 1:]]
    assert tail == ["T vm:1 info line %d" % n for n in range(20, 60)], tail


@t.test("Tap: a sanitizer report in a retryd's log (here LeakSanitizer's, "
        "written at exit) is one more failed test, with the report")
def _():
    out = io.StringIO()
    tap = harness.Tap(out=out)
    d = harness.Retryd(start=False)
    with open(d.logfile, "w") as f:
        f.write("T vm:1 info retryd: stopped\n\n=================\n"
                "==4242==ERROR: LeakSanitizer: detected memory leaks\n\n"
                "Direct leak of 24 byte(s) in 1 object(s) allocated from:\n"
                "    #0 0x7f in malloc\n    #1 0x55 in xmalloc util/x.c:9\n")
    tap.run("passes", lambda: None)
    try:
        code, lines = finish(tap, out)
        assert code == 1, code
        assert lines[0] == "ok 1 - passes", lines
        assert lines[1] == "not ok 2 - no sanitizer reports in retryd's " \
            "output", lines
        assert any("ERROR: LeakSanitizer" in x for x in lines), lines
        assert any("xmalloc util/x.c:9" in x for x in lines), lines
        assert lines[-1] == "1..2", lines
    finally:
        del harness._sanitizer_reports[:]
    # UBSan's and ASan's own lines are reports too; ordinary lines are not.
    for text, found in [("x.c:3:9: runtime error: signed integer overflow",
                         True),
                        ("==1==ERROR: AddressSanitizer: heap-use-after-free",
                         True),
                        ("info api: the body is not valid JSON", False)]:
        assert harness._scan_sanitizers(text, "t") is found, text
    del harness._sanitizer_reports[:]


@t.test("Tap: a retryd that exits other than 0 on stop()'s SIGTERM is one "
        "more failed test; one already gone (killed by the test) is not")
def _():
    out = io.StringIO()
    tap = harness.Tap(out=out)
    d = harness.Retryd(start=False)
    armed = os.path.join(d.dir, "armed")
    d.proc = subprocess.Popen(["sh", "-c", "trap 'exit 3' TERM; : >%s; "
                               "while :; do sleep 0.05; done" % armed])
    gone = harness.Retryd(start=False)
    gone.proc = subprocess.Popen(["sh", "-c", "exit 9"])
    gone.proc.wait()
    try:
        harness.wait_for(lambda: os.path.exists(armed), what="the trap")
        assert d.stop() == 3
        assert gone.stop() == 9
        code, lines = finish(tap, out)
        assert code == 1, code
        assert lines[0] == "not ok 1 - every retryd stopped with SIGTERM " \
            "exited 0", lines
        assert any("exited 3 on SIGTERM" in x for x in lines), lines
        assert not any("exited 9" in x for x in lines), lines
        assert lines[-1] == "1..1", lines
    finally:
        del harness._stop_reports[:]


t.done()
