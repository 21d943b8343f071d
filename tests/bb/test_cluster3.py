#!/usr/bin/env python3
"""test_cluster3.py - the whole daemon against a Redis Cluster of three
masters, each serving a third of the slots.

A tenant's 16 shards hash to slots on every node, so a job's state changes,
the timer's pipelines and the reads that span shards must each go to the
node that serves the shard: a command sent elsewhere is answered MOVED, and
retryd follows it.  The cluster is set up by hand (ADDSLOTSRANGE, MEET); a
slot is then migrated the way redis-cli does it (SETSLOT IMPORTING and
MIGRATING, MIGRATE of its keys, SETSLOT NODE), with work going on while the
keys are at the new node but the slot is not yet its own (ASK) and after
(MOVED).  Counters on the Redis side (ASKING calls, MOVED and ASK errors)
prove which of the two happened."""

import os
import sys
import threading
import zlib

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import unique  # noqa: E402

t = harness.Tap()
SHARDS = 16


def start_node():
    bus = harness.free_port()
    r = harness.RedisServer(args=["--cluster-enabled", "yes",
                                  "--cluster-config-file", "nodes.conf",
                                  "--cluster-port", str(bus)])
    r.bus = bus
    r.id = r.cmd("CLUSTER", "MYID")
    return r


N = [start_node() for _ in range(3)]
RANGES = [(0, 5460), (5461, 10922), (10923, 16383)]
for n, (lo, hi) in zip(N, RANGES):
    assert n.cmd("CLUSTER", "ADDSLOTSRANGE", str(lo), str(hi)) == "OK"
# Every pair meets, not each through the first: no round of gossip is
# needed before all know all.
for i, a in enumerate(N):
    for b in N[i + 1:]:
        assert a.cmd("CLUSTER", "MEET", "127.0.0.1", str(b.port),
                     str(b.bus)) == "OK"


def cluster_ok():
    return all("cluster_state:ok" in n.cmd("CLUSTER", "INFO") and
               "cluster_known_nodes:3" in n.cmd("CLUSTER", "INFO")
               for n in N)


# A deadline, not a wait: on a loaded machine (the ASan stage of CI) the
# nodes took over 10 s once.
harness.wait_for(cluster_ok, 60, "the three-node cluster to be ok")


def slot(key):
    return N[0].cmd("CLUSTER", "KEYSLOT", key)


def owner(s):
    """The node serving slot s as its masters agree (after migrations)."""
    for n in N:
        for lo, hi, m in ((e[0], e[1], e[2]) for e in
                          N[0].cmd("CLUSTER", "SLOTS")):
            if lo <= s <= hi and int(m[1]) == n.port:
                return n
    raise AssertionError("no node serves slot %d" % s)


def info(n, section, field):
    for line in n.cmd("INFO", section).splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1]
    return ""


def calls(n, cmd):
    """Calls of cmd on n (INFO commandstats), 0 when never called."""
    v = info(n, "commandstats", "cmdstat_" + cmd)
    return int(v.split(",")[0].split("=")[1]) if v else 0


def errors(n, prefix):
    """Error replies starting with prefix n sent (INFO errorstats)."""
    v = info(n, "errorstats", "errorstat_" + prefix)
    return int(v.split("=")[1]) if v else 0


def shard_tag(tenant, i):
    return "rd:{%s:%d}:j" % (tenant, i)


# A tenant whose shards are spread over all three nodes.
while True:
    NAME = unique("t")
    NODES = [owner(slot(shard_tag(NAME, i))) for i in range(SHARDS)]
    if all(n in NODES for n in N):
        break

D = harness.Retryd(redis=N[0], config={"debug": {"fake_clock": True},
                                       "scheduler": {"lease": "1s"}})
D.wait_ready()
st, _, b = D.admin("POST", "/v1/tenants", {"name": NAME})
assert st == 201, b
KEY = b["api_key"]


def req(method, path, body=None, d=None):
    return (d or D).request(method, path, body, key=KEY)


def advance(ms):
    D.advance_clock(ms)


def state(jid):
    st, _, b = req("GET", "/v1/jobs/" + jid)
    assert st == 200, b
    return b


def push(q, body, d=None, **kw):
    b = {"body": body}
    b.update(kw)
    st, _, j = req("POST", "/v1/topics/%s/jobs" % q, b, d=d)
    assert st in (200, 201), (st, j)
    return j


