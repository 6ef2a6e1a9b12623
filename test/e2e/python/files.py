"""Files through the sync Python SDK: write/read text, bytes, streams, gzip, multi-file
write, metadata, list (depth), make_dir, rename, remove, exists, get_info, watch_dir
(polling watcher), signed upload/download URLs."""
import io
import os
import time
import urllib.request

from e2b import Sandbox
from e2b.sandbox.filesystem.filesystem import WriteEntry
from common import Recorder, error_name

r = Recorder()
sb = Sandbox.create("base", timeout=180)
blob = os.urandom(3 * 1024 * 1024 + 7)


def entry(e):
    return {"name": e.name, "type": e.type.value if e.type else None, "path": e.path, "size": e.size,
            "mode": oct(e.mode), "permissions": e.permissions, "owner": e.owner, "group": e.group,
            "modified": e.modified_time is not None, "symlink_target": e.symlink_target}


try:
    def write_text():
        w = sb.files.write("/home/user/dir/a.txt", "alpha")
        return {"name": w.name, "path": w.path, "type": w.type.value if w.type else None,
                "read": sb.files.read("/home/user/dir/a.txt")}

    r.step("write_text", write_text)
    r.step("relative", lambda: sb.files.write("rel.txt", "rel") and sb.files.read("/home/user/rel.txt"))

    def binary():
        sb.files.write("/home/user/blob.bin", blob)
        back = sb.files.read("/home/user/blob.bin", format="bytes")
        streamed = b"".join(sb.files.read("/home/user/blob.bin", format="stream"))
        return {"bytes_equal": bytes(back) == blob, "stream_equal": streamed == blob}

    r.step("binary", binary)

    def octet_and_gzip():
        sb.files.write("/home/user/io.bin", io.BytesIO(blob))  # file-like: octet-stream upload
        sb.files.write("/home/user/gz.txt", "gz" * 10000, gzip=True)
        return {"io_equal": bytes(sb.files.read("/home/user/io.bin", format="bytes")) == blob,
                "gz": sb.files.read("/home/user/gz.txt", gzip=True) == "gz" * 10000}

    r.step("octet_and_gzip", octet_and_gzip)

    def multi():
        res = sb.files.write_files([WriteEntry(path="/home/user/m/one.txt", data="1"), WriteEntry(path="/home/user/m/two.txt", data=b"2")])
        return {"paths": sorted(w.path for w in res), "two": sb.files.read("/home/user/m/two.txt")}

    r.step("multi", multi)

    def metadata():
        sb.files.write("/home/user/meta.txt", "m", metadata={"Owner": "py"})
        return sb.files.get_info("/home/user/meta.txt").metadata

    r.step("metadata", metadata)
    r.step("empty", lambda: sb.files.write("/home/user/empty.txt", "") and sb.files.read("/home/user/empty.txt"))
    r.step("list", lambda: [entry(e) for e in sb.files.list("/home/user/dir")])
    r.step("list_depth", lambda: [e.path for e in sb.files.list("/home/user/m", depth=2)])
    r.step("make_dir", lambda: [sb.files.make_dir("/home/user/new/deep"), sb.files.make_dir("/home/user/new/deep")])
    r.step("exists", lambda: [sb.files.exists("/home/user/dir/a.txt"), sb.files.exists("/home/user/nope")])
    r.step("get_info_file", lambda: entry(sb.files.get_info("/home/user/dir/a.txt")))
    r.step("get_info_dir", lambda: entry(sb.files.get_info("/home/user/new")))

    def symlink():
        sb.commands.run("ln -sf /home/user/dir/a.txt /home/user/link")
        return entry(sb.files.get_info("/home/user/link"))

    r.step("symlink", symlink)
    r.step("rename", lambda: entry(sb.files.rename("/home/user/dir/a.txt", "/home/user/dir/b.txt")))
    r.step("after_rename", lambda: [sb.files.exists("/home/user/dir/a.txt"), sb.files.read("/home/user/dir/b.txt")])
    r.step("remove", lambda: [sb.files.remove("/home/user/dir/b.txt"), sb.files.exists("/home/user/dir/b.txt")])
    r.step("read_missing", lambda: error_name(lambda: sb.files.read("/home/user/missing.txt")))
    r.step("list_missing", lambda: error_name(lambda: sb.files.list("/home/user/missing")))
    r.step("info_missing", lambda: error_name(lambda: sb.files.get_info("/home/user/missing")))
    r.step("as_root", lambda: sb.files.write("/root/r.txt", "r", user="root").path)
    r.step("owner_user", lambda: sb.commands.run("stat -c %U:%G /home/user/dir /home/user/blob.bin").stdout)

    def watch():
        sb.files.make_dir("/home/user/w")
        h = sb.files.watch_dir("/home/user/w")
        sb.files.write("/home/user/w/f.txt", "x")
        sb.commands.run("mkdir /home/user/w/sub && rm /home/user/w/f.txt")
        events = []
        deadline = time.time() + 10
        while time.time() < deadline:
            events += [(e.name, e.type.value) for e in h.get_new_events()]
            if ("f.txt", "remove") in events and any(n == "sub" for n, _ in events):
                break
            time.sleep(0.2)
        h.stop()
        return events

    r.step("watch", watch)

    def watch_recursive():
        sb.files.make_dir("/home/user/wr/inner")
        h = sb.files.watch_dir("/home/user/wr", recursive=True, include_entry=True)
        sb.files.write("/home/user/wr/inner/deep.txt", "d")
        events = []
        deadline = time.time() + 10
        while time.time() < deadline:
            events += [{"name": e.name, "type": e.type.value, "entry": e.entry.name if e.entry else None} for e in h.get_new_events()]
            if any(e["name"] == "inner/deep.txt" for e in events):
                break
            time.sleep(0.2)
        h.stop()
        return events

    r.step("watch_recursive", watch_recursive)
    r.step("watch_missing", lambda: error_name(lambda: sb.files.watch_dir("/home/user/missing")))

    def signed_urls():
        up = sb.upload_url("/home/user/signed.txt", use_signature_expiration=120)
        down = sb.download_url("/home/user/signed.txt", use_signature_expiration=120)
        req = urllib.request.Request(up, data=b"signed body", method="POST", headers={"Content-Type": "application/octet-stream"})
        urllib.request.urlopen(req, timeout=30).read()
        return {"read": urllib.request.urlopen(down, timeout=30).read().decode(), "sdk": sb.files.read("/home/user/signed.txt")}

    r.step("signed_urls", signed_urls)
finally:
    sb.kill()
r.emit()
