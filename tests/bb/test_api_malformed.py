#!/usr/bin/env python3
"""test_api_malformed.py - a corpus of malformed requests: truncated JSON,
100k levels of nesting, huge numbers, invalid UTF-8, NUL bytes, members
named twice or with a \\u0000 in their name, a 10 MiB body, 20,000
headers, garbage instead of HTTP, HEAD where it would change something.
Each is answered with a 4xx or a closed connection, and an error that
quotes what the client sent stays valid UTF-8 and bounded; the daemon
stays healthy and every job it accepted before stays intact."""

import json
import os
import random
import re
import socket
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, status_of  # noqa: E402

t = harness.Tap()
E = Env()
NAME, KEY = E.tenant()
Q = E.topic(KEY, mode="pull")["name"]
ACCEPTED = [E.push(KEY, Q, {"n": i, "text": "caf\u00e9 \u2603"},
                   delay_ms=3600000, bizkey="keep-%d" % i)["id"]
            for i in range(10)]
SNAPSHOT = {j: E.job(KEY, j) for j in ACCEPTED}

JSON_ROUTES = [("POST", "/v1/topics/%s/jobs" % Q),
               ("POST", "/v1/topics/%s/jobs:batch" % Q),
               ("PUT", "/v1/topics/%s" % Q),
               ("PATCH", "/v1/jobs/" + ACCEPTED[0]),
               ("POST", "/push"),
               ("POST", "/v1/jobs/%s/ack" % ACCEPTED[1]),
               ("POST", "/v1/tenants")]


def http(method, path, body=b"", headers=None, key=KEY):
    h = ["%s %s HTTP/1.1" % (method, path), "Host: x",
         "Content-Type: application/json",
         "Content-Length: %d" % len(body)]
    if key:
        h.append("Authorization: Bearer " + key)
    h += headers or []
    return ("\r\n".join(h) + "\r\n\r\n").encode() + body


def send(method, path, body, key=KEY):
    """(status, raw) of one request over a raw socket."""
    if path == "/v1/tenants":
        key = E.d.admin_key
    raw = E.raw(http(method, path, body, key=key))
    return status_of(raw), raw


def fourxx_or_closed(raw):
    st = status_of(raw)
    return raw == b"" or (st is not None and 400 <= st < 500)


def intact():
    assert E.healthy(), "the daemon does not answer /healthz"
    for j, before in SNAPSHOT.items():
        assert E.job(KEY, j) == before, (j, before, E.job(KEY, j))
    return True


