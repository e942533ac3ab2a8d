"""What if: the same cluster scheduled under two configurations, side by side.

`compare(a, b)` reports what differs between two `SimulationResult`s of the
same input: pods placed on other nodes, pods pending in one run and not in
the other (with both reasons), gangs admitted in one only, preemptions, and
the use of each node and zone (by `topology.kubernetes.io/zone`) under both,
and of each ElasticQuota (used under both, with its min and max).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from troupe.tools.simulate import SimulationResult

ZONE_LABEL = "topology.kubernetes.io/zone"


def _placed(p: Mapping[str, Any]) -> bool:
    return bool(p.get("node")) and not p.get("preemptedBy")


def _use(nodes: Mapping[str, Any], resource: str) -> tuple[float, float]:
    req = sum(float(n.get(resource, {}).get("requested", 0)) for n in nodes.values())
    alloc = sum(float(n.get(resource, {}).get("allocatable", 0)) for n in nodes.values())
    return req, alloc


def compare(
    a: SimulationResult,
    b: SimulationResult,
    names: tuple[str, str] = ("A", "B"),
    zones: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The differences between two runs of one input; `zones`: node -> zone."""
    moved, only_a, only_b = [], [], []
    for key in sorted(a.pods.keys() | b.pods.keys()):
        pa, pb = a.pods.get(key, {}), b.pods.get(key, {})
        in_a, in_b = _placed(pa), _placed(pb)
        if in_a and in_b and pa["node"] != pb["node"]:
            moved.append({"pod": key, names[0]: pa["node"], names[1]: pb["node"]})
        elif in_a and not in_b:
            only_a.append({"pod": key, "node": pa["node"], "reason": pb.get("reason")})
        elif in_b and not in_a:
            only_b.append({"pod": key, "node": pb["node"], "reason": pa.get("reason")})
    gangs = []
    for key in sorted(a.pod_groups.keys() | b.pod_groups.keys()):
        ga, gb = a.pod_groups.get(key, {}), b.pod_groups.get(key, {})
        sa, sb = ga.get("scheduled", 0), gb.get("scheduled", 0)
        if sa != sb or ga.get("phase") != gb.get("phase") or ga.get("domain") != gb.get("domain"):
            gangs.append(
                {
                    "podGroup": key,
                    names[0]: {k: ga.get(k) for k in ("phase", "scheduled", "domain")},
                    names[1]: {k: gb.get(k) for k in ("phase", "scheduled", "domain")},
                }
            )
    victims = {
        n: sorted(k for k, p in r.pods.items() if p.get("preemptedBy"))
        for n, r in zip(names, (a, b), strict=True)
    }
    resources = sorted({r for res in (a, b) for n in res.nodes.values() for r in n} - {"pods"}) or [
        "cpu"
    ]
    nodes = []
    for node in sorted(a.nodes.keys() | b.nodes.keys()):
        row: dict[str, Any] = {"node": node}
        if zones:
            row["zone"] = zones.get(node, "")
        for n, res in zip(names, (a, b), strict=True):
            row[n] = {r: res.nodes.get(node, {}).get(r, {}).get("requested", 0) for r in resources}
        nodes.append(row)
    by_zone: dict[str, Any] = {}
    if zones:
        for z in sorted(set(zones.values())):
            members = [n for n, zz in zones.items() if zz == z]
            by_zone[z or "(no zone)"] = {
                n: {
                    r: dict(
                        zip(
                            ("requested", "allocatable"),
                            _use({m: res.nodes.get(m, {}) for m in members}, r),
                            strict=True,
                        )
                    )
                    for r in resources
                }
                for n, res in zip(names, (a, b), strict=True)
            }
    placed = {
        n: sum(1 for p in r.pods.values() if _placed(p)) for n, r in zip(names, (a, b), strict=True)
    }
    quotas = []
    for key in sorted(a.elastic_quotas.keys() | b.elastic_quotas.keys()):
        qa, qb = a.elastic_quotas.get(key, {}), b.elastic_quotas.get(key, {})
        spec = qa or qb
        quotas.append(
            {
                "elasticQuota": key,
                "min": spec.get("min", {}),
                "max": spec.get("max", {}),
                names[0]: dict(qa.get("used", {})),
                names[1]: dict(qb.get("used", {})),
            }
        )
    return {
        "configurations": list(names),
        "placed": placed,
        "moved": moved,
        f"placedOnlyUnder{names[0]}": only_a,
        f"placedOnlyUnder{names[1]}": only_b,
        "podGroups": gangs,
        "preempted": victims,
        "nodes": nodes,
        "zones": by_zone,
        "elasticQuotas": quotas,
    }


