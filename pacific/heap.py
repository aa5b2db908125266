"""The C heap of a long-running daemon: fewer malloc arenas.

    heap.limit_arenas(2)    # first thing in main(), before any thread starts

CPython keeps objects of up to 512 bytes in its own arenas, but dict and set
tables, long strings and API responses come from glibc's malloc, which gives
threads arenas of their own (up to 8 per core) and keeps what a thread freed
for that arena's next allocation.  The controller's sixteen reconcile workers,
informers and OVSDB thread spread a restart's garbage over many arenas; with
two, a controller at 30,000 pods was 7 % smaller (allocations run under the
GIL anyway).  Trimming the heap after a burst gained little, so it is not
done (docs/benchmarks.md, decision 0034).

Elsewhere than glibc (musl, macOS) this is a no-op that says so.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

LOG = logging.getLogger(__name__)
M_ARENA_MAX = -8        # glibc's malloc.h


def limit_arenas(n: int) -> bool:
    """At most `n` malloc arenas for the process (call before threads start:
    a thread that already has an arena keeps it).  False when not applied."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError) as exc:
        LOG.info("no glibc malloc here (%s): malloc arenas left as they are", exc)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(M_ARENA_MAX, n) == 1
