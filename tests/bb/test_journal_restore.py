"""test_journal_restore.py - Redis loses its data (FLUSHALL) and comes back
from the journal: by itself (the redis_lost hook), through the restore route
racing it, and with retryd --recover; every accepted job delivered once,
tenants, keys and topics back, nothing finished revived.  Each case runs on
SQLite and on MySQL (a private mariadbd).

The clock is the test clock (debug.fake_clock): jobs are pushed due in an
hour, Redis is flushed, and the clock is moved when the test wants them
delivered, so nothing is delivered before the loss and nothing waits on
real time.
"""

import os
import re
import signal
import sys
import threading

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import test_journal_lib as L  # noqa: E402

t = harness.Tap()
D = L.Drivers(t)
N = 10000


def hook_topic(d, key, rcv, **conf):
    c = {"callback_url": rcv.url("/hook"), "retry_schedule": "<0,1s,1s>"}
    c.update(conf)
    return L.topic(d, key, **c)


def deliver_all(d, rcv, ids, timeout=90):
    """Move the clock past the due time; every id delivered exactly once."""
    L.advance(d, 2 * L.HOUR)
    rcv.wait_count(len(ids), timeout=timeout)
    got = L.delivered_ids(rcv)
    dup = len(got) - len(set(got))
    assert dup == 0, "%d deliveries were duplicates" % dup
    assert set(got) == set(ids), (len(set(got) - set(ids)),
                                  len(set(ids) - set(got)))


def case_auto(drv):
    """10k jobs, FLUSHALL, the automatic rebuild; the route after it
    creates nothing; the old key works; all delivered once."""
    with harness.RedisServer() as r, harness.Receiver() as rcv, \
            harness.Retryd(redis=r, config=L.config(D.url(drv))) as d:
        L.ready(d)
        name, key = L.tenant(d)
        q = hook_topic(d, key, rcv, timeout_ms=5000)
        before = L.ok(d.request("GET", "/v1/topics/" + q, key=key))
        ids = L.push_batches(d, key, q, N)
        tenants, keys, topics, restored, present = L.lose_redis(d, r)
        assert (tenants, keys, topics) == (1, 1, 1), (tenants, keys, topics)
        assert restored == N and present == 0, (restored, present)
        # The tenant's old key works; the topic is as it was.
        after = L.ok(d.request("GET", "/v1/topics/" + q, key=key))
        for f in ("secret", "callback_url", "retry_schedule", "timeout_ms",
                  "created_ms"):
            assert after[f] == before[f], (f, before[f], after[f])
        assert after["counts"]["scheduled"] == N, after["counts"]
        # Restoring again (the route, every tenant) creates nothing.
        b = L.ok(d.admin("POST", "/v1/restore"), 200)
        assert b["restored"] == 0 and b["present"] == N, b
        deliver_all(d, rcv, ids)


def case_route(drv):
    """FLUSHALL, then the route at once, racing the automatic rebuild:
    together they make every job once."""
    n = 2000
    with harness.RedisServer() as r, harness.Receiver() as rcv, \
            harness.Retryd(redis=r, config=L.config(D.url(drv))) as d:
        L.ready(d)
        name, key = L.tenant(d)
        q = hook_topic(d, key, rcv)
        ids = L.push_batches(d, key, q, n)
        mark = d.log_mark()
        r.cmd("FLUSHALL")
        # The admin key without X-Tenant: every tenant.
        b = L.ok(d.admin("POST", "/v1/restore"), 200)
        assert b["failed"] == 0, b
        _, _, _, restored, present = L.wait_restore(d, mark)
        assert b["restored"] + restored == n, (b, restored)
        assert present + restored == n, (present, restored)
        # The original route, for one tenant: all present.
        b = L.ok(d.request("GET", "/restore?expire=true", key=key), 200)
        assert b["restored"] == 0 and b["present"] == n, b
        deliver_all(d, rcv, ids)