CORPUS = [
    ("truncated JSON", b'{"body": {"a": [1, 2'),
    ("truncated string", b'{"body": "abc'),
    ("trailing garbage", b'{"body": 1} xyz'),
    ("two values", b'{"body": 1}{"body": 2}'),
    ("a bare value", b'42'),
    ("an array", b'[{"body": 1}]'),
    ("null", b'null'),
    ("empty", b''),
    ("blank", b'   \r\n  '),
    ("single quotes", b"{'body': 1}"),
    ("comments", b'{"body": 1 /* x */}'),
    ("trailing comma", b'{"body": 1,}'),
    ("NaN", b'{"body": NaN}'),
    ("100k arrays", b'{"body": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
    ("100k objects", b'{"body": ' + b'{"a":' * 100000 + b"1" +
     b"}" * 100000 + b"}"),
    ("100k unclosed", b"[" * 100000),
    ("huge exponent", b'{"delay_ms": 1e999999}'),
    ("a thousand digits", b'{"delay_ms": ' + b"9" * 1000 + b"}"),
    ("negative thousand digits", b'{"delay_ms": -' + b"9" * 1000 + b"}"),
    ("int64 overflow", b'{"delay_ms": 9223372036854775808}'),
    ("uint64 overflow", b'{"priority": 18446744073709551616}'),
    ("invalid UTF-8", b'{"body": "\xff\xfe"}'),
    ("overlong UTF-8", b'{"body": "\xc0\xaf"}'),
    ("encoded surrogate", b'{"body": "\xed\xa0\x80"}'),
    ("truncated UTF-8", b'{"body": "\xe2\x98"}'),
    ("invalid UTF-8 key", b'{"\xff": 1}'),
    ("raw NUL in a string", b'{"body": "a\x00b"}'),
    ("raw NUL outside", b'{"body": 1}\x00'),
    ("NUL escape in a name", b'{"topic": "a\\u0000b", "bizkey": "x\\u0000"}'),
    ("NUL escape in a bizkey", b'{"bizkey": "k\\u0000ey"}'),
    ("NUL escape in a header", b'{"headers": {"X-A": "\\u0000"}}'),
    ("control characters", b'{"body": "\x01\x02"}'),
    ("lone surrogate escape", b'{"bizkey": "\\ud800"}'),
    ("wrong types", b'{"delay_ms": "soon", "priority": [], "token": {}}'),
    ("deep headers", b'{"headers": {"X-A": {"b": {"c": 1}}}}'),
]


@t.test("the JSON corpus is answered 4xx on every JSON route")
def _():
    for name, body in CORPUS:
        for m, p in JSON_ROUTES:
            st, raw = send(m, p, body)
            assert fourxx_or_closed(raw), (name, m, p, raw[:300])
            if st is not None:
                assert b'"error"' in raw and b'"code"' in raw, \
                    (name, m, p, raw[:300])
    assert intact()


@t.test("a body that is JSON but not an object (a bare number, true, null, "
        "a string, an array) is 400 saying it must be an object")
def _():
    # json-c, at the end of its input, cannot tell that a bare number or
    # literal has ended: these were once answered "not valid JSON:
    # unexpected end of data".
    for body in [b'42', b'-1.5', b'true', b'false', b'null', b'"x"',
                 b'[1]', b' 7 \r\n']:
        for m, p in JSON_ROUTES:
            st, raw = send(m, p, body)
            assert st == 400 and b'"invalid_json"' in raw and \
                b"the body must be a JSON object" in raw, \
                (body, m, p, raw[:300])
    assert intact()


@t.test("NUL bytes in names and keys (path, query, headers) are refused")
def _():
    for path in ["/v1/topics/a%00b", "/v1/jobs/%00", "/get/%00x",
                 "/v1/tenants/a%00b", "/delete?id=a%00b",
                 "/finish?id=%00", "/v1/jobs?topic=a%00b",
                 "/v1/jobs?cursor=%00"]:
        key = E.d.admin_key if "tenants" in path else KEY
        raw = E.raw(http("GET", path, key=key))
        assert status_of(raw) == 400, (path, raw[:300])
    raw = E.raw(http("DELETE", "/v1/topics/%s/bizkeys/a%%00b" % Q))
    assert status_of(raw) == 400, raw[:300]
    # A NUL in a header line breaks HTTP itself.
    for hdr in [b"Authorization: Bearer rk_\x00abc",
                b"X-Tenant: a\x00b", b"X-\x00: 1"]:
        req = (b"GET /v1/topics HTTP/1.1\r\nHost: x\r\n" + hdr +
               b"\r\n\r\n")
        assert fourxx_or_closed(E.raw(req)), hdr
    assert intact()


@t.test("a raw NUL byte in the request's target is refused, not cut at")
def _():
    # libmicrohttpd hands the target on as a C string: cut at the NUL,
    # each of these would name another resource (the tenant itself, the
    # topic, the job) and change it.
    victim, vkey = E.tenant()
    st, _, k = E.admin("POST", "/v1/tenants/%s/keys" % victim)
    assert st == 201, (st, k)
    vq = E.topic(vkey, mode="pull")["name"]
    vj = E.push(vkey, vq, {"v": 1}, delay_ms=3600000)["id"]
    before = E.job(vkey, vj)
    admin = E.d.admin_key
    for m, target, key in [
            ("DELETE", "/v1/tenants/%s\x00/keys/%s" % (victim, k["key_id"]),
             admin),
            ("DELETE", "/v1/topics/%s\x00/bizkeys/b" % vq, vkey),
            ("DELETE", "/v1/jobs/%s\x00/restore" % vj, vkey),
            ("PUT", "/v1/topics/nul\x00x", vkey),
            ("GET", "/v1/jobs?topic=%s\x00zz&limit=1" % vq, vkey),
            ("GET", "/v1/topics\x00", vkey)]:
        raw = E.raw(http(m, target, key=key))
        assert status_of(raw) == 400 and b'"invalid_request"' in raw, \
            (m, target, raw[:300])
    st, _, b = E.admin("GET", "/v1/tenants/" + victim)
    assert st == 200, (st, b)
    st, _, b = E.req("GET", "/v1/topics/" + vq, key=vkey)
    assert st == 200, (st, b)
    st, _, b = E.req("GET", "/v1/topics/nul", key=vkey)
    assert st == 404, (st, b)
    assert E.job(vkey, vj) == before
    st, _, b = E.req("GET", "/v1/topics", key=k["api_key"])
    assert st == 200, (st, b)
    assert intact()


@t.test("a 10 MiB body: 413 or a closed connection")
def _():
    big = b'{"body": "' + b"x" * (10 << 20) + b'"}'
    raw = E.raw(http("POST", "/v1/topics/%s/jobs" % Q, big), timeout=20)
    assert status_of(raw) == 413 or raw == b"", raw[:300]
    # Chunked, no length declared: the cap applies while reading.
    chunk = b"x" * 65536
    parts = [("POST /v1/topics/%s/jobs HTTP/1.1\r\nHost: x\r\n"
              "Authorization: Bearer %s\r\nTransfer-Encoding: chunked\r\n"
              "\r\n" % (Q, KEY)).encode(), b"10000\r\n" + chunk + b"\r\n"]
    parts += [b"10000\r\n" + chunk + b"\r\n"] * 160
    parts.append(b"0\r\n\r\n")
    raw = E.raw(parts, timeout=20)
    assert status_of(raw) == 413 or raw == b"", raw[:300]
    assert intact()


@t.test("20,000 headers: 4xx or a closed connection")
def _():
    hdrs = "".join("X-H%d: v\r\n" % i for i in range(20000))
    req = ("GET /v1/topics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s"
           "\r\n%s\r\n" % (KEY, hdrs)).encode()
    raw = E.raw(req, timeout=20)
    assert fourxx_or_closed(raw), raw[:300]
    # One huge header, one huge URL.
    raw = E.raw(("GET /v1/topics HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n" %
                 ("v" * 200000)).encode(), timeout=20)
    assert fourxx_or_closed(raw), raw[:300]
    raw = E.raw(("GET /v1/jobs/%s HTTP/1.1\r\nHost: x\r\n\r\n" %
                 ("a" * 200000)).encode(), timeout=20)
    assert fourxx_or_closed(raw), raw[:300]
    assert intact()


@t.test("garbage instead of HTTP: 4xx or a closed connection")
def _():
    rnd = random.Random(5)
    corpus = [b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64),
              b"GET\r\n\r\n", b"\r\n\r\n\r\n", b"HELLO WORLD\r\n\r\n",
              b"GET / HTTP/9.9\r\n\r\n", b"GET /healthz HTTP/1.1\r\n\r\n",
              b"GET /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Length: -5"
              b"\r\n\r\n",
              b"POST /push HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999"
              b"999999999999\r\n\r\n",
              b"POST /push HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
              b"\r\n\r\nzz\r\n",
              b"GET /v1/topics HTTP/1.1\r\nHost: x\r\nAuthorization: " +
              b"Bearer " + b"A" * 20000 + b"\r\n\r\n",
              b"GET /v1/topics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer"
              b"\r\n\r\n",
              b"BREW /v1/topics HTTP/1.1\r\nHost: x\r\n\r\n",
              b"GET /v1/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
              b"GET http://evil/v1/topics HTTP/1.1\r\nHost: x\r\n\r\n",
              b"\x00" * 4096]
    corpus += [bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 3000)))
               for _ in range(30)]
    for data in corpus:
        raw = E.raw(data, timeout=3, shut=True)
        st = status_of(raw)
        ok = raw == b"" or (st is not None and 400 <= st < 500) or \
            (st == 200 and data.startswith(b"GET /healthz")) or \
            (st == 505 and b"HTTP/9.9" in data)
        assert ok, (data[:80], raw[:300])
    assert intact()


