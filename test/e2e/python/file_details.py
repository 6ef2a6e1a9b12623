"""E2B file details through the sync Python SDK (issue 20 items 4, 5, 8): metadata in
the write answer and as user.e2b.* xattrs, an upload without metadata clearing it,
remove of a missing path, symlink info, directory size, a command past its timeout."""
from e2b import Sandbox
from common import Recorder, error_name

r = Recorder()
sb = Sandbox.create("base", timeout=180)
path = "/home/user/pm/a.txt"
try:
    def write_metadata():
        w = sb.files.write(path, "one", metadata={"Owner": "py", "k": "v"})
        return {"written": w.metadata, "info": sb.files.get_info(path).metadata}

    r.step("write_metadata", write_metadata)

    def xattrs():
        code = f"import os; print(sorted((n, os.getxattr('{path}', n).decode()) for n in os.listxattr('{path}')))"
        return sb.commands.run(f'python3 -c "{code}"').stdout.strip()

    r.step("xattrs", xattrs)

    def overwrite_clears():
        w = sb.files.write(path, "two")
        return {"written": w.metadata, "info": sb.files.get_info(path).metadata}

    r.step("overwrite_clears", overwrite_clears)

    def set_inside():
        p = "/home/user/pm/inside.txt"
        sb.commands.run(f"echo x > {p} && python3 -c \"import os; os.setxattr('{p}', 'user.e2b.foo', b'bar')\"")
        return sb.files.get_info(p).metadata

    r.step("set_inside", set_inside)
    r.step("remove_missing", lambda: [sb.files.remove("/home/user/pm/never"), sb.files.exists("/home/user/pm/never")])

    def symlink():
        sb.commands.run("mkdir -p /home/user/pm/d && echo hi > /home/user/pm/f && chmod 640 /home/user/pm/f && ln -s /home/user/pm/f /home/user/pm/lf && ln -s d /home/user/pm/ld")
        f = sb.files.get_info("/home/user/pm/lf")
        d = sb.files.get_info("/home/user/pm/ld")
        return {"file": [f.type.value, f.symlink_target, oct(f.mode)], "dir": [d.type.value, d.symlink_target]}

    r.step("symlink", symlink)

    def dir_size():
        sb.files.make_dir("/home/user/pm/empty")
        return sb.files.get_info("/home/user/pm/empty").size

    r.step("dir_size", dir_size)
    r.step("timeout", lambda: error_name(lambda: sb.commands.run("sleep 30", timeout=2)))
finally:
    sb.kill()
r.emit()
