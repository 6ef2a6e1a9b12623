"""
The code interpreter's in-sandbox server (template `code-interpreter-v1`, port 49999): what
E2B's `@e2b/code-interpreter` (JS) and `e2b-code-interpreter` (Python) SDKs speak, learnt
from their code. Python because it drives Jupyter kernels through jupyter_client, the one
library that speaks the kernel protocol (ZeroMQ, signed messages) and starts and interrupts
ipykernel; tornado (an ipykernel dependency) serves HTTP, so the image needs nothing more.

  GET    /health                   200 once the default Python context's kernel is up
  POST   /execute                  {code, context_id?, language?, env_vars?} -> one JSON object
                                   per line: stdout/stderr {text, timestamp (ns)}, result
                                   {text, html, png, ..., is_main_result}, error {name, value,
                                   traceback}, number_of_executions {execution_count},
                                   end_of_execution
  POST   /contexts                 {language?, cwd?} -> {id, language, cwd}
  GET    /contexts                 [{id, language, cwd}]
  POST   /contexts/<id>/restart    the kernel restarts: its state is gone
  DELETE /contexts/<id>            the kernel shuts down

One execution at a time per context (a kernel runs one cell at a time; later ones queue).
The SDK ends a run by closing its connection (its timeout, or the caller going away): the
kernel is then interrupted, so the context is free for the next run. The gateway checks the
traffic token; the envd access token the SDK sends on /execute is not re-checked here (the
SDK sends none on /contexts), as E2B's server does not.
"""

import asyncio
import json
import os
import queue
import signal
import sys
import time
import uuid

from jupyter_client.manager import AsyncKernelManager
from tornado import httpserver, iostream, web

PORT = int(os.environ.get("SPACE_CODE_INTERPRETER_PORT", "49999"))
DEFAULT_CWD = "/home/user"
# The SDKs' language names -> the kernelspec that runs them.
KERNELS = {"python": "python3", "python3": "python3"}
SUPPORTED = "python"
# A kernel that does not go idle this long after an interrupt is restarted.
INTERRUPT_GRACE_S = 10
# Kernels talk to the server over unix sockets here, not loopback TCP: a paused sandbox's
# memory checkpoint (CRIU) restores them whole, and no kernel port is open in the sandbox.
SOCKETS = "/tmp/space-code-interpreter"

MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}


class BadRequest(Exception):
    pass


class NotFound(Exception):
    pass


def result_line(data, is_main):
    """A Jupyter MIME bundle as the SDKs read a result: known types by field, others in `extra`."""
    out = {"type": "result", "is_main_result": is_main}
    extra = {}
    for mime, value in data.items():
        field = MIME_FIELDS.get(mime)
        if field:
            out[field] = value
        else:
            extra[mime] = value
    if extra:
        out["extra"] = extra
    return out


