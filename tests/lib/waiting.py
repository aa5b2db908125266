"""The one wait of the tests: poll a condition until it holds, or fail naming it.

    rec = wait_until(lambda: record(api, "web"), 20, what="web's address")

A test waits on the condition that makes its next assertion meaningful, never
on time (tests/README.md).
"""
from __future__ import annotations

import time


def wait_until(pred, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """`pred()`'s first truthy value, polled every `interval` s; AssertionError
    naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def timed_wait(pred, timeout: float, what: str, interval: float = 0.02) -> float:
    """wait_until, returning how long the condition took to hold (s)."""
    t0 = time.monotonic()
    wait_until(pred, timeout, interval, what)
    return time.monotonic() - t0
