"""Pacific: a Kubernetes network plugin on OVN / Open vSwitch."""

__version__ = "0.1.0"
