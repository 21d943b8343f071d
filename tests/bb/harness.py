"""harness.py - the black-box test harness of retryd (Python 3 stdlib only).

A test file drives the real daemon, a throwaway redis-server and the scripted
callback receiver (receiver.py), and prints TAP:

    import os, sys
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    t = harness.Tap()

    @t.test("healthz answers 200")
    def _():
        with harness.RedisServer() as r, harness.Retryd(redis=r) as d:
            status, _, _ = d.request("GET", "/healthz")
            assert status == 200

    t.done()

Key decision: tests never sleep to let time pass.  They wait for a condition
with a deadline (wait_for) or, later, move retryd's injectable clock.  Every
child process and temp dir is registered when it is made and removed at exit
(atexit, SIGTERM/SIGHUP/SIGINT included) and when the test that made it fails.
"""

import atexit
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))

DEFAULT_TIMEOUT = 10.0          # seconds; every wait has a deadline
# Retryd.stop(): SIGTERM drains for shutdown.grace (10 s by default) and
# then up to a second more for HTTP requests; past this, SIGKILL, and
# the stop counts as a failure (Tap.done).
STOP_TIMEOUT = 20.0
HTTP_TIMEOUT = 10.0
LOG_TAIL_LINES = 40


# ---------------------------------------------------------------------------
# Resource registry and cleanup

_resources = []                 # [(seq, obj)]: live objects with _cleanup()
_tempdirs = []
_sanitizer_reports = []         # what _scan_sanitizers() found, for Tap
_stop_reports = []              # a retryd that did not exit 0 on SIGTERM
_lock = threading.RLock()
_seq = [0]


def _register(obj):
    with _lock:
        _seq[0] += 1
        _resources.append((_seq[0], obj))


def _unregister(obj):
    with _lock:
        _resources[:] = [(s, o) for s, o in _resources if o is not obj]


def _mark():
    with _lock:
        return _seq[0]


def _live_since(mark):
    """Objects registered after _mark() returned mark, oldest first."""
    with _lock:
        return [o for s, o in _resources if s > mark]


def mkdtemp(prefix="retryd-bb-"):
    """A fresh temp dir, removed at exit (unless RETRYD_BB_KEEP=1)."""
    d = tempfile.mkdtemp(prefix=prefix)
    with _lock:
        _tempdirs.append(d)
    return d


# A report of AddressSanitizer, LeakSanitizer, UndefinedBehaviorSanitizer
# or ThreadSanitizer in a retryd's output (a build with --enable-asan,
# --enable-ubsan or --enable-tsan).  ASan and UBSan stop the daemon, which
# a test may not notice (it may be stopping it anyway); LeakSanitizer
# speaks only at exit, after the test; ThreadSanitizer goes on, and its
# exit status at the end says it spoke.
_SANITIZER_RE = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|"
                           r"SUMMARY: UndefinedBehaviorSanitizer|"
                           r"WARNING: ThreadSanitizer|"
                           r": runtime error: ")


