"""The sandbox's cluster DNS: what CoreDNS's `kubernetes` plugin is to a real
cluster, for the names Kubernetes' own networking tests look up.

    python -m pacific.sandbox.k8s.clusterdns --kubeconfig K --netns pac-x-central \\
        --listen 192.168.77.1 [--domain cluster.local]

A cluster DNS is not the network plugin's job, but upstream's Service tests reach
Services by name (`nc -z <service> <port>`, `nslookup <service>.<ns>.svc...`), and
Debian has no CoreDNS to build offline.  This answers, from the API (informers on
Services and EndpointSlices), over UDP and TCP on port 53 inside --netns:

- `<service>.<ns>.svc.<domain>`: A, the cluster IP; a headless Service, its ready
  endpoints (all of them with publishNotReadyAddresses); ExternalName, a CNAME;
- `<hostname>.<service>.<ns>.svc.<domain>`: A, the endpoint with that hostname;
- `<a-b-c-d>.<ns>.pod.<domain>`: A, a-b-c-d;
- a name it knows with no record of the type asked (AAAA): no data, not NXDOMAIN
  (resolvers ask A and AAAA together); a name under the domain it does not know:
  NXDOMAIN; any other name: REFUSED (the sandbox sends nothing to the Internet).

The sandbox runs it in the central namespace and gives it the Service
kube-system/kube-dns (clusterDNS of every kubelet): a selector-less Service whose
Endpoints name the central address, trusted by the controller
(--trusted-endpoint-services), as an administrator's own Service is.
"""
from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import socket
import socketserver
import sys
import threading

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from pacific import names
from pacific.exposure import SERVICE_NAME_LABEL
from pacific.kube import client, errors, versions
from pacific.kube import resources as r
from pacific.kube.informer import Informer
from pacific.sandbox import controllers
from pacific.sandbox.k8s.listen import bound_socket

LOG = logging.getLogger("pacific.sandbox.clusterdns")
TTL = 5


class Records:
    """Names -> answers, read from the informers' caches at each query."""

    def __init__(self, services, slices, domain: str = "cluster.local"):
        self.services, self.slices = services, slices
        self.domain = dns.name.from_text(domain)

    def _endpoints(self, ns: str, name: str, not_ready: bool) -> list[tuple[str, str]]:
        """(address, hostname) of the Service's endpoints (ready ones unless not_ready)."""
        out = []
        for s in self.slices.list():
            m = s.get("metadata") or {}
            if m.get("namespace") != ns or (m.get("labels") or {}).get(SERVICE_NAME_LABEL) != name \
                    or s.get("addressType", "IPv4") not in ("IPv4", "IPv6"):
                continue
            for ep in s.get("endpoints") or []:
                if not not_ready and (ep.get("conditions") or {}).get("ready") is False:
                    continue
                out += [(a, ep.get("hostname") or "") for a in ep.get("addresses") or []]
        return sorted(set(out))

    def answer(self, qname: dns.name.Name, qtype: int) -> tuple[int, list[dns.rrset.RRset]]:
        """(rcode, answer rrsets) for a question."""
        if not qname.is_subdomain(self.domain):
            return dns.rcode.REFUSED, []
        labels = [x.decode().lower() for x in qname.relativize(self.domain).labels]
        a: list[str] = []
        cname = None
        if len(labels) == 3 and labels[2] == "pod":
            try:
                a = [str(ipaddress.IPv4Address(labels[0].replace("-", ".")))]
            except ValueError:
                return dns.rcode.NXDOMAIN, []
        elif len(labels) in (3, 4) and labels[-1] == "svc":
            host, name, ns = (labels[0] if len(labels) == 4 else None), labels[-3], labels[-2]
            svc = self.services.get(f"{ns}/{name}")
            if svc is None:
                return dns.rcode.NXDOMAIN, []
            spec = svc.get("spec") or {}
            if host is not None:
                a = [ip for ip, h in self._endpoints(ns, name, True) if h == host]
            elif spec.get("type") == "ExternalName":
                cname = spec.get("externalName")
            elif spec.get("clusterIP") not in (None, "", "None"):
                a = list(spec.get("clusterIPs") or [spec["clusterIP"]])
            else:
                a = [ip for ip, _ in self._endpoints(ns, name,
                                                     bool(spec.get("publishNotReadyAddresses")))]
            if host is not None and not a:
                return dns.rcode.NXDOMAIN, []
        else:
            return dns.rcode.NXDOMAIN, []
        if cname:
            return dns.rcode.NOERROR, [dns.rrset.from_text(
                qname, TTL, dns.rdataclass.IN, dns.rdatatype.CNAME, cname.rstrip(".") + ".")]
        out = [dns.rrset.from_text(qname, TTL, dns.rdataclass.IN, rtype, *found)
               for rtype, six in ((dns.rdatatype.A, False), (dns.rdatatype.AAAA, True))
               if qtype in (rtype, dns.rdatatype.ANY)
               and (found := [x for x in a if (":" in x) == six])]
        return dns.rcode.NOERROR, out         # [] : the name exists; no record of this type

    def respond(self, wire: bytes) -> bytes | None:
        try:
            q = dns.message.from_wire(wire)
        except Exception:        # noqa: BLE001 - anything malformed gets no answer
            return None
        resp = dns.message.make_response(q)
        resp.flags |= dns.flags.AA
        if len(q.question) != 1:
            resp.set_rcode(dns.rcode.FORMERR)
            return resp.to_wire()
        question = q.question[0]
        rcode, answers = self.answer(question.name, question.rdtype)
        resp.set_rcode(rcode)
        resp.answer.extend(answers)
        LOG.debug("%s %s -> %s %s", question.name, dns.rdatatype.to_text(question.rdtype),
                  dns.rcode.to_text(rcode), [str(x) for x in answers])
        return resp.to_wire()


