"""pacific.servicesnat: which pods leave with which Service external IP (the
controller and every egress gateway node call it alike), and the SNAT rule a
node makes of it."""
from pacific import names, servicesnat
from pacific.node.egresssnat import snat_rule

CLUSTER = ["10.16.0.0/16", "100.64.0.0/16", "10.96.0.0/12"]
ANYWHERE = ["0.0.0.0/0"]


def svc(name, created, ips, annotations=None):
    return {"metadata": {"name": name, "namespace": "ns", "creationTimestamp": created,
                         "annotations": annotations or {}},
            "spec": {"clusterIP": "10.96.0.10", "externalIPs": ips,
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}


def eps(service, *addrs, ready=True):
    return {"metadata": {"namespace": "ns", "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": ready}} for a in addrs]}


def test_ready_endpoints_leave_with_the_first_external_ip():
    grants, notes = servicesnat.egress_ips(
        [svc("web", "1", ["192.168.77.200", "192.168.77.201"])],
        [eps("web", "10.16.0.6", "10.16.0.5"), eps("web", "10.16.0.9", ready=False)],
        CLUSTER, allowed=ANYWHERE)
    assert grants["ns/web"] == servicesnat.SnatGrant("ns/web", "192.168.77.200",
                                                 ("10.16.0.5", "10.16.0.6"))
    assert notes == {}


def test_a_pod_behind_two_services_leaves_as_the_older_one_s_and_the_newer_is_told():
    grants, notes = servicesnat.egress_ips(
        [svc("new", "2026-02-01T00:00:00Z", ["192.168.77.201"]),
         svc("old", "2026-01-01T00:00:00Z", ["192.168.77.200"])],
        [eps("old", "10.16.0.5"), eps("new", "10.16.0.5", "10.16.0.7")],
        CLUSTER, allowed=ANYWHERE)
    assert grants["ns/old"].sources == ("10.16.0.5",)
    assert grants["ns/new"].sources == ("10.16.0.7",)
    assert notes == {"ns/new": ["pod address 10.16.0.5 leaves as 192.168.77.200 of the older "
                                "Service ns/old"]}


def test_the_opt_out_and_refused_external_ips():
    grants, _ = servicesnat.egress_ips(
        [svc("out", "1", ["192.168.77.200"], {names.ANN_EGRESS_SNAT: "false"}),
         svc("inside", "2", ["10.16.3.3"])],            # inside the cluster: refused
        [eps("out", "10.16.0.5"), eps("inside", "10.16.0.6")],
        CLUSTER, allowed=ANYWHERE)
    assert grants == {}


def test_the_first_external_ip_is_the_first_granted_one():
    grants, _ = servicesnat.egress_ips([svc("web", "1", ["10.16.3.3", "192.168.77.202"])],
                                    [eps("web", "10.16.0.5")],
        CLUSTER, allowed=ANYWHERE)
    assert grants["ns/web"].ip == "192.168.77.202"


def test_an_ipv6_external_ip_is_the_source_of_the_ipv6_endpoints():
    both = ["0.0.0.0/0", "::/0"]
    six, dual = svc("six", "1", ["2001:db8::10"]), svc("dual", "2", ["2001:db8::11",
                                                                      "192.168.77.203"])
    for s in (six, dual):
        s["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::a"]
    assert servicesnat.opted_in(six) and servicesnat.opted_in(dual)
    slices = [eps("six", "10.16.0.5"), eps("dual", "10.16.0.6")]
    for name, addr in (("six", "fd00:16::5"), ("dual", "fd00:16::6")):
        sl = eps(name, addr)
        sl["addressType"] = "IPv6"
        slices.append(sl)
    grants, _ = servicesnat.egress_ips([six, dual], slices, CLUSTER, allowed=both)
    v6 = servicesnat.V6
    assert grants == {
        "ns/six" + v6: servicesnat.SnatGrant("ns/six" + v6, "2001:db8::10", ("fd00:16::5",)),
        "ns/dual": servicesnat.SnatGrant("ns/dual", "192.168.77.203", ("10.16.0.6",)),
        "ns/dual" + v6: servicesnat.SnatGrant("ns/dual" + v6, "2001:db8::11", ("fd00:16::6",))}
    assert servicesnat.gateway_key("ns/dual" + v6) == "ns/dual"
    assert servicesnat.set_name("ns/dual" + v6) == servicesnat.address_set_name("ns/dual") + "_6"
    assert servicesnat.set_name("ns/dual") == servicesnat.address_set_name("ns/dual")


