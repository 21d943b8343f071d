#!/usr/bin/env python3
"""test_journal_model.py - the job state machine under a random mix of
operations (pushes with and without bizkeys, reserves, acks and nacks,
stale tokens, cancels, reschedules, retries, redrives, the clock moving),
checked against what it must keep whatever the order: every answer is one
the contract allows (never a 5xx), a token of a finished reservation is
refused with 409, every job ends delivered, dead or cancelled, the
topics' counts agree with the jobs' states, the journal's listing agrees
with Redis, and after Redis loses its data only the dead jobs come back,
dead.  The sequence is drawn from a fixed seed (named in the test's
name), so a failure replays; the callbacks' outcomes depend on the order
the dispatcher makes them, so the path differs from run to run while what
is checked does not.  Each case runs on SQLite and on MySQL.
"""

import os
import random
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_journal_lib as L  # noqa: E402

t = harness.Tap()
D = L.Drivers(t)
STEPS = 600
FINISHED = ("delivered", "dead", "cancelled")


class Model:
    """One daemon, one tenant, a push topic P and a pull topic Q, and what
    the test knows of their jobs."""

    def __init__(self, d, rcv, rnd):
        self.d, self.rnd = d, rnd
        _, self.key = L.tenant(d)
        self.P = L.topic(d, self.key, callback_url=rcv.url("/h"),
                         retry_schedule="<0,1s,2s>")
        self.Q = L.topic(d, self.key, ttr_ms=3000,
                         retry_schedule="<0,1s,1s>")
        self.jobs = {}          # id -> topic
        self.held = {}          # id -> token of a reservation not finished
        self.stale = []         # (id, token) of finished reservations
        self.seen = set()       # (operation, status) answered

    def req(self, op, allowed, method, path, body=None):
        st, _, b = self.d.request(method, path, body, key=self.key)
        assert st in allowed, (op, method, path, body, st, b)
        self.seen.add((op, st))
        return st, b

    def push(self):
        r = self.rnd
        body = {"delay_ms": r.randrange(0, 3000),
                "body": {"n": len(self.jobs)}, "priority": r.randrange(-3, 4)}
        if r.random() < 0.3:
            body["bizkey"] = "k%d" % r.randrange(30)
        q = r.choice((self.P, self.Q))
        st, b = self.req("push", (200, 201), "POST", "/v1/topics/%s/jobs" % q,
                         body)
        assert st == 201 or b["deduplicated"], b
        assert self.jobs.setdefault(b["id"], q) == q, (b, q)

    def reserve(self, n):
        st, b = self.req("reserve", (200, 204), "GET",
                         "/v1/topics/%s/reserve?wait_ms=0&max=%d" %
                         (self.Q, n))
        got = b["jobs"] if st == 200 else []
        for j in got:
            assert j["id"] in self.jobs, j
            self.held[j["id"]] = j["token"]
        return got

    def finish(self, jid, verb):
        tok = self.held.pop(jid)
        # 409: its time to run ran out meanwhile (the clock moved).
        self.req(verb, (200, 409), "POST", "/v1/jobs/%s/%s" % (jid, verb),
                 {"token": tok})
        self.stale.append((jid, tok))

    def step(self):
        r, ids = self.rnd, list(self.jobs)
        op = r.randrange(14)
        if op <= 1:
            self.push()
        elif op <= 3:
            self.reserve(r.randrange(1, 5))
        elif op <= 5 and self.held:
            self.finish(r.choice(list(self.held)),
                        r.choice(("ack", "ack", "nack")))
        elif op == 6 and self.stale:
            # Mostly a token of a job reserved again since: the fence.
            again = [x for x in self.stale if x[0] in self.held]
            jid, tok = r.choice(again if again and r.random() < 0.7 else
                                self.stale)
            self.req("stale ack, reserved again" if jid in self.held else
                     "stale ack", (409,), "POST", "/v1/jobs/%s/ack" % jid,
                     {"token": tok})
        elif op == 7 and ids:
            self.req("cancel", (204, 409), "DELETE",
                     "/v1/jobs/" + r.choice(ids))
        elif op == 8 and ids:
            # Mostly a waiting job (it may move before the PATCH: 409).
            jid = r.choice(ids)
            for _ in range(5):
                st, b = self.req("get", (200,), "GET", "/v1/jobs/" + jid)
                if b["state"] in ("scheduled", "retrying"):
                    break
                jid = r.choice(ids)
            self.req("reschedule", (200, 409), "PATCH", "/v1/jobs/" + jid,
                     {"delay_ms": r.randrange(0, 2000)})
        elif op == 9:
            self.req("cancel bizkey", (204, 404), "DELETE",
                     "/v1/topics/%s/bizkeys/k%d" %
                     (r.choice((self.P, self.Q)), r.randrange(30)))
        elif op == 10:
            # A dead job: nothing else moves it, so 200 unless another
            # unfinished job of its topic holds its bizkey (409
            # bizkey_taken: it stays dead); another: 409.
            q = r.choice((self.P, self.Q))
            st, b = self.req("dead", (200,), "GET", "/v1/topics/%s/dead" % q)
            if b["jobs"]:
                j = r.choice(b["jobs"])
                st, e = self.req("retry", (200, 409), "POST",
                                 "/v1/jobs/%s/retry" % j["id"])
                assert st == 200 or (j["bizkey"] is not None and
                                     e["error"]["code"] == "bizkey_taken"), e
            elif ids:
                self.req("retry", (200, 409), "POST", "/v1/jobs/%s/retry" %
                         r.choice(ids))
        elif op == 11:
            self.req("redrive", (200,), "POST",
                     "/v1/topics/%s/dead:redrive" %
                     r.choice((self.P, self.Q)))
        else:
            L.advance(self.d, r.randrange(0, 1500))

    def states(self):
        """Each job's state as Redis holds it, 404 when it does not (GET
        then answers from the journal, with the listing's updated_ms)."""
        out = {}
        for jid in self.jobs:
            st, b = self.req("get", (200, 404), "GET", "/v1/jobs/" + jid)
            out[jid] = b["state"] if st == 200 and \
                "updated_ms" not in b else 404
        return out

    def settled(self):
        """Acks whatever is ready, moves the clock past every wait; the
        states once all are finished, else None."""
        while True:
            got = self.reserve(50)
            if not got:
                break
            for j in got:
                self.finish(j["id"], "ack")
        L.advance(self.d, 3500)
        s = self.states()
        return s if all(v in FINISHED for v in s.values()) else None

    def listed(self, topic):
        """The journal's listing of a topic: {id: state}."""
        out, cursor = {}, ""
        while True:
            b = L.ok(self.d.request("GET", "/v1/jobs?topic=%s&limit=100%s" %
                                    (topic, cursor), key=self.key), 200)
            for j in b["jobs"]:
                out[j["id"]] = j["state"]
            if not b.get("next_cursor"):
                return out
            cursor = "&cursor=" + b["next_cursor"]