def push_spread(q, n, **kw):
    """Pushes n jobs, each in its own 4 ms of the test clock: a generated id
    takes the shard of its 4 ms, so the jobs go round every shard (pushed
    within one 4 ms they would share one)."""
    ids = []
    for i in range(n):
        advance(4)
        ids.append(push(q, i, **kw)["id"])
    return ids


def keys_on(n, tenant):
    """Keys of tenant's shards that n holds."""
    return sum(n.cmd("CLUSTER", "COUNTKEYSINSLOT", str(slot(shard_tag(
        tenant, i)))) for i in range(SHARDS) if NODES[i] is n)


def take_all(q, want, d=None):
    """Reserves and acks (on d) until want jobs came; their ids in order."""
    got = []
    while len(got) < want:
        st, _, j = req("GET", "/v1/topics/%s/reserve?wait_ms=5000" % q, d=d)
        assert st == 200, (st, j, len(got), want)
        st, _, a = req("POST", "/v1/jobs/%s/ack" % j["id"],
                       {"token": j["token"]}, d=d)
        assert st == 200 and a["state"] == "delivered", (st, a)
        got.append(j["id"])
    st, _, j = req("GET", "/v1/topics/%s/reserve?wait_ms=0" % q, d=d)
    assert st == 204, (st, j)
    return got


@t.test("the tenant's shards hash to slots on all three nodes")
def _():
    per = [sum(1 for x in NODES if x is n) for n in N]
    assert all(k > 0 for k in per) and sum(per) == SHARDS, per


@t.test("push: jobs land on all three nodes, each delivered exactly once")
def _():
    rcv = harness.Receiver(script="200")
    q = unique("q")
    st, _, b = req("PUT", "/v1/topics/" + q, {"callback_url": rcv.url("/h")})
    assert st == 201, b
    ids = push_spread(q, 64, delay_ms=0)
    rcv.wait_count(64)
    harness.wait_for(lambda: all(state(i)["state"] == "delivered"
                                 for i in ids), what="every job delivered")
    advance(1000)
    seen = [r.headers["webhook-id"] for r in rcv.requests]
    assert sorted(seen) == sorted(ids), (len(seen), len(ids))
    per = [keys_on(n, NAME) for n in N]
    assert all(k > 0 for k in per), per
    rcv.stop()


@t.test("pull: reserve and ack across the nodes, every job exactly once")
def _():
    q = unique("q")
    assert req("PUT", "/v1/topics/" + q, {"mode": "pull"})[0] == 201
    ids = [push(q, i, delay_ms=0)["id"] for i in range(48)]
    got = take_all(q, 48)
    assert sorted(got) == sorted(ids), (len(got), len(set(got)))
    st, _, b = req("GET", "/v1/topics/" + q)
    assert st == 200 and b["counts"]["delivered"] == 48, b["counts"]


@t.test("dedup, retry, dead letters, redrive and stats across the nodes")
def _():
    rcv = harness.Receiver(script="500")
    q = unique("q")
    st, _, b = req("PUT", "/v1/topics/" + q,
                   {"callback_url": rcv.url("/h"),
                    "retry_schedule": "<0,1s>"})
    assert st == 201, b
    ids = [push(q, i, delay_ms=0, bizkey="b%d" % i)["id"] for i in range(24)]
    j = push(q, 0, delay_ms=0, bizkey="b0")
    assert j["deduplicated"] and j["id"] == ids[0], j
    harness.wait_for(lambda: all(state(i)["state"] == "retrying"
                                 for i in ids), what="every job retrying")
    advance(1000)
    harness.wait_for(lambda: all(state(i)["state"] == "dead" for i in ids),
                     what="every job dead after its last attempt")
    assert len(rcv.requests) == 48, len(rcv.requests)
    st, _, b = req("GET", "/v1/topics/%s/dead?limit=100" % q)
    assert st == 200 and sorted(x["id"] for x in b["jobs"]) == sorted(ids), b
    rcv.set_script("200")
    st, _, b = req("POST", "/v1/topics/%s/dead:redrive" % q)
    assert st == 200, b
    harness.wait_for(lambda: all(state(i)["state"] == "delivered"
                                 for i in ids), what="every job delivered")
    st, _, b = req("GET", "/v1/topics/" + q)
    assert b["counts"]["delivered"] == 24 and b["counts"]["dead"] == 0, \
        b["counts"]

    def delivered_in_stats():
        st, _, s = req("GET", "/v1/topics/%s/stats" % q)
        assert st == 200, s
        return s["total"]["delivered"] == 24 and s["total"]["failed"] == 48
    harness.wait_for(delivered_in_stats, what="the stats of every attempt")
    st, _, s = req("GET", "/v1/stats")
    assert st == 200 and q in [x["name"] for x in s["topics"]], s
    rcv.stop()


