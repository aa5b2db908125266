"""The node's host firewall: Pacific's own nftables table `inet pacific`.

    fw = HostFirewall(ctx)     # a node feature (feature.py): its informers, the flags
    fw.start()                 # converges now, on every kick, and every REPAIR seconds

What it holds (nftables' JSON interface, `nft -j`, one atomic transaction per
change):

    set pod_cidrs      every Subnet's CIDR (the controller's status.cidrBlock)
    set nat_cidrs      the CIDRs of Subnets with spec.natOutgoing: true
    set cluster_cidrs  pod CIDRs + the join network + the service CIDR
    set service_cidrs  the service CIDR
    set internal_cidrs pod CIDRs + the join network: the sources pods and ovn0 have
    set ovn_central    OVN central's addresses (from --ovn-remote), set ovn_ports its
                       TCP ports (the remote's, NB 6641, SB 6642, RAFT 6643/6644)
    set node_addrs     every Node's IPv4 addresses (node_addrs6: IPv6 ones); set
                       host_ports the host daemons' TCP
                       ports (pacific-node's metrics port, pacific-controller's)
    chain guard-underlay (filter, prerouting, before conntrack)  a packet from
                       @internal_cidrs that did not come in on one of OVN's own paths
                       (ovn0, pegress0, br-egress, lo): drop (spoofed from the underlay)
    chain guard-input  (filter, input, before `input`)  from @internal_cidrs to
                       @ovn_central:@ovn_ports, or to @host_ports: drop
    chain guard-forward (filter, forward, before `forward`)  from @internal_cidrs to
                       @ovn_central:@ovn_ports, or to @node_addrs:@host_ports: drop
                       (both guards also: from @internal_cidrs to the tunnel and BFD
                       ports, names.UNDERLAY_*_PORTS, of any address: drop, decision 0051)
    chain egress-mark  (filter, prerouting)  what a centralized gateway receives on
                       pegress0 is marked, so its replies go back there
                       (pacific.node.egressgw)
    chain snat         (nat, postrouting, before the masquerade)  a rule per Service
                       whose endpoints leave with its external IP (node.egresssnat)
    chain services     (regular; jumped to from services-in, nat prerouting, and
                       services-out, nat output, not to 127/8)  a rule per external
                       IP and node port a Service was granted (pacific.node.frontends),
                       rewritten whole when what it should hold changes
    chain service-source (nat, postrouting, before the masquerade)  this node's
                       connections into the service CIDR leave ovn0 with its service
                       source (contract.NodeRecord), masqueraded when OVN sends them
                       back out (source_rules)
    chain postrouting  (nat)  ip saddr @nat_cidrs ip daddr != @cluster_cidrs masquerade;
                       ip saddr @internal_cidrs ip daddr @node_addrs oifname != ovn0
                       masquerade (a pod reaching another node's address arrives as
                       this node: that node drops pod sources from the underlay);
                       oifname ovn0 ct status dnat ip daddr @service_cidrs masquerade
                       (a frontend sent to a cluster IP answers through this node)
    chain forward      (filter, policy accept)  from a pod CIDR in conntrack state
                       invalid: drop; from or to a pod CIDR: accept
    chain input        (filter, policy accept)  Geneve (udp 6081): accept;
                       from ovn0: accept

A drop in a guard chain is final whatever the later chains accept: pods reach
neither OVN's databases (whether they speak TCP or TLS) nor the daemons' HTTP
endpoints (whatever address those bind), through this node or any other, nor
any chassis' Geneve port (a forged tunnel packet, masqueraded as this node,
would be decapsulated as this node's own before any firewall sees it).

Pod <-> pod, pod <-> Service and pod <-> node traffic never leaves by the
masquerade rule (its destination is in @cluster_cidrs).  A change of Subnets
rewrites only the sets' elements; a table another program flushed or deleted
is rebuilt at the next repair (every REPAIR seconds): each rule carries a
comment, and the table is rebuilt when one is missing.  `remove()` deletes
the table (the node leaves the cluster).
"""
from __future__ import annotations

import ipaddress
import json
import logging
import socket
import subprocess

from pacific import names, remotes
from pacific.contract import ContractError, NodeRecord, subnet_cidrs_in_effect
from pacific.node import frontends
from pacific.node.feature import NodeFeature, service_cidr