def _scan_sanitizers(text, who):
    """Record the first sanitizer report in text (a retryd's output)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if _SANITIZER_RE.search(line):
            with _lock:
                _sanitizer_reports.append(
                    [who + ": a sanitizer report:"] + lines[i:i + 40])
            return True
    return False


def sanitizer_reports():
    """The reports found so far, each a list of lines (see Tap.done)."""
    with _lock:
        return [list(r) for r in _sanitizer_reports]


def stop_reports():
    """Each retryd that exited other than 0 on Retryd.stop()'s SIGTERM,
    as a list of lines (see Tap.done)."""
    with _lock:
        return [list(r) for r in _stop_reports]


def cleanup_all():
    """Stop every registered child (newest first) and remove temp dirs."""
    with _lock:
        objs = [o for _, o in reversed(_resources)]
    for o in objs:
        try:
            o._cleanup()
        except Exception:
            pass
    with _lock:
        dirs = list(_tempdirs)
        del _tempdirs[:]
    if os.environ.get("RETRYD_BB_KEEP") == "1":
        for d in dirs:
            sys.stderr.write("harness: kept %s\n" % d)
        return
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(cleanup_all)


def _on_signal(signo, frame):
    # Turn a polite kill (make's timeout, a closed terminal) into SystemExit,
    # so that atexit runs and no redis-server or retryd outlives the run.
    raise SystemExit(128 + signo)


if threading.current_thread() is threading.main_thread():
    for _s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(_s, _on_signal)


def _kill_proc(proc, sig=signal.SIGTERM, timeout=5.0):
    """Signal proc, wait up to timeout, then SIGKILL.  Returns the exit
    code."""
    if proc is None:
        return None
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


# Lines a failing test's log tail leaves out: routine, and numerous enough
# (a line per shard taken or let go) to push what matters out of the tail.
_TAIL_NOISE = re.compile(r" debug scheduler: shard \d+ (taken|handed back)")


def _tail(path, n=LOG_TAIL_LINES, skip=None):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    if skip is not None:
        lines = [s for s in lines if not skip.search(s)]
    return lines[-n:]


# ---------------------------------------------------------------------------
# Waiting

class WaitTimeout(AssertionError):
    pass


def wait_for(predicate, timeout=DEFAULT_TIMEOUT, what="condition",
             interval=0.005, ignore=()):
    """Poll predicate() until it returns a true value; return that value.

    Raises WaitTimeout naming `what` at the deadline.  Exceptions of the
    types in `ignore` count as "not yet" (the last one is reported).  This
    is the only way tests wait: never sleep to let time pass.
    """
    deadline = time.monotonic() + timeout
    last_exc = None
    delay = interval
    while True:
        try:
            v = predicate()
            if v:
                return v
        except ignore as e:             # noqa: B030 (tuple of types)
            last_exc = e
        if time.monotonic() >= deadline:
            msg = "timed out after %.1f s waiting for %s" % (timeout, what)
            if last_exc is not None:
                msg += " (last error: %r)" % (last_exc,)
            raise WaitTimeout(msg)
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.05)


# ---------------------------------------------------------------------------
# TAP

def at_once(fns, timeout=60):
    """Run fns on threads released together (a barrier); their results in
    order.  A call that raised leaves None in its place and is re-raised."""
    out = [None] * len(fns)
    errs = []
    gate = threading.Barrier(len(fns))

    def run(i):
        gate.wait()
        try:
            out[i] = fns[i]()
        except BaseException as e:  # noqa: B902 - handed to the caller
            errs.append(e)
    ths = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for th in ths:
        th.start()
    for th in ths:
        th.join(timeout)
    if errs:
        raise errs[0]
    return out


class Skip(Exception):
    pass


def skip(why):
    """Raise inside a test to report it as `ok N - name # SKIP why`."""
    raise Skip(why)


def _tap_escape(s):
    return s.replace("\\", "\\\\").replace("#", "\\#").replace("\n", " ")


class Tap:
    """Runs tests in order in this process and prints TAP (plan at the end)."""

    def __init__(self, out=None):
        self.out = out or sys.stdout
        self.n = 0
        self.failed = 0

    def _say(self, line):
        self.out.write(line + "\n")
        self.out.flush()

    def diag(self, text):
        for line in str(text).splitlines() or [""]:
            self._say("# " + line)

    def test(self, name):
        """Decorator: runs the function now, as the next test."""
        def deco(fn):
            self.run(name, fn)
            return fn
        return deco

    def run(self, name, fn, *args, **kwargs):
        self.n += 1
        mark = _mark()
        t0 = time.monotonic()
        try:
            fn(*args, **kwargs)
        except Skip as e:
            self._say("ok %d - %s # SKIP %s" % (self.n, _tap_escape(name),
                                               _tap_escape(str(e))))
            return True
        except Exception:
            self.failed += 1
            self._say("not ok %d - %s" % (self.n, _tap_escape(name)))
            self.diag(traceback.format_exc().rstrip())
            # Logs of every daemon still running: those this test started
            # and those started before it (a file's shared instance, which
            # served the test too); then stop the test's own.
            for o in _live_since(0):
                for line in o._diag_lines():
                    self._say("# " + line)
            for o in reversed(_live_since(mark)):
                try:
                    o._cleanup()
                except Exception:
                    pass
            return False
        self._say("ok %d - %s" % (self.n, _tap_escape(name)))
        dt = time.monotonic() - t0
        if dt > 5:
            self.diag("%s took %.1f s" % (name, dt))
        return True

    def done(self):
        """Stop what is still running.  A retryd that stop() sent SIGTERM
        and that did not exit 0 is one more failed test, and a sanitizer
        report in any retryd's output another.  Print the plan and exit:
        status 1 when any test failed."""
        cleanup_all()
        stops = stop_reports()
        if stops:
            self.n += 1
            self.failed += 1
            self._say("not ok %d - every retryd stopped with SIGTERM "
                      "exited 0" % self.n)
            for report in stops:
                self.diag("\n".join(report))
        reports = sanitizer_reports()
        if reports:
            self.n += 1
            self.failed += 1
            self._say("not ok %d - no sanitizer reports in retryd's output"
                      % self.n)
            for report in reports:
                self.diag("\n".join(report))
        self._say("1..%d" % self.n)
        sys.exit(1 if self.failed else 0)


# ---------------------------------------------------------------------------
# Ports and paths

def free_port():
    """A TCP port free right now on 127.0.0.1 (bind port 0, read it back)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def port_open(port, host="127.0.0.1", timeout=0.5):
    try:
        socket.create_connection((host, port), timeout).close()
        return True
    except OSError:
        return False


