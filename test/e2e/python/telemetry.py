"""Metrics history and sandbox logs through the Python SDK (issue 20 items 11, 12).

get_metrics(start, end) sends whole seconds truncated (the JS SDK rounds); logs go through
the SDK's own generated API client (the Python SDK has no logs method), so its models
parse our entries (isoparse'd timestamps, the LogLevel enum).
"""
import datetime
import time

from e2b import ConnectionConfig, Sandbox
from e2b.api.client.api.sandboxes import get_v_2_sandboxes_sandbox_id_logs
from e2b.api.client.models.log_level import LogLevel
from e2b.api.client_sync import get_api_client

from common import Recorder

r = Recorder()
sb = Sandbox.create(timeout=600)
try:
    start = datetime.datetime.now(datetime.timezone.utc)

    def history():
        deadline = time.time() + 60
        m = []
        while time.time() < deadline:
            m = sb.get_metrics(start=start, end=datetime.datetime.now(datetime.timezone.utc))
            if len(m) >= 2:
                break
            time.sleep(1)
        end = datetime.datetime.now(datetime.timezone.utc)
        ts = [x.timestamp.timestamp() for x in m]
        one = sb.get_metrics(start=m[1].timestamp, end=m[1].timestamp) if len(m) >= 2 else []
        return {
            "count_at_least_2": len(m) >= 2,
            "increasing": all(b > a for a, b in zip(ts, ts[1:])),
            "within": all(int(start.timestamp()) <= t <= int(end.timestamp()) for t in ts),
            "one": [x.timestamp == m[1].timestamp for x in one],
        }

    r.step("history", history)

    def logs():
        sb.commands.run("echo py-logs")
        client = get_api_client(ConnectionConfig())
        res = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(sb.sandbox_id, level=LogLevel.INFO, client=client)
        entries = res.parsed.logs
        started = [e for e in entries if e.message == "process started" and "py-logs" in e.fields.additional_properties.get("args", "")]
        return {
            "status": res.status_code,
            "started": len(started),
            "levels": sorted({e.level.value for e in entries}),
            "aware": all(e.timestamp.tzinfo is not None for e in entries),
        }

    r.step("logs", logs)
finally:
    sb.kill()
r.emit()
