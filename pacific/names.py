"""Every name, key, priority and default Pacific uses, defined once.

Code elsewhere imports these constants instead of writing string literals, so a
grep for a constant finds every user of a name.
"""

# --- API group and CRDs -------------------------------------------------------
GROUP = "pacific.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
SUBNET_PLURAL = "subnets"
IP_PLURAL = "ips"

# --- Pod / namespace / node annotations (the controller <-> node contract) ----
ANN_PREFIX = "pacific.io/"
# written by users
ANN_IP_ADDRESS = "pacific.io/ip_address"          # requested fixed IP
ANN_MAC_ADDRESS = "pacific.io/mac_address"        # requested fixed MAC
ANN_LOGICAL_SWITCH = "pacific.io/logical_switch"  # subnet choice (pod or namespace)
ANN_INGRESS_RATE = "pacific.io/ingress_rate"      # Mbit/s
ANN_EGRESS_RATE = "pacific.io/egress_rate"        # Mbit/s
ANN_MIRROR = "pacific.io/mirror"                  # "true": copy the pod's traffic to mirror0
# Kubernetes' own bandwidth annotations (quantities, bit/s), honoured too; the
# pacific.io/ ones win when both are set
ANN_K8S_INGRESS_BANDWIDTH = "kubernetes.io/ingress-bandwidth"
ANN_K8S_EGRESS_BANDWIDTH = "kubernetes.io/egress-bandwidth"
# written by the controller for the node daemon: ONE value, its record of the
# allocation (JSON, built and parsed only by pacific/contract.py).  It names the
# pod's UID and the port derived from the pod, so a copy on another pod is
# recognised and never plumbed.  The user's requests above stay separate keys.
ANN_ALLOCATION = "pacific.io/allocation"
ANN_ALLOCATION_ERROR = "pacific.io/allocation_error"
# the controller's decision on a pod's bandwidth (contract.QosRecord) and why a
# requested value was refused (the previous limit stays)
ANN_QOS = "pacific.io/qos"
ANN_QOS_ERROR = "pacific.io/qos_error"
# keys of the record before it was one value (read by nothing; the controller
# removes them where it finds them, so an old copy cannot confuse a reader)
ANN_LEGACY_RECORD = ("pacific.io/allocated", "pacific.io/cidr", "pacific.io/gateway",
                     "pacific.io/logical_switch_port")
# namespace label: the tenant a namespace belongs to ("global": reaches and is
# reached by every tenant); no label: the namespace is a tenant of its own
LABEL_TENANT = "pacific.io/tenant"
# node annotations (management port ovn0)
ANN_NODE_JOIN_IP = "pacific.io/join_ip"           # "100.64.0.2/16"
ANN_NODE_JOIN_MAC = "pacific.io/join_mac"
ANN_NODE_JOIN_GW = "pacific.io/join_gateway"
ANN_NODE_JOIN_IP6 = "pacific.io/join_ipv6"           # a dual-stack join network's IPv6 half
ANN_NODE_JOIN_GW6 = "pacific.io/join_gateway_ipv6"   # ... and its gateway
ANN_NODE_LSP = "pacific.io/node_logical_switch_port"
# the join address the node gives its connections into the service CIDR (not
# on ovn0: OVN may send them back out to the node, answers come through OVN)
ANN_NODE_SERVICE_SOURCE = "pacific.io/service_source"
ANN_NODE_SERVICE_SOURCE6 = "pacific.io/service_source_ipv6"   # its IPv6 twin

