#!/usr/bin/env python3
"""test_api_mutate.py - every route's valid request, mutated at random:
one member replaced by a value of another type or out of its range,
removed, added, named twice, the body cut short or a byte changed, a
path or query parameter replaced by a strange one, the key swapped for
another tenant's or the admin's.  Whatever comes of it, the daemon
answers below 500, every error has the documented shape, a 4xx changes
nothing anywhere, and no request of one tenant changes another's
anything.  Then half as many again from eight threads at once, where
only what holds whatever the order is checked (no 5xx, errors in shape,
no request left unanswered, the other tenant untouched): two requests on
one job, a topic or tenant deleted under a push, must not break the
daemon.

Key decision: the test does not predict each answer (a mutation may
well leave the request valid); it checks the properties API.md promises
for every input.  What "changes nothing" compares is what cannot change
by itself while the test runs: the tenants, each tenant's topics, the
journal's rows of the jobs of pull topics (the journal writes no row for
a job becoming ready or reserved, and the reserved jobs' time to run is
an hour), and the counts of the topic the reserves take from.  Push
topics' jobs are left out: their callbacks run on their own.

The run is fixed (seed 1, 1200 requests) so that a failure replays (the
threads' part replays each thread's requests, not how they interleave);
RETRYD_MUTATE_SEED and RETRYD_MUTATE_N choose another, to look further.
A failure names the seed, the request's number and the request.
"""

import json
import os
import random
import sys
import threading
import urllib.parse

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, unique  # noqa: E402

SEED = int(os.environ.get("RETRYD_MUTATE_SEED", "1"))
N = int(os.environ.get("RETRYD_MUTATE_N", "1200"))
HOUR = 3600000

t = harness.Tap()
RND = random.Random(SEED)
LOCAL = threading.local()   # a thread's own random stream and R topic


def rng():
    return getattr(LOCAL, "rnd", RND)


def r_topic():
    return getattr(LOCAL, "R", A.R)
DBDIR = harness.mkdtemp("retryd-bb-j-")
E = Env(config={"journal": {"url": "sqlite://%s/journal.db" % DBDIR}})


# -- the world the mutations run in ----------------------------------------

class Tenant:
    def __init__(self):
        self.name, self.key = E.tenant()
        # P: pull, where the job routes push; R: pull, where the reserves
        # take from; H: push, its callbacks refused at once.
        self.P = E.topic(self.key, name=unique("P"), mode="pull",
                         ttr_ms=HOUR)["name"]
        self.R = E.topic(self.key, name=unique("R"), mode="pull",
                         ttr_ms=HOUR, retry_schedule="<0,1h,1h>")["name"]
        self.H = E.topic(self.key, name=unique("H"),
                         callback_url="http://127.0.0.1:9/cb",
                         retry_schedule="<0,1h>")["name"]
        self.jobs = [E.push(self.key, self.P, {"n": i}, delay_ms=HOUR,
                            bizkey="fixed-%d" % i)["id"] for i in range(4)]
        self.ready = [E.push(self.key, self.R, {"r": i})["id"]
                      for i in range(3)]

    def stable(self):
        return (self.P, self.R)


A = Tenant()
B = Tenant()
E.d.wait_ready()


DIRTY = [True]      # set by each setup step that changes state


def api(method, path, body=None, key=None, headers=None):
    st, h, b = E.req(method, path, body, key=key or A.key, headers=headers,
                     timeout=15)
    return st, b


def ready_in_R(n=1):
    """Make sure R has n jobs ready (reserves take them)."""
    def count():
        st, b = api("GET", "/v1/topics/" + r_topic())
        assert st == 200, b
        return b["counts"].get("ready", 0)
    for _ in range(max(0, n - count())):
        DIRTY[0] = True
        api("POST", "/v1/topics/%s/jobs" % r_topic(),
            {"body": {"refill": 1}})
    harness.wait_for(lambda: count() >= n, what="jobs ready in R")


def reserved():
    """A job of R reserved now: (id, token)."""
    ready_in_R()
    DIRTY[0] = True
    st, b = api("GET", "/v1/topics/%s/reserve?wait_ms=5000" % r_topic())
    assert st == 200, (st, b)
    return b["id"], b["token"]


def fresh_job(bizkey=None):
    j = {"body": {"spare": 1}, "delay_ms": HOUR}
    if bizkey:
        j["bizkey"] = bizkey
    DIRTY[0] = True
    st, b = api("POST", "/v1/topics/%s/jobs" % A.P, j)
    assert st == 201, (st, b)
    return b["id"]


