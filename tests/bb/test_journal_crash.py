"""test_journal_crash.py - retryd is killed (SIGKILL) in the middle of a
push storm from several client threads; after a restart every push that was
answered 2xx is delivered, once.  Twice per driver: with Redis intact, and
with Redis flushed as well (the journal alone brings the jobs back, through
the rebuild at start).  SQLite and MySQL (a private mariadbd).
"""

import http.client
import os
import signal
import sys
import threading

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_journal_lib as L  # noqa: E402

t = harness.Tap()
D = L.Drivers(t)
THREADS = 8
BEFORE_KILL = 400       # 2xx answers before the kill


class Storm:
    """THREADS clients pushing one job per request until told to stop;
    the ids of the 2xx answers."""

    def __init__(self, d, key, topic):
        self.d, self.key, self.topic = d, key, topic
        self.acked = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,))
                        for i in range(THREADS)]
        for th in self.threads:
            th.start()

    def _run(self, i):
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                st, _, b = self.d.request(
                    "POST", "/v1/topics/%s/jobs" % self.topic,
                    {"delay_ms": L.HOUR, "body": {"t": i, "n": n}},
                    key=self.key, timeout=5)
            except (OSError, http.client.HTTPException):
                continue
            if st in (200, 201):
                with self.lock:
                    self.acked.append(b["id"])

    def count(self):
        with self.lock:
            return len(self.acked)

    def join(self):
        self.stop.set()
        for th in self.threads:
            th.join(30)
        with self.lock:
            return list(self.acked)


def crash(drv, flush_redis):
    cfg = L.config(D.url(drv), scheduler={"lease": "1s"})
    with harness.RedisServer() as r, harness.Receiver() as rcv, \
            harness.Retryd(redis=r, config=cfg) as d:
        L.ready(d)
        _, key = L.tenant(d)
        q = L.topic(d, key, callback_url=rcv.url("/hook"))
        storm = Storm(d, key, q)
        try:
            harness.wait_for(lambda: storm.count() >= BEFORE_KILL, 60,
                             "%d pushes answered" % BEFORE_KILL)
            d.signal(signal.SIGKILL)
            assert d.wait_exit() == -signal.SIGKILL
        finally:
            acked = storm.join()
        assert len(acked) >= BEFORE_KILL and len(set(acked)) == len(acked)
        if flush_redis:
            r.cmd("FLUSHALL")
        mark = d.log_mark()
        d.start()
        L.ready(d, mark)
        if flush_redis:
            assert "will be rebuilt" in d.log(mark)
        L.advance(d, 2 * L.HOUR)
        got = harness.wait_for(
            lambda: (lambda s: s if set(acked) <= s else None)(
                set(L.delivered_ids(rcv))), 60,
            "every acknowledged push delivered")
        ids = L.delivered_ids(rcv)
        assert len(ids) == len(set(ids)), "a job was delivered twice"
        t.diag("%d pushes acknowledged, %d jobs delivered" %
               (len(acked), len(got)))


D.each("kill -9 during a push storm: every 2xx push is delivered",
       lambda drv: crash(drv, False))
D.each("kill -9 and FLUSHALL: the journal alone brings every 2xx push back",
       lambda drv: crash(drv, True))
t.done()
