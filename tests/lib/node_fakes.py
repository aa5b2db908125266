"""Fakes for unit tests of the node daemon's features (pacific/node/feature.py).

* `args(...)`: pacific-node's flags, parsed by its own parser (node n1).
* `context(*argv, **caches)`: a NodeContext on those flags whose informers are
  the given caches (any object with the surface a feature reads: get, list, keys).
* `Informer`: controller_fakes.FakeInformer (in sync with a FakeKube, events
  delivered in the writer's thread) with the life cycle NodeFeatures calls and
  the field selector it was made with, for core.NodeFeatures(make_informer=...).
"""
from __future__ import annotations

from controller_fakes import FakeInformer
from pacific.node.feature import NodeContext
from pacific.node.main import build_parser


def args(*argv: str):
    return build_parser().parse_args(["--node-name", "n1", *argv])


def context(*argv: str, **caches) -> NodeContext:
    return NodeContext(args(*argv), informers=dict(caches))


class Informer(FakeInformer):
    def __init__(self, api, res, field_selector=None, **callbacks):
        super().__init__(api, res, **callbacks)
        self.field_selector = field_selector
        self.started = self.stopped = False

    def start(self):
        self.started = True
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.stopped = True

    def wait_synced(self, timeout: float | None = None) -> bool:
        return True
