"""Sandbox lifecycle through the sync Python SDK: create (template, metadata, envs,
timeout), info, set_timeout, list (metadata filter, pagination, state), get_host,
metrics, pause / connect (resume), kill."""
import uuid
from datetime import datetime, timezone

from e2b import Sandbox, SandboxQuery, SandboxState
from common import Recorder, error_name

r = Recorder()
tag = uuid.uuid4().hex[:8]
sb = Sandbox.create("base", metadata={"suite": "py", "tag": tag, "a b": "c&d"}, envs={"FOO": "bar baz"}, timeout=120)
others = []
try:
    r.set("id", sb.sandbox_id)
    r.step("env", lambda: sb.commands.run("echo $FOO").stdout)
    r.step("running", lambda: sb.is_running())

    def info():
        i = sb.get_info()
        return {
            "sandbox_id": i.sandbox_id,
            "template_id": i.template_id,
            "metadata": i.metadata,
            "state": i.state.value,
            "envd_version": i.envd_version,
            "cpu_count": i.cpu_count,
            "memory_mb": i.memory_mb,
            "ttl_s": (i.end_at - i.started_at).total_seconds(),
            "started_recent": abs((datetime.now(timezone.utc) - i.started_at).total_seconds()) < 600,
            "on_timeout": i.lifecycle["on_timeout"].value if i.lifecycle else None,
        }

    r.step("info", info)

    def set_timeout():
        before = sb.get_info().end_at
        sb.set_timeout(600)
        after = sb.get_info().end_at
        return {"extended_s": round((after - before).total_seconds())}

    r.step("set_timeout", set_timeout)
    r.step("class_get_info", lambda: Sandbox.get_info(sb.sandbox_id).sandbox_id)

    # Two more sandboxes with the same tag: list by metadata, two per page.
    others.extend(Sandbox.create("base", metadata={"suite": "py", "tag": tag}, timeout=120) for _ in range(2))

    def list_pages():
        p = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=2)
        pages = []
        while p.has_next:
            pages.append(sorted(s.sandbox_id for s in p.next_items()))
        return {"page_sizes": [len(x) for x in pages], "ids": sorted(i for x in pages for i in x)}

    r.step("list_pages", list_pages)
    r.set("expected_ids", sorted([sb.sandbox_id] + [o.sandbox_id for o in others]))

    def list_filter():
        p = Sandbox.list(query=SandboxQuery(metadata={"a b": "c&d", "tag": tag}, state=[SandboxState.RUNNING]))
        items = p.next_items()
        return [{"id": s.sandbox_id, "state": s.state.value, "metadata": s.metadata, "template": s.template_id} for s in items]

    r.step("list_filter", list_filter)
    r.step("list_none", lambda: len(Sandbox.list(query=SandboxQuery(metadata={"tag": "none-" + tag})).next_items()))
    r.step("get_host", lambda: sb.get_host(8080))

    def metrics():
        m = sb.get_metrics()
        return [{"cpu_count": x.cpu_count, "mem_total": x.mem_total, "ts": str(x.timestamp)} for x in m]

    r.step("metrics", metrics)

    # Pause, then connect (resume): files and env survive.
    sb.files.write("/home/user/keep.txt", "kept")
    r.step("pause", lambda: sb.pause())
    r.step("pause_again", lambda: Sandbox.pause(sb.sandbox_id) if hasattr(Sandbox, "pause") else None)

    def paused_state():
        return Sandbox.get_info(sb.sandbox_id).state.value

    r.step("paused_state", paused_state)
    r.step("paused_list", lambda: [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"tag": tag}, state=[SandboxState.PAUSED])).next_items()])

    def resume():
        again = Sandbox.connect(sb.sandbox_id, timeout=300)
        return {
            "file": again.files.read("/home/user/keep.txt"),
            "env": again.commands.run("echo $FOO").stdout,
            "state": again.get_info().state.value,
        }

    r.step("resume", resume)
    r.step("connect_running", lambda: Sandbox.connect(sb.sandbox_id).commands.run("echo again").stdout)

    r.step("kill", lambda: sb.kill())
    r.step("kill_again", lambda: Sandbox.kill(sb.sandbox_id))
    r.step("running_after_kill", lambda: sb.is_running())
    r.step("connect_killed", lambda: error_name(lambda: Sandbox.connect(sb.sandbox_id)))
    r.step("info_killed", lambda: error_name(lambda: Sandbox.get_info(sb.sandbox_id)))
    r.step("unknown_template", lambda: error_name(lambda: Sandbox.create("no-such-template-" + tag, timeout=30)))
finally:
    for s in [sb, *others]:
        try:
            s.kill()
        except Exception:
            pass
r.emit()