@t.test("connections dropped mid-request leave nothing behind")
def _():
    for n in (1, 10, 100, 1000):
        req = http("POST", "/v1/topics/%s/jobs" % Q,
                   b'{"body": "' + b"y" * 5000 + b'"}')
        s = socket.create_connection((E.d.host, E.d.port))
        s.sendall(req[:n])
        s.close()
    assert intact()


@t.test("unknown routes and methods: 404 and 405 in the error shape")
def _():
    st, h, b = E.req("GET", "/nope", key=KEY)
    assert st == 404 and b["error"]["code"] == "not_found", b
    st, h, b = E.req("PUT", "/v1/jobs", key=KEY)
    assert st == 405 and b["error"]["code"] == "method_not_allowed", b
    assert "GET" in h["Allow"], h
    st, h, b = E.req("GET", "/%FF%FE", key=KEY)
    assert st == 404 and b["error"]["code"] == "not_found", b


@t.test("an ambiguous body length is refused and makes nothing")
def _():
    q = E.topic(KEY, mode="pull")["name"]
    head = ("POST /v1/topics/%s/jobs HTTP/1.1\r\nHost: x\r\n"
            "Authorization: Bearer %s\r\n"
            "Content-Type: application/json\r\n" % (q, KEY)).encode()
    for framing, body in [
            (b"Content-Length: 2\r\nContent-Length: 40\r\n", b"{}"),
            (b"Content-Length: 2\r\nContent-Length: 2\r\n", b"{}"),
            (b"Transfer-Encoding: chunked\r\nContent-Length: 7\r\n",
             b"2\r\n{}\r\n0\r\n\r\n")]:
        raw = E.raw(head + framing + b"\r\n" + body)
        assert status_of(raw) == 400 and b'"invalid_request"' in raw, \
            (framing, raw[:300])
    st, _, b = E.req("GET", "/v1/topics/" + q, key=KEY)
    assert st == 200 and sum(b["counts"].values()) == 0, b


