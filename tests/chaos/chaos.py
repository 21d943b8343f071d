#!/usr/bin/env python3
"""chaos.py - several retryd instances under faults, then an account of
every job they accepted.

    tests/chaos/chaos.py [--seconds 90] [--instances 3] [--seed N]
                         [--faults kill,term,cut,reload,flush,redis]
                         [--rate 100]
                         [--journal mysql|sqlite] [--settle 120]

Not part of `make check`: it runs on the real clock for minutes, and what it
reports (lateness, duplicates) depends on the machine.  It starts a private
Redis and a private mariadbd (tests/mariadb.sh; the instances share the
MySQL journal, as a deployment of several instances does), N instances, a
callback receiver and load; with --journal sqlite one instance with an
SQLite journal (the default deployment), which the faults then kill and
stop too:

- pushers POST jobs (delay 0-2 s, some with a bizkey) to a push topic
  (schedule <0,300ms,700ms,1s>) and a pull topic, each to an instance
  picked at random; a job's body says how many attempts the receiver fails
  (0, 1, 2, or 9: a job that must end dead after its 4 attempts);
- an id pusher POSTs /push with client-given ids to the push topic, and
  pushes each one left without an answer, or answered 5xx, again with the
  same id until it is answered 200 (retries go on after the load stops);
- pull consumers reserve and ack on any instance;
- a canceller cancels some jobs still waiting;
- the fault thread, every 2-5 s: kill -9 an instance and start it again,
  stop one with SIGTERM and start it again, cut one off (Redis holds
  writes a moment, `CLIENT PAUSE WRITE`, so pushes committed to the
  journal wait for Redis, and the instance is killed meanwhile), reload
  one (SIGHUP: its registry cache is dropped), FLUSHALL Redis (every key
  lost: the instances must rebuild it from the journal), or restart Redis
  empty.

Then the load stops, every instance runs, and it waits for every accepted
job to finish.  It fails (exit 1) when a job answered 2xx was lost
(never delivered or acked, not dead when it should be), when a job answered
204 to a cancel was delivered, when an attempt came early, when a job's
final state (GET /v1/jobs/{id}, for a sample) is not what its history says
or GET no longer finds it, when a valid push was answered 4xx (a 401 or
404 while Redis was being rebuilt), or when a client id pushed again never
got its 200.  Duplicates (a job delivered or acked twice) and the first
attempts' lateness are printed, not failed: delivery is at least once (a
kill -9 during a callback repeats it), a shard an instance held when
killed waits for its lease to run out, and an id whose push was cut off
is made about a minute later (503 push_unsettled until then), its
lateness counted from its first push.
"""

import argparse
import http.client
import http.server
import json
import os
import random
import signal
import socketserver
import sys
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bb"))
import harness  # noqa: E402
from test_journal_lib import MariaDB  # noqa: E402

SCHEDULE = "<0,300ms,700ms,1s>"
WAITS = [0, 300, 700, 1000]		# before attempts 1..4
FAILS = [0] * 6 + [1] * 2 + [2] + [9]	# attempts the receiver fails
TTR = 2000


def now_ms():
    return int(time.time() * 1000)


class Log:
    def __init__(self):
        self.lock = threading.Lock()

    def __call__(self, fmt, *a):
        with self.lock:
            sys.stdout.write("%7.1f  %s\n" % (time.time() - T0, fmt % a))
            sys.stdout.flush()


T0 = time.time()
T0MS = int(T0 * 1000)
say = Log()


