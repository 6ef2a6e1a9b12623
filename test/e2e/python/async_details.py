"""Issue 20's file metadata and filesystem-only pause through the async Python SDK
(AsyncSandbox: httpx's async client, its own filesystem and pause code): metadata in the
write answer (multipart and the gzip octet-stream upload) and in get_info, an upload
without metadata clearing it; remove of a missing path, symlinks (a dangling one
listed as a symlink), a directory's size, a command past its timeout, get_metrics of a
range; pause(mode="filesystem") and connect(on_resume="reboot")
booting the sandbox fresh from its disk; the list's started_after (sent as isoformat with
an offset and microseconds) at or after."""
import asyncio
import datetime
import time
import uuid

from datetime import timedelta

from e2b import AsyncSandbox, SandboxQuery
from e2b.sandbox.filesystem.filesystem import WriteEntry
from common import Recorder, aerror_name

marker = f"pyafs-{uuid.uuid4().hex[:8]}"
# The bracket keeps the grep itself out of the count.
COUNT = "grep -l 'pyafscount[e]r' /proc/[0-9]*/cmdline 2>/dev/null | wc -l"
LOOP = "nohup sh -c 'while true; do echo x > /home/user/pyafscounter.out; sleep 0.1; done; : pyafscounter' >/dev/null 2>&1 &"


async def main():
    r = Recorder()
    made = []

    async def create(**kw):
        sb = await AsyncSandbox.create("base", timeout=300, **kw)
        made.append(sb)
        return sb

    async def prepare(sb):
        await sb.files.write("/home/user/note.txt", marker)
        await sb.commands.run(LOOP)
        return (await sb.commands.run(COUNT)).stdout.strip()

    async def fresh(sb):
        # Right after a connect the gateway may still answer 502 for a moment (issue 20 item 1, its own test).
        deadline = time.time() + 30
        while True:
            try:
                await sb.files.exists("/home/user/note.txt")
                break
            except Exception:
                if time.time() > deadline:
                    raise
                await asyncio.sleep(0.2)
        return {"file": await sb.files.read("/home/user/note.txt"), "processes": (await sb.commands.run(COUNT)).stdout.strip()}

    try:
        sb = await create()
        path = "/home/user/pam/a.txt"

        async def write_metadata():
            w = await sb.files.write(path, "one", metadata={"Owner": "pyasync", "k": "v"})
            return {"written": w.metadata, "info": (await sb.files.get_info(path)).metadata}

        await r.astep("write_metadata", write_metadata)

        async def gzip_metadata():
            p = "/home/user/pam/z.bin"
            w = await sb.files.write(p, b"zipped" * 100, gzip=True, metadata={"via": "octet"})
            return {"written": w.metadata, "info": (await sb.files.get_info(p)).metadata, "size": (await sb.files.get_info(p)).size}

        await r.astep("gzip_metadata", gzip_metadata)

        async def write_files_metadata():
            ws = await sb.files.write_files(
                [WriteEntry(path="/home/user/pam/m1.txt", data="1"), WriteEntry(path="/home/user/pam/m2.txt", data="2")],
                metadata={"batch": "b1"},
            )
            return [[w.path, w.metadata] for w in ws]

        await r.astep("write_files_metadata", write_files_metadata)

        async def overwrite_clears():
            w = await sb.files.write(path, "two")
            return {"written": w.metadata, "info": (await sb.files.get_info(path)).metadata}

        await r.astep("overwrite_clears", overwrite_clears)

        async def set_inside():
            p = "/home/user/pam/inside.txt"
            await sb.commands.run(f"echo x > {p} && python3 -c \"import os; os.setxattr('{p}', 'user.e2b.foo', b'bar')\"")
            return (await sb.files.get_info(p)).metadata

        await r.astep("set_inside", set_inside)

        async def remove_missing():
            await sb.files.remove("/home/user/pam/never")
            return await sb.files.exists("/home/user/pam/never")

        await r.astep("remove_missing", remove_missing)

        async def symlink():
            await sb.commands.run(
                "mkdir -p /home/user/pal/d && echo hi > /home/user/pal/f && chmod 640 /home/user/pal/f"
                " && ln -s /home/user/pal/f /home/user/pal/lf && ln -s d /home/user/pal/ld && ln -s /home/user/pal/gone /home/user/pal/dangling"
            )
            f = await sb.files.get_info("/home/user/pal/lf")
            d = await sb.files.get_info("/home/user/pal/ld")
            listed = [[e.name, e.type.value if e.type else None] for e in await sb.files.list("/home/user/pal")]
            return {"file": [f.type.value, f.symlink_target, oct(f.mode)], "dir": [d.type.value, d.symlink_target], "listed": listed}

        await r.astep("symlink", symlink)

        async def dir_size():
            await sb.files.make_dir("/home/user/pam/empty")
            return (await sb.files.get_info("/home/user/pam/empty")).size

        await r.astep("dir_size", dir_size)
        await r.astep("timeout", lambda: aerror_name(lambda: sb.commands.run("sleep 30", timeout=2)))

        async def metrics():
            start = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
            deadline = time.time() + 60
            m = []
            while time.time() < deadline:
                m = await sb.get_metrics(start=start, end=datetime.datetime.now(datetime.timezone.utc))
                if len(m) >= 2:
                    break
                await asyncio.sleep(1)
            ts = [x.timestamp.timestamp() for x in m]
            return {"count_at_least_2": len(m) >= 2, "increasing": all(b > a for a, b in zip(ts, ts[1:]))}

        await r.astep("metrics", metrics)

        async def mode_filesystem():
            s = await create()
            before = await prepare(s)
            paused = await s.pause(mode="filesystem")
            state = (await AsyncSandbox.get_info(s.sandbox_id)).state.value
            back = await AsyncSandbox.connect(s.sandbox_id, timeout=300)
            seen = await fresh(back)
            await back.kill()
            return {"before": before, "paused": paused, "state": state, **seen}

        await r.astep("mode_filesystem", mode_filesystem)

        async def reboot():
            s = await create()
            await prepare(s)
            await s.pause()
            full = await AsyncSandbox.connect(s.sandbox_id, timeout=300)
            kept = (await fresh(full))["processes"]
            await full.pause()
            back = await AsyncSandbox.connect(s.sandbox_id, timeout=300, on_resume="reboot")
            seen = await fresh(back)
            await back.kill()
            return {"full": kept, **seen}

        await r.astep("reboot", reboot)

        async def started_after():
            tag = uuid.uuid4().hex[:8]
            s = await create(metadata={"tag": tag})
            started = (await s.get_info()).started_at

            async def ids(after):
                return [x.sandbox_id for x in await AsyncSandbox.list(query=SandboxQuery(metadata={"tag": tag}, started_after=after)).next_items()]

            return {"at": await ids(started) == [s.sandbox_id], "later": await ids(started + timedelta(milliseconds=1))}

        await r.astep("started_after", started_after)
    finally:
        for s in made:
            try:
                await s.kill()
            except Exception:
                pass
        r.set("marker", marker)
        r.emit()


asyncio.run(main())
