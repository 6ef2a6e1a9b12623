"""Less common Python SDK features: network options and update_network, public port
traffic token, lifecycle on_timeout=pause, idempotency key, fork, named snapshots."""
import os
import time
import urllib.error
import urllib.request
import uuid

from e2b import Sandbox
from common import Recorder

r = Recorder()
tag = uuid.uuid4().hex[:8]
made = []


def create(*a, **kw):
    s = Sandbox.create(*a, **kw)
    made.append(s)
    return s


def port_status(sb, port, token=None):
    headers = {"E2b-Sandbox-Id": sb.sandbox_id, "E2b-Sandbox-Port": str(port)}
    if token:
        headers["e2b-traffic-access-token"] = token
    req = urllib.request.Request(os.environ["E2B_SANDBOX_URL"] + "/", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=20) as res:
            return res.status
    except urllib.error.HTTPError as e:
        return e.code


def step(name, fn):
    """One step; its sandboxes are killed after it (the test node holds only a few)."""
    try:
        r.step(name, fn)
    finally:
        while made:
            try:
                made.pop().kill()
            except Exception:
                pass


try:
    def network():
        sb = create("base", timeout=120, network={"deny_out": ["0.0.0.0/0"], "allow_out": ["1.1.1.1", "10.0.0.0/8"]})
        i = sb.get_info()
        sb.update_network({"deny_out": ["8.8.8.8"]})
        j = sb.get_info()
        return {"network": i.network, "after": j.network, "allow_internet_access": i.allow_internet_access}

    step("network", network)

    def no_internet():
        sb = create("base", timeout=120, allow_internet_access=False)
        return sb.get_info().allow_internet_access

    step("no_internet", no_internet)

    def public_traffic():
        sb = create("base", timeout=120, network={"allow_public_traffic": False})
        sb.commands.run("cd /tmp && python3 -m http.server 8000 >/dev/null 2>&1", background=True)
        deadline = time.time() + 20
        ok = None
        while time.time() < deadline:
            ok = port_status(sb, 8000, sb.traffic_access_token)
            if ok == 200:
                break
            time.sleep(0.3)
        return {"token": bool(sb.traffic_access_token), "with_token": ok, "without_token": port_status(sb, 8000)}

    step("public_traffic", public_traffic)

    def lifecycle():
        sb = create("base", timeout=120, lifecycle={"on_timeout": "pause", "auto_resume": False})
        lc = sb.get_info().lifecycle
        return {"on_timeout": lc["on_timeout"].value, "auto_resume": lc["auto_resume"]}

    step("lifecycle", lifecycle)

    def idempotency():
        key = "py-" + tag
        a = create("base", timeout=120, idempotency_key=key)
        b = create("base", timeout=120, idempotency_key=key)
        c = create("base", timeout=120, idempotency_key=key + "-other")
        return {"same": a.sandbox_id == b.sandbox_id, "other": c.sandbox_id != a.sandbox_id,
                "usable": b.commands.run("echo idem").stdout}

    step("idempotency", idempotency)

    def fork():
        sb = create("base", timeout=120)
        sb.files.write("/home/user/f.txt", "forked")
        forks = sb.fork(count=2, timeout=120)
        out = []
        for f in forks:
            if isinstance(f, Exception):
                out.append(f"{type(f).__name__}: {f}")
                continue
            made.append(f)
            out.append({"file": f.files.read("/home/user/f.txt"), "distinct": f.sandbox_id != sb.sandbox_id})
        return {"forks": out, "source_running": sb.is_running()}

    step("fork", fork)

    def snapshots():
        sb = create("base", timeout=120)
        sb.files.write("/home/user/s.txt", "snap")
        name = "py-snap-" + tag
        info = sb.create_snapshot(name=name)
        listed = []
        p = Sandbox.list_snapshots(sandbox_id=sb.sandbox_id)
        while p.has_next:
            listed += [s.snapshot_id for s in p.next_items()]
        restored = create(info.snapshot_id, timeout=120)
        by_name = create(name, timeout=120)
        return {
            "names": info.names,
            "listed": info.snapshot_id in listed,
            "restored": restored.files.read("/home/user/s.txt"),
            "by_name": by_name.files.read("/home/user/s.txt"),
            "deleted": Sandbox.delete_snapshot(info.snapshot_id),
            "deleted_again": Sandbox.delete_snapshot(info.snapshot_id),
        }

    step("snapshots", snapshots)
finally:
    for s in made:
        try:
            s.kill()
        except Exception:
            pass
r.emit()