def case_two(drv):
    """Two instances share Redis and the journal: after FLUSHALL exactly one
    rebuilds, the other waits; every job once."""
    n = 2000
    url = D.url(drv)
    with harness.RedisServer() as r, harness.Receiver() as rcv, \
            harness.Retryd(redis=r, config=L.config(url)) as a:
        L.ready(a)
        with harness.Retryd(redis=r, config=L.config(url)) as b:
            L.ready(b)
            _, key = L.tenant(a)
            q = hook_topic(a, key, rcv)
            ids = L.push_batches(a, key, q, n // 2) + \
                L.push_batches(b, key, q, n // 2)
            marks = (a.log_mark(), b.log_mark())
            r.cmd("FLUSHALL")
            done = harness.wait_for(
                lambda: [m for m in (re.search(L.RESTORE_DONE, d.log(k))
                                     for d, k in zip((a, b), marks)) if m],
                60, "a rebuild to complete")
            assert len(done) == 1, "both instances rebuilt"
            assert int(done[0].group(4)) == n, done[0].group(0)
            logs = [d.log(k) for d, k in zip((a, b), marks)]
            assert sum(x.count("rebuilding Redis from the journal")
                       for x in logs) == 1, logs
            assert L.counts(b, key, q)["scheduled"] == n
            L.advance(a, 2 * L.HOUR)
            L.advance(b, 2 * L.HOUR)
            rcv.wait_count(n, timeout=60)
            got = L.delivered_ids(rcv)
            assert len(got) == len(set(got)) and set(got) == set(ids)


def lose_locked(r, holder):
    """FLUSHALL r with the rebuild lock set to holder (for two minutes) in
    the same transaction: the rebuild waits for an instance that is not
    there."""
    assert r.cmd("MULTI") == "OK"
    r.cmd("FLUSHALL")
    r.cmd("SET", "rd:{registry}:restore_lock", holder, "PX", "120000")
    r.cmd("EXEC")


def case_rebuilding(drv):
    """While Redis is owed its rebuild, what it lacks is not "unknown":
    401 or 404 would tell a client to give up on a key, tenant, topic or
    job that exists.  Two instances; Redis loses its data with the rebuild
    lock held by an instance that is gone, so the rebuild waits: every
    lookup is 503 `rebuilding` with Retry-After, nothing is made.  Once the
    lock is let go: served as before, on both instances (neither keeps a
    miss it cached meanwhile), and what is unknown is 401 and 404 again."""
    url = D.url(drv)
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(url)) as a:
        L.ready(a)
        with harness.Retryd(redis=r, config=L.config(url)) as b:
            L.ready(b)
            name, key = L.tenant(a)
            q = L.topic(a, key, mode="pull")
            jid = L.push_batches(a, key, q, 1)[0]
            marks = (a.log_mark(), b.log_mark())
            lose_locked(r, "gone/0")
            bogus = "rk_" + "x" * (len(key) - 3)

            def asks(d):
                return [("GET", "/v1/topics/" + q, None, key, {}),
                        ("POST", "/v1/topics/%s/jobs" % q, {"body": "no"},
                         key, {}),
                        ("GET", "/v1/jobs/" + jid, None, key, {}),
                        ("GET", "/v1/topics", None, d.admin_key,
                         {"X-Tenant": name}),
                        ("GET", "/v1/tenants/" + name, None, d.admin_key,
                         {}),
                        ("GET", "/v1/topics", None, bogus, {})]

            def refused(d, m, path, body, k, h):
                st, hd, res = d.request(m, path, body, headers=h, key=k)
                return st == 503 and \
                    res["error"]["code"] == "rebuilding" and \
                    hd["Retry-After"] == "1"
            # The first ask may come before the sweep saw the loss.
            harness.wait_for(lambda: refused(a, *asks(a)[0]), 10,
                             "a 503 rebuilding")
            for d in (a, b):
                for ask in asks(d):
                    st, _, res = d.request(ask[0], ask[1], ask[2],
                                           headers=ask[4], key=ask[3])
                    assert refused(d, *ask), (ask, st, res)
            # A request without a key is still refused as such.
            assert a.request("GET", "/v1/topics")[0] == 401
            r.cmd("DEL", "rd:{registry}:restore_lock")
            harness.wait_for(
                lambda: [m for m in (re.search(L.RESTORE_DONE, d.log(k))
                                     for d, k in zip((a, b), marks)) if m],
                60, "a rebuild to complete")
            for d in (a, b):
                L.ok(d.request("GET", "/v1/topics/" + q, key=key), 200)
                L.ok(d.request("GET", "/v1/topics", headers={
                    "X-Tenant": name}, key=d.admin_key), 200)
                assert L.redis_job(d, key, jid)["state"] == "scheduled"
                assert d.request("GET", "/v1/topics", key=bogus)[0] == 401
                assert d.request("GET", "/v1/topics/nope",
                                 key=key)[0] == 404
                assert d.request("GET", "/v1/jobs/0000000000000000",
                                 key=key)[0] == 404
            # Nothing of the refused pushes was made.
            assert L.counts(a, key, q)["scheduled"] == 1


def lose_topics(r, name):
    """Redis loses its schema marker and the tenant's topics, the jobs
    kept (a loss the rebuild is owed for, caught with a job in flight), in
    one transaction with the rebuild lock held by an instance that is gone
    (lose_locked): the rebuild waits."""
    assert r.cmd("MULTI") == "OK"
    r.cmd("DEL", "rd:schema", "rd:{registry}:topics:" + name,
          "rd:{registry}:topicc:" + name)
    r.cmd("SET", "rd:{registry}:restore_lock", "gone/0", "PX", "120000")
    r.cmd("EXEC")


def reload_twice(d, mark):
    """SIGHUP d twice: each reload drops the registry's cache, and the
    second's log line is written after the first's drop."""
    for n in (1, 2):
        d.signal(signal.SIGHUP)
        harness.wait_for(lambda: d.log(mark).count(
            "configuration reloaded") >= n, 10, "reload %d" % n)


def held_in_window(d, r, rcv):
    """A job of a topic with the schedule <0,1m> (callback timeout 60 s,
    longer than any test waits) in flight, its answer held by rcv, then
    Redis owed its rebuild without the topic (lose_topics) and d's cache
    dropped (reload_twice): (key, topic, job id, log mark before the
    loss)."""
    L.ready(d)
    name, key = L.tenant(d)
    q = hook_topic(d, key, rcv, retry_schedule="<0,1m>", timeout_ms=60000)
    jid = L.ok(d.request("POST", "/v1/topics/%s/jobs" % q,
                         {"body": "x", "delay_ms": 0}, key=key), 201)["id"]
    rcv.wait_count(1)
    mark = d.log_mark()
    lose_topics(r, name)
    reload_twice(d, mark)
    return key, q, jid, mark


def retry_delivered(d, rcv, key, jid):
    """The clock moved to the job's retry: delivered by the second
    request."""
    L.advance(d, 60000)
    rcv.wait_count(2)
    harness.wait_for(lambda: L.redis_job(d, key, jid)["state"] ==
                     "delivered", 10, "the retry delivered")


def recalled_then_rebuilt(d, r, key, q, jid, mark):
    """The failed attempt read topic q from the journal; then the rebuild
    runs (the gone rebuilder's lock dropped) and leaves job jid retrying
    after its one attempt, never dead as if q were deleted."""
    d.wait_log(r"topic=%s .*the topic read from the journal" % q,
               since=mark)
    r.cmd("DEL", "rd:{registry}:restore_lock")
    L.wait_restore(d, mark)
    assert "the topic is gone" not in d.log(mark)
    job = L.redis_job(d, key, jid)
    assert job["state"] == "retrying" and job["attempt_count"] == 1, job


def case_recall(drv):
    """An attempt fails while Redis is owed its rebuild and lacks the
    topic, and the instance has it no longer cached (a reload dropped its
    cache): the topic is read from the journal and the job retried on its
    schedule, not made dead as if the topic were deleted.  The rebuild
    then leaves the job as it is, and it is delivered at its retry."""
    url = D.url(drv)
    with harness.RedisServer() as r, \
            harness.Receiver(script="hold=500,200") as rcv, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        key, q, jid, mark = held_in_window(d, r, rcv)
        rcv.release()
        recalled_then_rebuilt(d, r, key, q, jid, mark)
        retry_delivered(d, rcv, key, jid)


def case_held(drv):
    """The deadline of a job in flight passes while Redis is owed its
    rebuild and lacks the topic, the instance's cache dropped: the timer
    does not wait on the journal, so the job is held in flight, not made
    dead; once the rebuild brings the topic back its expiry is decided on
    the schedule, and the job is delivered at its retry."""
    url = D.url(drv)
    with harness.RedisServer() as r, \
            harness.Receiver(script="hold=500,200") as rcv, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        key, q, jid, mark = held_in_window(d, r, rcv)
        L.advance(d, 66000)         # its deadline (+5 s) passed
        d.wait_log(r"job=%s .*cannot be decided" % jid, since=mark)
        r.cmd("DEL", "rd:{registry}:restore_lock")
        L.wait_restore(d, mark)
        harness.wait_for(lambda: L.redis_job(d, key, jid)["state"] ==
                         "retrying", 10, "the expiry decided")
        assert "the topic is gone" not in d.log(mark)
        job = L.redis_job(d, key, jid)
        assert job["attempt_count"] == 1, job
        rcv.release()               # the late 500 is a stale outcome
        retry_delivered(d, rcv, key, jid)


def reserved_in_window(d, r):
    """A job of a pull topic with the schedule <0,1m> reserved, then Redis
    owed its rebuild without the topic (lose_topics) and d's cache dropped
    (reload_twice): (key, topic, job id, its nack with the reservation's
    token, log mark before the loss)."""
    L.ready(d)
    name, key = L.tenant(d)
    q = L.topic(d, key, mode="pull", retry_schedule="<0,1m>")
    jid = L.ok(d.request("POST", "/v1/topics/%s/jobs" % q,
                         {"body": "x", "delay_ms": 0}, key=key), 201)["id"]
    j = L.ok(d.request("GET", "/v1/topics/%s/reserve?wait_ms=10000" % q,
                       key=key, timeout=30), 200)
    assert j["id"] == jid, j
    mark = d.log_mark()
    lose_topics(r, name)
    reload_twice(d, mark)

    def nack():
        # Long enough for a hung MariaDB's read timeout (case_nack_hung).
        return d.request("POST", "/v1/jobs/%s/nack" % jid,
                         {"token": j["token"]}, key=key, timeout=60)
    return key, q, jid, nack, mark


def case_nack(drv):
    """A pull job nacked while Redis is owed its rebuild and lacks the
    topic, the instance's cache dropped: the nack reads the topic from the
    journal and the job waits for its retry, not made dead.  With the
    journal down as well (MariaDB stopped), nothing can tell the schedule:
    the nack is answered 503 and changes nothing, and the same nack is
    applied once the journal is back."""
    url = D.url(drv)
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        key, q, jid, nack, mark = reserved_in_window(d, r)
        if drv == "mysql":
            D.db.stop()
            try:
                st, _, b = nack()
                assert st == 503 and b["error"]["code"] == "unavailable", \
                    (st, b)
            finally:
                D.db.start()
            job = L.redis_job(d, key, jid)
            assert job["state"] == "in_flight" and \
                job["attempt_count"] == 0, job
            d.wait_ready(timeout=30)
        # A recall that failed is not tried again for a second: until
        # then the nack is refused as above.
        b = harness.wait_for(
            lambda: (lambda x: None if x[0] == 503 and
                     x[2]["error"]["code"] == "unavailable" else x)(nack()),
            20, "the nack applied")
        assert b[0] == 200 and b[2]["state"] == "retrying", b
        recalled_then_rebuilt(d, r, key, q, jid, mark)


def case_nack_hung():
    """As case_nack, with MariaDB hanging rather than down (its topics
    table locked: the recall's read waits for its timeout): the first
    nack is answered 503 once the read gives up, and the journal is not
    asked again for a second after that, so the nack after it is
    answered at once, not after another timeout."""
    url = D.url("mysql")
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        key, _, jid, nack, mark = reserved_in_window(d, r)
        db = url.rsplit("/", 1)[1].split("?")[0]
        holder = D.db.hold("LOCK TABLES %s.topics WRITE" % db)
        try:
            for _ in range(2):
                st, _, b = nack()
                assert st == 503 and b["error"]["code"] == "unavailable", \
                    (st, b)
        finally:
            holder.kill()
            holder.wait()
        failed = d.log(mark).count("cannot be read from the journal either")
        assert failed == 1, d.log(mark)
        job = L.redis_job(d, key, jid)
        assert job["state"] == "in_flight" and \
            job["attempt_count"] == 0, job


def case_bizkey(drv):
    """A topic holds one unfinished job per bizkey, also across a restore:
    Redis loses a tenant's jobs (its other keys kept), the bizkey is pushed
    again meanwhile (Redis lacks the first job, so a second is made), and
    the restore route does not make the first: it is cancelled in the
    journal and logged, the second stands, one delivery in all.  A rebuild
    after FLUSHALL does not bring the first back either."""
    url = D.url(drv)
    with harness.RedisServer() as r, harness.Receiver() as rcv, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        L.ready(d)
        name, key = L.tenant(d)
        q = hook_topic(d, key, rcv)

        def push(body):
            return L.ok(d.request("POST", "/v1/topics/%s/jobs" % q, {
                "body": body, "delay_ms": L.HOUR, "bizkey": "order-42"},
                key=key), 201)["id"]
        first = push("first")
        lost = r.cmd("KEYS", "rd:{%s:*" % name)
        assert lost and r.cmd("DEL", *lost) == len(lost)
        second = push("second")
        assert second != first
        mark = d.log_mark()
        b = L.ok(d.request("POST", "/v1/restore", key=key), 200)
        assert (b["restored"], b["present"], b["superseded"]) == \
            (0, 1, 1), b
        d.wait_log(r"job=%s restore: not made: .* bizkey order-42" % first,
                   since=mark)
        harness.wait_for(lambda: d.request("GET", "/v1/jobs/" + first,
                                           key=key)[2].get("state") ==
                         "cancelled", 10, "the first cancelled")
        L.advance(d, 2 * L.HOUR)
        rcv.wait_count(1)
        assert L.delivered_ids(rcv) == [second], L.delivered_ids(rcv)
        harness.wait_for(lambda: L.redis_job(d, key, second)["state"] ==
                         "delivered", 10, "the second delivered")
        c = L.counts(d, key, q)
        assert c["delivered"] == 1 and sum(c.values()) == 1, c
        _, _, _, restored, _ = L.lose_redis(d, r)
        assert restored == 0, restored
        c = L.counts(d, key, q)
        assert sum(c.values()) == 0, c
        assert L.delivered_ids(rcv) == [second], L.delivered_ids(rcv)


def case_dead_rebuilder(drv):
    """A run that died rebuilding leaves the rebuild lock behind; the next
    run on its data_dir lets go of it and rebuilds at once, not when the
    lock runs out.  The dead run is made by hand: its values in
    data_dir/instance, its lock in Redis for two minutes."""
    url = D.url(drv)
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        L.ready(d)
        _, key, q = L.pull_tenant(d)
        L.push_batches(d, key, q, 3)
        d.stop()
        with open(os.path.join(d.data_dir, "instance"), "w") as f:
            f.write("old:1/aaaa\nold:1/bbbb\n")
        lose_locked(r, "old:1/bbbb")
        mark = d.log_mark()
        d.start()
        tenants, keys, topics, restored, present = L.wait_restore(
            d, mark, timeout=30)
        assert (tenants, restored) == (1, 3), (tenants, restored)
        assert L.counts(d, key, q)["scheduled"] == 3


def case_route_first(drv):
    """Two instances, their scheduler's sweep long (5 s): FLUSHALL, then
    the restore route at once, before either has seen the loss.  The route
    must not hide it: the full rebuild (tenants, keys, topics) still runs,
    once, and every job is delivered once."""
    n = 200
    url = D.url(drv)
    cfg = L.config(url, scheduler={"sweep": "5s"})
    with harness.RedisServer() as r, harness.Receiver() as rcv, \
            harness.Retryd(redis=r, config=cfg) as a:
        L.ready(a)
        with harness.Retryd(redis=r, config=cfg) as b:
            L.ready(b)
            name, key = L.tenant(a)
            q = hook_topic(a, key, rcv)
            ids = L.push_batches(a, key, q, n)
            marks = (a.log_mark(), b.log_mark())
            r.cmd("FLUSHALL")
            res = L.ok(a.admin("POST", "/v1/restore"), 200)
            assert res["failed"] == 0, res
            done = harness.wait_for(
                lambda: [m for m in (re.search(L.RESTORE_DONE, d.log(k))
                                     for d, k in zip((a, b), marks)) if m],
                30, "the rebuild the loss owes")
            assert len(done) == 1, "both instances rebuilt"
            assert done[0].group(1, 2, 3) == ("1", "1", "1"), \
                done[0].group(0)
            L.ok(a.admin("GET", "/v1/tenants/" + name), 200)
            L.ok(b.request("GET", "/v1/topics/" + q, key=key), 200)
            L.advance(a, 2 * L.HOUR)
            L.advance(b, 2 * L.HOUR)
            rcv.wait_count(n, timeout=60)
            got = L.delivered_ids(rcv)
            assert len(got) == len(set(got)) and set(got) == set(ids)
            logs = [d.log(k) for d, k in zip((a, b), marks)]
            assert sum(x.count("rebuilding Redis from the journal")
                       for x in logs) == 1, logs


def case_groups(drv):
    """Single pushes from 16 threads at once (groups the journal's writer
    pushes itself) and batches of 64 and 65 jobs (the largest group it
    pushes, and the smallest it hands to the push threads): each accepted
    job is in Redis at once, comes back once after FLUSHALL, and is
    delivered once."""
    with harness.RedisServer() as r, harness.Receiver() as rcv, \
            harness.Retryd(redis=r, config=L.config(D.url(drv))) as d:
        L.ready(d)
        _, key = L.tenant(d)
        q = hook_topic(d, key, rcv)
        ids, lock = [], threading.Lock()

        def singles(k):
            for x in range(25):
                b = L.ok(d.request("POST", "/v1/topics/%s/jobs" % q,
                                   {"delay_ms": L.HOUR,
                                    "body": {"t": k, "n": x}},
                                   key=key), 201)
                with lock:
                    ids.append(b["id"])

        th = [threading.Thread(target=singles, args=(k,)) for k in range(16)]
        for x in th:
            x.start()
        for size in (64, 65, 64, 65):
            ids += L.push_batches(d, key, q, size, size=size)
        for x in th:
            x.join()
        n = 16 * 25 + 2 * (64 + 65)
        assert len(set(ids)) == n, len(set(ids))
        for jid in ids[:: 7]:
            b = L.ok(d.request("GET", "/v1/jobs/" + jid, key=key), 200)
            assert b["state"] == "scheduled", b
        assert L.counts(d, key, q)["scheduled"] == n
        _, _, _, restored, present = L.lose_redis(d, r)
        assert restored == n and present == 0, (restored, present)
        deliver_all(d, rcv, ids)


def case_skew(drv):
    """Two instances whose clocks are an hour apart share Redis and the
    journal.  Jobs pushed through the one ahead are cancelled, and
    reserved and acked, through the one behind: their changes carry times
    older than the rows they change.  The journal orders a job's changes
    by the version Redis gives each, not by the reporting instance's
    clock, so after FLUSHALL neither comes back; a job left alone does."""
    url = D.url(drv)
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(url)) as b:
        L.ready(b)
        _, key = L.tenant(b)
        q = L.topic(b, key, ttr_ms=60000)
        b_now = L.ok(b.admin("GET", "/v1/debug/clock"))["now_ms"]
        with harness.Retryd(redis=r, config=L.config(url)) as a:
            L.ready(a)
            L.advance(a, L.HOUR)
            push = "/v1/topics/%s/jobs" % q
            x = L.ok(a.request("POST", push, {"delay_ms": 3 * L.HOUR},
                               key=key), 201)["id"]
            y = L.ok(a.request("POST", push, {"run_at_ms": b_now},
                               key=key), 201)["id"]
            z = L.ok(a.request("POST", push, {"delay_ms": 3 * L.HOUR},
                               key=key), 201)["id"]
            a.stop()
        assert b.request("DELETE", "/v1/jobs/" + x, key=key)[0] == 204

        def reserved():
            st, _, j = b.request("GET", "/v1/topics/%s/reserve?wait_ms=0"
                                 % q, key=key)
            return j if st == 200 else None
        j = harness.wait_for(reserved, 30, "y to be reserved")
        assert j["id"] == y, j
        L.ok(b.request("POST", "/v1/jobs/%s/ack" % y,
                       {"token": j["token"]}, key=key), 200)
        _, _, _, restored, present = L.lose_redis(b, r)
        assert restored == 1 and present == 0, (restored, present)
        for jid in (x, y):
            g = L.redis_job(b, key, jid)
            assert g == 404, ("a finished job came back", jid, g)
        st, _, body = b.request("GET", "/v1/jobs/" + z, key=key)
        assert st == 200 and body["state"] == "scheduled", (st, body)