class Stack:
    """Redis, MariaDB and the instances; .pick() an instance that runs."""

    def __init__(self, n, journal):
        self.redis = harness.RedisServer()
        if journal == "mysql":
            self.db = MariaDB()
            url = self.db.new_db()
        else:
            url = "sqlite://%s/journal.db" % harness.mkdtemp(
                "retryd-chaos-j-")
        self.admin_key = "chaos-admin-" + os.urandom(8).hex()
        conf = {"journal": {"url": url, "mode": "sync"},
                "log": {"level": "info"}}
        self.lock = threading.Lock()
        self.up = []
        self.inst = []
        self.term_exits = []    # (instance, status) of a SIGTERM not 0
        for i in range(n):
            d = harness.Retryd(self.redis, config=conf,
                               admin_key=self.admin_key, start=False)
            self.inst.append(d)
            self.start(i)

    def start(self, i):
        d = self.inst[i]
        d.start(timeout=60)
        with self.lock:
            self.up.append(i)

    def down(self, i):
        with self.lock:
            if i in self.up:
                self.up.remove(i)

    def pick(self, rnd):
        with self.lock:
            if not self.up:
                return None
            return self.inst[rnd.choice(self.up)]


def call(d, method, path, body=None, key=None, timeout=10):
    """(status, json or None); status 0 for a connection that failed."""
    if d is None:
        return 0, None
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    try:
        c = http.client.HTTPConnection(d.host, d.port, timeout=timeout)
        c.request(method, path, body=None if body is None else
                  json.dumps(body), headers=h)
        r = c.getresponse()
        raw = r.read()
        c.close()
    except (OSError, http.client.HTTPException):
        return 0, None
    try:
        return r.status, json.loads(raw) if raw else None
    except ValueError:
        return r.status, None


