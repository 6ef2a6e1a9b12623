"""The async Python SDK (AsyncSandbox): create, commands (run, background + kill,
stdin, env/cwd/user), files (write/read/list/make_dir/rename/remove/exists/get_info,
watch_dir with a callback), list, set_timeout, pause / connect, kill."""
import asyncio
import os
import uuid

from e2b import AsyncSandbox, CommandExitException, SandboxQuery
from common import Recorder, aerror_name


async def main():
    r = Recorder()
    tag = uuid.uuid4().hex[:8]
    sb = await AsyncSandbox.create("base", metadata={"tag": tag}, envs={"FOO": "async"}, timeout=180)
    try:
        async def basic():
            res = await sb.commands.run("echo $FOO; echo err >&2")
            return {"stdout": res.stdout, "stderr": res.stderr, "exit_code": res.exit_code}

        await r.astep("basic", basic)

        async def failing():
            try:
                await sb.commands.run("exit 7")
            except CommandExitException as e:
                return e.exit_code
            return "no exception"

        await r.astep("failing", failing)

        async def options():
            res = await sb.commands.run("echo $X; pwd; whoami", envs={"X": "1"}, cwd="/tmp", user="root")
            return res.stdout

        await r.astep("options", options)

        async def concurrent():
            rs = await asyncio.gather(*(sb.commands.run(f"sleep 0.5; echo {i}") for i in range(5)))
            return [x.stdout for x in rs]

        await r.astep("concurrent", concurrent)

        async def background():
            out = []
            h = await sb.commands.run("sleep 300", background=True, on_stdout=out.append)
            killed = await h.kill()
            try:
                await h.wait()
                waited = "no exception"
            except CommandExitException as e:
                waited = e.exit_code
            return {"killed": killed, "wait": waited, "kill_again": await sb.commands.kill(h.pid)}

        await r.astep("background", background)

        async def stdin():
            h = await sb.commands.run("cat", background=True, stdin=True)
            await sb.commands.send_stdin(h.pid, "via async\n")
            await sb.commands.close_stdin(h.pid)
            return (await h.wait()).stdout

        await r.astep("stdin", stdin)

        async def files():
            blob = os.urandom(1024 * 1024)
            await sb.files.write("/home/user/a/x.txt", "async text")
            await sb.files.write("/home/user/a/b.bin", blob)
            made = await sb.files.make_dir("/home/user/a/d")
            listed = sorted(e.name for e in await sb.files.list("/home/user/a"))
            moved = await sb.files.rename("/home/user/a/x.txt", "/home/user/a/y.txt")
            await sb.files.remove("/home/user/a/d")
            info = await sb.files.get_info("/home/user/a/y.txt")
            return {
                "text": await sb.files.read("/home/user/a/y.txt"),
                "bytes_equal": bytes(await sb.files.read("/home/user/a/b.bin", format="bytes")) == blob,
                "made": made,
                "listed": listed,
                "moved": moved.path,
                "exists": [await sb.files.exists("/home/user/a/y.txt"), await sb.files.exists("/home/user/a/d")],
                "info": {"size": info.size, "type": info.type.value},
            }

        await r.astep("files", files)
        await r.astep("read_missing", lambda: aerror_name(lambda: sb.files.read("/home/user/none")))

        async def watch():
            await sb.files.make_dir("/home/user/w")
            seen = []
            got = asyncio.Event()

            def on_event(e):
                seen.append([e.name, e.type.value])
                if e.name == "n.txt" and e.type.value == "write":
                    got.set()

            h = await sb.files.watch_dir("/home/user/w", on_event=on_event)
            await sb.files.write("/home/user/w/n.txt", "n")
            try:
                await asyncio.wait_for(got.wait(), 10)
            except asyncio.TimeoutError:
                pass
            await h.stop()
            return seen

        await r.astep("watch", watch)

        async def listing():
            p = AsyncSandbox.list(query=SandboxQuery(metadata={"tag": tag}))
            return [s.sandbox_id for s in await p.next_items()] == [sb.sandbox_id]

        await r.astep("list", listing)

        async def timeout():
            before = (await sb.get_info()).end_at
            await sb.set_timeout(900)
            return round(((await sb.get_info()).end_at - before).total_seconds())

        await r.astep("set_timeout", timeout)

        async def pause_connect():
            await sb.commands.run("echo keep > /home/user/keep")
            paused = await sb.pause()
            state = (await AsyncSandbox.get_info(sb.sandbox_id)).state.value
            again = await AsyncSandbox.connect(sb.sandbox_id)
            return {"paused": paused, "state": state, "file": (await again.commands.run("cat /home/user/keep")).stdout,
                    "state_after": (await again.get_info()).state.value}

        await r.astep("pause_connect", pause_connect)
        await r.astep("kill", lambda: sb.kill())
        await r.astep("running_after_kill", lambda: sb.is_running())
        await r.astep("connect_killed", lambda: aerror_name(lambda: AsyncSandbox.connect(sb.sandbox_id)))
    finally:
        try:
            await sb.kill()
        except Exception:
            pass
    r.emit()


asyncio.run(main())