def srcdir():
    return os.environ.get("RETRYD_SRCDIR") or os.path.normpath(
        os.path.join(HERE, "..", ".."))


def retryd_bin():
    b = os.environ.get("RETRYD_BIN")
    if b:
        return b
    bd = os.environ.get("RETRYD_BUILDDIR")
    if bd:
        return os.path.join(bd, "retryd")
    cand = os.path.normpath(os.path.join(HERE, "..", "..", "retryd"))
    if os.path.exists(cand):
        return cand
    return os.path.abspath("retryd")


def redis_server_bin():
    b = os.environ.get("REDIS_SERVER")
    if b and b != "no":
        return b
    b = shutil.which("redis-server")
    if not b:
        raise RuntimeError("redis-server not found (set REDIS_SERVER)")
    return b


# ---------------------------------------------------------------------------
# Redis

class RedisError(Exception):
    pass


class RedisServer:
    """A throwaway redis-server on 127.0.0.1 in a fresh temp dir.

    RedisServer(port=None, start=True): port None picks a free one; with
    start=False nothing runs until .start() (a "Redis down" test points
    retryd at .url first).
    """

    def __init__(self, port=None, start=True, args=()):
        self.dir = mkdtemp("retryd-bb-redis-")
        self.logfile = os.path.join(self.dir, "redis.log")
        self.port = port or free_port()
        self.extra_args = list(args)
        self.proc = None
        self._sock = None
        self._rbuf = b""
        _register(self)
        if start:
            self.start()

    @property
    def url(self):
        return "redis://127.0.0.1:%d/0" % self.port

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        _unregister(self)

    def _spawn(self):
        argv = [redis_server_bin(), "--save", "", "--appendonly", "no",
                "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.dir, "--daemonize", "no",
                "--logfile", self.logfile] + self.extra_args
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL,
                                     cwd=self.dir)

    def start(self, timeout=DEFAULT_TIMEOUT):
        if self.proc is not None and self.proc.poll() is None:
            return self
        self._spawn()
        try:
            wait_for(self._pings, timeout, "redis-server on port %d to answer"
                     " PING" % self.port, ignore=(OSError, RedisError))
        except Exception:
            _kill_proc(self.proc, signal.SIGKILL)
            raise
        return self

    def _pings(self):
        if self.proc.poll() is not None:
            raise RuntimeError("redis-server exited with %d: %s" % (
                self.proc.returncode, " | ".join(_tail(self.logfile, 5))))
        self._disconnect()
        return self.cmd("PING") == "PONG"

    def stop(self):
        self._disconnect()
        _kill_proc(self.proc)

    def restart(self):
        self.stop()
        return self.start()

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    # A tiny RESP2 client: enough for tests and for checking what retryd
    # stores.  Bulk strings come back as str (utf-8, surrogateescape) or, with
    # raw=True, as bytes.
    def _disconnect(self):
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None
        self._rbuf = b""

    def _readline(self):
        while b"\r\n" not in self._rbuf:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self._rbuf += chunk
        line, self._rbuf = self._rbuf.split(b"\r\n", 1)
        return line

    def _readn(self, n):
        while len(self._rbuf) < n + 2:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self._rbuf += chunk
        data, self._rbuf = self._rbuf[:n], self._rbuf[n + 2:]
        return data

    def _reply(self, raw):
        line = self._readline()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest if raw else rest.decode("utf-8", "surrogateescape")
        if t == b"-":
            return RedisError(rest.decode("utf-8", "replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self._readn(n)
            return data if raw else data.decode("utf-8", "surrogateescape")
        if t == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._reply(raw) for _ in range(n)]
        raise RedisError("bad RESP reply %r" % line)

    def cmd(self, *args, raw=False, timeout=DEFAULT_TIMEOUT):
        """Send one command; return its reply; raise RedisError on -ERR."""
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode("utf-8")
            elif not isinstance(a, bytes):
                a = str(a).encode("ascii")
            parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
        if self._sock is None:
            self._sock = socket.create_connection(("127.0.0.1", self.port),
                                                  timeout)
        self._sock.settimeout(timeout)
        try:
            self._sock.sendall(b"".join(parts))
            r = self._reply(raw)
        except Exception:
            self._disconnect()
            raise
        if isinstance(r, RedisError):
            raise r
        return r

    def info(self, section=None):
        """INFO parsed into a dict of str -> str."""
        text = self.cmd("INFO", section) if section else self.cmd("INFO")
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#") and ":" in line:
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def _cleanup(self):
        self.stop()
        _unregister(self)

    def _diag_lines(self):
        return []


# ---------------------------------------------------------------------------
# retryd

def _conf_scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if -2 ** 31 <= v < 2 ** 31:
            return str(v)
        return "%dL" % v
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        out = ['"']
        for ch in v:
            if ch == "\\":
                out.append("\\\\")
            elif ch == '"':
                out.append('\\"')
            elif ch == "\n":
                out.append("\\n")
            elif ch == "\r":
                out.append("\\r")
            elif ch == "\t":
                out.append("\\t")
            elif ord(ch) < 0x20:
                out.append("\\x%02x" % ord(ch))
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)
    raise TypeError("no libconfig form for %r" % (v,))


