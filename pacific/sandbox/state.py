"""The sandbox state file: everything `down()` needs, readable by a new process.

`<sandbox dir>/state.json` records the node count, every network namespace the
sandbox made and every daemon it started (pid + kernel start time, log, pidfile).
Updates are read-modify-write under an exclusive flock on `<sandbox dir>/state.lock`
and the JSON is replaced atomically, so concurrent writers (a test and a CLI
`spawn`) cannot lose each other's entries and a crash never leaves half a file.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from typing import Iterator

STATE_FILE = "state.json"
LOCK_FILE = "state.lock"

_thread_lock = threading.RLock()


def empty_state(name: str) -> dict:
    return {"name": name, "nodes": 0, "netns": [], "daemons": {}, "pods": {}, "seq": 0}


class StateFile:
    def __init__(self, directory: str, name: str):
        self.dir = directory
        self.name = name
        self.path = os.path.join(directory, STATE_FILE)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def read(self) -> dict:
        """Current state, or an empty one if there is no (readable) state file."""
        try:
            with open(self.path) as f:
                data = json.load(f)
        except FileNotFoundError:
            return empty_state(self.name)
        except (json.JSONDecodeError, OSError):
            # a state file we cannot parse is treated as empty; cleanup still
            # finds leftovers by namespace name and pidfiles under the directory
            return empty_state(self.name)
        base = empty_state(self.name)
        base.update(data)
        return base

    @contextlib.contextmanager
    def update(self) -> Iterator[dict]:
        """Yield the state for modification; written back atomically on exit."""
        os.makedirs(self.dir, exist_ok=True)
        with _thread_lock, open(os.path.join(self.dir, LOCK_FILE), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = self.read()
                yield state
                tmp = f"{self.path}.{os.getpid()}.tmp"
                with open(tmp, "w") as f:
                    json.dump(state, f, indent=1, sort_keys=True)
                os.replace(tmp, self.path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