@t.test("cancel, cancel by bizkey and reschedule across the nodes")
def _():
    q = unique("q")
    assert req("PUT", "/v1/topics/" + q, {"mode": "pull"})[0] == 201
    a = [push(q, i, delay_ms=60000)["id"] for i in range(16)]
    b = [push(q, i, delay_ms=60000, bizkey="k%d" % i)["id"]
         for i in range(16)]
    for i in a[:8]:
        assert req("DELETE", "/v1/jobs/" + i)[0] == 204
    for i in range(8):
        assert req("DELETE", "/v1/topics/%s/bizkeys/k%d" % (q, i))[0] == 204
    now = D.admin("GET", "/v1/debug/clock")[2]["now_ms"]
    for i in a[8:] + b[8:]:
        st, _, r = req("PATCH", "/v1/jobs/" + i, {"run_at_ms": now + 5})
        assert st == 200, r
    assert all(state(i)["state"] == "cancelled" for i in a[:8] + b[:8])
    advance(5)
    got = take_all(q, 16)
    assert sorted(got) == sorted(a[8:] + b[8:]), got
    st, _, c = req("GET", "/v1/topics/" + q)
    assert c["counts"]["cancelled"] == 16 and \
        c["counts"]["delivered"] == 16, c["counts"]


@t.test("scripts flushed on two nodes are loaded again where NOSCRIPT was "
        "said")
def _():
    rcv = harness.Receiver(script="200")
    q = unique("q")
    st, _, b = req("PUT", "/v1/topics/" + q, {"callback_url": rcv.url("/h")})
    assert st == 201, b
    p = unique("p")
    assert req("PUT", "/v1/topics/" + p, {"mode": "pull"})[0] == 201
    for n in N[1:]:
        assert n.cmd("SCRIPT", "FLUSH") == "OK"
    loads = [calls(n, "script|load") for n in N[1:]]
    said = [errors(n, "NOSCRIPT") for n in N[1:]]
    ids = push_spread(q, 32, delay_ms=0)
    rcv.wait_count(32)
    assert sorted(r.headers["webhook-id"] for r in rcv.requests) == \
        sorted(ids)
    pids = push_spread(p, 16, delay_ms=0)
    assert sorted(take_all(p, 16)) == sorted(pids)
    now = [calls(n, "script|load") for n in N[1:]]
    assert all(b > a for a, b in zip(loads, now)), (loads, now)
    now = [errors(n, "NOSCRIPT") for n in N[1:]]
    assert all(b > a for a, b in zip(said, now)), (said, now)
    assert "NOSCRIPT" not in "".join(
        x for x in D.log().splitlines() if " warn " in x)
    # Settled before a later test moves the clock past their deadlines.
    harness.wait_for(lambda: all(state(i)["state"] == "delivered"
                                 for i in ids), what="32 delivered")
    rcv.stop()


def bizkeys_of(shard, prefix, n):
    """n bizkeys whose jobs go to shard (the crc32 of the bizkey)."""
    return [k for k in ("%s%d" % (prefix, i) for i in range(5000))
            if zlib.crc32(k.encode()) % SHARDS == shard][:n]


def pull_topic():
    q = unique("q")
    assert req("PUT", "/v1/topics/" + q, {"mode": "pull"})[0] == 201
    return q


