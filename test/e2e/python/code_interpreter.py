"""E2B's code interpreter through the official e2b-code-interpreter Python SDK (sync, and
one async round): run_code in the default context (state kept, streamed stdout, errors,
a matplotlib PNG, an HTML result, env vars per run), contexts (create with cwd, list,
restart, remove), a timeout that interrupts the kernel, and the kernel's state across
pause / connect. The SDK's default template is code-interpreter-v1."""
import asyncio
import base64

from e2b_code_interpreter import AsyncSandbox, Sandbox
from common import Recorder, error_name

r = Recorder()
sb = Sandbox.create(timeout=300)
try:
    r.set("template", sb.get_info().template_id)
    r.step("same_context", lambda: [sb.run_code("x = 1").text, sb.run_code("x + 1").text])

    def streamed():
        seen = []

        def on_stdout(m):
            seen.append(m.line)
            if m.line == "one\n":
                # The run waits for this file: had "one" not arrived while it ran, it would never end.
                sb.files.write("/tmp/go-py", "go")

        e = sb.run_code(
            'import os, sys, time\nprint("one", flush=True)\nwhile not os.path.exists("/tmp/go-py"):\n    time.sleep(0.05)\nprint("two")\nprint("oops", file=sys.stderr)',
            on_stdout=on_stdout,
            timeout=120,
        )
        return {"seen": seen, "stdout": e.logs.stdout, "stderr": e.logs.stderr}

    r.step("streamed", streamed)

    def error():
        e = sb.run_code("raise KeyError('nope')")
        return {"name": e.error.name, "value": e.error.value, "has_traceback": "KeyError" in e.error.traceback}

    r.step("error", error)

    def rich():
        plot = sb.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.show()")
        png = next((x.png for x in plot.results if x.png), None)
        html = sb.run_code("from IPython.display import HTML\nHTML('<i>it</i>')")
        return {"png": base64.b64decode(png)[1:4].decode() if png else None, "html": html.results[0].html, "formats": list(html.results[0].formats())}

    r.step("rich", rich)
    r.step("envs", lambda: [sb.run_code("import os\nos.environ.get('PY_CI')", envs={"PY_CI": "v"}).text, sb.run_code("os.environ.get('PY_CI')").text])

    def contexts():
        ctx = sb.create_code_context(cwd="/tmp")
        out = {"cwd": ctx.cwd, "language": ctx.language, "getcwd": sb.run_code("import os\nos.getcwd()", context=ctx).text}
        sb.run_code("z = 7", context=ctx)
        out["own"] = sb.run_code("z", context=ctx).text
        out["listed"] = any(c.id == ctx.id for c in sb.list_code_contexts())
        sb.restart_code_context(ctx)
        out["after_restart"] = sb.run_code("z", context=ctx).error.name
        sb.remove_code_context(ctx)
        out["listed_after_remove"] = any(c.id == ctx.id for c in sb.list_code_contexts())
        out["removed_run"] = error_name(lambda: sb.run_code("1", context=ctx))
        return out

    r.step("contexts", contexts)

    def timeout():
        raised = error_name(lambda: sb.run_code("import time\nfor i in range(6000):\n    m = i\n    time.sleep(0.1)", timeout=3))
        after = sb.run_code("m")
        return {"raised": raised, "interrupted": after.error is None and int(after.text) < 5999}

    r.step("timeout", timeout)
    r.step("unsupported_language", lambda: error_name(lambda: sb.run_code("1", language="cobol")))

    def pause_connect():
        sb.run_code("kept = 'py across pause'")
        paused = sb.pause()
        back = Sandbox.connect(sb.sandbox_id)
        return {"paused": paused, "kept": back.run_code("kept").text}

    r.step("pause_connect", pause_connect)

    async def async_round():
        a = await AsyncSandbox.create(timeout=120)
        try:
            await a.run_code("q = 20")
            lines = []
            e = await a.run_code("print(q + 1)\nq * 2", on_stdout=lambda m: lines.append(m.line))
            return {"text": e.text, "stdout": lines}
        finally:
            await a.kill()

    asyncio.run(r.astep("async_round", async_round))
finally:
    sb.kill()
    r.emit()
