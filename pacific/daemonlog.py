"""Logging set-up shared by the daemons (pacific-controller, pacific-node)."""
from __future__ import annotations

import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s]: %(message)s"
NOISY = ("ovsdbapp", "urllib3", "kubernetes")


def setup(verbose: bool, log_file: str | None) -> None:
    """Log to `log_file` (else stderr) at INFO, or DEBUG with `verbose`; the
    libraries' own chatter only with `verbose`."""
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not verbose:
        for noisy in NOISY:
            logging.getLogger(noisy).setLevel(logging.WARNING)