log = logging.getLogger(__name__)
TABLE = "pacific"
FAMILY = "inet"
REPAIR = 5.0
GENEVE_PORT = names.UNDERLAY_UDP_PORTS[0]
_T = {"family": FAMILY, "table": TABLE}          # how sets, chains, rules name their table
_TABLE = {"family": FAMILY, "name": TABLE}      # the table object itself


def _address(protocol: str, field: str):
    """A matcher of an address field: _address("ip6", "saddr")(op, right)."""
    def match(op, right):
        return {"match": {"op": op, "left": {"payload": {"protocol": protocol, "field": field}},
                          "right": right}}
    return match


_saddr, _daddr = _address("ip", "saddr"), _address("ip", "daddr")
_saddr6, _daddr6 = _address("ip6", "saddr"), _address("ip6", "daddr")


def _dport(protocol: str):
    def match(right):
        return {"match": {"op": "==", "left": {"payload": {"protocol": protocol,
                                                           "field": "dport"}},
                          "right": right}}
    return match


_tcp_dport, _udp_dport = _dport("tcp"), _dport("udp")
# the underlay's tunnel and BFD ports (names.UNDERLAY_*_PORTS), which no pod or
# join source reaches at any address (decision 0051)
_UNDERLAY_PORTS = ((_udp_dport, {"set": list(names.UNDERLAY_UDP_PORTS)}),
                   (_tcp_dport, {"set": list(names.UNDERLAY_TCP_PORTS)}))


def _underlay_guards(saddr, internal: str, tail: str = "") -> list[tuple[str, str, list]]:
    """The guard rules that keep pod and join sources (set `internal`) from the
    tunnel and BFD ports of every address, through this node (forward: another
    node, whatever the masquerade makes of the source) and into it (input).  A
    chassis decapsulates what arrives at its Geneve port from a peer's address
    inside Open vSwitch, before any firewall of its own: only the sending node
    can stop a pod's forged tunnel packet."""
    return [(chain, f"pacific-underlay-{proto}{where}{tail}",
             [saddr("==", internal), *local, dport(ports), {"drop": None}])
            for chain, where, local in (("guard-input", "-in", [_NOT_LOCAL]),
                                        ("guard-forward", "-fwd", []))
            for proto, (dport, ports) in zip(("udp", "tcp"), _UNDERLAY_PORTS)]


def _iifname(op, right):
    return {"match": {"op": op, "left": {"meta": {"key": "iifname"}}, "right": right}}


def _oifname(op, right):
    return {"match": {"op": op, "left": {"meta": {"key": "oifname"}}, "right": right}}