def spare_tenant():
    DIRTY[0] = True
    name, key = E.tenant()
    return name


def spare_topic(**conf):
    DIRTY[0] = True
    return E.topic(A.key, name=unique("S"), **conf)["name"]


def snapshot():
    """What no 4xx may change (see the file's comment)."""
    st, _, tenants = E.admin("GET", "/v1/tenants")
    assert st == 200, tenants
    snap = {"tenants": tenants}
    for who in (A, B):
        st, topics = api("GET", "/v1/topics", key=who.key)
        assert st == 200, topics
        rows, cursor = [], None
        while True:
            q = "/v1/jobs?limit=1000" + \
                ("&cursor=" + urllib.parse.quote(cursor) if cursor else "")
            st, page = api("GET", q, key=who.key)
            assert st == 200, page
            rows += [r for r in page["jobs"] if r["topic"] in who.stable()]
            cursor = page.get("next_cursor")
            if not cursor:
                break
        st, r = api("GET", "/v1/topics/" + who.R, key=who.key)
        assert st == 200, r
        snap[who.name] = {"topics": topics,
                          "rows": sorted(rows, key=lambda x: x["id"]),
                          "R": r["counts"]}
    return snap


# -- request templates ------------------------------------------------------
#
# Each is (name, make): make() does any setup and returns the valid
# request: method, path with {name} slots, their values, the query as a
# list of pairs, the body (a JSON value or None) and the key ("A" or
# "admin").  Setup may change state; the snapshot is taken after it.

def req(method, path, params=None, query=None, body=None, key="A"):
    return {"method": method, "path": path, "params": dict(params or {}),
            "query": list(query or []), "body": body, "key": key}


JOB = {"body": {"order": 42, "items": ["a", "b"]}, "delay_ms": HOUR,
       "bizkey": "order-42", "priority": 3, "headers": {"X-Req": "1"},
       "retry_schedule": "<0,1m,2h>", "ttr_ms": 60000}

