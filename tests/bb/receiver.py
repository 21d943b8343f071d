#!/usr/bin/env python3
"""receiver.py - a scripted HTTP callback receiver for retryd's black-box
tests.

Importable:  r = Receiver(script="500,500,200"); ... r.url("/hook") ...
Program:     python3 receiver.py --port 0 --script 500,500,200 --log FILE
             (prints its port on stdout, serves until SIGTERM/SIGINT)

A threading HTTP/1.1 server on 127.0.0.1 with keep-alive.  The script is a
list of entries (a comma-separated string or a Python list) applied to the
requests in arrival order, the last entry repeating; with path_scripts
{path: script} each path has its own.  Entries:

    200, 500, 410 ...   answer with that status
    429:ra=2            that status with "Retry-After: 2"
    503:ra=date+5       ... with an HTTP-date 5 s from now
    503:ra=@1767225600  ... with the HTTP-date of that Unix time
    503:ra=TEXT         ... with TEXT as is (list form allows commas)
    hang                never answer: hold the socket until the client leaves
    sleep=MS            wait MS milliseconds, then answer 200
    hold=STATUS         wait until release() is called, then answer STATUS
    close               drop the connection without answering (FIN)
    reset               drop it with a TCP RST

Every request is recorded before it is answered: arrival time (time.time()
in ms), method, path (with query), headers (case-insensitive), body bytes
(Content-Length or chunked), and the script entry that answered.
"""

import argparse
import email.utils
import http.server
import json
import select
import signal
import socket
import socketserver
import struct
import sys
import threading
import time


class Headers(dict):
    """Case-insensitive header dict (repeated headers joined with ", ")."""

    def __init__(self, items=()):
        super().__init__()
        for k, v in items:
            k = k.lower()
            super().__setitem__(k, v if k not in self else
                                self[k] + ", " + v)

    def __getitem__(self, k):
        return super().__getitem__(k.lower())

    def __contains__(self, k):
        return super().__contains__(k.lower())

    def get(self, k, default=None):
        return super().get(k.lower(), default)


class Request:
    __slots__ = ("t_ms", "method", "path", "headers", "body", "entry",
                 "index", "seq")

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def as_dict(self):
        return {"t_ms": self.t_ms, "method": self.method, "path": self.path,
                "headers": dict(self.headers),
                "body": self.body.decode("utf-8", "replace"),
                "entry": self.entry, "index": self.index, "seq": self.seq}

    def __repr__(self):
        return "<Request #%d %s %s -> %s>" % (self.seq, self.method,
                                              self.path, self.entry)


def parse_script(script):
    if isinstance(script, (list, tuple)):
        entries = [str(e).strip() for e in script]
    else:
        entries = [e.strip() for e in str(script).split(",")]
    entries = [e for e in entries if e]
    if not entries:
        raise ValueError("empty script")
    for e in entries:
        _parse_entry(e)                 # fail early on a typo
    return entries


def _parse_entry(e):
    """-> (kind, arg, retry_after): kind
    status|hang|sleep|hold|close|reset."""
    if e in ("hang", "close", "reset"):
        return e, None, None
    if e.startswith("sleep="):
        return "sleep", int(e[6:]), None
    if e.startswith("hold="):
        return "hold", _parse_entry(e[5:])[1], None
    status, _, opt = e.partition(":")
    status = int(status)
    if not 200 <= status <= 599:
        raise ValueError("bad status in %r" % e)
    ra = None
    if opt:
        if not opt.startswith("ra="):
            raise ValueError("bad option in %r (only ra=)" % e)
        ra = opt[3:]
    return "status", status, ra


