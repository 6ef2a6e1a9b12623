"""Tenant quotas and create rate limits (issues 24, 27) through the sync Python SDK: a
quota refusal is RateLimitException at once (the server says Should-Retry: false), a rate
limit too when retries are off, and with its default retries the SDK sleeps the
Retry-After and the create goes through. E2B_API_KEY: a tenant with a quota of one
sandbox; QUOTA_RATE_KEY: a tenant limited to one create per few seconds (burst 1)."""
import os
import time

from e2b import Sandbox
from common import Recorder

r = Recorder()
made = []


def refused(fn):
    """The exception class and message, or "accepted"."""
    try:
        made.append(fn())
    except Exception as e:
        return {"class": type(e).__name__, "message": str(e)[:300]}
    return "accepted"


def timed(fn):
    t0 = time.monotonic()
    made.append(fn())
    return {"created": True, "waited_s": round(time.monotonic() - t0, 1)}


rate_key = os.environ["QUOTA_RATE_KEY"]
try:
    r.step("quota_first", lambda: refused(lambda: Sandbox.create("base", timeout=120)))
    r.step("quota_second", lambda: refused(lambda: Sandbox.create("base", timeout=120)))
    r.step("rate_first", lambda: refused(lambda: Sandbox.create("base", timeout=120, api_key=rate_key)))
    r.step("rate_second", lambda: refused(lambda: Sandbox.create("base", timeout=120, api_key=rate_key, retries=0)))
    r.step("rate_retried", lambda: timed(lambda: Sandbox.create("base", timeout=120, api_key=rate_key)))
finally:
    for sb in made:
        try:
            sb.kill()
        except Exception:
            pass
r.emit()