D.each("10k jobs come back by themselves after FLUSHALL, once each",
       case_auto)
D.each("the restore route racing the automatic rebuild makes each job once",
       case_route)
D.each("two instances: one rebuilds, the other waits", case_two)
D.each("while the rebuild is owed, what Redis lacks is 503 rebuilding, not "
       "401 or 404", case_rebuilding)
D.each("an attempt failing while the rebuild is owed, its topic not cached: "
       "retried on the journal's schedule, not dead", case_recall)
D.each("a deadline passing while the rebuild is owed, the topic not "
       "cached: held in flight, then decided on the schedule", case_held)
D.each("a pull job nacked while the rebuild is owed, its topic not cached: "
       "retried on the journal's schedule; with the journal down too, 503 "
       "and nothing changed", case_nack)
if "mysql" in D.names:
    t.run("a pull job nacked while the rebuild is owed and the journal "
          "hangs: one read waits for its timeout, the next nack does not "
          "[mysql]", case_nack_hung)
else:
    t.run("a pull job nacked while the rebuild is owed and the journal "
          "hangs [mysql]", harness.skip, "mariadbd is not installed")
D.each("a bizkey pushed again while Redis lacked its job: the restore "
       "keeps one job, the one Redis has", case_bizkey)
D.each("a run that died rebuilding: the next on its data_dir lets go of its "
       "lock and rebuilds at once", case_dead_rebuilder)