def migrating(q, src, dst, prefix, delay_ms):
    """8 jobs of q (bizkeys prefix..., delay_ms) on a shard of src whose
    slot is then set IMPORTING at dst and MIGRATING at src: (shard, slot,
    job ids, the slot's keys)."""
    sh = [i for i in range(SHARDS) if NODES[i] is src][0]
    s = slot(shard_tag(NAME, sh))
    ids = [push(q, k, delay_ms=delay_ms, bizkey=k)["id"]
           for k in bizkeys_of(sh, prefix, 8)]
    assert dst.cmd("CLUSTER", "SETSLOT", str(s), "IMPORTING", src.id) == "OK"
    assert src.cmd("CLUSTER", "SETSLOT", str(s), "MIGRATING", dst.id) == "OK"
    return sh, s, ids, src.cmd("CLUSTER", "GETKEYSINSLOT", str(s), "1000")


@t.test("a slot migrates mid-flight: ASK while its keys moved, MOVED after;"
        " nothing lost, nothing twice")
def _():
    src, dst = N[0], N[1]
    q = pull_topic()
    ids = [push(q, i, delay_ms=10000)["id"] for i in range(40)]
    sh, s, inside, keys = migrating(q, src, dst, "in", 10000)
    ids = inside + ids
    assert keys, "the slot has no keys"
    assert src.cmd("MIGRATE", "127.0.0.1", str(dst.port), "", "0", "5000",
                   "KEYS", *keys) == "OK"
    assert src.cmd("CLUSTER", "COUNTKEYSINSLOT", str(s)) == 0

    # ASK: the keys are at dst, the slot is still src's.  Reads follow it;
    # a script whose keys are not all there yet is refused by Redis
    # (TRYAGAIN: 503, nothing done) until the migration ends.
    asking0, ask0 = calls(dst, "asking"), errors(src, "ASK")
    assert all(state(i)["state"] == "scheduled" for i in inside)
    st, _, c = req("GET", "/v1/topics/" + q)
    assert st == 200 and c["counts"]["scheduled"] == 48, c
    during = []
    for k in bizkeys_of(sh, "ask", 3):
        st, _, j = req("POST", "/v1/topics/%s/jobs" % q,
                       {"body": k, "delay_ms": 10000, "bizkey": k})
        assert st in (201, 503), (st, j)
        if st == 201:
            during.append(j["id"])
    assert calls(dst, "asking") > asking0, "no ASKING reached the new node"
    assert errors(src, "ASK") > ask0, "the old node never answered ASK"
    if len(during) < 3:
        assert "TRYAGAIN" in D.log(), "a 503 that was not TRYAGAIN"

    # The slot is dst's now: src answers MOVED, and it is followed.
    moved0 = errors(src, "MOVED")
    for n in N:
        assert n.cmd("CLUSTER", "SETSLOT", str(s), "NODE", dst.id) == "OK"
    assert owner(s) is dst
    after = [push(q, k, delay_ms=10000, bizkey=k)["id"]
             for k in bizkeys_of(sh, "moved", 3)]
    assert errors(src, "MOVED") > moved0, "no command was ever MOVED"
    k = bizkeys_of(sh, "moved", 3)[0]
    assert req("DELETE", "/v1/topics/%s/bizkeys/%s" % (q, k))[0] == 204
    assert state(after[0])["state"] == "cancelled"
    now = D.admin("GET", "/v1/debug/clock")[2]["now_ms"]
    st, _, r = req("PATCH", "/v1/jobs/" + after[1],
                   {"run_at_ms": now + 20000})
    assert st == 200, r
    advance(10000)
    want = ids + during + after[2:]
    got = take_all(q, len(want))
    assert sorted(got) == sorted(want), (len(got), len(want))
    advance(10000)
    assert take_all(q, 1) == [after[1]]
    st, _, c = req("GET", "/v1/topics/" + q)
    assert c["counts"]["delivered"] == len(want) + 1 and \
        c["counts"]["cancelled"] == 1, c["counts"]
    assert dst.cmd("CLUSTER", "COUNTKEYSINSLOT", str(s)) > 0
    assert src.cmd("CLUSTER", "COUNTKEYSINSLOT", str(s)) == 0
    NODES[sh] = dst


@t.test("TRYAGAIN while a shard's keys are split between two nodes: pushes"
        " and cancels wait for the migration and succeed, each once")