def _retry_after(ra):
    if ra.startswith("date+"):
        return email.utils.formatdate(time.time() + float(ra[5:]),
                                      usegmt=True)
    if ra.startswith("@"):
        return email.utils.formatdate(float(ra[1:]), usegmt=True)
    return ra


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def shutdown_request(self, request):
        with self.owner._lock:
            reset = request in self.owner._resets
            self.owner._resets.discard(request)
        if reset:
            self.close_request(request)
        else:
            super().shutdown_request(request)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "retryd-bb-receiver"
    sys_version = ""

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        super().setup()
        self.server.owner._track(self.connection, True)

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, False)

    def _read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            out = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ConnectionError("eof in chunked body")
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while True:         # trailers up to the empty line
                        t = self.rfile.readline(65537)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    return b"".join(out)
                out.append(self.rfile.read(size))
                self.rfile.readline(3)  # CRLF after the chunk
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _handle(self):
        owner = self.server.owner
        t_ms = time.time() * 1000.0
        body = self._read_body()
        path = self.path
        entry, index = owner._next(path)
        rq = Request()
        rq.t_ms, rq.method, rq.path = t_ms, self.command, path
        rq.headers = Headers(self.headers.items())
        rq.body, rq.entry, rq.index = body, entry, index
        owner._record(rq)
        kind, arg, ra = _parse_entry(entry)
        if kind == "hang":
            self._hang()
            return
        if kind in ("close", "reset"):
            self.close_connection = True
            if kind == "reset":
                # Linger 0 and a close with no shutdown first: an RST.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                with owner._lock:
                    owner._resets.add(self.connection)
                return
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        status = 200
        if kind == "sleep":
            if owner._stopping.wait(arg / 1000.0):
                self.close_connection = True
                return
        elif kind == "hold":
            while not owner._released.wait(0.05):
                if owner._stopping.is_set():
                    self.close_connection = True
                    return
            status = arg
        else:
            status = arg
        payload = b""
        if status not in (204, 304):    # these have no body at all
            payload = ("%d %s\n" % (status, entry)).encode()
        self.send_response(status)
        if ra is not None:
            self.send_header("Retry-After", _retry_after(ra))
        if payload:
            self.send_header("Content-Type", "text/plain")
        if status != 204:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _hang(self):
        """Hold the connection, answering nothing, until the client closes
        it or the receiver stops."""
        self.close_connection = True
        sock = self.connection
        owner = self.server.owner
        while not owner._stopping.is_set():
            try:
                r, _, _ = select.select([sock], [], [], 0.05)
                if r and not sock.recv(65536):
                    return
            except (OSError, ValueError):
                return

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = \
        do_OPTIONS = _handle


class Receiver:
    """A scripted callback receiver; see the module comment."""

    def __init__(self, script="200", path_scripts=None, port=0, log=None):
        self._lock = threading.Condition()
        self._script = parse_script(script)
        self._path_scripts = {p: parse_script(s)
                              for p, s in (path_scripts or {}).items()}
        self._counts = {}
        self._requests = []
        self._conns = set()
        self._resets = set()
        self._stopping = threading.Event()
        self._released = threading.Event()
        self._logf = open(log, "a") if log else None
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def url(self, path="/hook"):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def set_script(self, script, path=None):
        """Replace the script (of one path), restarting it at entry 0."""
        entries = parse_script(script)
        with self._lock:
            if path is None:
                self._script = entries
                self._counts = {p: n for p, n in self._counts.items()
                                if p in self._path_scripts}
            else:
                self._path_scripts[path] = entries
                self._counts.pop(path, None)

    def release(self):
        """Let the requests held by hold= entries (and later ones) be
        answered."""
        self._released.set()

    def _next(self, path):
        key = path.split("?", 1)[0]
        with self._lock:
            if key in self._path_scripts:
                entries = self._path_scripts[key]
            else:
                entries, key = self._script, None
            i = self._counts.get(key, 0)
            self._counts[key] = i + 1
            i = min(i, len(entries) - 1)
            return entries[i], i

    def _record(self, rq):
        with self._lock:
            rq.seq = len(self._requests) + 1
            self._requests.append(rq)
            if self._logf:
                self._logf.write(json.dumps(rq.as_dict()) + "\n")
                self._logf.flush()
            self._lock.notify_all()

    def _track(self, conn, add):
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)

    @property
    def requests(self):
        with self._lock:
            return list(self._requests)

    def wait_count(self, n, timeout=10.0):
        """Wait until at least n requests arrived; return them all."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self._requests) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        "receiver: %d request(s) after %.1f s, wanted %d" %
                        (len(self._requests), timeout, n))
                self._lock.wait(left)
            return list(self._requests)

    def stop(self):
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._logf:
            self._logf.close()
            self._logf = None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--script", default="200")
    ap.add_argument("--path-script", action="append", default=[],
                    metavar="PATH=SCRIPT", help="a script for one path")
    ap.add_argument("--log", help="append one JSON line per request")
    a = ap.parse_args(argv)
    ps = dict(x.split("=", 1) for x in a.path_script)
    r = Receiver(a.script, path_scripts=ps, port=a.port, log=a.log)
    done = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda *_: done.set())
    print(r.port, flush=True)
    while not done.wait(1.0):
        pass
    r.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