# --- OVN / OVS external_ids (ownership of every row Pacific creates) ----------
EXT_OWNER_KIND = "pacific.io/owner-kind"   # Pod, Node, Subnet, Cluster, ...
EXT_OWNER = "pacific.io/owner"             # namespace/name or name of the owner
EXT_CREATED_BY = "pacific.io/created-by"   # component that wrote the row
EXT_SUBNET = "pacific.io/subnet"
EXT_POLICIES = "pacific.io/policies"       # a NetworkPolicy group's policies in force (names)
EXT_RULE = "pacific.io/rule"               # which rule of its owner an ACL is (trace names it)
SET_SUFFIX_IP6 = "_6"      # an address set holds one family: its IPv6 twin is "<name>_6"
RULE_SUFFIX_IP6 = "/ip6"     # a rule's IPv6 twin: EXT_RULE "ingress/0" -> "ingress/0/ip6"
EXT_ALSO = "pacific.io/also"               # the other policies' rules one merged allow ACL
                                           # stands for: "ns/name:ingress/0,..."
# OVS Interface external_ids used by the node daemon
# LSP option: the only chassis that may bind the port (a stale OVS port of a
# force-deleted pod on its old node cannot claim it back: no thrashing)
LSP_OPT_REQUESTED_CHASSIS = "requested-chassis"

OVS_IFACE_ID = "iface-id"
OVS_IFACE_STATUS = "iface-status"
OVS_OVN_INSTALLED = "ovn-installed"
OVS_CONTAINER_ID = "pacific.io/container-id"
OVS_POD = "pacific.io/pod"                 # namespace/name
OVS_IFNAME = "pacific.io/ifname"
OVS_ATTACHED_MAC = "attached-mac"          # the pod end's MAC (OVS/OVN convention)
OVS_NETNS = "pacific.io/netns"             # CNI_NETNS path of the pod
OVS_IP_ADDRESS = "pacific.io/ip_address"   # pod address with prefix, "10.16.0.5/16"
OVS_GATEWAY = "pacific.io/gateway"
OVS_MORE_ADDRESSES = "pacific.io/more_addresses"  # dual-stack: "fd00:17::5/64 fd00:17::1"

OWNER_KIND_POD = "Pod"
OWNER_KIND_NODE = "Node"
OWNER_KIND_SUBNET = "Subnet"
OWNER_KIND_TENANT = "Tenant"
OWNER_KIND_POLICY = "NetworkPolicy"
OWNER_KIND_POLICY_GROUP = "NetworkPolicyGroup"    # the pods a podSelector selects, shared
OWNER_KIND_SERVICE = "Service"
LB_GROUP = "pacific_services"        # Load_Balancer_Group every switch holds: all Services
SERVICE_AFFINITY_DEFAULT = 10800     # seconds, Kubernetes' default ClientIP timeout
PG_ISOLATED = "pacific_isolated"     # port group: every pod of a non-global namespace
DEFAULT_GLOBAL_NAMESPACES = ("kube-system", "pacific-system")
OWNER_KIND_CLUSTER = "Cluster"

# --- Controller (pacific-controller) -------------------------------------------
CONTROLLER_NAME = "pacific-controller"            # Event source, created-by, lease name
CONTROLLER_LEASE_NAMESPACE = "pacific-system"   # where deploy/ grants the Lease (Role pacific-controller-leader)
SUBNET_FINALIZER = "pacific.io/subnet-protection"  # refuses delete while addresses are in use
OWNER_KIND_STATEFULSET = "StatefulSet"             # IP objects kept across pod re-creation
ADDRESS_QUARANTINE = 60.0     # s a released address goes to no other holder (ipam/quarantine.py)

# --- Logical topology names ----------------------------------------------------
CLUSTER_ROUTER = "pacific-cluster"
JOIN_SWITCH = "join"
DEFAULT_SUBNET = "ovn-default"
INTEGRATION_BRIDGE = "br-int"
MGMT_PORT = "ovn0"


# Logical port names carry a per-kind prefix ending in ":", a character no
# Kubernetes name contains, so ports of pods, nodes and router links can never
# take each other's name (OVN's Port_Binding names share one namespace across
# switch and router ports, so the two sides of a router link differ too).
PORT_PREFIX_POD = "pod:"
PORT_PREFIX_NODE = "node:"
PORT_PREFIX_ROUTER = "lrp:"          # router side of a router <-> switch link
PORT_PREFIX_ROUTER_LINK = "ls-lrp:"  # switch side of it


