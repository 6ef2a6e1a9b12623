"""A command streaming while its sandbox is killed from outside, through the sync and
async Python SDK: the transport fails (an HTTP/2 stream reset over h2, the connection
cut over HTTP/1.1), the SDK probes the sandbox, finds it gone and raises what it raises
against E2B; plus a round trip to the gateway over HTTP/2 with httpx (h2c with prior
knowledge on a plain gateway, ALPN h2 over TLS)."""
import asyncio
import os
import threading

import httpx
from e2b import AsyncSandbox, Sandbox
from common import Recorder

r = Recorder()
KILL_AFTER_S = 1.5


def outcome(e):
    return {"raised": type(e).__name__, "message": str(e)}


def killed_run():
    sb = Sandbox.create("base", timeout=120)
    threading.Timer(KILL_AFTER_S, lambda: Sandbox.kill(sb.sandbox_id)).start()
    try:
        sb.commands.run("sleep 60; echo never", timeout=90)
        return {"raised": None}
    except Exception as e:
        return outcome(e)


def killed_wait():
    sb = Sandbox.create("base", timeout=120)
    handle = sb.commands.run("sleep 60; echo never", background=True, timeout=90)
    threading.Timer(KILL_AFTER_S, lambda: Sandbox.kill(sb.sandbox_id)).start()
    try:
        handle.wait()
        return {"raised": None}
    except Exception as e:
        return outcome(e)


async def akilled_run():
    sb = await AsyncSandbox.create("base", timeout=120)

    async def kill_later():
        await asyncio.sleep(KILL_AFTER_S)
        await AsyncSandbox.kill(sb.sandbox_id)

    killer = asyncio.create_task(kill_later())
    try:
        await sb.commands.run("sleep 60; echo never", timeout=90)
        return {"raised": None}
    except Exception as e:
        return outcome(e)
    finally:
        await killer


def http2_round_trip():
    sb = Sandbox.create("base", timeout=120)
    try:
        url = os.environ["E2B_SANDBOX_URL"]
        tls = url.startswith("https:")
        # Plain: HTTP/2 only, with prior knowledge (h2c); TLS: offered by ALPN.
        kw = {"http2": True, "verify": os.environ.get("SSL_CERT_FILE", True)} if tls else {"http1": False, "http2": True}
        with httpx.Client(**kw) as c:
            res = c.get(f"{url}/health", headers={"E2b-Sandbox-Id": sb.sandbox_id, "E2b-Sandbox-Port": "49983"})
            return {"http_version": res.http_version, "status": res.status_code}
    finally:
        sb.kill()


r.step("http2", http2_round_trip)
r.step("killed_run", killed_run)
r.step("killed_wait", killed_wait)
r.set("killed_run_async", asyncio.run(akilled_run()))
r.emit()
