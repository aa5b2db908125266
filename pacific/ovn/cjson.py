"""Use Open vSwitch's C JSON parser for the ovs IDL when the wheel lacks it.

The `ovs` wheel on PyPI ships no C extension, so the IDL parses every OVSDB
message in pure Python (`ovs/json.py`): about a third of the controller's CPU
when it programs pods (docs/benchmarks.md, "Controller").  Debian's
`python3-openvswitch` (a dependency of `openvswitch-switch`, which Pacific
needs anyway) ships the same parser compiled, `ovs/_json.<abi>.so`.  The
module is self-contained (libopenvswitch is linked in statically) and its
interface (`Parser(check_trailer=...)`, `feed`, `is_done`, `finish`) is the one
`ovs.json.Parser` delegates to, so we load it under the name `ovs._json` when:

* the installed `ovs` has no `_json` of its own (otherwise nothing to do);
* a file is found whose suffix is one of *this* interpreter's extension
  suffixes (e.g. `.cpython-311-x86_64-linux-gnu.so`), so the ABI matches;
* it parses a probe document exactly as the pure-Python parser does.

Otherwise the pure-Python parser stays, and the log says why.  Set
``PACIFIC_OVS_C_JSON=0`` to keep the pure-Python parser.  Called once by the
OVSDB API constructors (`pacific.ovn.base.ApiBase`); idempotent.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading

from pacific import ovsinstall

LOG = logging.getLogger(__name__)

ENV_SWITCH = "PACIFIC_OVS_C_JSON"
SYSTEM_DIRS = ("/usr/lib/python3/dist-packages/ovs", "/usr/lib64/python3/site-packages/ovs",
               "/usr/local/lib/python3/dist-packages/ovs")
_PROBE = ('{"id":1,"result":[{"rows":[{"_uuid":["uuid","0f0e0d0c-0b0a-0908-0706-050403020100"],'
          '"name":"ls-\\u00e9\\"x","n":-12,"f":1.5,"b":true,"z":null,'
          '"m":["map",[["k","v"]]],"s":["set",[]]}]}],"error":null}')

_lock = threading.Lock()
_state: str | None = None      # "C" / "PYTHON" once decided


def _candidates(dirs) -> list[str]:
    out = []
    for d in dirs:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if suffix == ".so":
                continue   # untagged: ABI unknown
            path = os.path.join(d, "_json" + suffix)
            if os.path.isfile(path):
                out.append(path)
    return out


def _probe(module) -> bool:
    import ovs.json
    p = module.Parser()   # as ovs.jsonrpc uses it
    p.feed(_PROBE)
    return p.is_done() and p.finish() == ovs.json.from_string(_PROBE)


def enable(dirs=None) -> str:
    """Make the ovs IDL use a C JSON parser if one can be found (first in the OVS
    installation named by $PACIFIC_OVS_PREFIX, then in Debian's); returns the parser
    in use, "C" or "PYTHON"."""
    global _state
    with _lock:
        if _state is not None:
            return _state
        if dirs is None:
            dirs = tuple(dict.fromkeys((ovsinstall.from_env().python_dir, *SYSTEM_DIRS)))
        import ovs
        import ovs.json
        if ovs.json.PARSER == ovs.json.PARSER_C:
            _state = ovs.json.PARSER_C
            return _state
        _state = ovs.json.PARSER_PY
        if os.environ.get(ENV_SWITCH, "1") == "0":
            LOG.info("OVSDB JSON parser: pure Python (%s=0)", ENV_SWITCH)
            return _state
        found = _candidates(dirs)
        for path in found:
            try:
                spec = importlib.util.spec_from_file_location("ovs._json", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                if not _probe(module):
                    LOG.warning("OVSDB JSON parser: %s parses differently from ovs.json; "
                                "not used", path)
                    continue
            except Exception as exc:  # a broken or foreign build: keep the Python parser
                LOG.warning("OVSDB JSON parser: cannot use %s (%s)", path, exc)
                continue
            sys.modules["ovs._json"] = module
            ovs._json = module
            # ovs/json.py names the package `ovs` only if its own import of
            # ovs._json succeeded; Parser.__new__ needs that name
            vars(ovs.json).setdefault("ovs", ovs)
            ovs.json.PARSER = ovs.json.PARSER_C
            _state = ovs.json.PARSER_C
            LOG.info("OVSDB JSON parser: C, from %s", path)
            return _state
        if not found:
            LOG.info("OVSDB JSON parser: pure Python (no ovs/_json%s in %s; install "
                     "python3-openvswitch for the C parser)",
                     importlib.machinery.EXTENSION_SUFFIXES[0], ", ".join(dirs))
        return _state


def parser() -> str:
    """The parser the ovs IDL uses now: "C" or "PYTHON"."""
    import ovs.json
    return ovs.json.PARSER