D.each("the restore route before the loss is seen: the full rebuild "
       "still runs, once", case_route_first)
D.each("concurrent single pushes and batches of 64 and 65 jobs: each in "
       "Redis at once, back once after FLUSHALL, delivered once",
       case_groups)
D.each("two instances an hour apart: a job cancelled, and one acked, "
       "through the one behind do not come back after FLUSHALL", case_skew)


def case_snapshot(drv):
    """Redis restarts from a snapshot taken before the last pushes: the
    schema marker is there (it was in the snapshot) but the last jobs are
    not.  The new run_id has every unfinished job checked: the missing ones
    come back, the ones there are left as they are, all delivered once."""
    url = D.url(drv)
    with harness.RedisServer() as r, \
            harness.Retryd(redis=r, config=L.config(url)) as d:
        L.ready(d)
        _, key, q = L.pull_tenant(d)
        ids = L.push_batches(d, key, q, 5)
        assert r.cmd("SAVE") == "OK"
        late = L.push_batches(d, key, q, 7)
        mark = d.log_mark()
        r.restart()		# loads the snapshot: 5 jobs, the marker
        assert r.cmd("EXISTS", "rd:schema") == 1
        d.wait_log(r"another Redis process answers", since=mark)
        tenants, keys, topics, restored, present = L.wait_restore(d, mark)
        assert (restored, present) == (7, 5), (restored, present)
        assert L.counts(d, key, q)["scheduled"] == 12
        L.advance(d, 2 * L.HOUR)
        got = []
        reserve = "/v1/topics/%s/reserve?max=100&wait_ms=" % q
        while len(got) < 12:
            b = L.ok(d.request("GET", reserve + "10000", key=key,
                               timeout=30), 200)
            got += [j["id"] for j in b["jobs"]]
        assert sorted(got) == sorted(ids + late), got
        assert d.request("GET", reserve + "0", key=key)[0] == 204