class Receiver:
    """Answers 500 to a job's first f attempts (f from its body), then
    200; records every request."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen = {}		# id -> [(attempt, at_ms, status)]
        rec = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                at = now_ms()
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                jid = self.headers.get("webhook-id", "")
                att = int(self.headers.get("retryd-attempt", "0"))
                try:
                    f = json.loads(body)["f"]
                except (ValueError, KeyError, TypeError):
                    f = 0
                st = 200 if att > f else 500
                with rec.lock:
                    rec.seen.setdefault(jid, []).append((att, at, st))
                self.send_response(st)
                self.send_header("Content-Length", "0")
                self.end_headers()

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            # Every instance's dispatcher opens connections at once after
            # a start: with the default backlog of 5 the kernel drops
            # SYNs, a callback times out, and the request it sent is read
            # here much later, after retryd gave it up.
            request_queue_size = 4096

            def handle_error(self, request, client_address):
                pass		# a killed instance resets its connections

        self.srv = S(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()


class Book:
    """What the clients were told."""

    def __init__(self):
        self.lock = threading.Lock()
        self.jobs = {}		# id -> dict(topic, f, due, at)
        self.status = {}	# push answers by status
        self.cancelled = {}	# id -> ms of the 204
        self.acks = {}		# id -> [ms of each 200 ack]
        self.reserves = {}	# id -> count
        self.cancel_409 = 0
        self.unsure = set()	# a cancel whose answer was lost

    def count(self, st):
        with self.lock:
            self.status[st] = self.status.get(st, 0) + 1


def pusher(stack, key, book, stop, seed, rate):
    rnd = random.Random(seed)
    n = 0
    while not stop.is_set():
        t0 = time.time()
        d = stack.pick(rnd)
        pull = rnd.random() < 0.3
        f = 0 if pull else rnd.choice(FAILS)
        delay = rnd.randrange(0, 2000)
        job = {"delay_ms": delay, "body": {"f": f, "s": seed, "n": n}}
        if rnd.random() < 0.2:
            job["bizkey"] = "b-%d-%d" % (seed, n)
        n += 1
        topic = "pull" if pull else "push"
        st, b = call(d, "POST", "/v1/topics/%s/jobs" % topic, job, key)
        book.count(st)
        if st == 201:
            with book.lock:
                book.jobs[b["id"]] = {"topic": topic, "f": f,
                                      "due": b["run_at_ms"], "at": now_ms()}
        time.sleep(max(0, 1.0 / rate - (time.time() - t0)))


class IdPusher:
    """Pushes with client-given ids (/push) to the push topic, and pushes
    again, with the same id, each one left without an answer or answered
    5xx, until it is answered 200: a client that makes its pushes
    idempotent so.  New ids stop with the load; the retries go on until
    every id has its answer or done is set."""

    def __init__(self, stack, key, book, seed, rate):
        self.stack, self.key, self.book = stack, key, book
        self.rnd = random.Random(seed)
        self.seed, self.rate = seed, rate
        self.retry = []		# [id, job, when, sent_ms] without a 200
        self.lock = threading.Lock()
        self.n = 0

    def left(self):
        with self.lock:
            return [x[0] for x in self.retry]

    def one(self, jid, job, sent_ms):
        """Push job; True when answered for good.  Its due time in the
        book is the first push's send time plus its delay, a bound below
        the one retryd gave it: an answer to a push again describes the
        job as it is then (next_attempt_ms may be a later attempt's)."""
        st, b = call(self.stack.pick(self.rnd), "POST", "/push", job,
                     self.key)
        self.book.count(st)
        if st == 200:
            with self.book.lock:
                self.book.jobs[jid] = {"topic": "push",
                                       "f": job["body"]["f"],
                                       "due": sent_ms + job["delay"],
                                       "at": now_ms()}
            return True
        return not (st == 0 or st >= 500)

    def run(self, stop_new, done):
        while not done.is_set():
            t0 = time.time()
            # The first id due again (a second after its last answer, as
            # Retry-After says); left() counts it until it is answered.
            with self.lock:
                again = self.retry[0] if self.retry and \
                    self.retry[0][2] <= t0 else None
            if again is not None:
                ok = self.one(again[0], again[1], again[3])
                with self.lock:
                    self.retry.remove(again)
                    if not ok:
                        self.retry.append([again[0], again[1],
                                           time.time() + 1, again[3]])
            if not stop_new.is_set():
                jid = "i-%d-%d" % (self.seed, self.n)
                self.n += 1
                job = {"topic": "push", "id": jid,
                       "delay": self.rnd.randrange(0, 2000),
                       "body": {"f": self.rnd.choice(FAILS),
                                "s": self.seed, "n": self.n}}
                sent = now_ms()
                if not self.one(jid, job, sent):
                    with self.lock:
                        self.retry.append([jid, job, time.time() + 1,
                                           sent])
            time.sleep(max(0, 1.0 / self.rate - (time.time() - t0)))


def consumer(stack, key, book, stop, seed):
    rnd = random.Random(seed)
    while not stop.is_set():
        d = stack.pick(rnd)
        if d is None:
            time.sleep(0.1)
            continue
        st, b = call(d, "GET", "/v1/topics/pull/reserve?wait_ms=500", None,
                     key)
        if st != 200:
            if st != 204:
                time.sleep(0.05)
            continue
        jid = b["id"]
        with book.lock:
            book.reserves[jid] = book.reserves.get(jid, 0) + 1
        d = stack.pick(rnd)
        st, _ = call(d, "POST", "/v1/jobs/%s/ack" % jid,
                     {"token": b["token"]}, key)
        if st == 200:
            with book.lock:
                book.acks.setdefault(jid, []).append(now_ms())


def canceller(stack, key, book, stop, seed):
    rnd = random.Random(seed)
    while not stop.is_set():
        time.sleep(0.05)
        with book.lock:
            cand = [j for j, v in book.jobs.items()
                    if v["topic"] == "push" and v["due"] - now_ms() > 500 and
                    j not in book.cancelled]
        if not cand:
            continue
        jid = rnd.choice(cand[-50:])
        st, _ = call(stack.pick(rnd), "DELETE", "/v1/jobs/" + jid, None, key)
        with book.lock:
            if st == 204:
                book.cancelled[jid] = now_ms()
            elif st == 409:
                book.cancel_409 += 1
            elif st == 0:
                book.unsure.add(jid)


def faults(stack, stop, seed, kinds):
    rnd = random.Random(seed)
    while not stop.wait(rnd.uniform(2, 5)):
        k = rnd.choice(kinds)
        if k in ("kill", "term", "cut"):
            with stack.lock:
                if len(stack.up) < min(2, len(stack.inst)):
                    continue
                i = rnd.choice(stack.up)
            stack.down(i)
            d = stack.inst[i]
            if k == "cut":
                # Redis holds writes a moment: pushes committed to the
                # journal wait for Redis, and the kill cuts them off.
                stack.redis.cmd("CLIENT", "PAUSE", "10000", "WRITE")
                time.sleep(rnd.uniform(0.1, 0.4))
                d.signal(signal.SIGKILL)
                d.wait_exit(timeout=60)
                stack.redis.cmd("CLIENT", "UNPAUSE")
            elif k == "kill":
                d.signal(signal.SIGKILL)
            else:
                d.signal(signal.SIGTERM)
            rc = d.wait_exit(timeout=60)
            say("fault: %s instance %d (exit %d)", k, i, rc)
            if k == "term" and rc != 0:
                with stack.lock:
                    stack.term_exits.append((i, rc))
            time.sleep(rnd.uniform(0.2, 1.5))
            stack.start(i)
            say("instance %d started again", i)
        elif k == "reload":
            # SIGHUP drops the instance's registry cache: after a flush it
            # must not take a topic Redis lacks for the moment as gone.
            with stack.lock:
                if not stack.up:
                    continue
                i = rnd.choice(stack.up)
            stack.inst[i].signal(signal.SIGHUP)
            say("fault: reload instance %d", i)
        elif k == "flush":
            stack.redis.cmd("FLUSHALL")
            say("fault: FLUSHALL")
        elif k == "redis":
            stack.redis.restart()
            say("fault: Redis restarted empty")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--journal", choices=("mysql", "sqlite"),
                    default="mysql",
                    help="sqlite: one instance, the default deployment")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--faults", default="kill,term,cut,reload,flush,redis",
                    help="kinds of fault to pick from (none: no fault)")
    ap.add_argument("--rate", type=float, default=100,
                    help="pushes a second per pusher (4 pushers)")
    ap.add_argument("--settle", type=float, default=120,
                    help="seconds to wait for every job to finish")
    o = ap.parse_args()
    kinds = o.faults.split(",")
    for k in kinds:
        if k not in ("kill", "term", "cut", "reload", "flush", "redis",
                     "none"):
            ap.error("--faults: %s is not one of kill, term, cut, reload, "
                     "flush, redis, none" % k)
    say("seed %d", o.seed)
    if o.journal == "sqlite":
        o.instances = 1		# an SQLite journal is one instance's
    stack = Stack(o.instances, o.journal)
    rcv = Receiver()
    d = stack.inst[0]
    st, b = call(d, "POST", "/v1/tenants", {"name": "chaos"},
                 stack.admin_key)
    assert st == 201, (st, b)
    key = b["api_key"]
    st, b = call(d, "PUT", "/v1/topics/push",
                 {"callback_url": "http://127.0.0.1:%d/hook" % rcv.port,
                  "retry_schedule": SCHEDULE, "timeout_ms": 2000}, key)
    assert st == 201, (st, b)
    st, b = call(d, "PUT", "/v1/topics/pull",
                 {"mode": "pull", "retry_schedule": SCHEDULE,
                  "ttr_ms": TTR}, key)
    assert st == 201, (st, b)

    book = Book()
    stop_load, stop_faults = threading.Event(), threading.Event()
    th = [threading.Thread(target=pusher, args=(stack, key, book, stop_load,
                                                o.seed * 10 + i, o.rate))
          for i in range(4)]
    th += [threading.Thread(target=consumer, args=(stack, key, book,
                                                   stop_load,
                                                   o.seed * 10 + 5 + i))
           for i in range(2)]
    th.append(threading.Thread(target=canceller, args=(stack, key, book,
                                                       stop_load,
                                                       o.seed * 10 + 8)))
    idp = IdPusher(stack, key, book, o.seed * 10 + 7, o.rate)
    ids_done = threading.Event()
    idt = threading.Thread(target=idp.run, args=(stop_load, ids_done))
    idt.start()
    ft = threading.Thread(target=faults, args=(stack, stop_faults,
                                               o.seed * 10 + 9,
                                               kinds))
    for x in th + [ft]:
        x.start()
    time.sleep(o.seconds)
    stop_faults.set()
    ft.join()
    say("faults stopped; %d jobs accepted so far", len(book.jobs))
    time.sleep(2)
    stop_load.set()
    for x in th[:4] + th[6:]:
        x.join()
    say("pushes stopped: %d accepted; answers %s", len(book.jobs),
        sorted(book.status.items()))

    # Consumers go on until every pull job is acked.
    stop_cons = threading.Event()
    for x in th[4:6]:
        x.join()
    cons = [threading.Thread(target=consumer, args=(stack, key, book,
                                                    stop_cons, 77 + i))
            for i in range(2)]
    for x in cons:
        x.start()

    def pending():
        out = []
        with book.lock, rcv.lock:
            for jid, v in book.jobs.items():
                if jid in book.cancelled or jid in book.unsure:
                    continue
                if v["topic"] == "pull":
                    if jid not in book.acks and jid not in dead:
                        out.append(jid)
                elif v["f"] < len(WAITS):
                    if not any(s == 200 for _, _, s in rcv.seen.get(jid,
                                                                    [])):
                        out.append(jid)
                elif jid not in dead:
                    out.append(jid)
        return out

    dead = set()

    def poll_dead():
        # Jobs whose end the clients cannot see, asked for their state:
        # those that must end dead (an attempt a crash cut short never
        # reached the receiver) and pull jobs whose ack was committed but
        # its answer lost with the instance.
        with book.lock:
            want = [j for j, v in book.jobs.items() if j not in dead and
                    j not in book.cancelled and
                    ((v["topic"] == "push" and v["f"] >= len(WAITS)) or
                     (v["topic"] == "pull" and j not in book.acks))]
        for jid in want:
            st, b = call(stack.inst[0], "GET", "/v1/jobs/" + jid, None, key)
            v = book.jobs[jid]
            if st == 200 and b.get("state") == ("dead" if v["topic"] ==
                                                 "push" else "delivered"):
                dead.add(jid)

    def explain(jid):
        v = book.jobs[jid]
        st, b = call(stack.inst[0], "GET", "/v1/jobs/" + jid, None, key)
        say("  %s %s f=%d due %d: %s %s; attempts %s; receiver %s; "
            "acks %s", jid, v["topic"], v["f"], v["due"] - T0MS, st,
            b and b.get("state"),
            [(a.get("at_ms", 0) - T0MS, a.get("status"), a.get("error"))
             for a in (b or {}).get("attempts", [])],
            [(a, t - T0MS, s) for a, t, s in rcv.seen.get(jid, [])],
            book.acks.get(jid))

    end = time.time() + o.settle
    while time.time() < end and (pending() or idp.left()):
        time.sleep(1)
        poll_dead()
    stop_cons.set()
    ids_done.set()
    idt.join()
    for x in cons:
        x.join()
    left = pending()
    bad = []
    if idp.left():
        bad.append("UNSETTLED: %d client ids pushed again until the end "
                   "never got a 200, e.g. %s" % (len(idp.left()),
                                                  idp.left()[:5]))
    if left:
        bad.append("LOST: %d accepted jobs never finished, e.g. %s" %
                   (len(left), left[:5]))
        for jid in left[:5]:
            st, b = call(stack.inst[0], "GET", "/v1/jobs/" + jid, None, key)
            explain(jid)

    early = []
    late = []
    late_of = {}
    dup = {"push": 0, "pull": 0}
    cancelled_delivered = []
    for jid, v in book.jobs.items():
        seen = sorted(rcv.seen.get(jid, []))
        if v["topic"] == "push":
            ok = [a for a in seen if a[2] == 200]
            if len(ok) > 1:
                dup["push"] += 1
            if jid in book.cancelled and ok:
                cancelled_delivered.append(jid)
            firsts = {}
            for att, at, _ in seen:
                firsts.setdefault(att, at)
            due = v["due"]
            for att in sorted(firsts):
                want = due if att == 1 else firsts.get(att - 1)
                if want is None:
                    continue
                want += WAITS[att - 1]
                if firsts[att] < want - 1:
                    early.append((jid, att, want - firsts[att]))
                if att == 1:
                    late.append(firsts[att] - due)
                    late_of[jid] = firsts[att] - due
        elif len(book.acks.get(jid, [])) > 1:
            dup["pull"] += 1
    for e in early[:3]:
        explain(e[0])
    worst = sorted(((firsts_late, jid) for jid, firsts_late in
                    late_of.items()), reverse=True)[:3]
    for _, jid in worst:
        explain(jid)
    if early:
        bad.append("EARLY: %d attempts before their time, e.g. %s" %
                   (len(early), early[:5]))
    if cancelled_delivered:
        bad.append("CANCELLED BUT DELIVERED: %d, e.g. %s" %
                   (len(cancelled_delivered), cancelled_delivered[:5]))

    # The final state each job is reported in.
    wrong = []
    rnd = random.Random(1)
    sample = rnd.sample(sorted(book.jobs), min(400, len(book.jobs)))
    for jid in sample + list(book.cancelled):
        if jid in book.unsure:
            continue
        v = book.jobs[jid]
        st, b = call(stack.inst[0], "GET", "/v1/jobs/" + jid, None, key)
        want = ("cancelled" if jid in book.cancelled else
                "dead" if v["f"] >= len(WAITS) else "delivered")
        if st != 200 or b.get("state") != want:
            wrong.append((jid, want, st, b and b.get("state")))
    gone = [w for w in wrong if w[2] == 404]
    wrong = [w for w in wrong if w[2] != 404]
    if gone:
        bad.append("GONE: GET /v1/jobs/{id} 404 for %d finished jobs, "
                   "e.g. %s" % (len(gone), gone[:5]))
    if wrong:
        bad.append("STATE: %d jobs not in the state their history says, "
                   "e.g. %s" % (len(wrong), wrong[:5]))
    refused = sum(n for st, n in book.status.items()
                  if 400 <= st < 500 and st != 429)
    if refused:
        bad.append("REFUSED: %d valid pushes answered 4xx: %s" %
                   (refused, sorted(book.status.items())))
    late.sort()

    def pct(p):
        return late[min(len(late) - 1, int(len(late) * p))] if late else 0

    say("accepted %d (push %d, pull %d), cancelled %d (409: %d), "
        "delivered twice %d, acked twice %d", len(book.jobs),
        sum(1 for v in book.jobs.values() if v["topic"] == "push"),
        sum(1 for v in book.jobs.values() if v["topic"] == "pull"),
        len(book.cancelled), book.cancel_409, dup["push"], dup["pull"])
    say("first attempts' lateness ms: p50 %d p99 %d max %d", pct(0.5),
        pct(0.99), late[-1] if late else 0)
    if stack.term_exits:
        bad.append("TERM: %d SIGTERMs not answered by exit 0: %s" % (
            len(stack.term_exits), stack.term_exits[:5]))
    # cleanup_all() stops the instances and reads each one's log, all its
    # runs: a sanitizer report there (a build with --enable-asan/-ubsan).
    harness.cleanup_all()
    for r in harness.sanitizer_reports():
        bad.append("SANITIZER: " + "\n".join(r))
    for b in bad:
        say("%s", b)
    say("%s", "FAIL" if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