TEMPLATES = [
    ("push a job", lambda: req(
        "POST", "/v1/topics/{topic}/jobs", {"topic": A.P},
        body=dict(JOB, bizkey=unique("bk")))),
    ("push a job at a time", lambda: req(
        "POST", "/v1/topics/{topic}/jobs", {"topic": A.P},
        body={"run_at_ms": 4102444800000, "body": "x",
              "retry_schedule": [0, 1000, 60000]})),
    ("push a job to a push topic", lambda: req(
        "POST", "/v1/topics/{topic}/jobs", {"topic": A.H},
        body={"body": [1, 2], "delay_ms": HOUR})),
    ("push a batch", lambda: req(
        "POST", "/v1/topics/{topic}/jobs:batch", {"topic": A.P},
        body={"jobs": [dict(JOB, bizkey=unique("bk")),
                       {"body": None, "priority": -5}]})),
    ("put a pull topic", lambda: req(
        "PUT", "/v1/topics/{topic}", {"topic": unique("T")},
        body={"mode": "pull", "ttr_ms": 30000,
              "retry_schedule": "<0,0,2m,10m>", "max_in_flight": 10})),
    ("put a push topic", lambda: req(
        "PUT", "/v1/topics/{topic}", {"topic": unique("T")},
        body={"callback_url": "http://127.0.0.1:9/x",
              "retry_schedule": "<0,1h>", "timeout_ms": 5000,
              "headers": {"X-Foo": "bar"}, "max_in_flight": 100})),
    ("delete a topic", lambda: req(
        "DELETE", "/v1/topics/{topic}", {"topic": spare_topic(mode="pull")})),
    ("rotate a secret", lambda: req(
        "POST", "/v1/topics/{topic}/secret",
        {"topic": spare_topic(callback_url="http://127.0.0.1:9/y")})),
    ("get a topic", lambda: req("GET", "/v1/topics/{topic}", {"topic": A.P})),
    ("list topics", lambda: req("GET", "/v1/topics")),
    ("a topic's dead letters", lambda: req(
        "GET", "/v1/topics/{topic}/dead", {"topic": A.H},
        query=[("limit", "10")])),
    ("a topic's stats", lambda: req(
        "GET", "/v1/topics/{topic}/stats", {"topic": A.H})),
    ("redrive", lambda: req(
        "POST", "/v1/topics/{topic}/dead:redrive", {"topic": A.P})),
    ("get a job", lambda: req("GET", "/v1/jobs/{id}", {"id": A.jobs[0]})),
    ("list jobs", lambda: req(
        "GET", "/v1/jobs", query=[("topic", A.P), ("state", "scheduled"),
                                  ("bizkey", "fixed-1"), ("limit", "5")])),
    ("cancel a job", lambda: req(
        "DELETE", "/v1/jobs/{id}", {"id": fresh_job()})),
    ("cancel by bizkey", lambda: (lambda k: (fresh_job(k), req(
        "DELETE", "/v1/topics/{topic}/bizkeys/{bizkey}",
        {"topic": A.P, "bizkey": k}))[1])(unique("bk"))),
    ("reschedule a job", lambda: req(
        "PATCH", "/v1/jobs/{id}", {"id": fresh_job()},
        body={"delay_ms": 2 * HOUR})),
    ("retry a job", lambda: req(
        "POST", "/v1/jobs/{id}/retry", {"id": A.jobs[1]})),
    ("restore a job", lambda: req(
        "POST", "/v1/jobs/{id}/restore", {"id": A.jobs[2]})),
    ("restore", lambda: req("POST", "/v1/restore",
                            query=[("expired", "false")])),
    ("reserve", lambda: (ready_in_R(), req(
        "GET", "/v1/topics/{topic}/reserve", {"topic": r_topic()},
        query=[("wait_ms", "0"), ("max", "1")]))[1]),
    ("ack", lambda: (lambda j: req(
        "POST", "/v1/jobs/{id}/ack", {"id": j[0]},
        body={"token": j[1]}))(reserved())),
    ("nack", lambda: (lambda j: req(
        "POST", "/v1/jobs/{id}/nack", {"id": j[0]},
        body={"token": j[1]}))(reserved())),
    ("ack many", lambda: (lambda j: req(
        "POST", "/v1/jobs:ack",
        body={"jobs": [{"id": j[0], "token": j[1]}]}))(reserved())),
    ("nack many", lambda: (lambda j: req(
        "POST", "/v1/jobs:nack",
        body={"jobs": [{"id": j[0], "token": j[1]}]}))(reserved())),
    ("validate a schedule", lambda: req(
        "POST", "/v1/schedules:validate",
        body={"retry_schedule": "<0,0,2m,10m,10m,1h,2h,6h,15h>"})),
    ("stats", lambda: req("GET", "/v1/stats", query=[("topic", A.H)])),
    ("whoami", lambda: req("GET", "/v1/whoami")),
    ("create a tenant", lambda: req(
        "POST", "/v1/tenants", key="admin",
        body={"name": unique("n"), "max_pending": 1000,
              "max_in_flight": 10})),
    ("list tenants", lambda: req("GET", "/v1/tenants", key="admin")),
    ("get a tenant", lambda: req("GET", "/v1/tenants/{name}",
                                 {"name": B.name}, key="admin")),
    ("patch a tenant", lambda: req(
        "PATCH", "/v1/tenants/{name}", {"name": spare_tenant()},
        key="admin", body={"max_pending": 5000, "max_in_flight": None})),
    ("delete a tenant", lambda: req(
        "DELETE", "/v1/tenants/{name}", {"name": spare_tenant()},
        key="admin", query=[("force", "false")])),
    ("issue a key", lambda: req(
        "POST", "/v1/tenants/{name}/keys", {"name": spare_tenant()},
        key="admin", body={})),
    ("list keys", lambda: req("GET", "/v1/tenants/{name}/keys",
                              {"name": B.name}, key="admin")),
    ("revoke a key", lambda: (lambda n: req(
        "DELETE", "/v1/tenants/{name}/keys/{key_id}",
        {"name": n, "key_id": E.admin("POST", "/v1/tenants/%s/keys" % n)
         [2]["key_id"]}, key="admin"))(spare_tenant())),
    ("original push", lambda: req(
        "POST", "/push", body={"topic": A.P, "bizkey": unique("o"),
                               "delay": HOUR, "priority": 1, "ttl": 60000,
                               "body": {"x": 1}})),
    ("original push with an id", lambda: req(
        "POST", "/push", body={"topic": A.P, "id": unique("c"),
                               "delay": HOUR, "body": "y"})),
    ("original delete", lambda: req("GET", "/delete",
                                    query=[("id", fresh_job())])),
    ("original get", lambda: (ready_in_R(), req(
        "GET", "/get/{topic}", {"topic": r_topic()},
        query=[("wait_ms", "0")]))[1]),
    ("original finish", lambda: (lambda j: req(
        "GET", "/finish", query=[("id", j[0]), ("token", j[1])]))(
            reserved())),
    ("original restore", lambda: req("GET", "/restore",
                                     query=[("expire", "false")])),
    ("original restore of one", lambda: req(
        "GET", "/restore/{id}", {"id": A.jobs[3]})),
    ("metrics", lambda: req("GET", "/metrics")),
    ("static file", lambda: req("GET", "/static/{file}",
                                {"file": "app.js"})),
]