def _nested(v):
    return isinstance(v, dict) or (isinstance(v, (list, tuple)) and any(
        isinstance(x, (dict, list, tuple)) for x in v))


def _conf_value(v, indent):
    if isinstance(v, dict):
        items = [(k, x) for k, x in v.items() if x is not None]
        if not any(_nested(x) for _, x in items):
            # The house style: `redis: { url = "..."; };` on one line.
            return "{ %s}" % "".join("%s = %s; " % (k, _conf_value(x, 0))
                                     for k, x in items)
        inner = "".join(_conf_setting(k, x, indent + 1) for k, x in items)
        return "{\n%s%s}" % (inner, "  " * indent)
    if isinstance(v, (list, tuple)):
        if any(isinstance(x, (dict, list, tuple)) for x in v):
            return "( %s )" % ", ".join(_conf_value(x, indent) for x in v)
        return "[ %s ]" % ", ".join(_conf_scalar(x) for x in v)
    return _conf_scalar(v)


def _conf_setting(k, v, indent=0):
    sep = ":" if isinstance(v, dict) else " ="
    return "%s%s%s %s;\n" % ("  " * indent, k, sep, _conf_value(v, indent))


def render_config(d):
    """A dict as libconfig text: dict -> group, list -> array (or list),
    str quoted, bool true/false, int bare; a None value is left out."""
    return "".join(_conf_setting(k, v) for k, v in d.items() if v is not None)


