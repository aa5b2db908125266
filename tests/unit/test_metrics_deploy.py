"""deploy/: the probes and scrape annotations reach the endpoints the
components really serve (port, address, paths)."""
import pytest

from deploy_fixtures import FIELD_SAMPLES, command_line, find, pod_spec
from pacific import metrics as m
from pacific import names
from pacific.controller import main as controller_main
from pacific.node import main as node_main

WORKLOADS = [("Deployment", names.CONTROLLER_NAME, "controller", controller_main,
              names.CONTROLLER_METRICS_PORT),
             ("DaemonSet", "pacific-node", "node", node_main, names.NODE_METRICS_PORT)]


@pytest.mark.parametrize("kind,name,container,module,port", WORKLOADS)
def test_probes_and_scrape_reach_the_metrics_address(kind, name, container, module, port):
    wl = find(kind, name)
    spec = pod_spec(wl)
    (c,) = [c for c in spec["containers"] if c["name"] == container]
    argv, env = command_line(wl, container)
    args = module.build_parser().parse_args(argv[1:])
    host, bound = m.parse_address(args.metrics_address)
    assert bound == port, f"{name} serves on {bound}, the documented default port is {port}"

    ports = {p["name"]: p for p in c["ports"]}
    assert ports["metrics"]["containerPort"] == bound
    # host network: the kubelet probes (and Prometheus scrapes) the pod IP,
    # which is the node's address; the daemon must listen there
    assert spec["hostNetwork"] is True
    assert host in (FIELD_SAMPLES["status.podIP"], FIELD_SAMPLES["status.hostIP"], ""), host

    for probe, path in (("livenessProbe", m.PATH_HEALTHZ), ("readinessProbe", None)):
        get = c[probe].get("httpGet")
        if get is None:
            continue   # the node's readiness is the runtime's own CNI STATUS (exec)
        assert get["port"] == "metrics"
        assert get["path"] == (path or m.PATH_READYZ)
    assert "livenessProbe" in c

    ann = wl["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/port"] == str(bound)
    assert ann["prometheus.io/path"] == m.PATH_METRICS


def test_controller_readiness_is_the_readyz_endpoint():
    (c,) = pod_spec(find("Deployment", names.CONTROLLER_NAME))["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == m.PATH_READYZ


def test_defaults_stay_on_loopback(monkeypatch):
    """Without the flag the endpoints are not exposed beyond the host."""
    monkeypatch.delenv("PACIFIC_METRICS_ADDRESS", raising=False)
    for module, port in ((controller_main, names.CONTROLLER_METRICS_PORT),
                         (node_main, names.NODE_METRICS_PORT)):
        args = module.build_parser().parse_args(["--nb-remote", "unix:x"]
                                                if module is controller_main else [])
        assert m.parse_address(args.metrics_address) == ("127.0.0.1", port)
