"""Commands through the sync Python SDK: stdout/stderr/exit code, env, cwd, user,
timeout, background + kill, stdin (send, stream, close), list, connect by pid, PTY."""

from e2b import Sandbox, CommandExitException
from e2b.sandbox.commands.command_handle import PtySize
from common import Recorder, error_name

r = Recorder()
sb = Sandbox.create("base", timeout=180)
try:
    def basic():
        res = sb.commands.run("echo out; echo err >&2")
        return {"stdout": res.stdout, "stderr": res.stderr, "exit_code": res.exit_code, "error": res.error}

    r.step("basic", basic)

    def failing():
        try:
            sb.commands.run("echo partial; echo bad >&2; exit 3")
        except CommandExitException as e:
            return {"exit_code": e.exit_code, "stdout": e.stdout, "stderr": e.stderr}
        return "no exception"

    r.step("failing", failing)
    r.step("env", lambda: sb.commands.run("echo $A-$B", envs={"A": "x y", "B": "z"}).stdout)
    r.step("cwd", lambda: sb.commands.run("pwd", cwd="/tmp").stdout)
    r.step("default_identity", lambda: sb.commands.run("whoami; echo $HOME; pwd").stdout)
    r.step("root", lambda: sb.commands.run("whoami; echo $HOME", user="root").stdout)

    def callbacks():
        out, err = [], []
        sb.commands.run("for i in 1 2 3; do echo o$i; echo e$i >&2; done", on_stdout=out.append, on_stderr=err.append)
        return {"stdout": "".join(out), "stderr": "".join(err)}

    r.step("callbacks", callbacks)
    r.step("timeout", lambda: error_name(lambda: sb.commands.run("sleep 30", timeout=2)))

    def large():
        res = sb.commands.run("head -c 3000000 /dev/zero | base64 -w 100")
        return {"len": len(res.stdout), "lines": res.stdout.count("\n")}

    r.step("large", large)

    def background():
        h = sb.commands.run("sleep 1; echo done", background=True)
        pid = h.pid
        res = h.wait()
        return {"pid_int": isinstance(pid, int) and pid > 0, "stdout": res.stdout}

    r.step("background", background)

    def kill_bg():
        h = sb.commands.run("sleep 300", background=True)
        listed = [p.pid for p in sb.commands.list()]
        ps = next((p for p in sb.commands.list() if p.pid == h.pid), None)
        killed = sb.commands.kill(h.pid)
        try:
            h.wait()
            waited = "no exception"
        except CommandExitException as e:
            waited = {"exit_code": e.exit_code, "error": e.error}
        return {
            "listed": h.pid in listed,
            "cmd": ps.cmd if ps else None,
            "args": ps.args if ps else None,
            "killed": killed,
            "wait": waited,
            "kill_again": sb.commands.kill(h.pid),
        }

    r.step("kill_bg", kill_bg)
    r.step("handle_kill", lambda: sb.commands.run("sleep 300", background=True).kill())

    def stdin():
        h = sb.commands.run("cat", background=True, stdin=True)
        h.send_stdin("hello ")
        sb.commands.send_stdin(h.pid, b"stdin\n")
        h.close_stdin()
        return h.wait().stdout

    r.step("stdin", stdin)

    def stream_input():
        h = sb.commands.run("cat", background=True, stdin=True)
        sb.commands.stream_input(h.pid, iter(["a", b"b", "c\n"]))
        sb.commands.close_stdin(h.pid)
        return h.wait().stdout

    r.step("stream_input", stream_input)

    def reconnect():
        h = sb.commands.run("for i in 1 2 3 4 5; do echo t$i; sleep 0.3; done", background=True)
        h.disconnect()
        again = sb.commands.connect(h.pid)
        return again.wait().exit_code

    r.step("reconnect", reconnect)
    r.step("connect_missing", lambda: error_name(lambda: sb.commands.connect(999999)))

    def pty():
        chunks = []
        h = sb.pty.create(PtySize(rows=24, cols=80))
        # The sleep lets the output be read before exit (node-pty may drop unread output at exit under load).
        sb.pty.send_stdin(h.pid, b"echo pty-$((40+2)); sleep 0.5; exit\n")
        try:
            h.wait(on_pty=lambda d: chunks.append(bytes(d)))
        except CommandExitException:
            pass
        return b"".join(chunks).decode(errors="replace")

    r.step("pty", pty)
finally:
    sb.kill()
r.emit()
