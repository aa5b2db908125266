"""pacific-node's features, in the order they start (they stop in reverse).

Adding a node feature is one module (a feature.NodeFeature subclass: what it
reads, what wakes it, which flags turn it off, which features it calls) and
one line here.  None waits for another: each converges on its own and kicks
those that read what it provides.  The pod loop comes first, so running pods'
settings are re-applied as soon as the caches are listed; health last, as it
reports on the node the others set up.
"""
from __future__ import annotations

from pacific.node.egressgw import EgressGateway
from pacific.node.egresssnat import EgressSnat
from pacific.node.firewall import HostFirewall
from pacific.node.flowlog import FlowLog
from pacific.node.health import HealthReporter
from pacific.node.mgmtport import MgmtPort
from pacific.node.podloop import PodLoop

FEATURES = [PodLoop, MgmtPort, EgressGateway, HostFirewall, EgressSnat, FlowLog,
            HealthReporter]