def test_the_snat_rule_names_the_service_and_changes_with_its_endpoints():
    a = snat_rule(servicesnat.SnatGrant("ns/web", "192.168.77.200", ("10.16.0.5",)))
    b = snat_rule(servicesnat.SnatGrant("ns/web", "192.168.77.200", ("10.16.0.5", "10.16.0.6")))
    assert a[0].startswith("ns/web snat 192.168.77.200 #") and a[0] != b[0]
    assert a[1][-1] == {"snat": {"family": "ip", "addr": "192.168.77.200"}}
    assert b[1][0]["match"]["right"] == {"set": ["10.16.0.5", "10.16.0.6"]}


def test_a_taken_over_address_is_announced_again_while_held(monkeypatch):
    """ovn-kubernetes #6553: a switch that ignored the first gratuitous ARPs
    kept sending to the old holder for hours; the holder announces again."""
    import threading
    from types import SimpleNamespace

    from pacific.node import egresssnat
    sent, done = [], threading.Event()
    monkeypatch.setattr(egresssnat, "GARP_AGAIN", (0.01, 0.02, 0.03, 0.5))

    def fake_garp(ifname, mac, ip):
        sent.append(ip)
        if len(sent) == 3:
            holder._held.discard(ip)     # given up: no more announcements
            done.set()
    monkeypatch.setattr(egresssnat, "garp", fake_garp)
    holder = SimpleNamespace(_stopping=threading.Event(), _held={"192.168.77.150"})
    egresssnat.EgressSnat._announce_again(holder, "eth0", "02:00:00:00:00:01", "192.168.77.150")
    assert done.wait(5)
    holder._stopping.wait(0.6)
    assert sent == ["192.168.77.150"] * 3


def test_an_ipv6_egress_address_snats_ipv6_members_outside_the_cluster_only():
    rule = snat_rule(servicesnat.SnatGrant("egw:eip:web/fd00:77::150", "fd00:77::150",
                                           ("fd00:16::5",)))
    match, dest, nat = rule[1]
    assert match["match"]["left"]["payload"] == {"protocol": "ip6", "field": "saddr"}
    assert dest["match"]["right"] == "@cluster_cidrs6"
    assert nat == {"snat": {"family": "ip6", "addr": "fd00:77::150"}}


def test_services_of_one_namespace_on_one_address_share_the_oldest_one_s_grant():
    """One external IP on many ports (a Service each): one grant, keyed by the
    oldest Service, whose members are every sharer's endpoints; so one gateway
    and one transit network, on the controller and on every node alike."""
    services = [svc(f"p{i}", f"2026-01-0{i + 1}T00:00:00Z", ["192.168.77.200"])
                for i in range(5)]
    for i, s in enumerate(services):          # each on its own port of the address
        s["spec"]["ports"][0]["port"] = 80 + i
    slices = [eps("p3", "10.16.0.9"), eps("p1", "10.16.0.5", "10.16.0.7"),
              eps("p4", "10.16.0.5")]
    grants, notes = servicesnat.egress_ips(services, slices, CLUSTER, allowed=ANYWHERE)
    assert grants == {"ns/p0": servicesnat.SnatGrant("ns/p0", "192.168.77.200",
                                                     ("10.16.0.5", "10.16.0.7", "10.16.0.9"))}
    assert notes == {}      # a pod behind two of them leaves by the same address: nothing to say


def test_a_service_on_another_address_keeps_its_own_grant():
    grants, _ = servicesnat.egress_ips(
        [svc("a", "1", ["192.168.77.200"]), svc("b", "2", ["192.168.77.201", "192.168.77.200"])],
        [eps("a", "10.16.0.5"), eps("b", "10.16.0.6")], CLUSTER, allowed=ANYWHERE)
    assert grants["ns/a"].sources == ("10.16.0.5",)
    assert grants["ns/b"] == servicesnat.SnatGrant("ns/b", "192.168.77.201", ("10.16.0.6",))