def router_port_name(switch: str) -> str:
    """Router side of the patch between the cluster router and a switch."""
    return f"{PORT_PREFIX_ROUTER}{switch}"


def switch_router_port_name(switch: str) -> str:
    """Switch side of the patch between the cluster router and a switch."""
    return f"{PORT_PREFIX_ROUTER_LINK}{switch}"


def service_lb_name(namespace: str, name: str, protocol: str) -> str:
    """OVN Load_Balancer of a Service's ports of one protocol (tcp, udp, sctp)."""
    return f"svc:{namespace}/{name}:{protocol}"


def pod_lsp_name(namespace: str, name: str) -> str:
    """Logical switch port of a pod: derived from the pod, never chosen by a user."""
    return f"{PORT_PREFIX_POD}{namespace}/{name}"


def node_lsp_name(node: str) -> str:
    return f"{PORT_PREFIX_NODE}{node}"


# --- Node-side port settings ---------------------------------------------------
MIRROR_PORT = "mirror0"              # per node: receives the copies of mirrored pods' traffic
MIRROR_NAME = "pacific-mirror"       # the OVS Mirror row on br-int
MIRROR_MODES = ("annotated", "all", "off")
QOS_MAX_MBPS = 32_000                # a tbf rate above ~34 Gbit/s does not fit its 32-bit field

# --- Defaults -----------------------------------------------------------------
DEFAULT_CIDR = "10.16.0.0/16"
SANDBOX_DEFAULT_CIDR6 = "fd00:16::/64"       # the default Subnet's IPv6 half (sandbox --dual-stack)
JOIN_CIDR = "100.64.0.0/16"
SANDBOX_JOIN_CIDR6 = "fd00:64::/64"          # the join network's IPv6 half (sandbox --dual-stack)
SERVICE_CIDR = "10.96.0.0/12"
SANDBOX_SERVICE_CIDR6 = "fd00:96::/108"      # the service CIDR's IPv6 half (sandbox --dual-stack)
CNI_SOCKET = "/run/pacific/cni.sock"
CNI_CONF_NAME = "10-pacific.conflist"
CNI_NETWORK_NAME = "pacific"
CNI_TYPE = "pacific"
CNI_PLUGIN_LIBDIR = "pacific.d"      # next to the plugin in the CNI bin dir: its module
CNI_PLUGIN_MODULE = "pacific_cni"    # (imported, so Python caches its bytecode)
CNI_PLUGIN_PY = "pacific-py"         # in CNI_PLUGIN_LIBDIR: the Python plugin's launcher,
                                     # which the `pacific` shim runs when it cannot
                                     # hand a call to pacific-node (pacific/cni/shim.c)

