"""The informers features declare, each defined once (resource + cache transform).

Features name them in `Feature.informers`; two features naming the same informer
share one cache, so its transform must keep what both read.
"""
from __future__ import annotations

from pacific.controller import model
from pacific.controller.feature import InformerSpec
from pacific.kube import resources as r

# pods and IP objects number in the 100,000s: the cache keeps only what is read
PODS = InformerSpec(r.PODS, model.slim_pod)
IPS = InformerSpec(r.IPS, model.slim_ip)
NAMESPACES = InformerSpec(r.NAMESPACES)
NODES = InformerSpec(r.NODES)
SUBNETS = InformerSpec(r.SUBNETS)
EGRESSIPS = InformerSpec(r.EGRESSIPS)
EGRESSFIREWALLS = InformerSpec(r.EGRESSFIREWALLS)
STATEFULSETS = InformerSpec(r.STATEFULSETS)
NETWORK_POLICIES = InformerSpec(r.NETWORKPOLICIES)
CLUSTER_NETWORK_POLICIES = InformerSpec(r.CLUSTERNETWORKPOLICIES)
SERVICES = InformerSpec(r.SERVICES)
