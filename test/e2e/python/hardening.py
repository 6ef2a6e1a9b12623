"""Hardening (issue 27) through the sync Python SDK: malformed create input answered 400
naming the field (NUL bytes, sizes, timeout 0), and envd's file API with the requesting
user's rights (what `user` may not touch is refused, its own files work)."""
from e2b import Sandbox
from common import Recorder

r = Recorder()


def refused(fn):
    """The exception class and whether its message names `what`, or "accepted"."""
    try:
        sb = fn()
    except Exception as e:
        return {"class": type(e).__name__, "message": str(e)[:300]}
    sb.kill()
    return "accepted"


r.step("nul_metadata", lambda: refused(lambda: Sandbox.create("base", metadata={"a": "x\u0000y"}, timeout=60)))
r.step("nul_env", lambda: refused(lambda: Sandbox.create("base", envs={"A": "x\u0000y"}, timeout=60)))
r.step("big_env", lambda: refused(lambda: Sandbox.create("base", envs={"BIG": "x" * 200 * 1024}, timeout=60)))
r.step("big_metadata", lambda: refused(lambda: Sandbox.create("base", metadata={"a": "x" * 10 * 1024 * 1024}, timeout=60)))

sb = Sandbox.create("base", timeout=180)
try:
    def denied(fn):
        try:
            fn()
        except Exception as e:
            return {"class": type(e).__name__, "message": str(e)[:200]}
        return "allowed"

    r.step("read_shadow", lambda: denied(lambda: sb.files.read("/etc/shadow", user="user")))
    r.step("write_root", lambda: denied(lambda: sb.files.write("/root/x", "no", user="user")))
    r.step("list_root", lambda: denied(lambda: sb.files.list("/root", user="user")))

    def own():
        sb.files.write("/home/user/mine/f.txt", "mine", user="user")
        info = sb.files.get_info("/home/user/mine/f.txt", user="user")
        return {"read": sb.files.read("/home/user/mine/f.txt", user="user"), "owner": info.owner}

    r.step("own", own)
    r.step("root_reads_shadow", lambda: sb.files.read("/etc/shadow", user="root").startswith("root:"))
finally:
    sb.kill()

r.emit()