# --- Sandbox (single-machine cluster network, pacific.sandbox) ----------------
SANDBOX_DIR = "/run/pacific-sandbox"          # parent of <name>/ state dirs
SANDBOX_DIR_ENV = "PACIFIC_SANDBOX_DIR"       # overrides SANDBOX_DIR
# OVS/OVN built by hack/build-ovs-ovn.sh (a link to the pinned versions' prefix)
OVS_BUILD_CURRENT = "/var/cache/pacific/ovs/current"
SANDBOX_DEFAULT_NAME = "default"
SANDBOX_NETNS_PREFIX = "pac"                  # netns pac-<name>-central|node<i>|ext
SANDBOX_UNDERLAY_CIDR = "192.168.77.0/24"     # lives only inside the sandbox netns
SANDBOX_UNDERLAY_CIDR6 = "fd00:77::/64"        # ... and its IPv6 (sandbox --dual-stack)
SANDBOX_UNDERLAY_MTU = 1500
SANDBOX_UNDERLAY_BRIDGE = "br-ul"             # in pac-<name>-central: every node's underlay
SANDBOX_PODS_ENV = "PACIFIC_SANDBOX_PODS"     # how a new sandbox runs pods: kubelet | runner
SANDBOX_PODS_DEFAULT = "kubelet"
SANDBOX_EXTERNAL_REMOTE_CIDR = "198.51.100.1/24"  # "internet" address of pac-<name>-ext
SANDBOX_EXTERNAL_REMOTE_CIDR6 = "2001:db8:100::1/64"  # ... and its IPv6 (sandbox --dual-stack)
# the external IPs the sandbox's administrator grants Services (a documentation
# range routed to the nodes, and the top of the underlay below its router .254)
SANDBOX_EXTERNAL_IP_CIDRS = "203.0.113.0/24,192.168.77.192/27"
SANDBOX_EXTERNAL_IP_CIDR6 = "2001:db8:200::/64"     # ... and IPv6 ones, in a dual-stack sandbox
SANDBOX_EGRESS_IP_CIDRS = "192.168.77.0/24"      # EgressIP addresses: the underlay
SANDBOX_EGRESS_IP_CIDR6 = "fd00:77::/64"         # ... and its IPv6, in a dual-stack sandbox
POD_MTU_OVERHEAD = 100                        # pod MTU = underlay MTU - this (Geneve+OVN)
OVN_NB_PORT = 6641
OVN_SB_PORT = 6642
KUBE_API_PORT = 6443
CONTROLLER_METRICS_PORT = 9476   # /metrics /healthz /readyz of pacific-controller (pacific/metrics.py)
NODE_METRICS_PORT = 9477         # ... of pacific-node
CENTRAL_HEALTH_PORT = 9478       # /healthz /readyz of pacific-central (pacific/central)
VSWITCH_HEALTH_PORT = 9479       # ... of pacific-vswitch (pacific/vswitch)
UNDERLAY_BRIDGE = "br-phy"       # userspace datapath: the OVS bridge owning the node address
HOST_OVS_LABEL = "pacific.io/host-ovs"   # = "true": the node keeps its own Open vSwitch
CENTRAL_ROLE_LABEL = "pacific.io/role"   # = "central": a node that runs an OVN central member
CENTRAL_ROLE = "central"
# on each pacific-central pod, "true" while its member leads that database (Services select them)
CENTRAL_LEADER_LABELS = {"nb": "pacific.io/ovn-nb-leader", "sb": "pacific.io/ovn-sb-leader"}
SANDBOX_KUBECONFIG = "kubeconfig"                   # <sandbox dir>/kubeconfig: root netns, 127.0.0.1
SANDBOX_KUBECONFIG_UNDERLAY = "kubeconfig-underlay"  # pacific-node's ServiceAccount, central_ip:6443
SANDBOX_KUBECONFIG_CONTROLLER = "kubeconfig-controller"  # pacific-controller's ServiceAccount
SANDBOX_APISERVER_TAG = "kube-apiserver"            # Sandbox.spawn tag of the real API server
SANDBOX_CLUSTER_DNS_TAG = "cluster-dns"            # pacific.sandbox.k8s.clusterdns
SANDBOX_CLUSTER_DNS = ("kube-system", "kube-dns")  # its Service: clusterDNS of every kubelet
SANDBOX_FORWARD_TAG = "kube-forward"               # carries node netns requests to the API server
KUBE_BIN_ENV = "PACIFIC_KUBE_BIN"                  # overrides where the Kubernetes binaries are
PACIFIC_NAMESPACE = "pacific-system"               # deploy/: Pacific's own namespace
NODE_HEALTH_NAMESPACE = "pacific-health"           # only the node daemons' reports live here (deploy/)
NODE_HEALTH_LEASE_PREFIX = "pacific-node-"         # Lease pacific-node-<node>: the node daemon's report
ANN_HEALTH_READY = "pacific.io/ready"              # on that Lease: "true" or what is not ready
ANN_HEALTH_TUNNELS = "pacific.io/tunnels"          # on that Lease: {"peer chassis": "up"|"down"}