CHAINS = {
    "guard-underlay": {"type": "filter", "hook": "prerouting", "prio": -300},
    "guard-input": {"type": "filter", "hook": "input", "prio": -10},
    "guard-forward": {"type": "filter", "hook": "forward", "prio": -10},
    "egress-mark": {"type": "filter", "hook": "prerouting", "prio": -150},
    # Service frontends (SERVICES, a regular chain) for traffic arriving and for
    # the host's own connections (a node port on its own address), as kube-proxy
    "services": {},
    "services-in": {"type": "nat", "hook": "prerouting", "prio": -100},
    "services-out": {"type": "nat", "hook": "output", "prio": -100},
    "snat": {"type": "nat", "hook": "postrouting", "prio": 90},
    "service-source": {"type": "nat", "hook": "postrouting", "prio": 95},
    "postrouting": {"type": "nat", "hook": "postrouting", "prio": 100},
    "forward": {"type": "filter", "hook": "forward", "prio": 0},
    "input": {"type": "filter", "hook": "input", "prio": 0},
}
_CT_MARK = {"ct": {"key": "mark"}}
_NOT_LOCAL = _iifname("!=", "lo")
RULES = [  # (chain, comment, expressions)
    # issue 22: pod and join addresses enter the host only through OVN's own paths
    ("guard-underlay", "pacific-underlay-spoof",
     [_saddr("==", "@internal_cidrs"),
      _iifname("!=", {"set": list(names.POD_SOURCE_INTERFACES)}), {"drop": None}]),
    # ... and never reach OVN's databases or the host daemons' HTTP endpoints
    ("guard-input", "pacific-ovn-central-in",
     [_saddr("==", "@internal_cidrs"), _NOT_LOCAL, _daddr("==", "@ovn_central"),
      _tcp_dport("@ovn_ports"), {"drop": None}]),
    ("guard-input", "pacific-host-ports-in",
     [_saddr("==", "@internal_cidrs"), _NOT_LOCAL, _tcp_dport("@host_ports"), {"drop": None}]),
    ("guard-forward", "pacific-ovn-central-fwd",
     [_saddr("==", "@internal_cidrs"), _daddr("==", "@ovn_central"), _tcp_dport("@ovn_ports"),
      {"drop": None}]),
    ("guard-forward", "pacific-host-ports-fwd",
     [_saddr("==", "@internal_cidrs"), _daddr("==", "@node_addrs"), _tcp_dport("@host_ports"),
      {"drop": None}]),
    # issue 51: ... nor the underlay's tunnel and BFD ports, anywhere
    *_underlay_guards(_saddr, "@internal_cidrs"),
    # a centralized gateway's connections (in on pegress0): their replies are
    # marked, and an ip rule routes them back to pegress0 (node/egressgw.py)
    ("egress-mark", "pacific-gateway-in",
     [{"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": names.EGRESS_PORT}},
      {"mangle": {"key": _CT_MARK, "value": names.EGRESS_FWMARK}}]),
    ("egress-mark", "pacific-gateway-reply",
     [{"match": {"op": "==", "left": {"ct": {"key": "direction"}}, "right": "reply"}},
      {"match": {"op": "==", "left": _CT_MARK, "right": names.EGRESS_FWMARK}},
      {"mangle": {"key": {"meta": {"key": "mark"}}, "value": names.EGRESS_FWMARK}}]),
    ("services-in", "pacific-services-in", [{"jump": {"target": "services"}}]),
    # not loopback: a local client of 127.0.0.1:<port> is no Service's
    ("services-out", "pacific-services-out",
     [_daddr("!=", {"prefix": {"addr": "127.0.0.0", "len": 8}}), {"jump": {"target": "services"}}]),
    ("postrouting", "pacific-masquerade",
     [_saddr("==", "@nat_cidrs"), _daddr("!=", "@cluster_cidrs"), {"masquerade": None}]),
    ("postrouting", "pacific-service-masquerade",
     [_oifname("==", names.MGMT_PORT),
      {"match": {"op": "in", "left": {"ct": {"key": "status"}}, "right": "dnat"}},
      _daddr("==", "@service_cidrs"), {"masquerade": None}]),
    ("postrouting", "pacific-to-nodes-masquerade",
     [_saddr("==", "@internal_cidrs"), _daddr("==", "@node_addrs"),
      _oifname("!=", names.MGMT_PORT), {"masquerade": None}]),
    ("forward", "pacific-invalid-drop",
     [_saddr("==", "@pod_cidrs"),
      {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "invalid"}},
      {"drop": None}]),
    ("forward", "pacific-from-pods", [_saddr("==", "@pod_cidrs"), {"accept": None}]),
    ("forward", "pacific-to-pods", [_daddr("==", "@pod_cidrs"), {"accept": None}]),
    ("input", "pacific-geneve",
     [{"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}},
                 "right": GENEVE_PORT}}, {"accept": None}]),
    ("input", "pacific-from-ovn0",
     [{"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": names.MGMT_PORT}},
      {"accept": None}]),
    # IPv6 (a dual-stack cluster: ovn0 has IPv6, docs/dual-stack.md): the same
    # guards for the pods' and the join network's IPv6 sources.  OVN central's
    # and the nodes' IPv6 addresses are not known here, so the guarded ports
    # are dropped towards any address
    ("guard-underlay", "pacific-underlay-spoof-6",
     [_saddr6("==", "@internal_cidrs6"),
      _iifname("!=", {"set": list(names.POD_SOURCE_INTERFACES)}), {"drop": None}]),
    ("guard-input", "pacific-ovn-central-in-6",
     [_saddr6("==", "@internal_cidrs6"), _NOT_LOCAL, _tcp_dport("@ovn_ports"), {"drop": None}]),
    ("guard-input", "pacific-host-ports-in-6",
     [_saddr6("==", "@internal_cidrs6"), _NOT_LOCAL, _tcp_dport("@host_ports"), {"drop": None}]),
    ("guard-forward", "pacific-ovn-central-fwd-6",
     [_saddr6("==", "@internal_cidrs6"), _tcp_dport("@ovn_ports"), {"drop": None}]),
    ("guard-forward", "pacific-host-ports-fwd-6",
     [_saddr6("==", "@internal_cidrs6"), _tcp_dport("@host_ports"), {"drop": None}]),
    *_underlay_guards(_saddr6, "@internal_cidrs6", "-6"),
    ("postrouting", "pacific-masquerade-6",
     [_saddr6("==", "@nat_cidrs6"), _daddr6("!=", "@cluster_cidrs6"), {"masquerade": None}]),
    ("postrouting", "pacific-to-nodes-masquerade-6",
     [_saddr6("==", "@internal_cidrs6"), _daddr6("==", "@node_addrs6"),
      _oifname("!=", names.MGMT_PORT), {"masquerade": None}]),
    ("postrouting", "pacific-service-masquerade-6",
     [_oifname("==", names.MGMT_PORT),
      {"match": {"op": "in", "left": {"ct": {"key": "status"}}, "right": "dnat"}},
      _daddr6("==", "@service_cidrs6"), {"masquerade": None}]),
    ("forward", "pacific-invalid-drop-6",
     [_saddr6("==", "@pod_cidrs6"),
      {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "invalid"}},
      {"drop": None}]),
    ("forward", "pacific-from-pods-6", [_saddr6("==", "@pod_cidrs6"), {"accept": None}]),
    ("forward", "pacific-to-pods-6", [_daddr6("==", "@pod_cidrs6"), {"accept": None}]),
]
SETS6 = ("pod_cidrs6", "nat_cidrs6", "cluster_cidrs6", "service_cidrs6", "internal_cidrs6",
         "node_addrs6")