D.each("Redis back from an older snapshot (the marker there, the last "
       "jobs not): the new run_id brings the missing ones back",
       case_snapshot)


@t.test("a restore held up keeps no other request waiting, even with one "
        "HTTP thread [mysql]")
def _():
    # The restore's read of the journal is held by a table lock (a MariaDB
    # session of our own), so it is known to be under way while another
    # tenant asks.  SQLite has no lock that holds a reader in WAL mode.
    if "mysql" not in D.names:
        harness.skip("mariadbd is not installed")
    url = D.url("mysql")
    db = re.sub(r"\?.*$", "", url).rsplit("/", 1)[1]
    with harness.RedisServer() as r, harness.Retryd(
            redis=r, config=L.config(url, http={"threads": 1})) as d:
        L.ready(d)
        _, ka, qa = L.pull_tenant(d)
        L.push_batches(d, ka, qa, 10)
        _, kb, qb = L.pull_tenant(d)
        lock = D.db.hold("LOCK TABLES %s.jobs WRITE" % db)
        res = {}
        th = threading.Thread(target=lambda: res.update(r=d.request(
            "POST", "/v1/restore", key=ka, timeout=120)))
        try:
            th.start()
            harness.wait_for(lambda: "metadata lock" in D.db.sql(
                "SHOW PROCESSLIST"), what="the restore's read to wait")
            # The only HTTP thread serves another tenant meanwhile.
            L.ok(d.request("GET", "/v1/topics/" + qb, key=kb, timeout=10),
                 200)
            assert th.is_alive() and "r" not in res
        finally:
            lock.kill()
            lock.wait()
            th.join(120)
        st, _, b = res["r"]
        assert st == 200 and b["present"] == 10 and b["restored"] == 0, \
            (st, b)


@t.test("a journal row restore cannot take (edited by hand) is counted as "
        "failed and logged by job and reason, by the route too [sqlite]")
def _():
    import sqlite3
    url = D.url("sqlite")
    with harness.RedisServer() as r, harness.Retryd(
            redis=r, config=L.config(url)) as d:
        L.ready(d)
        _, key, q = L.pull_tenant(d)
        ids = L.push_batches(d, key, q, 6)
        bad = ids[:2]
        db = sqlite3.connect(url[len("sqlite://"):], timeout=10)
        db.execute("UPDATE jobs SET priority = 99999 WHERE id = ?",
                   (bad[0],))
        db.execute("UPDATE jobs SET attempts = -3 WHERE id = ?", (bad[1],))
        db.commit()
        db.close()
        L.lose_redis(d, r)
        mark = d.log_mark()
        b = L.ok(d.request("POST", "/v1/restore", key=key), 200)
        assert b["failed"] == 2 and b["present"] == 4, b
        log = d.log(mark)
        for jid in bad:
            assert re.search(r"job=%s restore: refused: .+; skipped" % jid,
                             log), (jid, log[-2000:])
        assert d.request("GET", "/healthz")[0] == 200


t.done()
