"""deploy/: the manifests parse, name themselves, are all applied by the
kustomization, and what they hand the components (flags, paths, the readiness
probe, the conflist) is what the components accept."""
import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib

import pytest
import yaml

from cni_fixtures import install_plugin, start_server
from deploy_fixtures import (DEPLOY, NAMESPACE, command_line, find, kustomization, load_file,
                             manifests, pod_spec)
from pacific import names
from pacific.cni import plugin as proto
from pacific.controller import main as controller_main
from pacific.kube import crds
from pacific.node import bootstrap
from pacific.node import main as node_main

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}


def _parse(parser, argv):
    try:
        return parser.parse_args(argv)
    except SystemExit:
        pytest.fail(f"{parser.prog} refuses the manifest's flags {argv} (see stderr)")


def controller_args(monkeypatch):
    dep = find("Deployment", names.CONTROLLER_NAME)
    argv, env = command_line(dep, "controller")
    assert argv[0] == "pacific-controller"
    for k, v in env.items():          # flags default to these variables
        monkeypatch.setenv(k, v)
    return _parse(controller_main.build_parser(), argv[1:])


def node_args():
    ds = find("DaemonSet", "pacific-node")
    argv, _ = command_line(ds, "node")
    assert argv[0] == "pacific-node"
    return _parse(node_main.build_parser(), argv[1:])


def config_data() -> dict:
    return find("ConfigMap", "pacific-config")["data"]


# --- structure ------------------------------------------------------------------
def test_every_document_parses_and_names_itself():
    files = sorted(DEPLOY.rglob("*.yaml"))
    assert files, "deploy/ holds no YAML"
    seen = set()
    for path in files:
        for doc in load_file(path):
            where = f"{path.relative_to(DEPLOY)}: {doc.get('kind')}"
            assert doc.get("apiVersion") and doc.get("kind"), f"{where} lacks apiVersion/kind"
            if path.name == "kustomization.yaml":
                # no metadata: kubectl 1.20's kustomize refuses it (`unknown field`)
                assert "metadata" not in doc, f"{where}: kubectl <= 1.20 cannot read metadata"
                continue
            assert (doc.get("metadata") or {}).get("name"), f"{where} lacks metadata.name"
            ns = doc["metadata"].get("namespace")
            if doc["kind"] in CLUSTER_SCOPED:
                assert ns is None, f"{where} is cluster-scoped but names namespace {ns}"
            elif doc["kind"] in ("Role", "RoleBinding") and ns == names.NODE_HEALTH_NAMESPACE:
                pass   # the node daemons' health reports: a namespace of their own
            else:
                assert ns == NAMESPACE, f"{where} {doc['metadata']['name']} not in {NAMESPACE}"
            key = (doc["kind"], ns, doc["metadata"]["name"])
            assert key not in seen, f"{key} defined twice"
            seen.add(key)


