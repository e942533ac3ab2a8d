"""`troupe simulate --output html`: one self-contained page people can look at.

No server, no network, no script: inline CSS and SVG only, so the page opens
the same in any browser, offline, and a screenshot shows it all. Sections:

- use per node, grouped by zone and rack (`topology.kubernetes.io/zone`,
  `troupe.dev/rack` or `topology.kubernetes.io/rack`): a heat map, one cell a
  node, coloured by its cpu requested / allocatable (hover: every resource);
- pending pods grouped by reason, with a bar each;
- PodGroups: phase, members placed, the domain they landed in;
- preemptions: victim, preemptor, node;
- with ElasticQuotas in the input, use per quota: each resource's used against
  its max (min marked), and the numbers;
- with `--compare`, both runs side by side, and what differs.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any, Final

from troupe.tools.simulate import SimulationResult

ZONE_LABELS: Final = ("topology.kubernetes.io/zone",)
RACK_LABELS: Final = ("troupe.dev/rack", "topology.kubernetes.io/rack")
CELL: Final = 28  # px, one node
PER_ROW: Final = 24

_CSS: Final = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2430;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
h3{font-size:13px;margin:12px 0 4px;color:#4a5568}
.sub{color:#4a5568;margin-bottom:16px}
table{border-collapse:collapse;margin:4px 0 12px} td,th{padding:3px 10px;text-align:left;
border-bottom:1px solid #e2e8f0;vertical-align:top} th{background:#f7fafc;font-weight:600}
.runs{display:flex;gap:40px;flex-wrap:wrap} .run{flex:1;min-width:420px}
.legend span{display:inline-block;width:14px;height:14px;margin:0 4px -2px 12px}
.num{text-align:right;font-variant-numeric:tabular-nums}
"""


def _heat(f: float) -> str:
    """A colour from pale green (idle) through yellow to red (full)."""
    f = max(0.0, min(1.0, f))
    if f < 0.5:
        r, g, b = 198 + (253 - 198) * f * 2, 239 + (224 - 239) * f * 2, 206 + (71 - 206) * f * 2
    else:
        t = (f - 0.5) * 2
        r, g, b = 253 + (220 - 253) * t, 224 + (38 - 224) * t, 71 + (38 - 71) * t
    return f"rgb({int(r)},{int(g)},{int(b)})"


def _label(labels: Mapping[str, str], keys: Sequence[str]) -> str:
    for k in keys:
        v = labels.get(k)
        if v:
            return v
    return ""


