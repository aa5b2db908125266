"""controller/dnsnames.py against a real DNS server (dnsmasq, as the sandbox
runs it): A records, and AAAA records too when the cluster has IPv6."""
from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from pacific.controller.dnsnames import DnsNames

pytestmark = pytest.mark.skipif(shutil.which("dnsmasq") is None, reason="no dnsmasq")


@pytest.fixture
def server(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("198.51.100.7 both.example\n2001:db8:100::7 both.example\n"
                     "198.51.100.8 four.example\n2001:db8:100::9 six.example\n")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts",
                             f"--addn-hosts={hosts}", "--listen-address=127.0.0.1",
                             "--bind-interfaces", f"--port={port}", "--local-ttl=30",
                             "--pid-file=", "--user=root",    # reads the hosts file in tmp_path
                             "--local=/#/"],     # every name local: NODATA for a missing type
                            stderr=subprocess.DEVNULL)
    try:
        names = DnsNames(lambda n: None, servers=[f"127.0.0.1:{port}"])
        deadline = time.monotonic() + 10
        while names.resolve("four.example")[1] and time.monotonic() < deadline:
            time.sleep(0.05)          # dnsmasq listening
        yield port
    finally:
        proc.kill()
        proc.wait()


def test_both_families_are_resolved_with_ipv6_and_a_name_with_either_has_an_answer(server):
    dns = DnsNames(lambda n: None, servers=[f"127.0.0.1:{server}"], ipv6=True)
    addrs, err, again = dns.resolve("both.example")
    assert addrs == {"198.51.100.7", "2001:db8:100::7"} and err is None and again == 30
    assert dns.resolve("six.example")[:2] == (frozenset({"2001:db8:100::9"}), None)
    assert dns.resolve("four.example")[:2] == (frozenset({"198.51.100.8"}), None)
    assert "NXDOMAIN" in dns.resolve("none.example")[1]


def test_without_ipv6_only_a_records_count(server):
    dns = DnsNames(lambda n: None, servers=[f"127.0.0.1:{server}"])
    assert dns.resolve("both.example")[:2] == (frozenset({"198.51.100.7"}), None)
    addrs, err, _ = dns.resolve("six.example")
    assert addrs == frozenset() and err == "six.example: no A record"