def test_kustomization_applies_every_manifest_and_the_crds():
    listed = kustomization()["resources"]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    on_disk = {str(p.relative_to(DEPLOY)) for p in DEPLOY.rglob("*.yaml")} - {"kustomization.yaml"}
    assert set(listed) == on_disk, f"not applied: {on_disk - set(listed)}; " \
                                   f"missing files: {set(listed) - on_disk}"
    for f in crds.CRD_FILES:        # what pacific.kube.crds (and the sandbox) load
        assert f"crds/{f}" in listed
    # CRDs and the namespace first, so one `kubectl apply -k` creates what the
    # rest refers to
    kinds = [d["kind"] for d in manifests()]
    first_other = next(i for i, k in enumerate(kinds)
                       if k not in ("CustomResourceDefinition", "Namespace"))
    assert "CustomResourceDefinition" not in kinds[first_other:]
    assert "Namespace" not in kinds[first_other:]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_kustomize_builds_it():
    out = subprocess.run(["kubectl", "kustomize", str(DEPLOY)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    built = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in built) == \
        sorted((d["kind"], d["metadata"]["name"]) for d in manifests())
    tag = kustomization()["images"][0]["newTag"]
    for kind in ("Deployment", "DaemonSet"):
        for d in built:
            if d["kind"] == kind:
                for c in pod_spec(d)["containers"]:
                    assert c["image"].endswith(f":{tag}"), c["image"]


def test_image_is_the_pyproject_version():
    with open(DEPLOY.parent / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    (img,) = kustomization()["images"]
    assert img["newTag"] == project["version"]
    for wl in (find("Deployment", names.CONTROLLER_NAME), find("DaemonSet", "pacific-node")):
        for c in pod_spec(wl)["containers"]:
            assert c["image"].split(":")[0] == img["name"]
            # the commands are the package's entry points
            assert c["command"][0] in project["scripts"]


# --- controller -------------------------------------------------------------------
def test_controller_flags_are_accepted_and_valid(monkeypatch):
    args = controller_args(monkeypatch)
    cfg = controller_main.config_from_args(args)     # raises ConfigError if invalid
    data = config_data()
    assert cfg.nb_remote == data["nb-remote"]
    assert cfg.default_cidr == data["default-cidr"]
    assert cfg.join_cidr == data["join-cidr"]
    assert cfg.transit_networks_per_namespace == int(data["transit-networks-per-namespace"])
    assert cfg.transit_networks_reserved == int(data["transit-networks-reserved"])
    assert args.leader_elect, "two replicas without leader election would both write NB"
    assert args.lease_namespace == NAMESPACE
    assert args.identity != "", "replicas need distinct Lease identities"


def test_controller_is_ha_and_unprivileged():
    dep = find("Deployment", names.CONTROLLER_NAME)
    spec = pod_spec(dep)
    assert dep["spec"]["replicas"] >= 2
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert anti[0]["labelSelector"]["matchLabels"].items() <= \
        dep["spec"]["template"]["metadata"]["labels"].items()
    # it provides pod networking, so it cannot depend on it
    assert spec["hostNetwork"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    (c,) = spec["containers"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert spec["serviceAccountName"] == names.CONTROLLER_NAME


def test_daemons_reach_the_api_server_without_the_kubernetes_service():
    """Pacific replaces kube-proxy: its host-network daemons take the API
    server's address from pacific-config when it is there (the kubelet's
    KUBERNETES_SERVICE_* otherwise), so they never need the Service they program."""
    docs = manifests()
    cm = find("ConfigMap", "pacific-config", docs)
    with_keys = [d for d in docs if d is not cm] + [
        {**cm, "data": {**cm["data"], "api-server-host": "192.0.2.20", "api-server-port": "6443"}}]
    for kind, name, container in (("Deployment", names.CONTROLLER_NAME, "controller"),
                                  ("DaemonSet", "pacific-node", "node")):
        workload = find(kind, name, docs)
        _, env = command_line(workload, container, with_keys)
        assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == \
            ("192.0.2.20", "6443"), kind
        _, env = command_line(workload, container, docs)      # the keys left out
        assert "KUBERNETES_SERVICE_HOST" not in env, kind


# --- node daemon ------------------------------------------------------------------
def test_node_flags_are_accepted_and_bootstrap_ovn_controller():
    args = node_args()
    data = config_data()
    assert not args.no_bootstrap
    assert args.ovn_remote == data["sb-remote"]
    assert args.encap_ip and args.node_name
    assert args.encap_type == data["encap-type"]
    assert args.datapath_type == data["datapath-type"]
    assert args.cni_socket == names.CNI_SOCKET
    ids = bootstrap.ovs_external_ids(args.node_name, args.ovn_remote, args.encap_ip,
                                     args.encap_type, args.datapath_type)
    assert ids["system-id"] == args.node_name


def _host_path_for(path: str) -> str | None:
    """The host path the node container sees at `path` (None if not mounted)."""
    ds = find("DaemonSet", "pacific-node")
    spec = pod_spec(ds)
    vols = {v["name"]: v for v in spec["volumes"]}
    (c,) = spec["containers"]
    best = None
    for m in c["volumeMounts"]:
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best[0]):
                best = (mp, vols[m["name"]])
    if best is None or "hostPath" not in best[1]:
        return None
    return best[1]["hostPath"]["path"].rstrip("/") + path[len(best[0]):]


def test_node_paths_are_the_hosts_at_the_same_place():
    """The conflist names the socket and the runtime runs the plugin on the
    host: what the daemon writes at a path must be at that path on the host."""
    args = node_args()
    ovs_sock = args.ovs_remote.removeprefix("unix:")
    assert args.ovs_remote.startswith("unix:")
    for path in (args.cni_socket, args.cni_conf_dir, args.cni_bin_dir, args.ovn_rundir,
                 ovs_sock, "/var/run/netns"):
        assert _host_path_for(path) == path, f"{path} is not the host's {path} in node.yaml"
    spec = pod_spec(find("DaemonSet", "pacific-node"))
    (c,) = spec["containers"]
    netns = [m for m in c["volumeMounts"] if m["mountPath"] == "/var/run/netns"]
    assert netns[0]["mountPropagation"] in ("HostToContainer", "Bidirectional"), \
        "namespaces the runtime pins later would be invisible"
    assert spec["hostNetwork"] and spec["hostPID"]
    assert c["securityContext"]["privileged"] is True
    assert {"operator": "Exists"} in spec["tolerations"], "a tainted node would get no network"


def test_conflist_the_node_writes_is_the_design_contract(tmp_path):
    args = node_args()
    path = bootstrap.write_conflist(str(tmp_path), args.cni_socket)
    assert os.path.basename(path) == names.CNI_CONF_NAME
    with open(path) as f:
        conf = json.load(f)
    # DESIGN.md: {"cniVersion": "1.0.0", "name": "pacific", "type": "pacific",
    #             "server_socket": "/run/pacific/cni.sock"} in a conflist
    assert conf == {"cniVersion": "1.0.0", "name": "pacific",
                    "plugins": [{"type": "pacific", "server_socket": "/run/pacific/cni.sock"}]}
    # the plugin accepts the network configuration a runtime derives from it
    net = dict(conf["plugins"][0], cniVersion=conf["cniVersion"], name=conf["name"])
    parsed = proto.parse_config(json.dumps(net).encode())
    proto.validate_config(parsed, "ADD")
    assert proto.check_version(parsed) == "1.0.0"


def _probe_script() -> str:
    (c,) = pod_spec(find("DaemonSet", "pacific-node"))["containers"]
    cmd = c["readinessProbe"]["exec"]["command"]
    assert cmd[:2] == ["/bin/sh", "-c"]
    return cmd[2]


def test_readiness_probe_is_a_real_cni_status(tmp_path):
    """The probe, run as the kubelet would against the real plugin and CNI
    server (paths moved under tmp_path): ready passes, not ready fails."""
    args = node_args()
    script = _probe_script()
    conf = json.loads(re.search(r"'(\{.*\})'", script, re.S).group(1))
    assert conf["server_socket"] == args.cni_socket
    assert f"{args.cni_bin_dir}/{names.CNI_TYPE}" in script
    proto.validate_config(proto.parse_config(json.dumps(conf).encode()), "STATUS")

    plugin = install_plugin(tmp_path)
    server, backend = start_server(tmp_path)
    try:
        local = script.replace(args.cni_socket, server.path) \
                      .replace(f"{args.cni_bin_dir}/{names.CNI_TYPE}", shlex.quote(plugin))
        ok = subprocess.run(["/bin/sh", "-c", local], capture_output=True, text=True, timeout=30)
        assert ok.returncode == 0, ok.stderr
        backend.not_ready = True
        bad = subprocess.run(["/bin/sh", "-c", local], capture_output=True, text=True,
                             timeout=30)
        assert bad.returncode != 0
        assert "ovn-controller is not connected" in bad.stdout + bad.stderr
    finally:
        server.stop()


# --- field names ------------------------------------------------------------------
def _unknown_fields(value, typ: str, path: str) -> list[str]:
    """Paths in `value` that the Kubernetes API type `typ` (the official
    client's model) does not have: a misspelt field is dropped or refused by
    the API server, and a dropped mountPropagation or toleration fails late."""
    import datetime

    import kubernetes.client as k
    if typ.startswith("List["):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [e for i, v in enumerate(value) for e in _unknown_fields(v, typ[5:-1], f"{path}[{i}]")]
    if typ.startswith("Dict["):
        if not isinstance(value, dict):
            return [f"{path}: expected a map"]
        inner = typ[5:-1].split(", ", 1)[1]
        return [e for kk, v in value.items() for e in _unknown_fields(v, inner, f"{path}.{kk}")]
    prim = {"str": str, "int": int, "bool": bool, "float": (int, float),
            "datetime": (str, datetime.datetime)}
    if typ == "object":
        return []
    if typ in prim:
        ok = isinstance(value, prim[typ]) and not (typ == "int" and isinstance(value, bool))
        return [] if ok else [f"{path}: {value!r} is not {typ}"]
    model = getattr(k, typ)
    if not isinstance(value, dict):
        return [f"{path}: expected a {typ} object"]
    by_json = {j: attr for attr, j in model.attribute_map.items()}
    out = []
    for key, v in value.items():
        if key not in by_json:
            out.append(f"{path}.{key}: no such field in {typ}")
        else:
            out.extend(_unknown_fields(v, model.openapi_types[by_json[key]], f"{path}.{key}"))
    return out


def test_every_field_is_a_kubernetes_field():
    import kubernetes.client as k
    for doc in manifests():
        model = f"V1{doc['kind']}"
        assert hasattr(k, model), f"no API type for {doc['kind']}"
        bad = _unknown_fields(doc, model, f"{doc['kind']}/{doc['metadata']['name']}")
        assert not bad, "; ".join(bad)


# --- central --------------------------------------------------------------------------
def test_central_runs_on_the_labelled_nodes_over_tls_with_its_databases_on_the_host(monkeypatch):
    from pacific.central import main as central_main
    ds = find("DaemonSet", "pacific-central")
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {names.CENTRAL_ROLE_LABEL: names.CENTRAL_ROLE}
    assert spec["hostNetwork"]
    argv, env = command_line(ds, "central")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    args = central_main.build_parser().parse_args(argv[1:])
    assert args.members_from_nodes and not args.allow_tcp
    assert all((args.ssl_key, args.ssl_cert, args.ssl_ca)), "central speaks TLS"
    (c,) = spec["containers"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts[args.db_dir]]["hostPath"]["path"] == args.db_dir
    secret = volumes[mounts[os.path.dirname(args.ssl_key)]]["secret"]["secretName"]
    assert secret == "pacific-ovn-central"
    port = int(args.health_address.rsplit(":", 1)[1])
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["port"] == port, probe
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1


# --- vswitch --------------------------------------------------------------------------
def test_vswitch_shares_the_hosts_ovs_paths_with_pacific_node(monkeypatch):
    """pacific-vswitch's sockets, pidfiles, database and ovn-controller log are
    the host paths pacific-node and the TLS files are read from; a node
    labelled to keep its own Open vSwitch runs none."""
    from pacific.vswitch import main as vswitch_main
    ds = find("DaemonSet", "pacific-vswitch")
    spec = pod_spec(ds)
    assert spec["hostNetwork"] and spec["hostPID"]
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": names.HOST_OVS_LABEL, "operator": "NotIn",
                                         "values": ["true"]}]
    argv, env = command_line(ds, "vswitch")
    assert argv[0] == "pacific-vswitch"
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    args = _parse(vswitch_main.build_parser(), argv[1:])
    (c,) = spec["containers"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    for d in (args.run_dir, args.ovn_run_dir, args.db_dir, args.log_dir, args.ovn_log_dir,
              names.OVN_TLS_DIR):
        assert volumes[mounts[d]]["hostPath"]["path"] == d, d
    node = node_args()
    assert node.ovs_remote == f"unix:{os.path.join(args.run_dir, 'db.sock')}"
    assert (node.ovs_rundir, node.ovn_rundir) == (args.run_dir, args.ovn_run_dir)
    assert os.path.join(args.ovn_log_dir, "ovn-controller.log") == names.OVN_CONTROLLER_LOG
    port = int(args.health_address.rsplit(":", 1)[1])
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["port"] == port, probe
    assert "underlay-interface" in config_data()