# -- the mutations ----------------------------------------------------------

LONG = "y" * 70000
WEIRD = [None, True, False, 0, -1, 1, 7, 1000, 1001, 2 ** 31, 2 ** 53 + 1,
         2 ** 63 - 1, 2 ** 63, -2 ** 63, -2 ** 63 - 1, 2 ** 64, 1.5, -0.0,
         1e308, 5e-324, "", " ", "0", "-1", "1e3", "true", "null", "x" * 64,
         "x" * 65, "x" * 129, "x" * 4097, LONG, "caf\u00e9", "\u202e",
         "\U0001F600", "a\u0000b", "\x01\x1f", "\ud800", "<0,1s>", "<>",
         "<-1>", "<0," + "1s," * 600 + "1s>", "<1y>", "<99999999999d>",
         "http://127.0.0.1:9/", "https://user:pw@[::1]:0/x", "ftp://x/",
         "javascript:alert(1)", "pull", "push", "PULL", "whsec_x",
         "rk_" + "A" * 43, [], [1], ["x"], [None], [[[]]], {}, {"a": 1},
         {"": None}, list(range(1200))]
NAMES = ["", "x" * 70, "\u0000", "BODY", "__proto__", "body ", "\u00e9",
         "delay_ms", "run_at_ms", "mode", "token", "jobs", "topic"]
PATHS = ["", ".", "..", "%2E%2E", "%00", "a%00b", "%FF", "%C3%A9", "a%2Fb",
         "a%20b", "%", "%zz", "-", "_", "0", "9" * 30, "x" * 129, "x" * 3000,
         "..%2F..%2Fetc%2Fpasswd", "38GEBGSDFWRR0000", "ZZZZZZZZZZZZZZZZ",
         "0000000000000000", "a;b", "%3F", "*"]
QUERY = ["", "-1", "0", "1.5", "abc", "1e3", "+5", "%205", "0x10",
         "99999999999999999999", "%00", "%FF", "true", "TRUE", "yes", "x" *
         300, "0" * 400, "1001", "2147483648", "in_flight", "ready", "%"]
CTYPES = [None, "text/plain", "application/x-www-form-urlencoded",
          "application/json; charset=latin1", "multipart/form-data",
          "application/json, application/json", "\u00e9"]


def weird():
    v = rng().choice(WEIRD + ["deep", "wide"])
    if v == "deep":
        d = rng().randint(2, 600)
        v = 0
        for _ in range(d):
            v = {"a": v} if rng().random() < 0.5 else [v]
    elif v == "wide":
        v = {"k%d" % i: i for i in range(rng().randint(2, 3000))}
    return v


def nodes(v, path=()):
    yield path
    if isinstance(v, dict):
        for k in v:
            yield from nodes(v[k], path + (k,))
    elif isinstance(v, list):
        for i in range(len(v)):
            yield from nodes(v[i], path + (i,))


def get(v, path):
    for p in path:
        v = v[p]
    return v


def mutate_body(body):
    """A mutated body: a JSON value, or bytes for text-level mutations."""
    if body is None:
        body = {}
    body = json.loads(json.dumps(body))
    spots = list(nodes(body))
    op = rng().choice(["replace", "replace", "replace", "delete", "add",
                       "root", "dup", "cut", "byte"])
    if op == "root":
        return weird()
    if op in ("cut", "byte", "dup"):
        text = json.dumps(body).encode()
        if op == "cut":
            return text[:rng().randrange(0, max(1, len(text)))]
        if op == "byte":
            i = rng().randrange(0, len(text))
            return text[:i] + bytes([rng().randrange(256)]) + text[i + 1:]
        if isinstance(body, dict) and body:
            k = rng().choice(list(body))
            extra = json.dumps({k: weird()})[1:-1]
            return b"{" + extra.encode() + b", " + text[1:]
        return text
    if op == "add":
        dicts = [p for p in spots if isinstance(get(body, p), dict)]
        if not dicts:
            return weird()
        get(body, rng().choice(dicts))[rng().choice(NAMES)] = weird()
        return body
    inner = [p for p in spots if p]
    if not inner:
        return weird()
    p = rng().choice(inner)
    parent = get(body, p[:-1])
    if op == "delete":
        del parent[p[-1]]
    else:
        parent[p[-1]] = weird()
    return body


