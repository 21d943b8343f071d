#!/usr/bin/env python3
"""test_metrics.py - GET /metrics (Prometheus text format), /healthz and
/readyz, and the access log.

Key decision: every scrape is parsed by a strict reader of the text format
(families declared before their samples and never split, histogram buckets
cumulative and ending in +Inf equal to _count, no duplicate series), so a
scraper would accept every page this file sees.  Counters are checked as
deltas per tenant and topic, since one daemon serves the whole file.
"""

import os
import re
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env, unique  # noqa: E402

t = harness.Tap()

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(r"^(%s)(?:\{(.*)\})? (\S+)$" % _NAME)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def _labels(text):
    out, pos = {}, 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        assert m, "bad label set %r" % text
        k = m.group(1)
        v = re.sub(r"\\(.)", lambda x: {"n": "\n"}.get(x.group(1),
                                                        x.group(1)),
                   m.group(2))
        assert k not in out, "label %s twice in %r" % (k, text)
        out[k] = v
        pos = m.end()
        if pos < len(text):
            assert text[pos] == ",", "bad label set %r" % text
            pos += 1
    return out


def parse(text):
    """{(name, frozenset(labels)): float}, checking the format strictly."""
    assert text.endswith("\n"), "the page must end with a newline"
    types, seen_families, current = {}, [], None
    samples = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ")
            assert typ in ("counter", "gauge", "histogram"), line
            assert name not in types, "TYPE %s twice" % name
            types[name] = typ
            current = name
            seen_families.append(name)
            continue
        assert not line.startswith("#"), line
        m = _SAMPLE.match(line)
        assert m, "bad sample line %r" % line
        name, lbl, val = m.group(1), _labels(m.group(2) or ""), m.group(3)
        fam = name
        if current and types.get(current) == "histogram":
            for suf in ("_bucket", "_sum", "_count"):
                if name == current + suf:
                    fam = current
        assert fam == current, "sample %s outside its family (%s)" % (
            name, current)
        if types[fam] == "counter":
            assert fam.endswith("_total"), fam
        v = float(val)
        key = (name, frozenset(lbl.items()))
        assert key not in samples, "duplicate series %r" % (key,)
        samples[key] = v
    # Histograms: cumulative buckets, +Inf == _count.
    for fam, typ in types.items():
        if typ != "histogram":
            continue
        series = {}
        for (name, lbl), v in samples.items():
            if name == fam + "_bucket":
                d = dict(lbl)
                le = d.pop("le")
                series.setdefault(frozenset(d.items()), []).append(
                    (float(le), v))
        for base, buckets in series.items():
            buckets.sort()
            vals = [v for _, v in buckets]
            assert vals == sorted(vals), "%s: buckets not cumulative" % fam
            assert buckets[-1][0] == float("inf"), fam
            assert samples[(fam + "_count", base)] == vals[-1], fam
    return samples


def scrape(env, key=None):
    st, h, body = env.req("GET", "/metrics", key=key)
    assert st == 200, (st, body)
    assert h["Content-Type"].startswith("text/plain; version=0.0.4"), h
    return parse(body.decode("utf-8"))