def case(drv, seed):
    with harness.RedisServer() as r, \
            harness.Receiver(script="200") as rcv, \
            harness.Retryd(redis=r, config=L.config(D.url(drv))) as d:
        L.ready(d)
        rnd = random.Random(seed)
        # Callbacks succeed, fail (500, 503) or end the job (410), in an
        # order drawn from the seed; then all succeed.
        rcv.set_script(",".join(rnd.choice(("200", "200", "500", "503",
                                            "410")) for _ in range(400)) +
                       ",200")
        m = Model(d, rcv, rnd)
        for _ in range(100):
            m.push()
        for _ in range(STEPS):
            m.step()
        states = harness.wait_for(m.settled, 60, "every job finished")
        # The mix took every path it is meant to check (else the seed is a
        # poor one): each final state, a stale token, each change.
        want = {("stale ack", 409), ("stale ack, reserved again", 409),
                ("nack", 200), ("cancel", 204),
                ("reschedule", 200), ("retry", 200), ("cancel bizkey", 204),
                ("push", 200)}
        assert want <= m.seen, sorted(want - m.seen)
        assert set(states.values()) == set(FINISHED), set(states.values())
        t.diag("%d jobs: %s" % (len(states), ", ".join(
            "%d %s" % (list(states.values()).count(s), s) for s in FINISHED)))
        for q in (m.P, m.Q):
            mine = [s for j, s in states.items() if m.jobs[j] == q]
            want = {s: mine.count(s) for s in FINISHED}
            got = L.counts(d, m.key, q)
            assert all(got.get(s, 0) == want[s] for s in FINISHED) and \
                not any(v for s, v in got.items() if s not in FINISHED), \
                (q, got, want)
            want = {j: s for j, s in states.items() if m.jobs[j] == q}
            try:
                harness.wait_for(lambda: m.listed(q) == want, 20,
                                 "the journal's listing of %s" % q)
            except harness.WaitTimeout:
                got = m.listed(q)
                assert False, ("listed, Redis", q, {
                    j: (got.get(j), s) for j, s in want.items()
                    if got.get(j) != s}, set(got) - set(want))
        dead = [j for j, s in states.items() if s == "dead"]
        _, _, _, restored, present = L.lose_redis(d, r)
        assert restored == len(dead) and present == 0, \
            (restored, present, len(dead))
        after = m.states()
        for j, s in states.items():
            assert after[j] == ("dead" if s == "dead" else 404), \
                (j, s, after[j])
        return states


for seed in (1, 2):
    D.each("a random mix of %d operations (seed %d): allowed answers, "
           "stale tokens 409, all finish, counts and journal agree, only "
           "dead jobs come back" % (STEPS, seed),
           lambda drv, seed=seed: case(drv, seed))
t.done()
