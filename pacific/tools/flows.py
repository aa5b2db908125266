"""`pacific flows`: the audit records of every node (node/flowlog.py writes
them, one JSON object per line), merged by time, filtered, and followed.

    for rec in read(paths, filters):          # what the files hold now, oldest first
    for rec in follow(paths, filters, stop):  # then what they get, as it comes
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator

from pacific import audit, tailfile

POLL = 0.2          # s between looks at the files while following


def _records(path: str) -> Iterator[dict]:
    for name in (path + ".1", path):          # the rotated part first
        try:
            with open(name, errors="replace") as f:
                for line in f:
                    rec = _parse(line)
                    if rec is not None:
                        yield rec
        except FileNotFoundError:
            continue


def _parse(line: str) -> dict | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None         # a line cut by a crash, or not ours
    return rec if isinstance(rec, dict) and "policy" in rec else None


def parse_text(text: str) -> list[dict]:
    """Records of a records file's text (e.g. read through `kubectl exec`)."""
    return [rec for line in text.splitlines() if (rec := _parse(line)) is not None]


def select(records, filters: dict, since: str | None = None) -> list[dict]:
    out = [rec for rec in records
           if (since is None or rec.get("time", "") >= since) and audit.matches(rec, **filters)]
    return sorted(out, key=lambda rec: rec.get("time", ""))


def read(paths: list[str], filters: dict, since: str | None = None) -> list[dict]:
    """Every record of `paths` that passes `filters` (audit.matches' keywords)
    and is at or after `since` (an ISO time), oldest first."""
    return select((rec for p in paths for rec in _records(p)), filters, since)


def follow(paths: list[str], filters: dict, stop: threading.Event | None = None
           ) -> Iterator[dict]:
    """Records appended to `paths` from now on, as they come (a file rotated
    or created meanwhile is read from its start)."""
    stop = stop or threading.Event()
    pos = {p: tailfile.end_of(p) for p in paths}      # now, at the call (not at the first next())
    return _follow(paths, filters, stop, pos)


def _follow(paths, filters, stop, pos):
    while not stop.is_set():
        batch = []
        for p in paths:
            lines, pos[p] = tailfile.new_lines(p, pos[p])
            batch += select(parse_text("\n".join(lines)), filters)
        yield from sorted(batch, key=lambda rec: rec.get("time", ""))
        stop.wait(POLL)


def _end(e: dict) -> str:
    where = e.get("pod") or e.get("ip") or "?"
    return f"{where}:{e['port']}" if e.get("port") is not None else where


def line(rec: dict) -> str:
    """One record, for people."""
    pol = rec["policy"]
    who = "/".join(x for x in (pol.get("kind"), pol.get("namespace"), pol.get("name")) if x)
    rule = f" {pol['rule']}" if pol.get("rule") else ""
    return (f"{rec.get('time', '?')} {rec.get('node', '?'):<8} {rec['verdict']:<10} "
            f"{rec.get('protocol', '?'):<5} {_end(rec['src'])} -> {_end(rec['dst'])}  "
            f"{who}{rule}")
