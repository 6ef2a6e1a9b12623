"""Templates from a private registry image through the Python SDK (issue 21):
`Template().from_image(image, username=, password=)` against the local registry behind
basic auth that python-sdk.test.ts starts (REGISTRY_IMAGE, REGISTRY_USER,
REGISTRY_PASSWORD): refused without credentials and with wrong ones, built and booted
with the right ones, its logs naming the digest the pull was pinned to."""
import os
import uuid

from e2b import Sandbox, Template
from common import Recorder

r = Recorder()
image = os.environ["REGISTRY_IMAGE"]
user = os.environ["REGISTRY_USER"]
password = os.environ["REGISTRY_PASSWORD"]
name = f"py-reg-{uuid.uuid4().hex[:6]}"


def refused(**creds):
    try:
        Template.build(Template().from_image(image, **creds), name)
    except Exception as e:
        return {"class": type(e).__name__, "message": str(e)}
    return None


r.step("no_credentials", lambda: refused())
r.step("wrong_credentials", lambda: refused(username=user, password="not-the-password"))


def build():
    logs = []
    t = Template().from_image(image, username=user, password=password).run_cmd("cat /etc/layer2 > /etc/py-registry", user="root")
    Template.build(t, name, on_build_logs=lambda e: logs.append(e.message))
    sb = Sandbox.create(name)
    try:
        return {"file": sb.commands.run("cat /etc/py-registry").stdout, "pinned": any("pinned to sha256:" in m for m in logs)}
    finally:
        sb.kill()


r.step("right_credentials", build)
r.emit()