class Context:
    def __init__(self, language, cwd):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = asyncio.Lock()
        os.makedirs(SOCKETS, exist_ok=True)
        self.km = AsyncKernelManager(kernel_name=KERNELS[language], transport="ipc", ip=os.path.join(SOCKETS, self.id))
        self.kc = None

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    async def start(self):
        os.makedirs(self.cwd, exist_ok=True)
        await self.km.start_kernel(cwd=self.cwd, env=dict(os.environ))
        await self._connect()

    async def _connect(self):
        self.kc = self.km.client()
        self.kc.start_channels()
        await self.kc.wait_for_ready(timeout=120)

    async def _respawn(self):
        self.kc.stop_channels()
        await self.km.restart_kernel(now=True)
        await self._connect()

    async def restart(self):
        async with self.lock:
            await self._respawn()

    async def shutdown(self):
        async with self.lock:
            if self.kc:
                self.kc.stop_channels()
            await self.km.shutdown_kernel(now=True)

    async def _run(self, code, emit, silent=False):
        """Runs one cell; `emit` gets each SDK line. Returns once the kernel is idle again."""
        msg_id = self.kc.execute(code, silent=silent, store_history=not silent, allow_stdin=False)
        while True:
            try:
                msg = await self.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                if await self.km.is_alive():
                    continue
                # The code ended the kernel (os._exit, a crash): a fresh one takes its place.
                if not silent:
                    await emit({"type": "error", "name": "DeadKernelError", "value": "the kernel died; it was restarted and its state is gone", "traceback": ""})
                await self._respawn()
                return
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue  # what an interrupted earlier cell still prints
            kind = msg["msg_type"]
            c = msg["content"]
            if kind == "status" and c.get("execution_state") == "idle":
                break
            if silent:
                continue
            if kind == "stream":
                await emit({"type": c["name"], "text": c["text"], "timestamp": time.time_ns()})
            elif kind == "execute_input":
                await emit({"type": "number_of_executions", "execution_count": c["execution_count"]})
            elif kind == "execute_result":
                await emit(result_line(c["data"], True))
            elif kind == "display_data":
                await emit(result_line(c["data"], False))
            elif kind == "error":
                await emit({"type": "error", "name": c["ename"], "value": c["evalue"], "traceback": "\n".join(c["traceback"])})
        self._drain_shell()

    def _drain_shell(self):
        # The shell channel's replies are not needed (iopub says everything); drop them.
        async def drain():
            try:
                while await self.kc.shell_channel.msg_ready():
                    await self.kc.get_shell_msg(timeout=0.1)
            except Exception:
                pass

        asyncio.ensure_future(drain())

    async def execute(self, code, env_vars, emit, gone):
        """Runs `code` with `env_vars` set for this run only; interrupts the kernel if `gone` is set first."""
        async with self.lock:
            if env_vars:
                # Set for this run, then put back as they were (a context outlives its runs).
                env = json.dumps({str(k): str(v) for k, v in env_vars.items()})
                await self._run(
                    f"import os as _space_os, json as _space_json\n_space_env = _space_json.loads({env!r})\n"
                    "_space_saved = {k: _space_os.environ.get(k) for k in _space_env}\n_space_os.environ.update(_space_env)",
                    emit,
                    silent=True,
                )
            try:
                run = asyncio.ensure_future(self._run(code, emit))
                closed = asyncio.ensure_future(gone.wait())
                done, _ = await asyncio.wait({run, closed}, return_when=asyncio.FIRST_COMPLETED)
                if run not in done:
                    await self.km.interrupt_kernel()
                    try:
                        await asyncio.wait_for(run, INTERRUPT_GRACE_S)
                    except (asyncio.TimeoutError, Exception):
                        run.cancel()
                        await self._respawn()
                        return
                closed.cancel()
                run.result()
            finally:
                if env_vars and await self.km.is_alive():
                    await self._run(
                        "for _k, _v in _space_saved.items():\n"
                        "    (_space_os.environ.pop(_k, None) if _v is None else _space_os.environ.__setitem__(_k, _v))\n"
                        "del _space_saved, _space_env",
                        emit,
                        silent=True,
                    )


class Contexts:
    def __init__(self):
        self.by_id = {}
        # The context a run with no context (or only a language) uses, per language.
        self.defaults = {}
        self.ready = asyncio.Event()

    @staticmethod
    def language_of(language):
        lang = (language or "python").strip().lower()
        if lang not in KERNELS:
            raise BadRequest(f"language {language!r} is not supported by this template (supported: {SUPPORTED})")
        return "python" if lang == "python3" else lang

    async def create(self, language, cwd):
        ctx = Context(self.language_of(language), cwd or DEFAULT_CWD)
        await ctx.start()
        self.by_id[ctx.id] = ctx
        return ctx

    async def default(self, language):
        lang = self.language_of(language)
        if lang not in self.defaults:
            self.defaults[lang] = asyncio.ensure_future(self.create(lang, DEFAULT_CWD))
        try:
            return await asyncio.shield(self.defaults[lang])
        except Exception:
            self.defaults.pop(lang, None)
            raise

    def get(self, context_id):
        ctx = self.by_id.get(context_id)
        if not ctx:
            raise NotFound(f"context {context_id} not found")
        return ctx

    async def remove(self, context_id):
        ctx = self.get(context_id)
        del self.by_id[context_id]
        for lang, f in list(self.defaults.items()):
            if f.done() and not f.exception() and f.result() is ctx:
                del self.defaults[lang]
        await ctx.shutdown()


