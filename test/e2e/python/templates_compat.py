"""Templates through the Python SDK (issue 20 item 7): the built-in `base` exists, build
ids are UUIDs (the SDK parses them in assign_tags and get_tags), names and tags are
validated, a glob COPY copies what it matched, and the `base` template has python, pip
(no PEP 668 error), node and npm."""
import os
import tempfile
import uuid

from e2b import Sandbox, Template
from common import Recorder

r = Recorder()
name = f"py-tpl-{uuid.uuid4().hex[:6]}"
ctx = tempfile.mkdtemp(prefix="space-py-tpl-")
os.makedirs(os.path.join(ctx, "folder", "sub"))
for rel, text in [("folder/a.txt", "a\n"), ("folder/sub/c.txt", "c\n")]:
    with open(os.path.join(ctx, rel), "w") as f:
        f.write(text)

r.step("base_exists", lambda: Template.exists("base"))


def build():
    t = Template(file_context_path=ctx).from_template("base").copy("folder/*", "/opt/glob").run_cmd("true")
    info = Template.build(t, f"{name}:v1")
    return {"template_id": info.template_id, "build_id": info.build_id, "uuid": str(uuid.UUID(info.build_id)) == info.build_id}


built = r.step("build", build)
template_id = built.get("template_id") if isinstance(built, dict) else None


def tags():
    assigned = Template.assign_tags(f"{name}:v1", "prod")
    listed = Template.get_tags(template_id)
    return {"assigned": assigned.build_id, "tags": sorted(t.tag for t in listed), "builds": sorted({t.build_id for t in listed})}


r.step("tags", tags)


def bad(fn):
    try:
        fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


r.step("bad_name", lambda: bad(lambda: Template.build(Template().from_template("base"), "name:")))
r.step("bad_target", lambda: bad(lambda: Template.assign_tags(":x", "prod")))


def sandbox():
    sb = Sandbox.create(name)
    try:
        run = lambda cmd: sb.commands.run(cmd).stdout
        return {
            "glob": run("cd /opt/glob && find . -mindepth 1 | sort"),
            "python": run("python --version"),
            "pip": run("pip install --no-index /nonexistent.whl 2>&1 || true"),
            "node": run("node -e 'console.log(6 * 7)'"),
            "npm": run("npm --version"),
        }
    finally:
        sb.kill()


r.step("sandbox", sandbox)
r.emit()
