#!/usr/bin/env python3
"""test_dashboard_browser.py - the dashboard in a real browser: sets up
Redis, retryd (with the SQLite journal, so bizkey search works) and the
data, then runs tests/browser/dashboard.test.mjs (playwright-core driving
Debian's chromium) and reports each of its steps as a TAP test.

Run through tests/browser/run.sh (make check), which checks node, chromium
and node_modules first.  RETRYD_SCREENSHOTS=DIR saves the screenshots of
the main pages there (docs/screenshots is made that way); make check saves
none.

Key decision: the scenario's data is made through the API before the
browser starts, with the callback receiver failing (500) until both jobs of
the topic are dead and answering 200 after, so redriving them from the
page delivers them.
"""

import os
import re
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_api_lib import Env  # noqa: E402

NODE_TIMEOUT = 240
t = harness.Tap()
here = os.path.join(harness.srcdir(), "tests", "browser")
node = os.environ.get("NODE") or shutil.which("node") or "node"
chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")

E = Env(config={"journal": {"url": ""}, "metrics":
                {"counts_interval": "200ms"}})
data = {}


@t.test("setup: two tenants, topics, two dead jobs, a scheduled job")
def _():
    a, ka = E.tenant("acme")
    b, kb = E.tenant("globex")
    failing = harness.Receiver(script="500")
    healthy = harness.Receiver(script="200")
    E.topic(ka, "orders", callback_url=failing.url("/hook"),
            retry_schedule="<0,1s>")
    E.topic(ka, "invoices", callback_url=healthy.url("/hook"),
            retry_schedule="<0,0,2m,10m,10m,1h,2h,6h,15h>")
    E.topic(ka, "emails", mode="pull")
    dead = [E.push(ka, "orders", {"order": 1000 + i},
                   bizkey="order-%d" % (1000 + i))["id"] for i in range(2)]
    for i in range(6):
        E.push(ka, "invoices", {"invoice": i})
    E.push(ka, "emails", {"to": "ops@example.com"})
    waiting = E.push(ka, "invoices", {"invoice": "later"},
                     delay_ms=3600 * 1000)["id"]
    for jid in dead:
        harness.wait_for(lambda: E.job(ka, jid)["state"] == "dead",
                         timeout=20, what="job %s to die" % jid)
    healthy.wait_count(6)
    failing.set_script("200")       # from now on the orders are delivered
    data.update(TENANT_A=a, KEY_A=ka, TENANT_B=b, KEY_B=kb,
                ADMIN_KEY=E.d.admin_key, TOPIC="orders",
                DEAD_IDS=",".join(dead), DEAD_BIZKEY="order-1000",
                WAITING_ID=waiting, BASE=E.d.base, CHROMIUM=chromium)
    # Wait for the chart's numbers (written once a second).
    harness.wait_for(lambda: E.req("GET", "/v1/topics/orders/stats",
                                   key=ka)[2]["total"]["failed"] == 4,
                     what="the failures in the per-minute stats")


def run_node():
    env = dict(os.environ)
    env.update(data)
    shots = os.environ.get("RETRYD_SCREENSHOTS")
    if shots:
        os.makedirs(shots, exist_ok=True)
        env["SCREENSHOT_DIR"] = os.path.abspath(shots)
    p = subprocess.run([node, os.path.join(here, "dashboard.test.mjs")],
                       cwd=here, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=NODE_TIMEOUT)
    return p.returncode, p.stdout.decode("utf-8", "replace"), \
        p.stderr.decode("utf-8", "replace")


if data:
    rc, out, err = run_node()
    results = []                    # [name, ok, [diag lines]]
    for line in out.splitlines():
        m = re.match(r"^(ok|not ok) (.*)$", line)
        if m:
            results.append([m.group(2), m.group(1) == "ok", []])
        elif line.startswith("# ") and results:
            results[-1][2].append(line[2:])
        elif line.strip():
            sys.stdout.write("# node: %s\n" % line)
    for name, ok, lines in results:
        def check(ok=ok, lines=lines):
            if not ok:
                raise AssertionError("\n".join(lines) or "failed")
            for s in lines:
                t.diag(s)
        t.run("browser: " + name, check)

    def finished():
        if rc != 0 and all(r[1] for r in results):
            raise AssertionError("node exited with %d:\n%s" % (rc, err))
        if not results:
            raise AssertionError("no step ran:\n%s" % err)
    t.run("browser: the test program ran to its end", finished)

E.stop()
t.done()