@t.test("topics named . or .. are refused: clients read them as path steps")
def _():
    for name in ("..", ".", "%2E%2E", "%2e"):
        raw = E.raw(http("PUT", "/v1/topics/" + name, b'{"mode": "pull"}'))
        assert status_of(raw) == 400 and b'"invalid_name"' in raw, \
            (name, raw[:300])
    st, _, b = E.req("GET", "/v1/topics", key=KEY)
    assert st == 200 and not [x for x in b["topics"]
                              if x["name"] in (".", "..")], b
    # Dots inside a name are fine.
    assert E.topic(KEY, name="a..b", mode="pull")["name"] == "a..b"


@t.test("a body of null reads back as null, not as the string null")
def _():
    q = E.topic(KEY, mode="pull")["name"]
    st, _, j = E.req("POST", "/v1/topics/%s/jobs" % q, {"body": None},
                     key=KEY)
    assert st == 201, (st, j)
    b = E.job(KEY, j["id"])
    assert "body" in b and b["body"] is None, b
    st, _, r = E.reserve(KEY, q, 5000)
    assert st == 200 and r["id"] == j["id"] and r["body"] is None, r


BEYOND_64_BITS = [b"123456789012345678901234567890", b"-9223372036854775809",
                  b"18446744073709551616"]


@t.test("a body integer beyond 64 bits is refused, not clamped")
def _():
    q = E.topic(KEY, mode="pull")["name"]
    for big in BEYOND_64_BITS:
        for m, p, body in [
                ("POST", "/v1/topics/%s/jobs" % q,
                 b'{"body": {"n": %s}}' % big),
                ("POST", "/v1/topics/%s/jobs:batch" % q,
                 b'{"jobs": [{"body": 1}, {"body": [0, %s]}]}' % big),
                ("POST", "/push",
                 b'{"topic": "%s", "body": {"n": %s}}' % (q.encode(), big))]:
            st, raw = send(m, p, body)
            assert st == 400 and b'"invalid_field"' in raw, \
                (big, p, raw[:300])
    st, _, b = E.req("GET", "/v1/topics/" + q, key=KEY)
    assert st == 200 and sum(b["counts"].values()) == 0, b
    # The ends of the range, and big numbers with a fraction or an
    # exponent, reach the consumer as written.
    nums = [b"-9223372036854775808", b"18446744073709551615",
            b"123456789012345678901234567890.5", b"1.0e30"]
    st, raw = send("POST", "/v1/topics/%s/jobs" % q,
                   b'{"body": [' + b",".join(nums) + b"]}")
    assert st == 201, raw[:300]
    st, raw = send("GET", "/v1/topics/%s/reserve?wait_ms=5000" % q, b"")
    assert st == 200, raw[:300]
    assert b"[" + b",".join(nums) + b"]" in raw, raw
    # A body sent as a string keeps such an integer too, shown as text.
    st, raw = send("POST", "/v1/topics/%s/jobs" % q,
                   b'{"body": "{\\"n\\": 123456789012345678901234567890}"}')
    assert st == 201, raw[:300]
    st, raw = send("GET", "/v1/topics/%s/reserve?wait_ms=5000" % q, b"")
    assert st == 200 and b"123456789012345678901234567890" in raw, raw


def counts(q):
    st, _, b = E.req("GET", "/v1/topics/" + q, key=KEY)
    assert st == 200, (st, b)
    return b["counts"]


MANY = b", ".join(b'"k%d": %d' % (i, i) for i in range(300))


def invalid_json_refused(m, p, body, field):
    """m p with body is 400 invalid_json naming field (None: no field)."""
    key = E.d.admin_key if "tenants" in p else KEY
    st, _, b = E.req(m, p, body, key=key,
                     headers={"Content-Type": "application/json"})
    assert st == 400, (p, body, st, b)
    assert b["error"]["code"] == "invalid_json", (p, body, b)
    assert b["error"].get("field") == field, (p, body, field, b)


def tenant_view(raw=None):
    """The tenant's GET (or raw, one read before), its counts by state
    summed.  A refused request could add a job or change a setting, and
    either shows here; the earlier tests' jobs may move between states
    meanwhile (their ttr, the timer), which is not the refusals' doing.
    intact() checks those jobs one by one."""
    if raw is None:
        st, _, raw = E.admin("GET", "/v1/tenants/" + NAME)
        assert st == 200, (st, raw)
    t = dict(raw)
    t["counts"] = sum(raw["counts"].values())
    return t


def unchanged(q, topic_before, tenant_before):
    """Topic q holds no job; it and the tenant read as before."""
    assert sum(counts(q).values()) == 0, counts(q)
    assert E.req("GET", "/v1/topics/" + q, key=KEY)[2] == topic_before
    st, _, raw = E.admin("GET", "/v1/tenants/" + NAME)
    assert st == 200 and tenant_view(raw) == tenant_before, \
        (raw, tenant_before)


@t.test("a member named twice in one object is refused 400 naming it, and "
        "changes nothing")