def format_compare(diff: Mapping[str, Any]) -> str:
    """The comparison for people."""
    a, b = diff["configurations"]
    lines = [f"COMPARE {a} vs {b}: {diff['placed'][a]} vs {diff['placed'][b]} pods placed"]
    moved = diff["moved"]
    lines.append(f"\nplaced on other nodes: {len(moved)}")
    if moved:
        w = max(len("POD"), *(len(m["pod"]) for m in moved))
        lines.append(f"  {'POD':<{w}}  {a} -> {b}")
        lines.extend(f"  {m['pod']:<{w}}  {m[a]} -> {m[b]}" for m in moved)
    for name, other in ((a, b), (b, a)):
        only = diff[f"placedOnlyUnder{name}"]
        lines.append(f"\nplaced under {name} only: {len(only)}")
        for m in only:
            lines.append(f"  {m['pod']}  on {m['node']}; under {other}: {m['reason']}")
    gangs = diff["podGroups"]
    if gangs:
        lines.append(f"\npod groups that differ: {len(gangs)}")
        for g in gangs:
            ga, gb = g[a], g[b]
            lines.append(
                f"  {g['podGroup']}  {a}: {ga['phase']} {ga['scheduled']} placed"
                + (f" in {ga['domain']}" if ga.get("domain") else "")
                + f"; {b}: {gb['phase']} {gb['scheduled']} placed"
                + (f" in {gb['domain']}" if gb.get("domain") else "")
            )
    pa, pb = diff["preempted"][a], diff["preempted"][b]
    if pa or pb:
        lines.append(f"\npreempted: {a} {len(pa)}, {b} {len(pb)}")
        for name, victims in ((a, pa), (b, pb)):
            if victims:
                lines.append(f"  under {name}: " + ", ".join(victims))
    if diff["zones"]:
        lines.append("\nZONE  " + f"{a} requested/allocatable  {b} requested/allocatable")
        for z, use in diff["zones"].items():
            cells = []
            for name in (a, b):
                cpu = use[name].get("cpu", {"requested": 0, "allocatable": 0})
                cells.append(f"cpu {cpu['requested']:g}/{cpu['allocatable']:g}")
            lines.append(f"{z}  " + "  ".join(cells))
    quotas = diff.get("elasticQuotas") or []
    if quotas:
        qw = max([len("ELASTICQUOTA"), *(len(q["elasticQuota"]) for q in quotas)])
        lines.append(f"\n{'ELASTICQUOTA':<{qw}}  used {a}/{b} (min, max)")
        for q in quotas:
            rs_q = sorted(q[a].keys() | q[b].keys() | q["min"].keys() | q["max"].keys())
            cells = [
                f"{r} {_num(q[a].get(r, 0))}/{_num(q[b].get(r, 0))} "
                f"({_num(q['min'][r]) if r in q['min'] else '-'}, "
                f"{_num(q['max'][r]) if r in q['max'] else '-'})"
                for r in rs_q
            ]
            lines.append(f"{q['elasticQuota']:<{qw}}  " + ", ".join(cells))
    lines.append("")
    rs = list(diff["nodes"][0][a]) if diff["nodes"] else []
    nw = max([len("NODE"), *(len(n["node"]) for n in diff["nodes"])])
    lines.append(f"{'NODE':<{nw}}  " + "  ".join(f"{r} {a}/{b}" for r in rs))
    for n in diff["nodes"]:
        cells = [f"{_num(n[a][r])}/{_num(n[b][r])}".ljust(len(f"{r} {a}/{b}")) for r in rs]
        lines.append(f"{n['node']:<{nw}}  " + "  ".join(cells).rstrip())
    return "\n".join(lines)


def _num(v: float) -> str:
    """An amount as the node table shows it: whole numbers without a point,
    bytes in Gi or Mi when they divide."""
    if v >= 2**30 and v % 2**30 == 0:
        return f"{v / 2**30:g}Gi"
    if v >= 2**20 and v % 2**20 == 0:
        return f"{v / 2**20:g}Mi"
    return f"{v:g}"
