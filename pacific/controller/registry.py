"""The controller's features, in the order they prepare and start.

Adding a feature is one module (see feature.py) and one line here.  Order
matters where one feature's state is another's input: Subnets make the IPAM
pools that node and pod addresses are restored into.
"""
from __future__ import annotations

from pacific.controller.audit import AuditFeature
from pacific.controller.cluster_policy import ClusterPolicyFeature
from pacific.controller.egress import EgressFeature
from pacific.controller.egress_firewall import EgressFirewallFeature
from pacific.controller.egress_ip import EgressIPFeature
from pacific.controller.egress_snat import EgressSnatFeature
from pacific.controller.gateway import GatewayFeature
from pacific.controller.multicast import MulticastFeature
from pacific.controller.node_join import NodeFeature
from pacific.controller.pod import PodFeature
from pacific.controller.policy import PolicyFeature
from pacific.controller.qos import QosFeature
from pacific.controller.service import ServiceFeature
from pacific.controller.subnet import SubnetFeature
from pacific.controller.tenant import TenantFeature

FEATURES = [SubnetFeature, AuditFeature, NodeFeature, TenantFeature, PolicyFeature, PodFeature, QosFeature,
            ServiceFeature, EgressFeature, GatewayFeature, EgressSnatFeature,
            EgressIPFeature, EgressFirewallFeature, MulticastFeature, ClusterPolicyFeature]