def _():
    q = E.topic(KEY, mode="pull", timeout_ms=1000)["name"]
    topic_before = E.req("GET", "/v1/topics/" + q, key=KEY)[2]
    tenant_before = tenant_view()
    jobs = "/v1/topics/%s/jobs" % q
    batch = "/v1/topics/%s/jobs:batch" % q
    for m, p, body, field in [
            ("POST", jobs, b'{"delay_ms": "soon", "delay_ms": 1}',
             "delay_ms"),
            ("POST", jobs, b'{"delay_ms": 1, "body": 1, "delay_ms": 1}',
             "delay_ms"),
            # Names compare as json-c keeps them: escapes decoded.
            ("POST", jobs, b'{"bizkey": "a", "\\u0062izkey": "b"}',
             "bizkey"),
            # The job's body is checked too: json-c would keep one of the
            # two, and the callback would never see the other.
            ("POST", jobs, b'{"body": {"a": 1, "b": {"c": 1, "c": 2}}}',
             "body.b.c"),
            ("POST", jobs, b'{"body": [0, {"x": {}}, {"x": 1, "x": 1}]}',
             "body[2].x"),
            ("POST", jobs, b'{"body": {"\\u00e9": 1, "\xc3\xa9": 2}}',
             "body.\u00e9"),
            # json-c cuts a name at a NUL: "a\u0000b" would replace "a"
            # (refused, as a name holding a NUL is).
            ("POST", jobs, b'{"body": {"a": 1, "a\\u0000b": 2}}',
             "body.a"),
            ("POST", jobs, b'{"body": {' + MANY + b', "k7": 0}}',
             "body.k7"),
            ("POST", jobs, b'{"headers": {"X-A": "1", "X-A": "2"}}',
             "headers.X-A"),
            ("POST", batch, b'{"jobs": [{"body": 1}, '
             b'{"delay_ms": 1, "delay_ms": 2}]}', "jobs[1].delay_ms"),
            ("POST", batch, b'{"jobs": [{}], "jobs": [{}, {}]}', "jobs"),
            ("POST", batch, b'{"jobs": [{"headers": {"X-A": "1", '
             b'"X-B": "1", "X-A": "1"}}]}', "jobs[0].headers.X-A"),
            ("POST", batch, b'{"jobs": [{}, {"body": {"a": {"b": 1, '
             b'"b": 1}}}]}', "jobs[1].body.a.b"),
            ("POST", "/push", ('{"topic": "%s", "body": 1, "body": 2}' %
                               q).encode(), "body"),
            ("PUT", "/v1/topics/" + q, b'{"mode": "pull", "mode": "push"}',
             "mode"),
            ("PUT", "/v1/topics/" + q, b'{"headers": {"X-A": "1", '
             b'"X-A": "1"}}', "headers.X-A"),
            ("PATCH", "/v1/jobs/" + ACCEPTED[0],
             b'{"delay_ms": 1, "delay_ms": 2}', "delay_ms"),
            ("POST", "/v1/jobs/%s/ack" % ACCEPTED[1],
             b'{"token": "a", "token": "b"}', "token"),
            ("POST", "/v1/tenants", b'{"name": "dup1", "name": "dup2"}',
             "name"),
            ("PATCH", "/v1/tenants/" + NAME,
             b'{"max_pending": 5, "max_pending": 6}', "max_pending")]:
        invalid_json_refused(m, p, body, field)
    # Nothing was made or changed.
    unchanged(q, topic_before, tenant_before)
    for t_ in ("dup1", "dup2"):
        assert E.admin("GET", "/v1/tenants/" + t_)[0] == 404, t_
    assert intact()
    # Same names in different objects are fine, as is a body sent as a
    # string: it reaches the callback as it is.
    for body in [b'{"body": {"a": {"x": 1}, "b": {"x": 1}, "x": 1}}',
                 b'{"body": [{"x": 1}, {"x": 1}]}',
                 b'{"body": {' + MANY + b'}}',
                 b'{"body": {"\\u00e9": 1, "e\\u0301": 2}}',
                 b'{"body": "{\\"a\\": 1, \\"a\\": 2}"}']:
        st, _, b = E.req("POST", jobs, body, key=KEY,
                         headers={"Content-Type": "application/json"})
        assert st == 201, (body, st, b)


@t.test("a member name holding \\u0000 is refused 400 naming it, and "
        "changes nothing")
