"""NB_Global's nb_cfg / sb_cfg / hv_cfg barrier: how a writer learns that a
change reached ovn-northd and every chassis (what `ovn-nbctl --wait=hv sync`
does).  Bump nb_cfg after the change; once hv_cfg (the minimum every
ovn-controller reported) reaches the bumped value, every chassis has applied
the change and everything before it.

    target = bump(nb)                  # None: no NB_Global row (yet)
    ...
    counters(nb).hv_cfg >= target      # read from the replica: costs nothing
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Counters:
    uuid: object
    nb_cfg: int
    sb_cfg: int
    hv_cfg: int


def counters(nb) -> Counters | None:
    """NB_Global's counters in the replica (None: no row, or an API without one)."""
    tables = getattr(nb, "tables", None)
    if tables is None or "NB_Global" not in tables:
        return None
    with nb.ovsdb_connection.lock:
        rows = list(tables["NB_Global"].rows.values())
        if not rows:
            return None
        g = rows[0]
        return Counters(g.uuid, g.nb_cfg, g.sb_cfg, g.hv_cfg)


def bump(nb) -> int | None:
    """nb_cfg + 1, written; the value to wait for (None: no NB_Global)."""
    c = counters(nb)
    if c is None:
        return None
    target = c.nb_cfg + 1
    nb.db_set("NB_Global", c.uuid, ("nb_cfg", target)).execute(check_error=True)
    return target
