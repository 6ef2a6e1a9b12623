"""The node's health watchdog (issue 27 item 2) through the sync Python SDK: the harness
freezes the sandbox's envd (SIGSTOP from the host) once this script wrote the sandbox's id
to WATCHDOG_ID_FILE and waits for WATCHDOG_GO_FILE; then a command gets an error instead of
hanging, and the sandbox is gone for the SDK (get_info, is_running, list, connect)."""
import os
import time

from e2b import Sandbox
from common import Recorder

r = Recorder()


def outcome(fn):
    """'answered' or the exception's class and message."""
    try:
        fn()
    except Exception as e:
        return {"class": type(e).__name__, "message": str(e)[:300]}
    return "answered"


sb = Sandbox.create("base", timeout=300)
r.set("id", sb.sandbox_id)
r.step("before", lambda: sb.commands.run("echo alive").stdout)
with open(os.environ["WATCHDOG_ID_FILE"], "w") as f:
    f.write(sb.sandbox_id)
deadline = time.time() + 120
while not os.path.exists(os.environ["WATCHDOG_GO_FILE"]) and time.time() < deadline:
    time.sleep(0.1)
r.set("frozen", os.path.exists(os.environ["WATCHDOG_GO_FILE"]))

started = time.time()
r.step("run_while_frozen", lambda: outcome(lambda: sb.commands.run("echo late", timeout=0, request_timeout=180)))
r.set("run_ended_before_its_timeout", time.time() - started < 170)


def gone():
    end = time.time() + 120
    while time.time() < end:
        o = outcome(lambda: Sandbox.get_info(sb.sandbox_id))
        if o != "answered":
            return o
        time.sleep(0.5)
    return "still found"


r.step("get_info", gone)
r.step("is_running", lambda: sb.is_running())
r.step("listed", lambda: any(s.sandbox_id == sb.sandbox_id for s in Sandbox.list().next_items()))
r.step("connect", lambda: outcome(lambda: Sandbox.connect(sb.sandbox_id)))
r.step("run_after", lambda: outcome(lambda: sb.commands.run("echo again", request_timeout=60)))
r.emit()