def serve(records: Records, host: str, netns: str | None, port: int = 53) -> list:
    """UDP and TCP servers on host:port in netns, each in a thread; returns them."""
    class Udp(socketserver.BaseRequestHandler):
        def handle(self):
            data, sock = self.request
            out = records.respond(data)
            if out is not None:
                sock.sendto(out, self.client_address)

    class Tcp(socketserver.StreamRequestHandler):
        def handle(self):
            self.connection.settimeout(10)
            try:
                while size := self.rfile.read(2):
                    out = records.respond(self.rfile.read(int.from_bytes(size, "big")))
                    if out is None:
                        return
                    self.wfile.write(len(out).to_bytes(2, "big") + out)
            except OSError:
                return

    servers = []
    for kind, handler, base in ((socket.SOCK_DGRAM, Udp, socketserver.ThreadingUDPServer),
                                (socket.SOCK_STREAM, Tcp, socketserver.ThreadingTCPServer)):
        srv = base((host, port), handler, bind_and_activate=False)
        srv.daemon_threads = True
        srv.socket.close()
        srv.socket = bound_socket(host, port, netns, kind)
        threading.Thread(target=srv.serve_forever, name=f"dns-{kind.name}", daemon=True).start()
        servers.append(srv)
    return servers


def address(sb) -> str:
    """The cluster IP of kube-system/kube-dns: the tenth address of the
    sandbox's (first) service CIDR."""
    return str(ipaddress.ip_network(controllers.service_cidrs(sb)[0])[10])


def listen_address(sb) -> str:
    """Where it answers: the central address of the cluster's first family."""
    return sb.central_ip6 if sb.ipv6_only else sb.central_ip


def start(sb) -> None:
    """The daemon (idempotent), and its Service and Endpoints."""
    kubeconfig = os.path.join(sb.dir, names.SANDBOX_KUBECONFIG)
    if sb.daemon_pid(names.SANDBOX_CLUSTER_DNS_TAG) is None:
        sb.spawn(names.SANDBOX_CLUSTER_DNS_TAG, [
            sys.executable, "-m", "pacific.sandbox.k8s.clusterdns",
            "--kubeconfig", kubeconfig, "--netns", sb.central_netns,
            "--listen", listen_address(sb)], grace=0.3)
    api = client.load(kubeconfig)
    ns, name = names.SANDBOX_CLUSTER_DNS
    ports = [{"name": n, "port": 53, "protocol": pr} for n, pr in (("dns", "UDP"),
                                                                    ("dns-tcp", "TCP"))]
    meta = {"name": name, "labels": {"k8s-app": name}}
    for res, body in (
            (r.SERVICES, {"metadata": meta, "spec": {"clusterIP": address(sb), "ports": ports}}),
            (r.ENDPOINTS, {"metadata": meta, "subsets": [{"addresses": [{"ip": listen_address(sb)}],
                                                          "ports": ports}]})):
        try:
            r.create(api, res, {"apiVersion": "v1", "kind": res.kind, **body}, ns)
        except errors.AlreadyExists:
            pass


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pacific.sandbox.k8s.clusterdns",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--listen", required=True, help="address to answer on (port 53)")
    p.add_argument("--netns", help="network namespace to listen in")
    p.add_argument("--domain", default="cluster.local")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    api = client.load(args.kubeconfig)
    infs = [Informer(api, res) for res in (r.SERVICES, versions.endpointslices(api))]
    for inf in infs:
        inf.start()
    for inf in infs:
        if not inf.wait_synced(60):
            raise SystemExit(f"{inf} never listed")
    servers = serve(Records(*infs, domain=args.domain), args.listen, args.netns)
    LOG.info("answering for %s on %s:53 (udp, tcp)%s", args.domain, args.listen,
             f" in {args.netns}" if args.netns else "")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    for srv in servers:
        srv.shutdown()
    for inf in infs:
        inf.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