def _():
    src, dst = N[2], N[0]
    # Due at once (the clock is not moved: the next test's instance has
    # its own, and its reservations must not look expired to this one).
    q = pull_topic()
    sh, s, before, keys = migrating(q, src, dst, "ta", 0)
    pool = "rd:{%s:%d}:j" % (NAME, sh)
    assert pool in keys and len(keys) > 2, keys
    # Every key but the job pool moves: a script on the shard names keys
    # on both nodes, which Redis refuses (TRYAGAIN) until the pool moves.
    rest = [k for k in keys if k != pool]
    assert src.cmd("MIGRATE", "127.0.0.1", str(dst.port), "", "0", "5000",
                   "KEYS", *rest) == "OK"
    tried0 = errors(src, "TRYAGAIN") + errors(dst, "TRYAGAIN")
    done = threading.Event()
    results = []

    def work():
        ks = iter(bizkeys_of(sh, "tw", 200))
        cancel = iter(before[:4])
        while True:
            last = done.is_set()
            k = next(ks)
            st, _, j = req("POST", "/v1/topics/%s/jobs" % q,
                           {"body": k, "delay_ms": 0, "bizkey": k})
            results.append(("push", st, j.get("id") if st in (200, 201)
                            else j))
            i = next(cancel, None)
            if i is not None:
                st, _, j = req("DELETE", "/v1/jobs/" + i)
                results.append(("cancel", st, i))
            if last and i is None:
                return
    th = threading.Thread(target=work)
    th.start()
    try:
        harness.wait_for(lambda: errors(src, "TRYAGAIN") +
                         errors(dst, "TRYAGAIN") > tried0,
                         what="Redis answering TRYAGAIN")
        assert results == [], results
        assert src.cmd("MIGRATE", "127.0.0.1", str(dst.port), pool, "0",
                       "5000") == "OK"
        for n in N:
            assert n.cmd("CLUSTER", "SETSLOT", str(s), "NODE",
                         dst.id) == "OK"
    finally:
        done.set()
        th.join()
    NODES[sh] = dst
    bad = [x for x in results if x[1] not in (200, 201, 204)]
    assert not bad, bad
    pushed = [x[2] for x in results if x[0] == "push"]
    cancelled = [x[2] for x in results if x[0] == "cancel"]
    assert len(set(pushed)) == len(pushed) and len(cancelled) == 4, results
    assert all(state(i)["state"] == "cancelled" for i in cancelled)
    want = before[4:] + pushed
    assert sorted(take_all(q, len(want))) == sorted(want)
    st, _, c = req("GET", "/v1/topics/" + q)
    assert c["counts"]["delivered"] == len(want) and \
        c["counts"]["cancelled"] == 4, (c["counts"], len(want))
    assert src.cmd("CLUSTER", "COUNTKEYSINSLOT", str(s)) == 0


@t.test("a slot migrating away, its keys still here: a promote and a cancel"
        " that empty a sorted set finish whole, nothing lost")
def _():
    # A script runs only when the node holds every key it names, but while
    # the slot is MIGRATING Redis refuses, inside the script, a command on
    # a key that is not there: one the script itself emptied (ZREM of the
    # last member) and then reads.  Such a script stopped halfway, its
    # writes kept: a promote left the job out of both its delays and its
    # ready set, lost.
    src, dst = N[1], N[2]
    sh = [i for i in range(SHARDS) if NODES[i] is src][0]
    s = slot(shard_tag(NAME, sh))
    keys = iter(bizkeys_of(sh, "mg", 8))
    q, q2 = pull_topic(), pull_topic()

    def job(topic, delay_ms):
        return push(topic, "b", delay_ms=delay_ms, bizkey=next(keys))["id"]

    def wait_state(jid, want):
        harness.wait_for(lambda: state(jid)["state"] == want,
                         what="job %s %s" % (jid, want))

    # Every key the two scripts name exists on the shard: a finished job
    # (the finished set), one in flight, one ready and one waiting in each
    # topic's sets, the bizkeys.
    job(q2, 0)
    take_all(q2, 1)
    held = job(q2, 0)
    st, _, r = req("GET", "/v1/topics/%s/reserve?wait_ms=5000" % q2)
    assert st == 200 and r["id"] == held, (st, r)
    ready2 = job(q2, 0)
    wait_state(ready2, "ready")
    waiting2 = job(q2, 60000)
    ready1 = job(q, 0)
    wait_state(ready1, "ready")
    due = job(q, 5000)
    assert state(due)["state"] == "scheduled"

    mark = D.log_mark()
    assert dst.cmd("CLUSTER", "SETSLOT", str(s), "IMPORTING", src.id) == "OK"
    assert src.cmd("CLUSTER", "SETSLOT", str(s), "MIGRATING", dst.id) == "OK"
    try:
        # The cancel empties q2's delays, then reads them for the heads.
        st, _, b = req("DELETE", "/v1/jobs/" + waiting2)
        assert st == 204, (st, b)
        assert state(waiting2)["state"] == "cancelled"
        # The promote empties q's delays, then reads them (more due?) and
        # the shard's heads.
        advance(5000)
        wait_state(due, "ready")
    finally:
        for n in (src, dst):
            assert n.cmd("CLUSTER", "SETSLOT", str(s), "STABLE") == "OK"
    assert "non local key" not in D.log(since=mark), "a script stopped halfway"
    assert sorted(take_all(q, 2)) == sorted([ready1, due])
    st, _, c = req("GET", "/v1/topics/" + q2)
    assert st == 200 and c["counts"].get("cancelled") == 1 and \
        c["counts"].get("scheduled", 0) == 0 and \
        c["counts"].get("ready") == 1, c["counts"]
    assert state(ready2)["state"] == "ready"
    assert state(held)["state"] == "in_flight"