SETS = ("pod_cidrs", "nat_cidrs", "cluster_cidrs", "service_cidrs", "internal_cidrs",
        "ovn_central", "node_addrs", "ovn_ports", "host_ports", *SETS6)
PORT_SETS = ("ovn_ports", "host_ports")     # inet_service; SETS6 ipv6 intervals, the rest ipv4
SERVICES = "services"   # the chain of Service frontends (pacific.node.frontends)
SNAT = "snat"           # the chain of egress SNAT to Services' external IPs (node.egresssnat)
SERVICE_SOURCE = "service-source"   # this node's connections to Services (source_rules)


def source_rules(source: str, source6: str = "") -> list[tuple[str, list]]:
    """The node's connections into the service CIDR through ovn0 leave with its
    service source (contract.NodeRecord), an address not on ovn0: when OVN sends
    such a connection back out to a node (an endpoint outside OVN: a host-network
    pod, the API server), the node forwards it, masqueraded, and the answer comes
    back to that address, through OVN, which undoes its balancing.  Without a
    source (an older controller) the postrouting chain masquerades as before.
    `source` is the IPv4 one, `source6` the IPv6 one (a dual-stack or an
    IPv6-only join network), for the service CIDR of its family."""
    return [rule for family, saddr, daddr, addr, tail in (
        ("ip", _saddr, _daddr, source, ""), ("ip6", _saddr6, _daddr6, source6, "-6"))
        if addr for rule in (
            (f"pacific-service-source{tail} {addr}",
             [_oifname("==", names.MGMT_PORT), daddr("==", "@service_cidrs" + tail[1:]),
              {"snat": {"family": family, "addr": addr}}]),
            (f"pacific-service-source-out{tail} {addr}",
             [saddr("==", addr), _oifname("!=", names.MGMT_PORT), {"masquerade": None}]))]


class FirewallError(Exception):
    pass


def nft(commands: list[dict] | None = None, list_table: bool = False) -> dict:
    if list_table:
        cp = subprocess.run(["nft", "-j", "list", "table", FAMILY, TABLE], capture_output=True,
                            text=True, timeout=30)
        if cp.returncode != 0:
            return {}
        return json.loads(cp.stdout)
    cp = subprocess.run(["nft", "-j", "-f", "-"], input=json.dumps({"nftables": commands}),
                        capture_output=True, text=True, timeout=30)
    if cp.returncode != 0:
        raise FirewallError(f"nft refused the change: {cp.stderr.strip()}")
    return {}