def node_places(objects: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """Node -> (zone, rack) from the input's Node objects ("" when unlabelled)."""
    out: dict[str, tuple[str, str]] = {}
    for o in objects:
        if o.get("kind") != "Node":
            continue
        md = o.get("metadata") or {}
        labels = md.get("labels") or {}
        out[str(md.get("name"))] = (_label(labels, ZONE_LABELS), _label(labels, RACK_LABELS))
    return out


def _fraction(use: Mapping[str, Any], resource: str = "cpu") -> float:
    r = use.get(resource) or {}
    alloc = float(r.get("allocatable") or 0)
    return float(r.get("requested") or 0) / alloc if alloc else 0.0


def _heat_map(result: SimulationResult, places: Mapping[str, tuple[str, str]]) -> str:
    groups: dict[tuple[str, str], list[str]] = {}
    for node in sorted(result.nodes):
        groups.setdefault(places.get(node, ("", "")), []).append(node)
    parts = []
    for (zone, rack), nodes in sorted(groups.items()):
        title = " / ".join(
            x for x in (f"zone {zone}" if zone else "", f"rack {rack}" if rack else "") if x
        )
        rows = (len(nodes) + PER_ROW - 1) // PER_ROW
        width = min(len(nodes), PER_ROW) * CELL
        cells = []
        for i, node in enumerate(nodes):
            use = result.nodes[node]
            tip = f"{node}: " + ", ".join(
                f"{r} {v.get('requested')}/{v.get('allocatable')}" for r, v in sorted(use.items())
            )
            x, y = (i % PER_ROW) * CELL, (i // PER_ROW) * CELL
            side = CELL - 2
            cells.append(
                f'<rect class="node" x="{x + 1}" y="{y + 1}" width="{side}" height="{side}" '
                f'rx="3" fill="{_heat(_fraction(use))}"><title>{html.escape(tip)}</title></rect>'
            )
        parts.append(
            f"<h3>{html.escape(title or 'nodes')} ({len(nodes)})</h3>"
            f'<svg width="{width}" height="{rows * CELL}" role="img" '
            f'aria-label="cpu use of {len(nodes)} nodes">{"".join(cells)}</svg>'
        )
    legend = (
        '<div class="legend">cpu requested / allocatable: '
        + "".join(
            f'<span style="background:{_heat(f)}"></span>{int(f * 100)}%'
            for f in (0, 0.25, 0.5, 0.75, 1)
        )
        + "</div>"
    )
    return legend + "".join(parts)


def _pending(result: SimulationResult) -> str:
    by_reason: dict[str, list[str]] = {}
    for k, p in result.pods.items():
        if not p.get("node") and not p.get("preemptedBy"):
            by_reason.setdefault(str(p.get("reason") or "pending"), []).append(k)
    if not by_reason:
        return "<p>No pod is pending.</p>"
    most = max(len(v) for v in by_reason.values())
    rows = []
    for reason, pods in sorted(by_reason.items(), key=lambda t: (-len(t[1]), t[0])):
        bar = (
            f'<svg width="160" height="12"><rect class="bar" width="{160 * len(pods) / most:.1f}" '
            'height="12" fill="#dd6b20"/></svg>'
        )
        shown = ", ".join(pods[:5]) + (f" and {len(pods) - 5} more" if len(pods) > 5 else "")
        rows.append(
            f'<tr><td class="num">{len(pods)}</td><td>{bar}</td><td>{html.escape(reason)}'
            f"<br><small>{html.escape(shown)}</small></td></tr>"
        )
    return "<table><tr><th>pods</th><th></th><th>reason</th></tr>" + "".join(rows) + "</table>"


def _groups(result: SimulationResult) -> str:
    if not result.pod_groups:
        return "<p>No PodGroup.</p>"
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(g.get('phase')))}</td>"
        f'<td class="num">{g.get("scheduled")}</td><td class="num">{g.get("running")}</td>'
        f"<td>{html.escape(str(g.get('domain') or '-'))}</td></tr>"
        for k, g in result.pod_groups.items()
    )
    return (
        "<table><tr><th>PodGroup</th><th>phase</th><th>placed</th><th>running</th>"
        f"<th>domain</th></tr>{rows}</table>"
    )


def _preemptions(result: SimulationResult) -> str:
    victims = [(k, p) for k, p in result.pods.items() if p.get("preemptedBy")]
    if not victims:
        return "<p>No preemption.</p>"
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(p['preemptedBy']))}</td>"
        f"<td>{html.escape(str(p.get('preemptedFrom') or p.get('node') or ''))}</td></tr>"
        for k, p in victims
    )
    return f"<table><tr><th>victim</th><th>preempted by</th><th>node</th></tr>{rows}</table>"


