"""Text and Graphviz renderings of pacific.tools.topology.read()'s dict."""
from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict

from pacific import names

# colour-blind-friendly palette (Okabe-Ito): one colour per tenant
_PALETTE = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7",
            "#999999"]


def tenant_colours(topo: dict) -> dict:
    """One colour per tenant, in name order (distinct up to the palette's size);
    the global tenant grey."""
    tenants = [t for t in topo["tenants"] if t != topo["global_tenant"]]
    out = {t: _PALETTE[i % len(_PALETTE)] for i, t in enumerate(tenants)}
    out[topo["global_tenant"]] = "#dddddd"
    return out


def _by_node(ports):
    groups = defaultdict(list)
    for p in ports:
        groups[p["node"] or "(no node)"].append(p)
    return sorted(groups.items())


def text(topo: dict) -> str:
    lines = []
    for router in topo["routers"]:
        lines.append(f"router {router}")
    for sw in topo["switches"]:
        if sw["name"] == names.JOIN_SWITCH:
            what = "nodes' management ports"
        else:
            ns = ", ".join(sw["namespaces"]) or ("the default Subnet" if sw["default"] else "-")
            what = f"Subnet {sw['name']}, namespaces: {ns}"
        lines.append(f"  switch {sw['name']} {sw['cidr'] or '?'} gateway {sw['gateway'] or '-'}"
                     f" ({what})")
        for node, ports in _by_node(sw["ports"]):
            items = []
            for p in ports:
                if p["kind"] == "node":
                    items.append(f"{names.MGMT_PORT} {p['ip']}")
                elif p["kind"] == "pod":
                    items.append(f"{p['owner']} {_addresses(p)} [tenant {p.get('tenant')}]")
                else:
                    items.append(f"{p['port']} {p['ip'] or ''}".strip())
            lines.append(f"    {node}: " + ", ".join(items))
    lines.append(f"load balancers: {topo['load_balancers']} "
                 f"(Services: {topo['services_with_lb']})")
    lines.append("tenants: " + "; ".join(f"{t}: {', '.join(ns)}"
                                        for t, ns in topo["tenants"].items()))
    return "\n".join(lines)


def _q(s: str) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


def dot(topo: dict) -> str:
    g = ["digraph pacific {", '  graph [rankdir=TB, fontname="Helvetica", compound=true, '
         'labelloc=t, label="Pacific logical network"];',
         '  node [fontname="Helvetica", fontsize=10, shape=box, style="rounded,filled", '
         'fillcolor="#ffffff"];', '  edge [arrowhead=none];']
    for router in topo["routers"]:
        g.append(f'  {_q("router:" + router)} [label={_q("router " + router)}, shape=ellipse, '
                 'fillcolor="#c6dbef"];')
    colours = tenant_colours(topo)
    for i, sw in enumerate(topo["switches"]):
        cid = f"cluster_sw{i}"
        label = f"switch {sw['name']}\\n{sw['cidr'] or ''}, gateway {sw['gateway'] or '-'}"
        if sw["namespaces"]:
            label += "\\nnamespaces: " + ", ".join(sw["namespaces"])
        g.append(f"  subgraph {cid} {{")
        g.append(f'    label="{label}"; style="rounded"; color="#555555";')
        first = None
        for j, (node, ports) in enumerate(_by_node(sw["ports"])):
            g.append(f"    subgraph {cid}_n{j} {{")
            g.append(f'      label={_q(node)}; style="dashed"; color="#999999";')
            for p in ports:
                if p["kind"] == "node":
                    lab, fill = f"{node} {names.MGMT_PORT}\\n{p['ip']}", "#eeeeee"
                else:
                    lab = f"{p['owner'] or p['port']}\\n{_addresses(p)}"
                    fill = colours.get(p.get("tenant"), "#ffffff")
                g.append(f'      {_q("p:" + p["port"])} [label="{lab}", fillcolor="{fill}"];')
                first = first or "p:" + p["port"]
            g.append("    }")
        if first is None:
            first = f"empty:{sw['name']}"
            g.append(f'    {_q(first)} [label="no ports", shape=plaintext, style=""];')
        g.append("  }")
        for router in topo["routers"]:
            g.append(f'  {_q("router:" + router)} -> {_q(first)} [lhead={cid}];')
    legend = [f'<tr><td bgcolor="{colours[t]}">tenant {t}</td>'
              f'<td>{", ".join(ns)}</td></tr>' for t, ns in topo["tenants"].items()]
    g.append('  legend [shape=plaintext, style="", label=<<table border="0" cellborder="1" '
             'cellspacing="0">' + "".join(legend) + "</table>>];")
    g.append("}")
    return "\n".join(g)


def render_image(dot_text: str, fmt: str) -> bytes:
    if shutil.which("dot") is None:
        raise RuntimeError("Graphviz's `dot` is not installed (Debian: apt-get install "
                           "graphviz); --format dot prints the source instead")
    cp = subprocess.run(["dot", f"-T{fmt}"], input=dot_text.encode(), capture_output=True,
                        timeout=60)
    if cp.returncode != 0:
        raise RuntimeError(f"dot failed: {cp.stderr.decode().strip()}")
    return cp.stdout


def _addresses(port: dict) -> str:
    """A port's addresses, IPv4 first ("10.16.0.5,fd00:16::5")."""
    return ",".join(port.get("ips") or [port.get("ip") or ""])
