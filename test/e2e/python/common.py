"""Shared by the Python SDK scenario scripts (run by test/e2e/python-sdk.test.ts).

Each script drives the real stack through the official e2b Python SDK, records what it
observed per step (a value, or {"error": "<Exception>: <message>"}) and prints one JSON
object; the node:test file asserts on it. Connection comes from E2B_API_KEY, E2B_API_URL
and E2B_SANDBOX_URL.
"""
import json
import sys
import traceback


class Recorder:
    def __init__(self):
        self.out = {}

    def step(self, name, fn):
        try:
            self.out[name] = fn()
        except Exception as e:  # recorded, asserted on by the test
            self.out[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=3)}
        return self.out[name]

    async def astep(self, name, fn):
        try:
            self.out[name] = await fn()
        except Exception as e:
            self.out[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=3)}
        return self.out[name]

    def set(self, name, value):
        self.out[name] = value

    def emit(self):
        json.dump(self.out, sys.stdout, default=str)
        sys.stdout.write("\n")


def error_name(fn):
    """The exception class name fn raises, or None."""
    try:
        fn()
    except Exception as e:
        return type(e).__name__
    return None


async def aerror_name(fn):
    try:
        await fn()
    except Exception as e:
        return type(e).__name__
    return None