def sandbox_node_name(index: int) -> str:
    """Kubernetes node name (= OVN chassis name) of sandbox node `index` (1-based)."""
    return f"node{index}"


# --- ACL / policy priorities (OVN allows 0..32767) ----------------------------
PRIO_ACL_DEFAULT_ALLOW = 1000
PRIO_ACL_NODE_ALLOW = 2000
PRIO_ACL_ISOLATION_DROP = 3000     # above every NetworkPolicy ACL: a tier above them
PRIO_ACL_ISOLATION_ANSWER = 3001   # an audited tenant's ARP answers to another tenant (its record)
PRIO_ACL_ISOLATION_OWN_ANSWER = 3002   # ... to its own pods: allowed, as without audit
PRIO_ACL_NP_DENY = 1000            # a pod selected by a policy: what no rule allows is dropped
PRIO_ACL_NP_ALLOW = 1001           # a rule of any policy selecting the pod allows (they add up)
PRIO_ACL_ISOLATION_ALLOW = 1600
# on the join switch: a node's connections to a Service whose endpoint is outside
# OVN pass the node's own port twice; the second time without conntrack
PRIO_ACL_SERVICE_SOURCE = 32000
SERVICE_SOURCES_SET = "pacific_service_sources"   # every node's service source
SERVICE_SOURCES_SET6 = SERVICE_SOURCES_SET + "_6"  # ... their IPv6 twins
PRIO_POLICY_NODE_LOCAL = 31000
PRIO_POLICY_DISTRIBUTED_EGRESS = 29000
PRIO_POLICY_CENTRALIZED_EGRESS = 29500

# --- Centralized egress gateways (controller/gateway.py, node/egressgw.py) ----
EGRESS_TRANSIT_CIDR = "100.65.0.0/16"   # one /24 per centralized Subnet: router .1, host .2
EGRESS_TRANSIT_CIDR6 = "fd00:65::/48"   # an IPv6 EgressIP's gateway: the /64 of its index, ::1, ::2
# of its 256 /24s: a namespace's Services hold at most this many (one per address
# they leave by), and only while more than the reserve (administrators' Subnet
# gateways and EgressIPs only) stay free (controller/transit.py)
TRANSIT_NETWORKS_PER_NAMESPACE = 4
# external IPs one namespace's Services may hold (the oldest Services' first; issue 51:
# one tenant cannot take every address an administrator granted); 0: no bound
EXTERNAL_IPS_PER_NAMESPACE = 16
TRANSIT_NETWORKS_RESERVED = 64
EGRESS_ADDR_PROTO = 0x50                # IFA_PROTO of the IPv6 egress addresses a node holds
EGRESS_PHYSNET = "pacific-egress"       # the transit switches' localnet network_name
EGRESS_BRIDGE = "br-egress"             # on every node: ovn-bridge-mappings physnet:bridge
EGRESS_PORT = "pegress0"                # its internal port: where a gateway's host gets it
EGRESS_PORT_MAC = "0e:00:64:41:ff:fe"   # the same on every node: a failover finds it unchanged
EGRESS_FWMARK = 0x6581                  # replies of what came in on pegress0 go back there
EGRESS_ROUTE_TABLE = 6581
EGRESS_BFD = {"bfd-min-rx": "100", "bfd-min-tx": "100", "bfd-mult": "3"}   # ~300 ms detection
GATEWAY_PRIO_TOP = 100                  # HA_Chassis priority of gatewayNodes[0]; -1 per next
STATUS_EGRESS = "egressGateway"         # Subnet status key the controller writes
PRIO_POLICY_SNAT_EGRESS = 29700         # a Service's endpoints leave with its external IP
ANN_EGRESS_SNAT = "pacific.io/egress-snat"          # on a Service: "false" opts out
LABEL_EGRESS_GATEWAY = "pacific.io/egress-gateway"  # on a Node: "true" may hold external IPs
SNAT_GATEWAY_PREFIX = "svc:"            # egress_switch_name(SNAT_GATEWAY_PREFIX + "ns/name")
SNAT_ADDRESS_SET_PREFIX = "pacific_snat_"  # + hash of "ns/name": a Service's egress SNAT members
# --- EgressIP (pacific/egressip.py, controller/egress_ip.py, node/egresssnat.py) --
EGRESSIP_PLURAL = "egressips"           # cluster-scoped, administrators' only
PRIO_POLICY_EGRESS_IP = 29800           # above a Service's and a Subnet's gateway: the admin's choice
LABEL_EGRESS_ASSIGNABLE = "pacific.io/egress-assignable"   # on a Node (any value): may host them
EIP_GATEWAY_PREFIX = "eip:"             # egress_switch_name(EIP_GATEWAY_PREFIX + "<name>/<ip>")
OWNER_KIND_EGRESS_IP = "EgressIP"       # owner "<name>/<ip>" (its members: a SNAT address set)