@t.test("a seed that is down: the next one in redis.url finds the cluster")
def _():
    dead = harness.free_port()
    d3 = harness.Retryd(redis="redis://127.0.0.1:%d/0,redis://127.0.0.1:%d"
                        % (dead, N[1].port),
                        config={"debug": {"fake_clock": True},
                                "scheduler": {"lease": "1s"}})
    d3.wait_ready()
    q = unique("q")
    assert req("PUT", "/v1/topics/" + q, {"mode": "pull"}, d=d3)[0] == 201
    ids = [push(q, i, d=d3, delay_ms=0)["id"] for i in range(16)]
    assert sorted(take_all(q, 16, d=d3)) == sorted(ids)
    assert "127.0.0.1:%d" % dead in d3.log(), "the dead seed never tried"
    d3.stop()


@t.test("two instances on the cluster split the shard leases")
def _():
    # Its seed is spelt otherwise than the cluster names the node.
    d2 = harness.Retryd(redis="redis://localhost:%d/0" % N[2].port,
                        config={"debug": {"fake_clock": True},
                                "scheduler": {"lease": "1s"}})
    d2.wait_ready()

    def owned(d):
        st, _, b = d.request("GET", "/readyz")
        return b.get("shards_owned", 0) if st == 200 else 0
    harness.wait_for(lambda: owned(D) == 8 and owned(d2) == 8,
                     what="8 shards each")
    holders = {}
    where = set()
    for i in range(SHARDS):
        k = "rd:lease:%d" % i
        n = owner(slot(k))
        where.add(n.port)
        holders.setdefault(n.cmd("GET", k), []).append(i)
    assert len(holders) == 2 and all(len(v) == 8 for v in holders.values()), \
        holders
    assert len(where) > 1, where
    # The second instance works too (on its own fake clock).
    q = unique("q")
    assert req("PUT", "/v1/topics/" + q, {"mode": "pull"})[0] == 201
    ids = [push(q, i, d=d2, delay_ms=0)["id"] for i in range(16)]
    assert sorted(take_all(q, 16, d=d2)) == sorted(ids)
    d2.stop()


@t.test("no command was refused for crossing slots or left unrouted")
def _():
    log = D.log()
    bad = [line for line in log.splitlines()
           if "CROSSSLOT" in line or "different slots" in line or
           "MOVED" in line or "unavailable" in line]
    assert not bad, bad[:5]


def subscribed(n):
    """retryd's subscriber connections on n (CLIENT LIST, sub=N > 0)."""
    return [c for c in n.cmd("CLIENT", "LIST").splitlines()
            if " sub=0 " not in c and " sub=" in c]


@t.test("the subscriber moves to another master when its node goes away")
def _():
    on = harness.wait_for(lambda: [n for n in N if subscribed(n)],
                          what="a subscriber on some node")
    assert len(on) == 1, [n.port for n in on]
    gone = on[0]
    gone.stop()
    left = [n for n in N if n is not gone]
    harness.wait_for(lambda: any(subscribed(n) for n in left),
                     what="the subscriber on a surviving node")


D.stop()
for n in N:
    n.stop()
t.done()