def _quotas(result: SimulationResult) -> str:
    """Each ElasticQuota's use by resource: a bar of used against max (against
    min when max leaves the resource unlimited), min marked on it."""
    rows = []
    for key, q in result.elastic_quotas.items():
        for r in sorted(q["used"].keys() | q["min"].keys() | q["max"].keys()):
            used, lo, hi = q["used"].get(r, 0), q["min"].get(r), q["max"].get(r)
            scale = float(hi if hi else lo if lo else used) or 1.0
            width, mark = 160 * min(1.0, used / scale), 160 * min(1.0, (lo or 0) / scale)
            tick = (
                f'<line x1="{mark:.1f}" x2="{mark:.1f}" y1="0" y2="12" '
                'stroke="#2b6cb0" stroke-width="2"/>'
                if lo
                else ""
            )
            bar = (
                f'<svg width="160" height="12"><rect class="bar" width="{width:.1f}" '
                f'height="12" fill="{_heat(used / scale)}"/>{tick}</svg>'
            )
            shown_min = "-" if lo is None else f"{lo:g}"
            shown_max = "-" if hi is None else f"{hi:g}"
            rows.append(
                f"<tr><td>{html.escape(key)}</td><td>{html.escape(r)}</td><td>{bar}</td>"
                f'<td class="num">{used:g}</td><td class="num">{shown_min}</td>'
                f'<td class="num">{shown_max}</td></tr>'
            )
    return (
        "<table><tr><th>ElasticQuota</th><th>resource</th><th></th><th>used</th><th>min</th>"
        f"<th>max</th></tr>{''.join(rows)}</table>"
    )


def _run(result: SimulationResult, places: Mapping[str, tuple[str, str]]) -> str:
    placed = sum(1 for p in result.pods.values() if p.get("node") and not p.get("preemptedBy"))
    n_pods, n_nodes = len(result.pods), len(result.nodes)
    return (
        f'<div class="sub">{placed} of {n_pods} pods placed on {n_nodes} nodes, '
        f"{result.cycles} scheduling cycles, {result.virtual_seconds:g} s of virtual time</div>"
        f"<h2>Use per node</h2>{_heat_map(result, places)}"
        f"<h2>Pending pods by reason</h2>{_pending(result)}"
        f"<h2>Pod groups</h2>{_groups(result)}"
        f"<h2>Preemptions</h2>{_preemptions(result)}"
        + (f"<h2>Use per quota</h2>{_quotas(result)}" if result.elastic_quotas else "")
    )


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def render_html(result: SimulationResult, objects: Sequence[Mapping[str, Any]]) -> str:
    """One run as a page."""
    return _page("troupe simulate", _run(result, node_places(objects)))


def render_compare_html(
    results: Sequence[SimulationResult],
    names: Sequence[str],
    diff: Mapping[str, Any],
    objects: Sequence[Mapping[str, Any]],
) -> str:
    """Two runs side by side, with what differs."""
    places = node_places(objects)
    a, b = names
    moved = "".join(
        f"<tr><td>{html.escape(m['pod'])}</td><td>{html.escape(str(m[a]))}</td>"
        f"<td>{html.escape(str(m[b]))}</td></tr>"
        for m in diff["moved"]
    )
    only = ""
    for name, other in ((a, b), (b, a)):
        rows = "".join(
            f"<tr><td>{html.escape(m['pod'])}</td><td>{html.escape(str(m['node']))}</td>"
            f"<td>{html.escape(str(m['reason']))}</td></tr>"
            for m in diff[f"placedOnlyUnder{name}"]
        )
        only += f"<h3>placed under {html.escape(name)} only</h3>" + (
            f"<table><tr><th>pod</th><th>node</th><th>reason under {html.escape(other)}</th>"
            f"</tr>{rows}</table>"
            if rows
            else "<p>None.</p>"
        )
    head = (
        f"<h2>What differs</h2><h3>placed on other nodes ({len(diff['moved'])})</h3>"
        + (
            f"<table><tr><th>pod</th><th>{html.escape(a)}</th><th>{html.escape(b)}</th></tr>"
            f"{moved}</table>"
            if moved
            else "<p>None.</p>"
        )
        + only
    )
    runs = "".join(
        f'<div class="run"><h2>{html.escape(n)}</h2>{_run(r, places)}</div>'
        for n, r in zip(names, results, strict=True)
    )
    return _page(f"troupe simulate: {a} vs {b}", head + f'<div class="runs">{runs}</div>')