def val(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


E = Env(config={"metrics": {"counts_interval": "100ms"}})
NAME, KEY = E.tenant()


def push_topic(receiver, **conf):
    q = unique("q")
    c = {"callback_url": receiver.url("/hook")}
    c.update(conf)
    E.topic(KEY, q, **c)
    return q


@t.test("GET /metrics is the text format, open by default, with build info")
def _():
    s = scrape(E)
    assert [k for k in s if k[0] == "retryd_build_info"], s.keys()
    ((name, lbl),) = [k for k in s if k[0] == "retryd_build_info"]
    assert dict(lbl)["version"] and s[(name, lbl)] == 1
    for name in ("retryd_redis_errors_total", "retryd_shards_owned",
                 "retryd_redis_up", "retryd_journal_up",
                 "retryd_journal_errors_total",
                 "retryd_dispatcher_in_flight",
                 "retryd_lateness_seconds_count",
                 "retryd_callback_duration_seconds_count"):
        assert (name, frozenset()) in s, name


@t.test("a delivery counts a push, an attempt, a callback ok and both "
        "histograms")
def _():
    with harness.Receiver(script="200") as rcv:
        q = push_topic(rcv)
        before = scrape(E)
        for i in range(3):
            E.push(KEY, q, {"i": i})
        rcv.wait_count(3)

        def settled():
            s = scrape(E)
            return s if val(s, "retryd_attempts_total", tenant=NAME,
                            topic=q, result="delivered") == 3 else None
        s = harness.wait_for(settled, what="3 delivered attempts")
    assert val(s, "retryd_jobs_pushed_total", tenant=NAME, topic=q) == 3
    assert val(s, "retryd_callbacks_total", outcome="ok") - \
        val(before, "retryd_callbacks_total", outcome="ok") == 3
    for h in ("retryd_lateness_seconds", "retryd_callback_duration_seconds"):
        assert val(s, h + "_count") - val(before, h + "_count") == 3, h
        assert val(s, h + "_sum") >= val(before, h + "_sum"), h


@t.test("failures count as retrying then dead; outcomes name the failure")
def _():
    with harness.Receiver(script="500") as rcv:
        q = push_topic(rcv, retry_schedule="<0,0>")
        before = scrape(E)
        E.push(KEY, q, {"x": 1})

        def dead():
            s = scrape(E)
            return s if val(s, "retryd_attempts_total", tenant=NAME,
                            topic=q, result="dead") == 1 else None
        s = harness.wait_for(dead, what="the job to die")
    assert val(s, "retryd_attempts_total", tenant=NAME, topic=q,
               result="retrying") == 1
    assert val(s, "retryd_attempts_total", tenant=NAME, topic=q,
               result="delivered") == 0
    assert val(s, "retryd_callbacks_total", outcome="http") - \
        val(before, "retryd_callbacks_total", outcome="http") == 2


@t.test("jobs per tenant, topic and state come from Redis (cached)")
def _():
    with harness.Receiver(script="200") as rcv:
        q = push_topic(rcv)
        E.push(KEY, q, {"now": 1})
        E.push(KEY, q, {"later": 1}, delay_ms=3600000)
        rcv.wait_count(1)

        def counted():
            s = scrape(E)
            return s if val(s, "retryd_jobs", tenant=NAME, topic=q,
                            state="delivered") == 1 else None
        s = harness.wait_for(counted, what="retryd_jobs to show delivered")
    assert val(s, "retryd_jobs", tenant=NAME, topic=q, state="scheduled") == 1
    states = {dict(k[1])["state"] for k in s if k[0] == "retryd_jobs" and
              dict(k[1])["topic"] == q}
    assert states == {"scheduled", "ready", "in_flight", "retrying",
                      "delivered", "dead", "cancelled"}, states


@t.test("callbacks in flight per topic while a callback runs")
def _():
    with harness.Receiver(script="sleep=3000") as rcv:
        q = push_topic(rcv, timeout_ms=20000)
        E.push(KEY, q, {"slow": 1})
        harness.wait_for(lambda: val(scrape(E), "retryd_callbacks_in_flight",
                                     tenant=NAME, topic=q) == 1,
                         what="one callback in flight")
        assert val(scrape(E), "retryd_dispatcher_in_flight") >= 1
        harness.wait_for(lambda: val(scrape(E), "retryd_attempts_total",
                                     tenant=NAME, topic=q,
                                     result="delivered") == 1,
                         what="the slow callback to finish")
        assert val(scrape(E), "retryd_callbacks_in_flight", tenant=NAME,
                   topic=q) == 0


@t.test("shards owned, Redis up, journal off; /healthz and /readyz")
def _():
    s = harness.wait_for(lambda: (lambda x: x if val(
        x, "retryd_shards_owned") == 16 else None)(scrape(E)),
        what="this instance to own the 16 shards")
    assert val(s, "retryd_redis_up") == 1
    assert val(s, "retryd_journal_enabled") == 0
    assert val(s, "retryd_journal_up") == 1
    st, _, b = E.req("GET", "/healthz")
    assert st == 200 and b == {"status": "ok"}, b
    st, _, b = E.req("GET", "/readyz")
    assert st == 200 and b["status"] == "ready", b
    assert b["shards_owned"] == 16 and b["shards"] == "leased", b


@t.test("/readyz: with one shard and two instances, one holds it and the "
        "other is ready and waiting")
def _():
    with harness.RedisServer() as r:
        conf = {"scheduler": {"shards": 1}}
        a = harness.Retryd(redis=r, config=conf)
        a.wait_ready()
        b = harness.Retryd(redis=r, config=conf)
        b.wait_ready()

        def split():
            ra = a.request("GET", "/readyz")[2]
            rb = b.request("GET", "/readyz")[2]
            got = sorted([ra.get("shards"), rb.get("shards")])
            return (ra, rb) if got == ["leased", "waiting"] else None
        ra, rb = harness.wait_for(split, what="one leased, one waiting")
        assert ra["status"] == rb["status"] == "ready", (ra, rb)
        assert ra["shards_owned"] + rb["shards_owned"] == 1, (ra, rb)
        b.stop()
        a.stop()


@t.test("lateness is the start of the attempt minus its due time "
        "(test clock)")
def _():
    F = Env(config={"debug": {"fake_clock": True},
                    "metrics": {"counts_interval": "100ms"}})
    try:
        name, key = F.tenant()
        with harness.Receiver(script="200") as rcv:
            q = unique("q")
            F.topic(key, q, callback_url=rcv.url("/hook"))
            before = scrape(F)
            F.push(key, q, {"late": 1}, delay_ms=10000)
            st, _, b = F.admin("POST", "/v1/debug/clock",
                               {"advance_ms": 70000})
            assert st == 200, b
            rcv.wait_count(1)
            s = harness.wait_for(lambda: (lambda x: x if val(
                x, "retryd_lateness_seconds_count") > val(
                before, "retryd_lateness_seconds_count") else None)(
                scrape(F)), what="the lateness to be observed")
        # Due at +10 s, started at +70 s: 60 s late, in le="60", not "30".
        d = {le: val(s, "retryd_lateness_seconds_bucket", le=le) -
             val(before, "retryd_lateness_seconds_bucket", le=le)
             for le in ("30", "60", "+Inf")}
        assert d == {"30": 0, "60": 1, "+Inf": 1}, d
        assert val(s, "retryd_lateness_seconds_sum") - \
            val(before, "retryd_lateness_seconds_sum") == 60, s
    finally:
        F.stop()


@t.test("metrics.require_key: only the admin key; the access log logs")
def _():
    G = Env(config={"metrics": {"require_key": True},
                    "log": {"access": True}})
    try:
        name, key = G.tenant()
        st, h, b = G.req("GET", "/metrics")
        assert st == 401 and b["error"]["code"] == "unauthorized", b
        assert st == 401 and "Bearer" in h["WWW-Authenticate"], h
        st, _, b = G.req("GET", "/metrics", key=key)
        assert st == 401, b
        parse(G.admin("GET", "/metrics")[2].decode())
        G.d.wait_log(r"access: GET /metrics 200 \d+us")
        G.d.wait_log(r"access: GET /metrics 401 \d+us")
    finally:
        G.stop()


TENANT_HELD = "retryd_dispatcher_tenant_held_total"
TENANT_IN_FLIGHT = "retryd_dispatcher_tenant_in_flight"


@t.test("the tenant cap: by default max_total_in_flight less a tenth")
def _():
    assert val(scrape(E), TENANT_IN_FLIGHT + "_max") == 9000


def capped_env():
    """An instance of 10 callbacks, 4 of them per tenant, on a fake clock."""
    return Env(config={"debug": {"fake_clock": True},
                       "dispatcher": {"max_total_in_flight": 10,
                                      "max_tenant_in_flight": 4},
                       "shutdown": {"grace": "100ms"}})


@t.test("dispatcher.max_tenant_in_flight = 4: a tenant whose receiver hangs "
        "shows its 4 callbacks against the cap, the passes holding it back "
        "count and one warning names it; a tenant under its cap: neither")
def _():
    env = capped_env()
    warn = r"tenant=%s reached max_tenant_in_flight \(4 callbacks"
    try:
        mark = env.d.log_mark()
        hang = harness.Receiver(script="hang")
        a, akey = env.tenant()
        topics = [env.topic(akey, callback_url=hang.url("/hook"),
                            timeout_ms=60000, max_in_flight=5,
                            retry_schedule="<0,0>")["name"]
                  for _ in range(2)]
        st, _, c = env.admin("GET", "/v1/debug/clock")
        assert st == 200, (st, c)
        for q in topics:
            for i in range(5):
                env.push(akey, q, {"i": i}, run_at_ms=c["now_ms"])
        hang.wait_count(4)
        env.d.advance_clock(0)          # two more passes: no 5th
        assert len(hang.requests) == 4, len(hang.requests)
        s = scrape(env)
        assert val(s, TENANT_IN_FLIGHT, tenant=a) == 4, s
        assert val(s, TENANT_IN_FLIGHT + "_max") == 4, s
        assert val(s, "retryd_dispatcher_in_flight") == 4, s
        held = harness.wait_for(
            lambda: val(scrape(env), TENANT_HELD, tenant=a),
            what="a pass that held the tenant back counted")
        env.d.wait_log(warn % a, since=mark)

        # Another tenant's jobs go out; its outcomes wake the timer, whose
        # passes find the first tenant still at its cap and count again.
        ok = harness.Receiver(script="200")
        b, bkey = env.tenant()
        bq = env.topic(bkey, callback_url=ok.url("/hook"),
                       retry_schedule="<0>")["name"]
        for i in range(3):
            env.push(bkey, bq, {"b": i}, run_at_ms=c["now_ms"])
        ok.wait_count(3)
        # The receiver has answered; the outcomes are applied after it.
        harness.wait_for(
            lambda: val(scrape(env), "retryd_attempts_total", tenant=b,
                        topic=bq, result="delivered") == 3,
            what="the other tenant's 3 jobs delivered")
        harness.wait_for(
            lambda: val(scrape(env), TENANT_HELD, tenant=a) > held,
            what="the held-back count to rise")
        env.d.advance_clock(0)
        s = scrape(env)
        assert val(s, TENANT_HELD, tenant=b) == 0, s
        assert val(s, TENANT_IN_FLIGHT, tenant=b) == 0, s
        assert val(s, TENANT_IN_FLIGHT, tenant=a) == 4, s
        assert len(hang.requests) == 4, len(hang.requests)
        log = env.d.log(mark)
        assert len(re.findall(warn % a, log)) == 1, log
        assert not re.search(warn % b, log), log
    finally:
        env.stop()


@t.test("a tenant's max_in_flight 2 under max_tenant_in_flight 4: its "
        "hanging callbacks stop at 2 and the cap gauge shows 2 for it, 4 for "
        "the instance; cleared, the tenant's row goes")
def _():
    env = capped_env()
    warn = r"tenant=%s reached its max_in_flight \(2 callbacks"
    try:
        mark = env.d.log_mark()
        hang = harness.Receiver(script="hang")
        a, akey = env.tenant(max_in_flight=2)
        q = env.topic(akey, callback_url=hang.url("/hook"), timeout_ms=60000,
                      max_in_flight=5, retry_schedule="<0,0>")["name"]
        st, _, c = env.admin("GET", "/v1/debug/clock")
        assert st == 200, (st, c)
        for i in range(5):
            env.push(akey, q, {"i": i}, run_at_ms=c["now_ms"])
        hang.wait_count(2)
        env.d.advance_clock(0)          # two more passes: no 3rd
        assert len(hang.requests) == 2, len(hang.requests)
        s = scrape(env)
        assert val(s, TENANT_IN_FLIGHT, tenant=a) == 2, s
        assert val(s, TENANT_IN_FLIGHT + "_max", tenant=a) == 2, s
        assert val(s, TENANT_IN_FLIGHT + "_max") == 4, s
        harness.wait_for(lambda: val(scrape(env), TENANT_HELD, tenant=a),
                         what="a pass that held the tenant back counted")
        env.d.wait_log(warn % a, since=mark)
        st, _, b = env.admin("PATCH", "/v1/tenants/" + a,
                             {"max_in_flight": None})
        assert st == 200 and b["max_in_flight"] == 4, b
        env.d.advance_clock(0)
        hang.wait_count(4)
        s = scrape(env)
        assert (TENANT_IN_FLIGHT + "_max", frozenset({("tenant", a)})) \
            not in s, s
        assert val(s, TENANT_IN_FLIGHT, tenant=a) == 4, s
    finally:
        env.stop()


@t.test("Redis down: redis_up 0, errors counted, not ready; back: ready")
def _():
    before = scrape(E)
    E.redis.stop()
    try:
        s = harness.wait_for(lambda: (lambda x: x if val(
            x, "retryd_redis_up") == 0 and val(
            x, "retryd_redis_errors_total") > val(
            before, "retryd_redis_errors_total") else None)(scrape(E)),
            what="redis_up 0 and an error counted")
        assert s
        st, _, b = E.req("GET", "/readyz")
        assert st == 503 and b["status"] == "not_ready", b
        st, _, b = E.req("GET", "/healthz")
        assert st == 200, b
    finally:
        E.redis.start()
    E.d.wait_ready(timeout=20)
    harness.wait_for(lambda: val(scrape(E), "retryd_redis_up") == 1,
                     what="redis_up 1 again")


E.stop()
t.done()
