"""ovn-trace --detailed output, parsed into sections and steps (pure).

ovn-trace prints one section per logical datapath a packet crosses:

    ingress(dp="ovn-default", inport="pod:a/p1")
    --------------------------------------------
     8. ls_in_acl (northd.c:6809): ip && !ct.est, priority 1, uuid 5dbb178a
        next;
    12. ls_in_lb (northd.c:7558): ct.new && ip4.dst == 10.96.0.10 && tcp.dst == 80, priority 120, uuid f18cdfbe
        ct_lb_mark(backends=10.16.0.3:80);
        ...
        /* output to "ls-lrp:ovn-default", type "patch" */

Each step names its stage, logical flow (first 8 hex digits of its uuid: the
SB Logical_Flow whose external_ids:stage-hint names the NB row behind it) and
the actions it ran.  `outcome()` says how the trace ended.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_SECTION = re.compile(r'^\s*(ingress|egress)\(dp="([^"]*)", inport="([^"]*)"(?:, outport="([^"]*)")?\)$')
_STEP = re.compile(r"^\s*(\d+)\. (\S+) \(([^)]*)\): (.*), priority (\d+), uuid ([0-9a-f]+)$")
_OUTPUT = re.compile(r'/\* output to "([^"]*)", type "([^"]*)" \*/')
_BACKENDS = re.compile(r"ct_lb(?:_mark)?\(backends=([^);]*)")

# OVN before 23.09 runs an ACL's action in its stage (`drop;`); later OVN evaluates
# the ACLs in *_acl_eval, which only sets a verdict bit (reg8[16] allow, reg8[17]
# drop, reg8[18] reject), and *_acl_action acts on it with flows of its own
ACL_STAGES = ("ls_in_acl", "ls_out_acl", "ls_in_acl_after_lb",
              "ls_in_acl_eval", "ls_out_acl_eval", "ls_in_acl_after_lb_eval")
_EVAL_DROPS = ("reg8[17] = 1;", "reg8[18] = 1;")


@dataclass
class Step:
    table: int
    stage: str
    priority: int
    uuid: str            # first 8 hex digits of the Logical_Flow
    match: str
    actions: list[str] = field(default_factory=list)

    @property
    def is_acl(self) -> bool:
        return self.stage in ACL_STAGES

    @property
    def drops(self) -> bool:
        if any(a.startswith("drop;") or a.startswith("reject") for a in self.actions):
            return True
        # ls_in_acl_eval, ls_out_acl_eval and ls_in_acl_after_lb_eval (egress policies)
        return self.stage.endswith("_eval") and self.is_acl and any(
            a.startswith(_EVAL_DROPS) for a in self.actions)

    @property
    def backends(self) -> list[str]:
        for a in self.actions:
            m = _BACKENDS.search(a)
            if m:
                return [b.strip() for b in m.group(1).split(",") if b.strip()]
        return []


@dataclass
class Section:
    pipeline: str        # ingress | egress
    datapath: str
    inport: str
    outport: str | None
    steps: list[Step] = field(default_factory=list)
    output: tuple[str, str] | None = None   # (port, type) the section handed the packet to


@dataclass
class Outcome:
    delivered_to: str | None      # the VIF the packet reached (type "" port), or None
    dropped_at: Step | None       # the step that dropped it, or None
    last: Section | None


def parse(text: str) -> list[Section]:
    sections: list[Section] = []
    step: Step | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        m = _SECTION.match(line)
        if m:
            sections.append(Section(m.group(1), m.group(2), m.group(3), m.group(4)))
            step = None
            continue
        if not sections or not line.strip() or set(line.strip()) == {"-"}:
            continue
        m = _STEP.match(line)
        if m:
            step = Step(int(m.group(1)), m.group(2), int(m.group(5)), m.group(6), m.group(4))
            sections[-1].steps.append(step)
            continue
        m = _OUTPUT.search(line)
        if m:
            sections[-1].output = (m.group(1), m.group(2))
            continue
        if step is not None and raw.startswith("    "):
            step.actions.append(line.strip())
    return sections


def outcome(sections: list[Section]) -> Outcome:
    """Delivered (the last section output to a VIF: type "" or "localport"),
    dropped (the step that dropped it), or neither (the trace just ends: no
    route, an unknown MAC, ...)."""
    if not sections:
        return Outcome(None, None, None)
    last = sections[-1]
    if last.output and last.output[1] in ("", "localport"):
        return Outcome(last.output[0], None, last)
    for st in reversed(last.steps):
        if st.drops:
            return Outcome(None, st, last)
    return Outcome(None, None, last)