contexts = Contexts()


class Handler(web.RequestHandler):
    def body(self):
        if not self.request.body:
            return {}
        try:
            b = json.loads(self.request.body)
        except ValueError as e:
            raise BadRequest(f"the body is not JSON: {e}")
        if not isinstance(b, dict):
            raise BadRequest("the body must be a JSON object")
        return b

    def write_error(self, status_code, **kwargs):
        e = kwargs.get("exc_info", (None, None))[1]
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(str(e) if isinstance(e, (BadRequest, NotFound)) else self._reason)

    def _handle_request_exception(self, e):
        if isinstance(e, BadRequest):
            self.send_error(400, exc_info=(type(e), e, None))
        elif isinstance(e, NotFound):
            self.send_error(404, exc_info=(type(e), e, None))
        else:
            super()._handle_request_exception(e)


def string_field(b, name, required=False):
    v = b.get(name)
    if v is None:
        if required:
            raise BadRequest(f"{name}: required")
        return None
    if not isinstance(v, str):
        raise BadRequest(f"{name}: must be a string")
    return v


class Health(Handler):
    async def get(self):
        if not contexts.ready.is_set():
            raise web.HTTPError(503)
        self.finish({"status": "ok"})


class Execute(Handler):
    def initialize(self):
        self.gone = asyncio.Event()

    def on_connection_close(self):
        self.gone.set()

    async def post(self):
        b = self.body()
        code = string_field(b, "code", required=True)
        context_id = string_field(b, "context_id")
        language = string_field(b, "language")
        env_vars = b.get("env_vars") or {}
        if not isinstance(env_vars, dict):
            raise BadRequest("env_vars: must be an object of strings")
        if context_id and language:
            raise BadRequest("context_id and language: give one, not both")
        ctx = contexts.get(context_id) if context_id else await contexts.default(language)
        self.set_header("Content-Type", "application/x-ndjson")

        async def emit(line):
            if self.gone.is_set():
                return
            try:
                self.write(json.dumps(line) + "\n")
                await self.flush()
            except iostream.StreamClosedError:
                self.gone.set()

        await ctx.execute(code, env_vars, emit, self.gone)
        await emit({"type": "end_of_execution"})
        if not self.gone.is_set():
            self.finish()


class ContextList(Handler):
    async def get(self):
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps([c.describe() for c in contexts.by_id.values()]))

    async def post(self):
        b = self.body()
        ctx = await contexts.create(string_field(b, "language"), string_field(b, "cwd"))
        self.finish(ctx.describe())


class ContextOne(Handler):
    async def delete(self, context_id):
        await contexts.remove(context_id)
        self.set_status(204)
        self.finish()


class ContextRestart(Handler):
    async def post(self, context_id):
        await contexts.get(context_id).restart()
        self.set_status(204)
        self.finish()


async def main():
    app = web.Application(
        [
            (r"/health", Health),
            (r"/execute", Execute),
            (r"/contexts", ContextList),
            (r"/contexts/([^/]+)/restart", ContextRestart),
            (r"/contexts/([^/]+)", ContextOne),
        ]
    )
    server = httpserver.HTTPServer(app, idle_connection_timeout=3600, body_timeout=3600)
    server.listen(PORT)
    # The first run should not wait for a kernel to start: the default Python one starts now.
    await contexts.default("python")
    contexts.ready.set()
    print(f"code interpreter listening on :{PORT}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    await stop.wait()
    # Not behind the contexts' locks: a run in progress must not hold the exit up.
    kernels = [c.km.shutdown_kernel(now=True) for c in contexts.by_id.values()]
    await asyncio.wait_for(asyncio.gather(*kernels, return_exceptions=True), 10)


if __name__ == "__main__":
    asyncio.run(main())