def _():
    # json-c keeps names as C strings: "delay_ms\u0000x" would read as
    # delay_ms, and a job's body would reach the callback with the name cut.
    q = E.topic(KEY, mode="pull")["name"]
    topic_before = E.req("GET", "/v1/topics/" + q, key=KEY)[2]
    tenant_before = tenant_view()
    jobs = "/v1/topics/%s/jobs" % q
    batch = "/v1/topics/%s/jobs:batch" % q
    for m, p, body, field in [
            ("POST", jobs, b'{"delay_ms\\u0000x": 5}', "delay_ms"),
            ("POST", jobs, b'{"\\u0000": 1}', None),
            ("POST", jobs, b'{"body": {"a\\u0000b": 1}}', "body.a"),
            ("POST", jobs, b'{"body": [1, {"x": {"y\\u0000": 1}}]}',
             "body[1].x.y"),
            ("POST", jobs, b'{"headers": {"X-A\\u0000B": "1"}}',
             "headers.X-A"),
            ("POST", batch, b'{"jobs": [{}, {"bizkey\\u0000": "k"}]}',
             "jobs[1].bizkey"),
            ("POST", "/push", ('{"topic": "%s", "id\\u0000x": "nul-1"}' %
                               q).encode(), "id"),
            ("PUT", "/v1/topics/" + q, b'{"ttr_ms\\u0000": 5}', "ttr_ms"),
            ("PATCH", "/v1/jobs/" + ACCEPTED[0],
             b'{"delay_ms\\u0000": 1}', "delay_ms"),
            ("POST", "/v1/jobs/%s/ack" % ACCEPTED[1],
             b'{"token\\u0000": "a"}', "token"),
            ("POST", "/v1/tenants", b'{"name\\u0000": "nul1"}', "name"),
            ("PATCH", "/v1/tenants/" + NAME,
             b'{"max_pending\\u0000": 5}', "max_pending")]:
        invalid_json_refused(m, p, body, field)
    unchanged(q, topic_before, tenant_before)
    assert E.admin("GET", "/v1/tenants/nul1")[0] == 404
    assert intact()


def string_body_reads_back(text):
    """Pushes text as a string body to a new pull topic: GET and reserve
    answer it as that string.  The topic's name."""
    q = E.topic(KEY, mode="pull")["name"]
    j = E.push(KEY, q, text)["id"]
    assert E.job(KEY, j)["body"] == text, E.job(KEY, j)
    st, raw = send("GET", "/v1/topics/%s/reserve?wait_ms=5000" % q, b"")
    assert st == 200, raw[:300]
    r = json.loads(raw.partition(b"\r\n\r\n")[2])
    assert r["id"] == j and r["body"] == text, r
    return q


@t.test("a body sent as a string holding a name with \\u0000 reads back "
        "as that string; a NUL in a string value is kept")
def _():
    q = string_body_reads_back('{"a\\u0000b": 1}')
    # json-c keeps a string value with its length: nothing to refuse.
    for body in [{"a": "x\u0000y"}, "x\u0000y"]:
        j = E.push(KEY, q, body)["id"]
        assert E.job(KEY, j)["body"] == body, (body, E.job(KEY, j))
        st, _, r = E.reserve(KEY, q, 5000)
        assert st == 200 and r["id"] == j and r["body"] == body, r


@t.test("an unknown member's long name is shown cut at 64 bytes, never "
        "inside a UTF-8 sequence")
def _():
    name = "\u00e9" * 100
    for p, body, field in [
            ("/v1/topics/%s/jobs" % Q, {name: 1}, "\u00e9" * 32),
            ("/v1/topics/%s/jobs:batch" % Q, {"jobs": [{name: 1}]},
             "jobs[0]." + "\u00e9" * 32),
            ("/v1/topics/%s/jobs" % Q, {"a" * 100 + "\u00e9": 1}, "a" * 64),
            ("/v1/topics/%s/jobs" % Q, {"a" * 63 + "\u00e9": 1}, "a" * 63)]:
        # A reply that is not UTF-8 fails in E.req already.
        st, _, b = E.req("POST", p, body, key=KEY)
        assert st == 400 and b["error"]["code"] == "unknown_field", b
        assert b["error"]["field"] == field, (field, b)
    assert intact()


def error_of(raw):
    """The error of a raw answer, its body read as strict UTF-8 JSON, with
    its message and field within their bounds."""
    e = json.loads(raw.partition(b"\r\n\r\n")[2].decode("utf-8"))["error"]
    assert len(e["message"].encode()) <= 511, e
    assert len(e.get("field", "").encode()) <= 320, e
    return e


@t.test("a member's path in an error shows at most 64 bytes of each name, "
        "never inside a UTF-8 sequence, and ends where a name was cut")
def _():
    e100, e32 = "\u00e9" * 100, "\u00e9" * 32
    for body, field in [
            ('{"body": {"%s": 1, "%s": 2}}' % (e100, e100), "body." + e32),
            ('{"body": {"%s": {"c": 1, "c": 2}}}' % e100, "body." + e32),
            ('{"body": {"%s": {"c": 1, "c": 2}}}' % ("a" * 63 + "\u00e9"),
             "body." + "a" * 63),
            ('{"body": {"a\\"b": {"c": 1, "c": 2}}}', "body.a"),
            ('{"body": {"%s": {"x\\u0000": 1}}}' % e100, "body." + e32)]:
        st, raw = send("POST", "/v1/topics/%s/jobs" % Q, body.encode())
        e = error_of(raw)
        assert st == 400 and e["code"] == "invalid_json", (body, raw[:300])
        assert e["field"] == field, (field, e)
    assert intact()


