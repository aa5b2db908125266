"""pacific.remotes: OVSDB remotes parsed once, for the addresses no Service may
claim (controller, nodes) and the host firewall's OVN central rules."""
from pacific import remotes


def test_members_keep_names_and_portless_hosts_for_whoever_resolves_them():
    assert remotes.members("ssl:ovn.example:6641,tcp:192.168.77.1,unix:/run/x.sock,"
                           "ssl:[fd00::1]:6642") == [
        ("ovn.example", 6641), ("192.168.77.1", None), ("fd00::1", 6642)]


def test_endpoints_are_the_address_members_with_a_port():
    assert remotes.endpoints("ssl:192.168.77.1:6642,ssl:[fd00::1]:6642,unix:/x,"
                             "tcp:1.2.3.4,tcp:h.example:6641") == [
        ("192.168.77.1", 6642), ("fd00::1", 6642)]
    assert remotes.addresses("tcp:192.168.77.1:6641", None, "unix:/x") == {"192.168.77.1"}
