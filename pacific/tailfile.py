"""Following a file that grows and may be rotated or truncated: a reader's
position (inode, offset) and the whole lines written since.  pacific-node's
flow log reads ovn-controller's log this way, `pacific flows --follow` the
records files."""
from __future__ import annotations

import os

Position = tuple[int, int]        # (inode, offset)


def end_of(path: str) -> Position:
    """Where a reader that wants only what comes next starts."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return 0, 0
    return st.st_ino, st.st_size


def new_lines(path: str, pos: Position, limit: int = -1) -> tuple[list[str], Position]:
    """The whole lines written to `path` since `pos` (at most `limit` bytes of
    them; the rest next time) and the position after them.  Another inode, or a
    file shorter than `pos`, was rotated or truncated: read from its start.  A
    missing file: nothing, the position kept."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return [], pos
    inode, offset = pos
    if st.st_ino != inode or st.st_size < offset:
        inode, offset = st.st_ino, 0
    if st.st_size == offset:
        return [], (inode, offset)
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(limit)
    end = data.rfind(b"\n") + 1
    return data[:end].decode(errors="replace").splitlines(), (inode, offset + end)