def _elements(cidrs, ports: bool = False) -> list:
    if ports:
        return sorted(int(c) for c in cidrs)
    out = []
    for c in sorted(cidrs, key=lambda c: ipaddress.ip_network(c)):
        n = ipaddress.ip_network(c)
        out.append({"prefix": {"addr": str(n.network_address), "len": n.prefixlen}})
    return out


def _set_commands(wanted: dict[str, set[str]]) -> list[dict]:
    cmds = []
    for name in SETS:
        cmds.append({"flush": {"set": {**_T, "name": name}}})
        if wanted[name]:
            cmds.append({"add": {"element": {**_T, "name": name,
                                             "elem": _elements(wanted[name],
                                                               name in PORT_SETS)}}})
    return cmds


def _chain_commands(chain: str, rules: list[tuple[str, list]]) -> list[dict]:
    """Rewrite a dynamic chain (services, snat) whole: flush, then its rules."""
    cmds: list[dict] = [{"flush": {"chain": {**_T, "name": chain}}}]
    for comment, expr in rules:
        cmds.append({"add": {"rule": {**_T, "chain": chain, "comment": comment, "expr": expr}}})
    return cmds


def full_commands(wanted: dict[str, set[str]], dynamic: dict | None = None) -> list[dict]:
    # the table deleted and made anew, in one transaction: a chain whose kind
    # changed (a regular chain that was a base chain) cannot be altered in place
    cmds: list[dict] = [{"add": {"table": dict(_TABLE)}}, {"delete": {"table": dict(_TABLE)}},
                        {"add": {"table": dict(_TABLE)}}]
    for name in SETS:
        if name in PORT_SETS:
            cmds.append({"add": {"set": {**_T, "name": name, "type": "inet_service"}}})
        else:
            cmds.append({"add": {"set": {**_T, "name": name, "type": "ipv6_addr" if name in SETS6
                                         else "ipv4_addr", "flags": ["interval"]}}})
    for chain, hook in CHAINS.items():
        base = {"policy": "accept"} if hook else {}     # a regular chain has neither
        cmds.append({"add": {"chain": {**_T, "name": chain, **hook, **base}}})
    for chain, comment, expr in RULES:
        cmds.append({"add": {"rule": {**_T, "chain": chain, "comment": comment, "expr": expr}}})
    cmds += _set_commands(wanted)
    for chain, rules in (dynamic or {}).items():
        if rules:
            cmds += _chain_commands(chain, rules)[1:]
    return cmds


def read_state(listing: dict) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(chain -> rule comments present, set name -> CIDRs) of the table listed."""
    comments: dict[str, set[str]] = {}
    sets = {}
    for item in listing.get("nftables", []):
        if "chain" in item:
            comments.setdefault(item["chain"]["name"], set())
        if "rule" in item:
            rule = item["rule"]
            comments.setdefault(rule["chain"], set()).add(rule.get("comment") or "")
        if "set" in item:
            s = item["set"]
            elems = set()
            for e in s.get("elem", []):
                p = e.get("prefix") if isinstance(e, dict) else None
                if p:
                    elems.add(f"{p['addr']}/{p['len']}")
                elif isinstance(e, int):
                    elems.add(str(e))               # a port
                elif isinstance(e, str):
                    elems.add(str(ipaddress.ip_network(e)))     # one address: /32, /128
            sets[s["name"]] = elems
    return comments, sets


def _static_intact(comments: dict[str, set[str]]) -> bool:
    if set(CHAINS) - set(comments):
        return False
    want: dict[str, set[str]] = {}
    for chain, comment, _ in RULES:
        want.setdefault(chain, set()).add(comment)
    return all(comments.get(chain, set()) == c for chain, c in want.items())


def _normal(name: str, values) -> set[str]:
    if name in PORT_SETS:
        return {str(int(v)) for v in values}
    return {str(ipaddress.ip_network(v)) for v in values}


def ovn_central(remote: str | None, resolve=socket.getaddrinfo) -> tuple[set[str], set[int]]:
    """(IPv4 addresses, TCP ports) of OVN central named by an OVSDB remote
    ("tcp:A:6642", "ssl:A:6642,ssl:B:6642,...", "ssl:[v6]:6642"; a unix: or
    punix: member names no address).  The ports are the remote's plus NB's,
    SB's and both RAFT ports (names.OVN_CENTRAL_PORTS): NB and the RAFT
    listeners run on the SB members' hosts.  A host name is resolved once
    (IPv4 only: the table matches IPv4); one that does not resolve is logged
    and left out."""
    addrs: set[str] = set()
    ports: set[int] = set(names.OVN_CENTRAL_PORTS)
    for host, port in remotes.members(remote):
        if port is not None:
            ports.add(port)
        try:
            ip = ipaddress.ip_address(host)
            if ip.version == 4:
                addrs.add(str(ip))
            continue
        except ValueError:
            pass
        try:
            infos = resolve(host, None, socket.AF_INET, socket.SOCK_STREAM)
        except OSError as e:
            log.warning("host firewall: OVN central %r does not resolve (%s): pods are not "
                        "kept from it", host, e)
            continue
        addrs.update(i[4][0] for i in infos)
    return addrs, ports


def host_ports(args) -> list[int]:
    """The TCP ports the host firewall keeps pods from: pacific-node's
    --metrics-address's and --host-only-ports (ValueError naming a bad one)."""
    from pacific.metrics import parse_address
    out = []
    addr = parse_address(args.metrics_address)
    if addr is not None and addr[1]:
        out.append(addr[1])
    for p in (args.host_only_ports or "").split(","):
        p = p.strip()
        if not p:
            continue
        if not p.isdigit() or not 0 < int(p) <= 65535:
            raise ValueError(f"--host-only-ports: {p!r} is not a TCP port")
        out.append(int(p))
    return out