def mutate(r):
    """Mutate one part of request r in place; return what was done."""
    kinds = ["body"] * 5 if r["body"] is not None else \
        ["body"] * (r["method"] != "GET")
    kinds += ["param"] * 2 * len(r["params"]) + ["query"] * 2 * \
        bool(r["query"]) + ["addquery", "key", "ctype"]
    kind = rng().choice(kinds)
    if kind == "body":
        r["body"] = mutate_body(r["body"])
    elif kind == "param":
        r["params"][rng().choice(list(r["params"]))] = \
            ("raw", rng().choice(PATHS + [B.P, B.R, B.jobs[0], B.name]))
    elif kind == "query":
        i = rng().randrange(len(r["query"]))
        k, v = r["query"][i]
        how = rng().choice(["value", "value", "drop", "twice"])
        if how == "value":
            r["query"][i] = (k, ("raw", rng().choice(QUERY +
                                                     [B.P, B.jobs[0]])))
        elif how == "drop":
            del r["query"][i]
        else:
            r["query"].append((k, ("raw", rng().choice(QUERY))))
    elif kind == "addquery":
        r["query"].append((rng().choice(["x", "wait_ms", "limit", "cursor",
                                         "force", "expired", "max", "%00",
                                         ""]), ("raw", rng().choice(QUERY))))
    elif kind == "key":
        keys = ["admin", "admin-as-x", "none", "junk"]
        if not getattr(LOCAL, "not_as_B", False):
            keys += ["B", "admin-as-B"]
        r["key"] = rng().choice(keys)
    else:
        r["ctype"] = rng().choice(CTYPES)
    return kind


def render(r):
    def enc(v):
        if isinstance(v, tuple) and v[0] == "raw":
            return v[1]
        return urllib.parse.quote(v, safe="")
    path = r["path"]
    for k, v in r["params"].items():
        path = path.replace("{%s}" % k, enc(v))
    if r["query"]:
        path += "?" + "&".join("%s=%s" % (k, enc(v)) for k, v in r["query"])
    keys = {"A": A.key, "B": B.key, "admin": E.d.admin_key,
            "admin-as-B": E.d.admin_key, "admin-as-x": E.d.admin_key,
            "none": None, "junk": "rk_" + "Q" * 43}
    headers = {}
    if r["key"] == "admin-as-B":
        headers["X-Tenant"] = B.name
    elif r["key"] == "admin-as-x":
        headers["X-Tenant"] = rng().choice(["", "x" * 65, "no-such", "A B"])
    body = r["body"]
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
    if body is not None:
        ct = r.get("ctype", "application/json")
        if ct is not None:
            headers["Content-Type"] = ct.encode("utf-8").decode("latin1")
    return r["method"], path, body, keys[r["key"]], headers


def check_error_shape(st, b, what):
    assert isinstance(b, dict) and isinstance(b.get("error"), dict), \
        (what, st, b)
    e = b["error"]
    assert isinstance(e.get("code"), str) and e["code"] and \
        all(c.islower() or c == "_" or c.isdigit() for c in e["code"]), \
        (what, st, b)
    assert isinstance(e.get("message"), str) and e["message"], (what, st, b)
    assert "field" not in e or isinstance(e["field"], str), (what, st, b)


def diff(a, b, at=""):
    """What differs between two snapshots, item by item."""
    if isinstance(a, list) and isinstance(b, list) and \
            all(isinstance(x, dict) for x in a + b):
        key = "id" if all("id" in x for x in a + b) else "name"
        a = {x.get(key): x for x in a}
        b = {x.get(key): x for x in b}
    if isinstance(a, dict) and isinstance(b, dict):
        return "; ".join(filter(None, (
            diff(a.get(k), b.get(k), "%s/%s" % (at, k))
            for k in sorted(set(a) | set(b), key=str)
            if a.get(k) != b.get(k))))
    return "%s: %s -> %s" % (at, json.dumps(a)[:300], json.dumps(b)[:300])


