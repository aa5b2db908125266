"""What the OVN that Pacific talks to can do, read from its Northbound schema.

Pacific runs on Debian 12's OVN 23.03 as well as on current OVN (hack/build-ovs-ovn.sh).
Rather than comparing version strings, it looks at the schema the server sent: a
column that exists is a feature that exists.  The controller logs the result once
at start ("OVN northbound schema 7.x: ACL tiers yes, ...") so an operator knows
which code paths are in use.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    schema_version: str
    acl_tier: bool          # ACL.tier (OVN >= 23.09): evaluation tiers, `pass` to the next tier
    acl_sample: bool        # ACL.sample_new (OVN >= 24.09): per-ACL IPFIX sampling
    lb_health_check: bool   # Load_Balancer.health_check (OVN >= 20.06)

    def describe(self) -> str:
        def yes(v: bool) -> str:
            return "yes" if v else "no"
        return (f"OVN northbound schema {self.schema_version}: ACL tiers {yes(self.acl_tier)}"
                f"{'' if self.acl_tier else ' (tenant isolation and NetworkPolicy by priority bands)'}"
                f", ACL sampling {yes(self.acl_sample)}"
                f", load-balancer health checks {yes(self.lb_health_check)}")


def from_schema(schema_json: dict) -> Capabilities:
    """Capabilities of the server whose Northbound schema (as sent by the server,
    the JSON of `get_schema`) is `schema_json`."""
    tables = schema_json.get("tables", {})

    def has(table: str, column: str) -> bool:
        return column in tables.get(table, {}).get("columns", {})

    return Capabilities(schema_version=str(schema_json.get("version", "?")),
                        acl_tier=has("ACL", "tier"),
                        acl_sample=has("ACL", "sample_new"),
                        lb_health_check=has("Load_Balancer", "health_check"))
