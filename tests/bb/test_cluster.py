#!/usr/bin/env python3
"""test_cluster.py - the whole daemon against a Redis Cluster of one node.

In cluster mode Redis itself refuses a script or a command whose keys hash
to more than one slot (CROSSSLOT), so running every kind of state change
here proves the key layout's promise: each script touches one slot, and no
command mixes shards or tenants.  (A cluster of one node never answers
MOVED; routing between nodes is another matter, see REDIS-SCHEMA.md.)"""

import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import unique  # noqa: E402

t = harness.Tap()

# The cluster bus gets a free port of its own (the default, port + 10000,
# may be past 65535 or taken).
R = harness.RedisServer(args=["--cluster-enabled", "yes",
                              "--cluster-config-file", "nodes.conf",
                              "--cluster-port", str(harness.free_port())])
assert R.cmd("CLUSTER", "ADDSLOTSRANGE", "0", "16383") == "OK"
harness.wait_for(lambda: "cluster_state:ok" in R.cmd("CLUSTER", "INFO"),
                 what="the one-node cluster to be ok")
D = harness.Retryd(redis=R, config={"debug": {"fake_clock": True}})
D.wait_ready()
st, _, b = D.admin("POST", "/v1/tenants", {"name": unique("t")})
assert st == 201, b
KEY = b["api_key"]


def req(method, path, body=None):
    return D.request(method, path, body, key=KEY)


def advance(ms):
    D.advance_clock(ms)


def state(jid):
    st, _, b = req("GET", "/v1/jobs/" + jid)
    assert st == 200, b
    return b


@t.test("push, dedup, retry, dead-letter, redrive and deliver on a cluster")
def _():
    rcv = harness.Receiver(script="500")
    q = unique("q")
    st, _, b = req("PUT", "/v1/topics/" + q,
                   {"callback_url": rcv.url("/h"),
                    "retry_schedule": "<0,1s>"})
    assert st == 201, b
    ids = []
    for i in range(20):
        st, _, j = req("POST", "/v1/topics/%s/jobs" % q,
                       {"delay_ms": 0, "body": i, "bizkey": "b%d" % i})
        assert st == 201, j
        ids.append(j["id"])
    st, _, j = req("POST", "/v1/topics/%s/jobs" % q,
                   {"delay_ms": 0, "body": 0, "bizkey": "b0"})
    assert st == 200 and j["deduplicated"] and j["id"] == ids[0], j
    harness.wait_for(lambda: all(state(i)["state"] == "retrying"
                                 for i in ids), what="every job retrying")
    advance(1000)
    harness.wait_for(lambda: all(state(i)["state"] == "dead" for i in ids),
                     what="every job dead after its last attempt")
    assert len(rcv.requests) == 40, len(rcv.requests)
    st, _, b = req("GET", "/v1/topics/%s/dead" % q)
    assert st == 200 and len(b["jobs"]) == 20, b
    rcv.set_script("200")
    st, _, b = req("POST", "/v1/topics/%s/dead:redrive" % q)
    assert st == 200, b
    harness.wait_for(lambda: all(state(i)["state"] == "delivered"
                                 for i in ids), what="every job delivered")
    st, _, b = req("GET", "/v1/topics/" + q)
    assert b["counts"]["delivered"] == 20 and b["counts"]["dead"] == 0, \
        b["counts"]


@t.test("cancel, cancel by bizkey and reschedule on a cluster")
def _():
    q = unique("q")
    assert req("PUT", "/v1/topics/" + q, {"mode": "pull"})[0] == 201
    st, _, a = req("POST", "/v1/topics/%s/jobs" % q,
                   {"delay_ms": 60000, "body": 1})
    st, _, b = req("POST", "/v1/topics/%s/jobs" % q,
                   {"delay_ms": 60000, "body": 2, "bizkey": "bk"})
    st, _, c = req("POST", "/v1/topics/%s/jobs" % q,
                   {"delay_ms": 60000, "body": 3})
    assert req("DELETE", "/v1/jobs/" + a["id"])[0] == 204
    assert req("DELETE", "/v1/topics/%s/bizkeys/bk" % q)[0] == 204
    now = D.admin("GET", "/v1/debug/clock")[2]["now_ms"]
    st, _, r = req("PATCH", "/v1/jobs/" + c["id"], {"run_at_ms": now + 5})
    assert st == 200, r
    assert state(a["id"])["state"] == "cancelled"
    assert state(b["id"])["state"] == "cancelled"
    advance(5)
    st, _, got = req("GET", "/v1/topics/%s/reserve?wait_ms=2000" % q)
    assert st == 200 and got["id"] == c["id"], got
    st, _, ack = req("POST", "/v1/jobs/%s/ack" % c["id"],
                     {"token": got["token"]})
    assert st == 200 and ack["state"] == "delivered", ack


@t.test("force-deleting a topic and a tenant drops their jobs on a cluster")
def _():
    st, _, tb = D.admin("POST", "/v1/tenants", {"name": unique("t")})
    assert st == 201, tb
    k = tb["api_key"]

    def r(method, path, body=None):
        return D.request(method, path, body, key=k)

    ids = {}
    for q in ("qa", "qb"):
        assert r("PUT", "/v1/topics/" + q, {"mode": "pull"})[0] == 201
        ids[q] = [r("POST", "/v1/topics/%s/jobs" % q,
                    {"delay_ms": d, "body": i, "bizkey": "b%d" % i})[2]["id"]
                  for i, d in enumerate((0, 0, 0, 60000))]
    advance(5)
    for q in ("qa", "qb"):
        for n in range(2):
            st, _, got = r("GET", "/v1/topics/%s/reserve?wait_ms=2000" % q)
            assert st == 200, got
        st, _, ack = r("POST", "/v1/jobs/%s/ack" % got["id"],
                       {"token": got["token"]})
        assert st == 200 and ack["state"] == "delivered", ack
    assert r("DELETE", "/v1/topics/qa?force=true")[0] == 204
    for jid in ids["qa"]:
        assert r("GET", "/v1/jobs/" + jid)[0] == 404, jid
    assert r("GET", "/v1/jobs/" + ids["qb"][0])[0] == 200
    assert D.admin("DELETE", "/v1/tenants/%s?force=true" %
                   tb["name"])[0] == 204
    st, _, tb2 = D.admin("POST", "/v1/tenants", {"name": tb["name"]})
    assert st == 201, tb2
    for jid in ids["qa"] + ids["qb"]:
        st, _, b = D.request("GET", "/v1/jobs/" + jid, key=tb2["api_key"])
        assert st == 404, b
    st, _, g = D.admin("GET", "/v1/tenants/" + tb["name"])
    assert all(v == 0 for v in g["counts"].values()), g


@t.test("no command was refused for crossing slots")
def _():
    log = D.log()
    bad = [line for line in log.splitlines()
           if "CROSSSLOT" in line or "different slots" in line]
    assert not bad, bad[:5]


D.stop()
R.stop()
t.done()