@t.test("text from the request in an error (path, query, header, body) is "
        "valid UTF-8, bounded, and not cut inside a UTF-8 sequence")
def _():
    q = E.topic(KEY, mode="pull")["name"]
    topic_before = E.req("GET", "/v1/topics/" + q, key=KEY)[2]
    j = ACCEPTED[3]
    for s in ("%C3%A9" * 300, "%FF%FE%C0%AF%ED%A0%80" + "a" * 600,
              "%0A%1B%22%5C%7F" * 100):
        for m, p in [
                ("GET", "/v1/topics/" + s), ("PUT", "/v1/topics/" + s),
                ("GET", "/v1/jobs/" + s), ("DELETE", "/v1/jobs/" + s),
                ("POST", "/v1/topics/%s/jobs" % s),
                ("GET", "/v1/topics/%s/reserve" % s),
                ("DELETE", "/v1/topics/%s/bizkeys/%s" % (q, s)),
                ("GET", "/get/" + s), ("GET", "/restore/" + s),
                ("GET", "/v1/jobs?topic=" + s), ("GET", "/v1/jobs?state=" + s),
                ("GET", "/v1/jobs?bizkey=" + s),
                ("GET", "/v1/jobs?cursor=" + s),
                ("GET", "/v1/topics/%s/reserve?wait_ms=%s" % (q, s)),
                ("GET", "/delete?id=" + s),
                ("GET", "/finish?id=%s&token=%s" % (j, s)),
                ("DELETE", "/v1/topics/%s?force=%s" % (q, s)),
                ("GET", "/v1/topics/%s/dead?cursor=%s" % (q, s)),
                ("GET", "/v1/topics/%s/dead?limit=%s" % (q, s)),
                ("GET", "/nope/" + s), ("GET", "/ui/" + s),
                ("GET", "/v1/tenants/" + s),
                ("DELETE", "/v1/tenants/%s/keys/%s" % (NAME, s))]:
            key = E.d.admin_key if "tenants" in p else KEY
            raw = E.raw(http(m, p, key=key))
            assert 400 <= status_of(raw) < 500, (m, p[:80], raw[:300])
            error_of(raw)
    for v in (b"\xc3\xa9" * 300, b"\xff\xfe\xc0\xaf" + b"a" * 600):
        for h, key in [(b"X-Tenant: " + v, E.d.admin_key),
                       (b"Authorization: Bearer " + v, None)]:
            raw = E.raw(b"GET /v1/topics HTTP/1.1\r\nHost: x\r\n" +
                        (b"Authorization: Bearer %s\r\n" % key.encode()
                         if key else b"") + h + b"\r\n\r\n")
            assert 400 <= status_of(raw) < 500, (h[:40], raw[:300])
            error_of(raw)
    ls = "\u00e9" * 300
    for m, p, body in [
            ("PUT", "/v1/topics/" + q, {"mode": ls}),
            ("PUT", "/v1/topics/" + q, {"callback_url": "http://" + ls}),
            ("PUT", "/v1/topics/" + q, {"secret": ls}),
            ("PUT", "/v1/topics/" + q, {"retry_schedule": "<1" + ls + ">"}),
            ("PUT", "/v1/topics/" + q, {"headers": {"X-A": ls + "\n"}}),
            ("PUT", "/v1/topics/" + q, {"headers": {"X-" + ls: "a"}}),
            ("PUT", "/v1/topics/" + q, {ls: 1}),
            ("POST", "/v1/topics/%s/jobs" % q, {"bizkey": ls}),
            ("POST", "/v1/topics/%s/jobs:batch" % q,
             {"jobs": [{}, {"headers": {"X-" + ls: "a"}}]}),
            ("POST", "/push", {"topic": ls}),
            ("POST", "/push", {"topic": q, "id": ls}),
            ("POST", "/v1/tenants", {"name": ls}),
            ("POST", "/v1/jobs/%s/ack" % j, {"token": ls}),
            ("POST", "/v1/schedules:validate",
             {"retry_schedule": "<1" + ls}),
            ("PATCH", "/v1/jobs/" + j, {"delay_ms": ls})]:
        key = E.d.admin_key if "tenants" in p else KEY
        st, raw = send(m, p, json.dumps(body, ensure_ascii=False).encode())
        assert 200 <= st < 500 and b'"error"' in raw, (p, body, raw[:300])
        error_of(raw)
    # A message cut at its limit ends between characters, at either parity.
    for p in ("/nope/", "/nope2/"):
        raw = E.raw(http("GET", p + "%C3%A9" * 300))
        e = error_of(raw)
        assert e["message"].endswith("\u00e9"), e
    assert E.req("GET", "/v1/topics/" + q, key=KEY)[2] == topic_before
    assert intact()