def show(method, path, body):
    b = body if body is None else body[:300]
    return "%s %s %r" % (method, path[:300], b)


def send(r, label):
    """Send request r; check what holds for any answer: one within 15 s,
    below 500, an error in its shape.  (status, body, what it was)."""
    method, path, body, key, headers = render(r)
    what = "%s: %s" % (label, show(method, path, body))
    try:
        st, h, b = E.req(method, path, body, key=key, headers=headers,
                         timeout=15)
    except Exception as e:
        raise AssertionError("%s: no answer: %r" % (what, e))
    assert 200 <= st < 500, (what, st, b)
    if st >= 400:
        check_error_shape(st, b, what)
    return st, b, what


@t.test("%d mutated requests over %d routes (seed %d): below 500, errors "
        "in shape, a 4xx changes nothing, no tenant changes another's "
        "anything" % (N, len(TEMPLATES), SEED))
def _():
    counts = {}
    snap = None
    for i in range(N):
        name, make = TEMPLATES[i % len(TEMPLATES)]
        r = make()
        kind = mutate(r)
        if DIRTY[0]:
            snap, DIRTY[0] = None, False
        before = snapshot() if snap is None else snap
        st, b, what = send(r, "seed %d, #%d (%s, %s)" % (SEED, i, name,
                                                          kind))
        counts[st // 100] = counts.get(st // 100, 0) + 1
        if st >= 400:
            after = snapshot()
            assert after == before, (what, st, b, diff(before, after))
            snap = after
        else:
            snap = None
            if r["key"] in ("B", "admin-as-B"):
                # B acting on A's objects: A must not have changed.
                after = snapshot()
                assert after[A.name] == before[A.name], \
                    (what, st, b, diff(before, after))
        if r["key"] == "A":
            # A's requests never change B.
            after = snapshot() if snap is None else snap
            assert after[B.name] == before[B.name], \
                (what, st, b, diff(before, after))
            snap = after
    t.diag("answers by class: %s" % ", ".join(
        "%dxx %d" % (k, v) for k, v in sorted(counts.items())))
    # A run where nearly everything is refused or nearly nothing is would
    # not be testing what it says.
    assert counts.get(4, 0) > N // 4 and counts.get(2, 0) > N // 20, counts


THREADS = 8


@t.test("%d more from %d threads at once (seed %d): below 500, errors in "
        "shape, none hangs, and B, whom none of them may touch, unchanged"
        % (N // 2, THREADS, SEED))
def _():
    # What a 4xx changed cannot be told apart while others change things;
    # what must hold whatever the order is checked, and that races of the
    # daemon's own (two requests on one job, a topic deleted under a push)
    # neither crash it nor answer 5xx.
    before = snapshot()[B.name]
    failures = []

    def worker(i):
        LOCAL.rnd = random.Random(SEED * 1000 + i)
        LOCAL.not_as_B = True   # acting as B may rightly make B things
        try:
            LOCAL.R = E.topic(A.key, name=unique("R"), mode="pull",
                              ttr_ms=HOUR, retry_schedule="<0,1h,1h>")["name"]
            for k in range(N // 2 // THREADS):
                name, make = TEMPLATES[rng().randrange(len(TEMPLATES))]
                r = make()
                kind = mutate(r)
                send(r, "seed %d, thread %d, #%d (%s, %s)" % (SEED, i, k,
                                                              name, kind))
        except Exception as e:
            failures.append("thread %d: %s" % (i, e))
    threads = [threading.Thread(target=worker, args=(i,))
               for i in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)
    assert not any(th.is_alive() for th in threads), "a thread hangs"
    assert not failures, failures
    after = snapshot()[B.name]
    assert after == before, diff(before, after)


@t.test("after all of it the daemon is healthy and still takes work")
def _():
    assert E.healthy()
    ready_in_R()
    j, tok = reserved()
    st, b = api("POST", "/v1/jobs/%s/ack" % j, {"token": tok})
    assert st == 200 and b["state"] == "delivered", (st, b)
    for who in (A, B):
        for jid in who.jobs:
            st, b = api("GET", "/v1/jobs/" + jid, key=who.key)
            assert st == 200 and b["state"] == "scheduled", (st, b)


E.stop()
t.done()