class HostFirewall(NodeFeature):
    name, repair = "host-firewall", REPAIR
    expected = (FirewallError, OSError, subprocess.SubprocessError, ValueError)
    # Subnets, this Node (the join network) and the Service frontends' caches;
    # this node's pods change no set (their endpoints change EndpointSlices), only
    # who holds an address here (the `Local` backends: _on_pod)
    informers = dict(frontends.INFORMERS)
    wakes_on = ("node", "subnets", "services", "endpointslices", "nodes")
    # rules() of the snat chain (it kicks this feature when they change); None
    # where egress SNAT is off
    uses = {"snat": "egress-snat"}

    @classmethod
    def disabled(cls, args) -> str | None:
        return None if args.host_firewall else "--no-host-firewall"

    def __init__(self, ctx):
        super().__init__(ctx)
        a = ctx.args
        self.subnets, self.nodes, self.node_name = (self.informer("subnets"),
                                                    self.informer("node"), ctx.node_name)
        self.service_cidr, self.service_cidr6 = service_cidr(a, 4), service_cidr(a, 6)
        # what pods must not reach: OVN central (from the SB remote) and the host
        # daemons' ports; node_ips() -> every Node's addresses (frontends.node_ips)
        self.central, self.central_ports = ovn_central(a.ovn_remote)
        self.host_ports = set(host_ports(a))
        self.frontends = frontends.view(self)
        self.node_ips = self.frontends.node_ips

    def handlers(self):
        return {**super().handlers(), "pods": self._on_pod}

    def _on_pod(self, old, new) -> None:
        """A pod of this node whose record comes, goes or changes: an address
        changed holder here, and a `Local` frontend's backends are decided
        again at once, not at the next repair (issue 51)."""
        if frontends.held_addresses(old) != frontends.held_addresses(new):
            self.kick()

    def join_cidr_of(self, family: int) -> str | None:
        """The join network of IP `family`, from the controller's record on
        this Node (None before it, or without that family)."""
        return next((c for c in frontends.join_networks(self.nodes.get(self.node_name))
                     if ipaddress.ip_network(c).version == family), None)

    @staticmethod
    def _holds_infrastructure(cidr: str, infra: set[str]) -> bool:
        """A Subnet containing a node's or OVN central's address (the controller
        refuses such a Subnet; an older one may still show it applied): left
        out of the pod sets, or the guards would drop the underlay itself, the
        API server's answers included, and the node could not learn of the fix."""
        net = ipaddress.ip_network(cidr)
        for ip in infra:
            try:
                if ipaddress.ip_address(ip) in net:
                    log.warning("Subnet %s contains the infrastructure address %s: not "
                                "treated as a pod network here", cidr, ip)
                    return True
            except ValueError:
                continue
        return False

    def wanted(self) -> dict[str, set[str]]:
        node_ips = set(self.node_ips())
        infra = node_ips | set(self.central)
        pods, nat, pods6, nat6 = set(), set(), set(), set()
        for s in self.subnets.list():
            for cidr in subnet_cidrs_in_effect(s):      # what the controller applied
                if self._holds_infrastructure(cidr, infra):
                    continue         # never: the underlay would count as pod traffic
                six = ipaddress.ip_network(cidr).version == 6
                (pods6 if six else pods).add(cidr)
                if (s.get("spec") or {}).get("natOutgoing") is True:
                    (nat6 if six else nat).add(cidr)
        join, join6 = self.join_cidr_of(4), self.join_cidr_of(6)
        cluster6 = pods6 | {c for c in (join6, self.service_cidr6) if c}
        cluster = set(pods) | {c for c in (join, self.service_cidr) if c}
        nodes, nodes6 = set(), set()
        for ip in node_ips:
            try:
                if ipaddress.ip_address(ip).version == 4:
                    nodes.add(f"{ip}/32")
                else:
                    nodes6.add(f"{ip}/128")
            except ValueError:
                continue
        return {"pod_cidrs": pods, "nat_cidrs": nat, "cluster_cidrs": cluster,
                "service_cidrs": {self.service_cidr} if self.service_cidr else set(),
                "internal_cidrs": set(pods) | ({join} if join else set()),
                "ovn_central": {f"{a}/32" for a in self.central}, "node_addrs": nodes,
                "ovn_ports": {str(p) for p in self.central_ports},
                "host_ports": {str(p) for p in self.host_ports},
                "pod_cidrs6": pods6, "nat_cidrs6": nat6, "cluster_cidrs6": cluster6,
                "service_cidrs6": {self.service_cidr6} if self.service_cidr6 else set(),
                "internal_cidrs6": pods6 | ({join6} if join6 else set()),
                "node_addrs6": nodes6}

    def dynamic(self) -> dict[str, list | None]:
        """chain -> its rules; None where the provider does not know yet (the
        caches are not listed): that chain keeps what it holds, so a restarted
        pacific-node cuts no external traffic."""
        out: dict[str, list | None] = {SERVICES: self.frontends.rules()}
        try:
            rec = NodeRecord.of(self.nodes.get(self.node_name))
        except ContractError:
            rec = None
        out[SERVICE_SOURCE] = source_rules(rec.source(4), rec.source(6)) if rec else None
        if self.snat is not None:
            out[SNAT] = self.snat.rules()
        return out

    def converge(self) -> str:
        """Make the table so; returns what was done ("ok", "rebuilt", or the parts
        rewritten: "sets", "services", "snat" joined by "+")."""
        want = self.wanted()
        dynamic = self.dynamic()
        comments, sets = read_state(nft(list_table=True))
        if not _static_intact(comments) or set(sets) != set(SETS):
            nft(full_commands(want, dynamic))   # an unknown chain is filled next round
            log.info("host firewall: table %s %s rebuilt (%s)", FAMILY, TABLE,
                     "created" if not comments else "rules missing")
            return "rebuilt"
        cmds, done = [], []
        if any(_normal(n, sets[n]) != _normal(n, want[n]) for n in SETS):
            cmds += _set_commands(want)
            done.append("sets")
            log.info("host firewall: sets updated: natOutgoing %s; pods %s",
                     ", ".join(sorted(want["nat_cidrs"])) or "-",
                     ", ".join(sorted(want["pod_cidrs"])) or "-")
        for chain, rules in dynamic.items():
            if rules is not None and comments.get(chain, set()) != {c for c, _ in rules}:
                cmds += _chain_commands(chain, rules)
                done.append(chain)
                log.info("host firewall: chain %s: %d rules: %s", chain, len(rules),
                         "; ".join(c.rsplit(" #", 1)[0] for c, _ in rules) or "-")
        if cmds:
            nft(cmds)                     # one transaction: sets and chains together
        return "+".join(done) or "ok"

    @staticmethod
    def remove() -> None:
        """Delete Pacific's table (the node leaves the cluster); idempotent."""
        if nft(list_table=True):
            nft([{"delete": {"table": dict(_TABLE)}}])
            log.info("host firewall: table %s %s removed", FAMILY, TABLE)
