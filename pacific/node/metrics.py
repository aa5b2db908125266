"""Every metric of `pacific-node`, and its liveness/readiness.

| metric | type | labels |
|---|---|---|
| pacific_cni_requests_total | counter | command, result |
| pacific_cni_request_duration_seconds | histogram | command |
| pacific_node_ovn_installed_wait_seconds | histogram | result (installed, timeout) |
| pacific_node_pods_attached | gauge | (pod interfaces on br-int, from the OVS database) |
| pacific_node_mgmt_port_ready | gauge | (1 once ovn0 converged to the Node annotations) |
| pacific_node_tunnel_peer_up | gauge | peer (chassis): 1 while its tunnel endpoint answers (health.py) |
| pacific_node_port_settings_applied_total | counter | setting (qos, mirror), result (ok, error) |
| pacific_node_flow_records_total | counter | verdict (allow, deny, would-deny, pass): audit records written (flowlog.py) |

command: ADD, DEL, CHECK, GC, STATUS, or "invalid" (did not parse); result: the
CNI error code answered, "0" = success.  ADD's duration includes waiting for
the controller's allocation and for ovn-installed.

Request counters are updated by the CNI server per request; the gauges are
read from OVS / the management port reconciler when Prometheus scrapes.
"""
from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from pacific import metrics as _exposition  # noqa: F401 - process-wide settings (no _created)
from pacific.cni import plugin as proto
from pacific.cni.plugin import CniError
from pacific.node.mgmtport import MgmtPort

# ADD: tens of ms when the allocation is there, up to the allocation timeout when not
_CNI_BUCKETS = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60)

CNI_REQUESTS = Counter("pacific_cni_requests", "CNI requests answered, by command and result "
                       "(the CNI error code; 0 = success)", ["command", "result"])
CNI_SECONDS = Histogram("pacific_cni_request_duration_seconds",
                        "Time to answer a CNI request (ADD includes waiting for the "
                        "controller's allocation and for ovn-installed)", ["command"],
                        buckets=_CNI_BUCKETS)
CNI_IN_FLIGHT = Gauge("pacific_cni_requests_in_flight", "CNI requests being answered now, by "
                      "command (an ADD stays in flight while it waits for the controller's "
                      "allocation)", ["command"])
OVN_INSTALLED_SECONDS = Histogram("pacific_node_ovn_installed_wait_seconds",
                                  "Time from adding a pod's OVS port until ovn-controller "
                                  "marked it ovn-installed (or gave up)", ["result"],
                                  buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
TUNNEL_UP = Gauge("pacific_node_tunnel_peer_up", "1 while the peer chassis' tunnel endpoint "
                  "answers the health probes, 0 when it does not", ["peer"])
SETTINGS_APPLIED = Counter("pacific_node_port_settings_applied", "Port settings applied to a "
                           "pod's port by the pod loop (bandwidth, mirroring)",
                           ["setting", "result"])
FLOW_RECORDS = Counter("pacific_node_flow_records", "Audit records written to --flow-log (one "
                       "per connection and verdict of a logging or dry-run policy)", ["verdict"])
INVALID = "invalid"   # command label of requests that could not be parsed

for _c in ("ADD", "DEL", "CHECK", "GC", "STATUS"):      # export zeros before the first one
    CNI_SECONDS.labels(_c)
    CNI_IN_FLIGHT.labels(_c)


def cni_request(command: str | None, code: int, seconds: float) -> None:
    """One answered CNI request (code 0 = success)."""
    command = command or INVALID
    CNI_REQUESTS.labels(command, str(code)).inc()
    CNI_SECONDS.labels(command).observe(seconds)


def code_of(exc: BaseException) -> int:
    return exc.code if isinstance(exc, CniError) else proto.ERR_INTERNAL


def installed_wait(seconds: float, ok: bool) -> None:
    """Plumber's on_installed_wait: the ovn-installed waits of pod ADDs, timed."""
    OVN_INSTALLED_SECONDS.labels("installed" if ok else "timeout").observe(seconds)


class NodeHealth:
    """Liveness/readiness of `pacific-node` and its scrape-time gauges.

    daemon: the NodeDaemon (core.py: attributes server, plumber, readiness and
    its features, read as they appear during start-up)."""

    def __init__(self, daemon):
        self.daemon = daemon

    def liveness(self) -> tuple[bool, str]:
        server = self.daemon.server
        if server is None:
            return True, "starting (CNI server not started yet)"
        if not server.serving:
            return False, f"the CNI server thread on {server.path} is not running"
        return True, f"CNI server on {server.path} running"

    def readiness(self) -> tuple[bool, str]:
        """The same check as CNI STATUS (OVS reachable, ovn-controller connected)."""
        d = self.daemon
        if d.server is None or d.readiness is None:
            return False, "starting: the CNI server does not serve yet"
        try:
            d.readiness.check()
        except CniError as e:
            return False, e.msg
        return True, "OVS reachable, ovn-controller connected to OVN southbound"


class _ScrapeCollector:
    def __init__(self):
        self.daemon = None

    def describe(self):
        return []

    def collect(self):
        attached = GaugeMetricFamily("pacific_node_pods_attached",
                                     "Pod interfaces attached to br-int (from the OVS database)")
        mgmt = GaugeMetricFamily("pacific_node_mgmt_port_ready",
                                 "1 once the management port ovn0 matches the Node "
                                 "annotations and Subnets, else 0")
        d = self.daemon
        if d is not None and d.plumber is not None:
            attached.add_metric([], len(d.plumber.attachments(0)))
        if d is not None:
            port = d.feature(MgmtPort.name)
            mgmt.add_metric([], 1 if port is not None and port.converged.is_set() else 0)
        return [attached, mgmt]


COLLECTOR = _ScrapeCollector()
REGISTRY.register(COLLECTOR)


def install(daemon) -> NodeHealth:
    """Read the gauges from `daemon`; returns its health checks."""
    COLLECTOR.daemon = daemon
    return NodeHealth(daemon)