def merge_config(base, over):
    """Deep-merge over into a copy of base; None in over deletes a key."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_config(out[k], v)
        else:
            out[k] = v
    return out


_LISTEN_RE = re.compile(r"listening on (\[[0-9A-Fa-f:.]+\]|[0-9.]+|[\w.-]+):"
                        r"(\d+)")


class Retryd:
    """One retryd process with a temp config, data dir and captured stderr.

    Retryd(redis=RedisServer|url|None, config=dict|str|False, env={}, args=[],
           start=True)
      config dict: deep-merged over the base config (see base_config());
      config str: written verbatim;  config False: no -c at all (the test
      supplies RETRYD_* env, including RETRYD_LISTEN=127.0.0.1:0).
    The inherited environment is stripped of RETRYD_* so a developer's shell
    cannot leak into a test.
    """

    def __init__(self, redis=None, config=None, env=None, args=(),
                 start=True, admin_key=None, timeout=DEFAULT_TIMEOUT):
        self.dir = mkdtemp("retryd-bb-d-")
        self.data_dir = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "retryd.log")
        self.conffile = os.path.join(self.dir, "retryd.conf")
        self.admin_key = admin_key or ("bb-admin-" + os.urandom(8).hex())
        if redis is None:
            self.redis_url = "redis://127.0.0.1:%d/0" % free_port()
        elif isinstance(redis, str):
            self.redis_url = redis
        else:
            self.redis_url = redis.url
        self.redis = redis
        self.env = dict(env or {})
        self.args = list(args)
        self.proc = None
        self.port = None
        self.host = "127.0.0.1"
        self._logf = None
        self._scanned = 0
        self.use_config = config is not False
        if self.use_config:
            self.write_config(config)
        _register(self)
        if start:
            self.start(timeout)

    def base_config(self):
        return {
            "listen": "127.0.0.1:0",
            "data_dir": self.data_dir,
            "admin_key": self.admin_key,
            "redis": {"url": self.redis_url},
            "log": {"level": "debug"},
            "dispatcher": {"allow_private_targets": True},
            "journal": {"url": "none"},
        }

    def write_config(self, config=None):
        """(Re)write the config file: dict merged over the base, or text."""
        if isinstance(config, str):
            text = config
        else:
            text = render_config(merge_config(self.base_config(),
                                              config or {}))
        tmp = self.conffile + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.conffile)
        return text

    def __enter__(self):
        return self

    def __exit__(self, etype, evalue, tb):
        self.stop()
        if etype is None:
            _unregister(self)   # else Tap still prints this log's tail

    @property
    def base(self):
        return "http://%s:%d" % (self.host, self.port)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def _child_env(self):
        e = {k: v for k, v in os.environ.items()
             if not k.startswith("RETRYD_")}
        e.update({k: str(v) for k, v in self.env.items()})
        return e

    def start(self, timeout=DEFAULT_TIMEOUT):
        """Start and wait (deadline) for the `listening on HOST:PORT` line."""
        os.makedirs(self.data_dir, exist_ok=True)
        argv = [retryd_bin()]
        if self.use_config:
            argv += ["-c", self.conffile]
        argv += self.args
        if self._logf is None:
            self._logf = open(self.logfile, "ab")
        self._log_start = self._logf.tell()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=self._logf, stderr=self._logf,
                                     cwd=self.dir, env=self._child_env())
        try:
            m = wait_for(self._listening, timeout,
                         "retryd to log 'listening on'")
        except Exception:
            _kill_proc(self.proc, signal.SIGKILL)
            raise
        host = m.group(1).strip("[]")
        self.host = "127.0.0.1" if host in ("0.0.0.0", "localhost") else host
        self.port = int(m.group(2))
        return self

    def _listening(self):
        m = _LISTEN_RE.search(self.log(since=self._log_start))
        if m:
            return m
        if self.proc.poll() is not None:
            raise RuntimeError("retryd exited with %d before listening" %
                               self.proc.returncode)
        return None

    # -- log
    def log(self, since=0):
        """retryd's stderr so far (from byte offset `since`)."""
        try:
            with open(self.logfile, "rb") as f:
                f.seek(since)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_mark(self):
        """An offset for log(since=...) / wait_log(since=...): 'from now'."""
        try:
            return os.path.getsize(self.logfile)
        except OSError:
            return 0

    def wait_log(self, pattern, since=0, timeout=DEFAULT_TIMEOUT, flags=0):
        """Wait until the log (from `since`) matches regex; return the
        match."""
        rx = re.compile(pattern, flags)
        return wait_for(lambda: rx.search(self.log(since)), timeout,
                        "log to match /%s/" % pattern)

    # -- HTTP
    def request(self, method, path, body=None, headers=None, key=None,
                timeout=HTTP_TIMEOUT):
        """One HTTP request on a fresh connection.

        body: dict/list -> JSON, str -> utf-8, bytes as is.  key -> Bearer.
        Returns (status, headers (case-insensitive), data): data is the
        parsed JSON when the answer says application/json, else raw bytes.
        """
        h = dict(headers or {})
        data = None
        if isinstance(body, (dict, list)):
            data = json.dumps(body).encode("utf-8")
            h.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            data = body.encode("utf-8")
        elif body is not None:
            data = body
        if key is not None:
            h["Authorization"] = "Bearer " + key
        conn = http.client.HTTPConnection(self.host, self.port,
                                          timeout=timeout)
        try:
            conn.request(method, path, body=data, headers=h)
            resp = conn.getresponse()
            raw = resp.read()
            ctype = resp.getheader("Content-Type", "")
            if "json" in ctype.lower() and raw:
                try:
                    parsed = json.loads(raw.decode("utf-8"))
                except ValueError as e:
                    raise AssertionError("%s %s: %d with invalid JSON (%s): "
                                         "%r" % (method, path, resp.status,
                                                 e, raw[:200]))
                return resp.status, resp.headers, parsed
            return resp.status, resp.headers, raw
        finally:
            conn.close()

    def admin(self, method, path, body=None, **kw):
        return self.request(method, path, body, key=self.admin_key, **kw)

    def wait_ready(self, timeout=DEFAULT_TIMEOUT):
        """Poll /readyz until 200."""
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("retryd exited with %d" %
                                   self.proc.returncode)
            return self.request("GET", "/readyz", timeout=2)[0] == 200
        wait_for(ready, timeout, "/readyz to answer 200",
                 ignore=(OSError, http.client.HTTPException))
        return self

    # -- process
    def signal(self, sig):
        self.proc.send_signal(sig)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_exit(self, timeout=DEFAULT_TIMEOUT):
        """Wait for exit; the exit code (negative: killed by that signal)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise WaitTimeout("retryd (pid %d) still running after %.1f s" %
                              (self.proc.pid, timeout))

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM, wait, SIGKILL fallback.  Returns the exit code; one
        other than 0 from a retryd that was running fails the file
        (Tap.done)."""
        alive = self.proc is not None and self.proc.poll() is None
        rc = _kill_proc(self.proc, signal.SIGTERM, timeout)
        if self._logf is not None:
            self._logf.close()
            self._logf = None
        self._scan()
        if alive and rc != 0:
            with _lock:
                _stop_reports.append(
                    ["retryd (pid %s) exited %d on SIGTERM (API.md: "
                     "drain and exit 0); its log's tail:" % (self.pid, rc)]
                    + _tail(self.logfile, skip=_TAIL_NOISE))
        return rc

    def _cleanup(self):
        _kill_proc(self.proc, signal.SIGTERM, 3)
        if self._logf is not None:
            self._logf.close()
            self._logf = None
        self._scan()
        _unregister(self)

    def _scan(self):
        """Sanitizer reports in the log since the last scan (see Tap)."""
        try:
            with open(self.logfile, "rb") as f:
                f.seek(self._scanned)
                raw = f.read()
        except OSError:
            return
        self._scanned += len(raw)
        _scan_sanitizers(raw.decode("utf-8", "replace"),
                         "retryd (pid %s)" % self.pid)

    def _diag_lines(self):
        lines = _tail(self.logfile, skip=_TAIL_NOISE)
        if not lines:
            return []
        return ["retryd (pid %s) log tail (shards taken or handed back "
                "left out):" % self.pid] + \
               ["  " + s for s in lines]

    # -- the injectable clock (debug.fake_clock, POST /v1/debug/clock)
    def advance_clock(self, ms):
        """Move retryd's wall clock by ms and wait until its scheduler has
        made two whole passes at the new time, so what did not happen by
        then will not.  Returns the route's answer (now_ms, passes)."""
        st, _, b = self.admin("POST", "/v1/debug/clock", {"advance_ms": ms})
        assert st == 200, (st, b)
        target = b["passes"] + 2

        def passed():
            st2, _, c = self.admin("GET", "/v1/debug/clock")
            assert st2 == 200, (st2, c)
            return c["passes"] >= target
        wait_for(passed, what="two timer passes after moving the clock")
        return b


def run_retryd(args, env=None, timeout=DEFAULT_TIMEOUT, cwd=None):
    """Run retryd to completion (e.g. -V, -n -c FILE): (rc, stdout, stderr)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("RETRYD_")}
    e.update(env or {})
    p = subprocess.run([retryd_bin()] + list(args), stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=e, cwd=cwd or mkdtemp(), timeout=timeout)
    _scan_sanitizers(p.stderr.decode("utf-8", "replace"),
                     "retryd %s" % " ".join(args))
    return (p.returncode, p.stdout.decode("utf-8", "replace"),
            p.stderr.decode("utf-8", "replace"))


# ---------------------------------------------------------------------------
# Receiver (see receiver.py), registered for cleanup like the rest.

def Receiver(*args, **kwargs):
    import receiver
    r = receiver.Receiver(*args, **kwargs)
    _register(_ReceiverHandle(r))
    return r


class _ReceiverHandle:
    def __init__(self, r):
        self.r = r

    def _cleanup(self):
        self.r.stop()
        _unregister(self)

    def _diag_lines(self):
        reqs = self.r.requests
        return ["receiver %s got %d request(s)" % (self.r.url(""), len(reqs))]


if HERE not in sys.path:
    sys.path.insert(0, HERE)