# --- EgressFirewall (pacific/egressfirewall.py, controller/egress_firewall.py) ---
EGRESSFIREWALL_PLURAL = "egressfirewalls"   # namespaced, one per namespace:
EGRESS_FIREWALL_NAME = "default"            # ... named this
EFW_EXITS_GROUP = "pacific_exits"       # every port where traffic leaves the cluster: the join
                                        # switch's node ports and the gateways' localnet ports
EFW_SOURCE_SET_PREFIX = "pacific_efw_src_"  # + hash of the namespace: its pods
EFW_DNS_SET_PREFIX = "pacific_efw_dns_"     # + hash of a DNS name: its A records
EFW_CLUSTER_SET = "pacific_efw_cluster"     # destinations no firewall rule matches
EFW_RULE_IPV6_DEFAULT = "ipv6-default"  # a firewall naming no IPv6 CIDR denies IPv6 (its last ACL)
PRIO_ACL_EFW_TOP = 10000                # rule i of a firewall: PRIO_ACL_EFW_TOP - i (on the exits)
OWNER_KIND_EGRESS_FIREWALL = "EgressFirewall"

# --- ClusterNetworkPolicy (pacific/clusterpolicy.py, controller/cluster_policy.py) --
OWNER_KIND_CLUSTER_POLICY = "ClusterNetworkPolicy"   # its port group, address sets, ACLs
CNP_GROUP_PREFIX = "cnp_"               # + hash of the policy's name: its subject's ports

# --- Multicast (pacific/multicast.py, controller/multicast.py) ------------------
ANN_MULTICAST = "pacific.io/multicast"  # on a Namespace (administrators'): "true" enables it
PG_MCAST = "pacific_mcast"              # port group: every pod of a namespace that enabled it
PG_MCAST_OFF = "pacific_mcast_off"      # port group: every other pod
OWNER_KIND_MULTICAST = "Multicast"      # owner of both groups and their ACLs
PRIO_ACL_MCAST_GATE = 2900              # drops: above NetworkPolicy, below tenant isolation
PRIO_ACL_MCAST_IGMP = 2901              # IGMP of enabled pods: joins and queries, whatever NP says
MCAST_QUERY_INTERVAL = 30               # s between the Subnet querier's IGMP general queries


# --- Audit and dry-run of policies (pacific/audit.py, controller/audit.py,
# node/flowlog.py, tools/flows.py) ---------------------------------------------
ANN_AUDIT = "pacific.io/audit"            # on a policy: "allow", "deny", "allow,deny" (or
                                          # "all"), "none"; on a Namespace (administrators'):
                                          # its tenant isolation's drops ("deny")