@t.test("a body sent as a string that names a member twice reads back as "
        "that string, not as json-c's reading of it")
def _():
    string_body_reads_back('{"a": 1, "b": {"c": 2}, "a": 3}')


def answer(method, path, key=KEY):
    """(status, headers, body) over a raw socket: every byte the server
    sent after the headers, the connection closed by it after the answer."""
    raw = E.raw(http(method, path, key=key, headers=["Connection: close"]))
    head, sep, body = raw.partition(b"\r\n\r\n")
    assert sep, (method, path, raw[:300])
    hdrs = {}
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        hdrs[k.strip().lower().decode()] = v.strip().decode()
    return status_of(raw), hdrs, body


@t.test("HEAD on a GET route answers as GET without a body")
def _():
    j = ACCEPTED[2]
    for path, key in [("/healthz", None), ("/v1/topics", KEY),
                      ("/v1/topics/" + Q, KEY), ("/v1/jobs/" + j, KEY),
                      ("/v1/jobs/no-such-job", KEY),
                      ("/v1/tenants/" + NAME, E.d.admin_key),
                      ("/v1/topics", None), ("/", None)]:
        hs, hh, hb = answer("HEAD", path, key)
        gs, gh, gb = answer("GET", path, key)
        assert hs == gs, (path, hs, gs)
        assert hb == b"", (path, hb[:300])
        assert gb != b"", (path, gs)
        assert hh.get("content-type") == gh.get("content-type"), \
            (path, hh, gh)
        assert hh.get("content-length") == str(len(gb)), (path, hh, len(gb))
    assert intact()


@t.test("HEAD elsewhere: 405 on routes without GET, and on the GET routes "
        "that change something; nothing changes")
def _():
    q = E.topic(KEY, mode="pull")["name"]
    ready = E.push(KEY, q, {"r": 1})["id"]
    # Due now, it is ready once the timer's next pass has promoted it.
    harness.wait_for(lambda: E.job(KEY, ready)["state"] == "ready",
                     what="the job to be ready")
    for path, allow in [("/v1/topics/%s/jobs" % q, "POST"),
                        ("/v1/topics/%s/reserve?wait_ms=0" % q, "GET"),
                        ("/get/%s" % q, "GET"),
                        ("/delete?id=" + ready, "GET"),
                        ("/finish?id=" + ready, "GET"),
                        ("/restore/" + ready, "GET")]:
        hs, hh, hb = answer("HEAD", path)
        assert hs == 405, (path, hs, hh)
        assert hb == b"", (path, hb[:300])
        assert hh.get("allow") == allow, (path, hh)
    # The job was neither reserved, finished nor cancelled.
    assert E.job(KEY, ready)["state"] == "ready", E.job(KEY, ready)
    st, _, r = E.reserve(KEY, q, 5000)
    assert st == 200 and r["id"] == ready and r["attempt"] == 1, r
    # A 405 of a GET route's path offers HEAD with GET.
    st, h, b = E.req("PUT", "/v1/jobs/" + ready, key=KEY)
    assert st == 405 and set(h["Allow"].split(", ")) == \
        {"GET", "HEAD", "DELETE", "PATCH"}, (st, h)
    assert intact()


@t.test("libmicrohttpd's own messages (a request too big, garbage) are "
        "log lines with a time and a level, not bare text")
def _():
    # The 431 of 20,000 headers and the garbage above make libmicrohttpd
    # speak; it used to print bare lines on stderr, which a log reader
    # cannot place or filter.
    raw = E.raw(("GET /v1/topics HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n" %
                 ("v" * 200000)).encode(), timeout=20)
    assert fourxx_or_closed(raw), raw[:300]
    lines = [ln for ln in E.d.log().splitlines() if ln.strip()]
    mhd = [ln for ln in lines if "libmicrohttpd: " in ln]
    assert mhd, "libmicrohttpd said nothing"
    # Nothing from it at start (its logger set where it wants it).
    start = lines[:[i for i, ln in enumerate(lines)
                    if "listening on" in ln][0] + 1]
    assert not [ln for ln in start if "libmicrohttpd" in ln], start
    bare = [ln for ln in lines
            if not re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", ln)]
    assert not bare, bare[:5]


@t.test("after all of it the daemon is healthy and the jobs intact")
def _():
    assert intact()
    # And it still takes work.
    j = E.push(KEY, Q, {"after": True})
    st, _, r = E.reserve(KEY, Q, 5000)
    assert st == 200 and r["id"] == j["id"], r


E.stop()
t.done()
