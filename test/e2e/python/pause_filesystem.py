"""Filesystem-only pause through the sync Python SDK: pause(mode="filesystem") and the
deprecated keep_memory=False, lifecycle on_timeout {"action": "pause", "mode":
"filesystem"}, and connect(on_resume="reboot") after a full pause. Each connect must boot
the sandbox fresh from its disk: the file is there, the background process is not."""
import time
import uuid

from e2b import Sandbox
from common import Recorder

r = Recorder()
marker = f"pyfs-{uuid.uuid4().hex[:8]}"
# The bracket keeps the grep itself out of the count.
COUNT = "grep -l 'pyfscount[e]r' /proc/[0-9]*/cmdline 2>/dev/null | wc -l"
LOOP = "nohup sh -c 'while true; do echo x > /home/user/pyfscounter.out; sleep 0.1; done; : pyfscounter' >/dev/null 2>&1 &"
made = []


def prepare(sb):
    sb.files.write("/home/user/note.txt", marker)
    sb.commands.run(LOOP)
    return sb.commands.run(COUNT).stdout.strip()


def wait_reachable(sb):
    # Right after a connect the gateway may still answer 502 for a moment (issue 20 item 1, its own test).
    deadline = time.time() + 30
    while True:
        try:
            return sb.files.exists("/home/user/note.txt")
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def fresh(sb):
    wait_reachable(sb)
    return {"file": sb.files.read("/home/user/note.txt"), "processes": sb.commands.run(COUNT).stdout.strip(), "user": sb.commands.run("whoami").stdout}


def create(**kw):
    sb = Sandbox.create("base", timeout=300, **kw)
    made.append(sb)
    return sb


try:
    def mode_filesystem():
        sb = create()
        before = prepare(sb)
        paused = sb.pause(mode="filesystem")
        state = sb.get_info().state.value
        return {"before": before, "paused": paused, "state": state, **fresh(Sandbox.connect(sb.sandbox_id, timeout=300))}

    r.step("mode_filesystem", mode_filesystem)

    def keep_memory_false():
        sb = create()
        prepare(sb)
        sb.pause(keep_memory=False)
        return fresh(Sandbox.connect(sb.sandbox_id, timeout=300))

    r.step("keep_memory_false", keep_memory_false)

    def on_timeout():
        sb = Sandbox.create("base", timeout=15, lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}})
        made.append(sb)
        prepare(sb)
        deadline = time.time() + 120
        while sb.get_info().state.value != "paused":
            if time.time() > deadline:
                raise TimeoutError("the timeout did not pause the sandbox")
            time.sleep(0.5)
        return fresh(Sandbox.connect(sb.sandbox_id, timeout=300))

    r.step("on_timeout", on_timeout)

    def reboot():
        sb = create()
        prepare(sb)
        sb.pause()
        return fresh(Sandbox.connect(sb.sandbox_id, timeout=300, on_resume="reboot"))

    r.step("reboot", reboot)
finally:
    for sb in made:
        try:
            sb.kill()
        except Exception:
            pass
    r.set("marker", marker)
    r.emit()
