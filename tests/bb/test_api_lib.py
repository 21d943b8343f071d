"""test_api_lib.py - helpers shared by the REST API black-box tests
(tests/bb/test_api_*.py).  Not a test itself: it is only imported.

Key decision: one daemon per test file (started by Env), unique tenant names
per test, so the files stay fast while the tests stay independent: nothing a
test makes is visible to another test's tenant.
"""

import base64
import hashlib
import hmac
import itertools
import json
import os
import socket
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

_seq = itertools.count(1)


def unique(prefix="t"):
    """A fresh tenant or topic name."""
    return "%s%d-%s" % (prefix, next(_seq), os.urandom(3).hex())


class Env:
    """A redis-server and a retryd for one test file."""

    def __init__(self, config=None, env=None):
        self.redis = harness.RedisServer()
        self.d = harness.Retryd(redis=self.redis, config=config, env=env)
        self.d.wait_ready()

    def stop(self):
        self.d.stop()
        self.redis.stop()

    # -- requests
    def req(self, method, path, body=None, key=None, headers=None, **kw):
        return self.d.request(method, path, body, key=key, headers=headers,
                              **kw)

    def admin(self, method, path, body=None, headers=None, **kw):
        return self.d.request(method, path, body, key=self.d.admin_key,
                              headers=headers, **kw)

    def tenant(self, name=None, **extra):
        """Create a tenant; return (name, api_key)."""
        name = name or unique("t")
        body = {"name": name}
        body.update(extra)
        st, _, b = self.admin("POST", "/v1/tenants", body)
        assert st == 201, (st, b)
        return name, b["api_key"]

    def topic(self, key, name=None, **conf):
        """PUT a topic (pull unless callback_url is given); return its JSON."""
        name = name or unique("q")
        st, _, b = self.req("PUT", "/v1/topics/" + name, conf, key=key)
        assert st == 201, (st, b)
        return b

    def push(self, key, topic, body=None, expect=201, **job):
        j = dict(job)
        if body is not None:
            j["body"] = body
        st, _, b = self.req("POST", "/v1/topics/%s/jobs" % topic, j, key=key)
        assert st == expect, (st, b)
        return b

    def job(self, key, jid):
        st, _, b = self.req("GET", "/v1/jobs/" + jid, key=key)
        assert st == 200, (st, b)
        return b

    def tenant_when_ready(self, name, ready):
        """The tenant's GET once `ready` of its jobs are ready: a job due
        now is scheduled until the timer's next pass promotes it."""
        def once():
            st, _, b = self.admin("GET", "/v1/tenants/" + name)
            assert st == 200, (st, b)
            return b if b["counts"]["ready"] == ready else None
        return harness.wait_for(once, what="%d ready jobs" % ready)

    def reserve(self, key, topic, wait_ms=0):
        return self.req("GET", "/v1/topics/%s/reserve?wait_ms=%d" %
                        (topic, wait_ms), key=key)

    def healthy(self):
        st, _, b = self.req("GET", "/healthz")
        return st == 200 and b == {"status": "ok"}

    # -- raw sockets
    def raw(self, data, timeout=5.0, read=True, shut=False):
        """Send raw bytes; return what came back before the connection
        closed or the timeout (bytes; b"" when closed at once)."""
        s = socket.create_connection((self.d.host, self.d.port), timeout)
        try:
            try:
                if isinstance(data, (list, tuple)):
                    for part in data:
                        s.sendall(part)
                else:
                    s.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                pass
            if shut:
                try:
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            if not read:
                return b""
            out = b""
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    break
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                out += chunk
                if b"\r\n\r\n" in out and _complete(out):
                    break
            return out
        finally:
            s.close()


def _complete(resp):
    head, _, rest = resp.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            try:
                return len(rest) >= int(v.strip())
            except ValueError:
                return True
    return True


def status_of(raw):
    """The status code of a raw HTTP response, or None."""
    if not raw.startswith(b"HTTP/1."):
        return None
    try:
        return int(raw.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def err(b):
    """(code, field) of an error answer."""
    assert isinstance(b, dict) and "error" in b, b
    e = b["error"]
    assert isinstance(e.get("message"), str) and e["message"], b
    return e.get("code"), e.get("field")


def expect_error(resp, status, code=None, field=None):
    st, _, b = resp
    assert st == status, "expected %d, got %d: %r" % (status, st, b)
    c, f = err(b)
    if code is not None:
        assert c == code, "expected code %s, got %s (%r)" % (code, c, b)
    if field is not None:
        assert f == field, "expected field %s, got %s (%r)" % (field, f, b)
    return b


def signature_ok(secret, headers, body):
    """Check a Standard Webhooks signature (v1,base64 HMAC-SHA256)."""
    key = base64.b64decode(secret[len("whsec_"):])
    msg = ("%s.%s." % (headers["webhook-id"], headers["webhook-timestamp"])
           ).encode() + body
    want = base64.b64encode(hmac.new(key, msg, hashlib.sha256).digest())
    sigs = [s.split(",", 1)[1] for s in headers["webhook-signature"].split()
            if s.startswith("v1,")]
    return want.decode() in sigs


def dumps(o):
    return json.dumps(o).encode()
