"""Pacific's CustomResourceDefinitions (deploy/crds/*.yaml) as dicts.

    from pacific.kube.crds import load_crds, install_crds
    for crd in load_crds():            # [Subnet CRD, IP CRD]
        print(crd["metadata"]["name"])
    install_crds(api)                  # create or update them on an API server

$PACIFIC_CRD_DIR overrides the directory (for an installed, non-editable package).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import yaml

from pacific.kube import errors, resources

log = logging.getLogger(__name__)

CRD_FILES = ("subnet.yaml", "ip.yaml", "egressip.yaml", "egressfirewall.yaml",
             "clusternetworkpolicy.yaml")


def crd_dir() -> Path:
    env = os.environ.get("PACIFIC_CRD_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "deploy" / "crds"


def load_crds() -> list[dict]:
    """Parse every CRD file; raises FileNotFoundError naming a missing file."""
    out = []
    base = crd_dir()
    for fname in CRD_FILES:
        path = base / fname
        if not path.is_file():
            raise FileNotFoundError(f"CRD file {path} is missing (set PACIFIC_CRD_DIR?)")
        with path.open() as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    out.append(doc)
    return out


def install_crds(api: Any) -> None:
    """Create each CRD, or replace it when it exists (idempotent)."""
    for crd in load_crds():
        name = crd["metadata"]["name"]
        try:
            resources.create(api, resources.CRDS, dict(crd))
            log.info("CRD %s created", name)
        except errors.AlreadyExists:
            cur = resources.get(api, resources.CRDS, name) or {}
            body = dict(crd)
            body["metadata"] = dict(crd["metadata"],
                                    resourceVersion=cur.get("metadata", {}).get("resourceVersion"))
            resources.replace(api, resources.CRDS, body)
            log.info("CRD %s updated", name)