ANN_AUDIT_SEVERITY = "pacific.io/audit-severity"   # alert|warning|notice|info (default)|debug
ANN_ENFORCEMENT = "pacific.io/enforcement"          # on a policy: "enforce" (default) | "dry-run"
METER_AUDIT = "pacific-audit"             # prefix of the OVN meters (not fair: one bucket
                                          # each) of every log, one per audited scope
                                          # (pacific.audit.meter_name, decision 0050)
AUDIT_RATE = 20                           # log records/s per scope before its meter drops them
AUDIT_BURST = 40
AUDIT_NODE_CAP = 200                      # log records/s of all scopes on one node, at most
OWNER_KIND_AUDIT = "Audit"                # the audit meters
ANN_ENFORCED = "pacific.io/enforced"      # on a NetworkPolicy (written by the controller):
                                          # "True" once every chassis applied it, "False",
                                          # "Pending" or "Unknown"
ANN_ENFORCED_MESSAGE = "pacific.io/enforced-message"
OWNER_KIND_DRY_RUN = "DryRun"             # the observing ACLs of dry-run policies, on each
                                          # Subnet switch (after load balancing)
OVN_CONTROLLER_LOG = "/var/log/ovn/ovn-controller.log"   # where ovn-controller writes acl_log
FLOW_LOG = "/var/log/pacific/flows.jsonl"                # pacific-node's structured records
FLOW_LOG_MAX_BYTES = 20 * 1024 * 1024                    # then rotated once (.1)
OVN_CONTROLLER_LOG_MAX_BYTES = 50 * 1024 * 1024          # pacific-node rotates it once (.1)

def egress_switch_name(subnet: str) -> str:
    """The transit switch of a centralized Subnet (its router port is
    router_port_name(this), its localnet port egress_localnet_name)."""
    return f"egw:{subnet}"


def egress_localnet_name(subnet: str) -> str:
    return f"ln:egw:{subnet}"


# Host firewall guards (pacific/node/firewall.py, issue 22): what pods must never reach
OVN_NB_RAFT_PORT = 6643   # a clustered NB's RAFT port (ovsdb-tool create-cluster ...:6643)
OVN_SB_RAFT_PORT = 6644   # ... SB's
# TCP ports of OVN central dropped from pod and join sources, besides the SB remote's own
OVN_CENTRAL_PORTS = (OVN_NB_PORT, OVN_SB_PORT, OVN_NB_RAFT_PORT, OVN_SB_RAFT_PORT)
# interfaces on which a packet with a pod or join source address is one of OVN's own
# paths: the management port, a centralized gateway's transit port and its bridge
# (node/egressgw.py, node/egresssnat.py), and the host's own loopback
POD_SOURCE_INTERFACES = ("lo", MGMT_PORT, EGRESS_PORT, EGRESS_BRIDGE)
# the underlay's encapsulation and liveness ports (issue 51, decision 0051): a chassis
# takes what arrives there from a peer's address as that peer's own, so no pod or join
# source may send to them, to any address: Geneve, VXLAN, BFD (single hop, echo,
# multihop) over UDP, STT over TCP
UNDERLAY_UDP_PORTS = (6081, 4789, 3784, 3785, 4784)
UNDERLAY_TCP_PORTS = (7471,)
# the OVSDB TLS files in deploy/: the controller's from Secret pacific-ovn-tls, each
# node's own in this host directory (the same path inside and out: ovn-controller reads it)
OVN_TLS_DIR = "/etc/pacific/ovn-tls"
OVN_TLS_SECRET = "pacific-ovn-tls"
# deploy/config.yaml's ConfigMap in PACIFIC_NAMESPACE (the daemons' settings; the
# day-two tools read nb-remote and sb-remote from it)
CONFIG_MAP = "pacific-config"


def family_set_name(name: str, family: int) -> str:
    """The address set of `name`'s addresses of one family: `name` itself for
    IPv4, with SET_SUFFIX_IP6 for IPv6 (OVN compares a set with one family's
    field, and a set of both fails to parse: the flow using it is dropped)."""
    return name if family == 4 else name + SET_SUFFIX_IP6
