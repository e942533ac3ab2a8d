"""`troupe simulate --output html`: one self-contained page an operator keeps.

No server, no network, no script: inline CSS only, so the page opens the same
in any browser, offline, and a screenshot or a print shows it all. Sections:

- provenance: the input files, the configuration, Troupe's version, the time;
- use per node, grouped by zone and rack (`topology.kubernetes.io/zone`,
  `troupe.dev/rack` or `topology.kubernetes.io/rack`): a heat map, one
  labelled cell a node (its name, requested / allocatable with units, the
  percentage), one map per resource (cpu, memory, isolated CPUs, other
  extended resources, DRA devices per class, pods) switched by radio inputs
  and CSS `:checked` rules (printing shows every map). The colours are six
  steps of viridis (colour-blind safe, adjacent steps apart in lightness);
  the legend gives each step's range;
- totals per zone and rack, per resource;
- pending pods grouped by reason, with a bar each;
- PodGroups: phase, members placed, the domain they landed in;
- preemptions: victim, preemptor, node;
- with ElasticQuotas in the input, use per quota: each resource's used against
  its max (min marked), and the numbers;
- where each pod went: node, zone, rack (and its devices);
- with `--compare`, the figures of both runs side by side (pods placed,
  pending and preempted, use per zone and rack and per node under each run,
  pods moved, pods placed under one run only), then both runs in full.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from troupe import __version__
from troupe.api.types import ISOLATED_CPU_RESOURCE
from troupe.tools.simulate import SimulationResult

ZONE_LABELS: Final = ("topology.kubernetes.io/zone",)
RACK_LABELS: Final = ("troupe.dev/rack", "topology.kubernetes.io/rack")
# Six steps of viridis, light (idle) to dark (full), and the text that reads on each.
STEPS: Final = ("#fde725", "#7ad151", "#22a884", "#2a788e", "#414487", "#440154")
INK: Final = ("#111", "#111", "#111", "#fff", "#fff", "#fff")
STEP_NAMES: Final = ("0–20 %", "20–40 %", "40–60 %", "60–80 %", "80–99 %", "100 %")
NONE_COLOUR: Final = "#e2e8f0"  # the node has none of the resource
BYTES: Final = ("memory", "ephemeral-storage")

_CSS: Final = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2430;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
h3{font-size:13px;margin:12px 0 4px;color:#4a5568}
.sub{color:#4a5568;margin-bottom:16px}
table{border-collapse:collapse;margin:4px 0 12px} td,th{padding:3px 10px;text-align:left;
border-bottom:1px solid #e2e8f0;vertical-align:top} th{background:#f7fafc;font-weight:600}
.runs{display:flex;gap:40px;flex-wrap:wrap} .run{flex:1;min-width:420px}
.legend{margin:4px 0 8px} .legend span{display:inline-block;width:14px;height:14px;
margin:0 4px -2px 12px;border:1px solid #cbd5e0}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.totals td{white-space:nowrap}
.grid{display:grid;grid-template-columns:repeat(auto-fill,136px);gap:3px;max-width:1120px}
.cell{height:50px;border-radius:3px;padding:3px 6px;font-size:11px;line-height:1.3;
overflow:hidden;white-space:nowrap;text-overflow:ellipsis;box-sizing:border-box}
.cell b{display:block;overflow:hidden;text-overflow:ellipsis;font-size:12px}
.switch>input{position:absolute;opacity:0;width:1px;height:1px}
.switch>label{display:inline-block;padding:3px 10px;margin:0 4px 4px 0;border:1px solid #a0aec0;
border-radius:12px;cursor:pointer}
.switch>input:checked+label{background:#2d3748;color:#fff;border-color:#2d3748}
.switch>input:focus-visible+label{outline:2px solid #2b6cb0}
.map{display:none} .chg td,td.chg{font-weight:600} .sbs td{white-space:nowrap}
.prov td:first-child{color:#4a5568}
"""


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a page came from: what `troupe simulate` read, with which
    configuration ("" for the default profile), by which Troupe, when."""

    files: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()
    seed: int | None = None
    version: str = __version__
    time: str = ""  # ISO 8601 UTC; the time of rendering when empty


def _step(f: float) -> int:
    """Which of the six colour steps a fraction falls in."""
    if f >= 1.0:
        return 5
    return max(0, min(4, int(f * 5)))


def _heat(f: float) -> str:
    """The colour step of a fraction (0 idle, 1 full) as `rgb(r,g,b)`."""
    c = STEPS[_step(f)]
    return f"rgb({int(c[1:3], 16)},{int(c[3:5], 16)},{int(c[5:7], 16)})"


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


def _trim(v: float) -> str:
    return f"{round(v, 2):g}"


def _bytes(v: float) -> str:
    """Bytes in binary units: Gi, Mi, Ki."""
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if abs(v) >= size:
            return f"{v / size:.1f}".removesuffix(".0") + unit
    return f"{v:g}"


@dataclass(frozen=True, slots=True)
class _Measure:
    """One resource as the maps show it: node -> (requested, allocatable)."""

    title: str
    unit: str  # after a pair: "cores", "CPUs", "pods", "devices"; "" for bytes and counts
    use: dict[str, tuple[float, float]]
    binary: bool = False  # bytes, shown in Gi, Mi, Ki

    def amount(self, v: float) -> str:
        return _bytes(v) if self.binary else _trim(v)

    def pair(self, req: float, alloc: float) -> str:
        s = f"{self.amount(req)} / {self.amount(alloc)}"
        return f"{s} {self.unit}".rstrip()


def _binary(resource: str) -> bool:
    return resource in BYTES or resource.startswith("hugepages-")


def _unit(resource: str) -> str:
    return {"cpu": "cores", ISOLATED_CPU_RESOURCE: "CPUs", "pods": "pods"}.get(resource, "")


def _title(resource: str) -> str:
    return {ISOLATED_CPU_RESOURCE: "isolated CPUs"}.get(resource, resource)


_DRIVER_ONLY: Final = re.compile(r"""^\s*device\.driver\s*==\s*["']([^"']+)["']\s*$""")


def _device_classes(objects: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Driver -> DeviceClass name, for the classes that select one driver's
    devices and nothing else (other devices are shown by their driver)."""
    out: dict[str, str] = {}
    for o in objects:
        if o.get("kind") != "DeviceClass":
            continue
        sels = (o.get("spec") or {}).get("selectors") or []
        exprs = [str((s.get("cel") or {}).get("expression", "")) for s in sels]
        m = _DRIVER_ONLY.match(exprs[0]) if len(exprs) == 1 else None
        if m:
            out.setdefault(m.group(1), str((o.get("metadata") or {}).get("name")))
    return out


def _devices(result: SimulationResult, objects: Sequence[Mapping[str, Any]]) -> list[_Measure]:
    """DRA devices per class and node: the node-local ResourceSlices' devices,
    and those allocated to the pods placed at the end."""
    classes = _device_classes(objects)
    owner: dict[tuple[str, str, str], str] = {}
    alloc: dict[str, dict[str, float]] = {}
    for o in objects:
        spec = o.get("spec") or {}
        node = spec.get("nodeName")
        if o.get("kind") != "ResourceSlice" or not node:
            continue
        driver, pool = str(spec.get("driver")), str((spec.get("pool") or {}).get("name"))
        for d in spec.get("devices") or []:
            owner[(driver, pool, str(d.get("name")))] = str(node)
            per = alloc.setdefault(driver, {})
            per[str(node)] = per.get(str(node), 0) + 1
    used: dict[str, dict[str, float]] = {}
    for p in result.pods.values():
        if not p.get("node") or p.get("preemptedBy"):
            continue
        for ids in (p.get("devices") or {}).values():
            for dev in ids:
                driver, _, rest = str(dev).partition("/")
                pool, _, name = rest.rpartition("/")
                node = owner.get((driver, pool, name))
                if node:
                    per = used.setdefault(driver, {})
                    per[node] = per.get(node, 0) + 1
    return [
        _Measure(
            f"devices: {classes.get(driver, driver)}",
            "devices",
            {n: (used.get(driver, {}).get(n, 0), a) for n, a in nodes.items()},
        )
        for driver, nodes in sorted(alloc.items())
    ]


def measures(result: SimulationResult, objects: Sequence[Mapping[str, Any]]) -> list[_Measure]:
    """The resources a page shows, in the order an operator reads them: cpu,
    memory, isolated CPUs, the other resources, devices per class, pods."""
    names = {r for use in result.nodes.values() for r in use}
    first = [r for r in ("cpu", "memory", ISOLATED_CPU_RESOURCE) if r in names]
    rest = sorted(names - set(first) - {"pods"})
    out = []
    for r in [*first, *rest]:
        use = {
            n: (float(u[r]["requested"]), float(u[r]["allocatable"]))
            for n, u in result.nodes.items()
            if r in u
        }
        out.append(_Measure(_title(r), _unit(r), use, _binary(r)))
    out += _devices(result, objects)
    if "pods" in names:
        out.append(
            _Measure(
                "pods",
                "pods",
                {
                    n: (float(u["pods"]["requested"]), float(u["pods"]["allocatable"]))
                    for n, u in result.nodes.items()
                    if "pods" in u
                },
            )
        )
    return out


def _pct(req: float, alloc: float) -> str:
    return f"{100 * req / alloc:.0f} %" if alloc else "-"


def _groups_of(
    nodes: Sequence[str], places: Mapping[str, tuple[str, str]]
) -> list[tuple[tuple[str, str], list[str]]]:
    groups: dict[tuple[str, str], list[str]] = {}
    for node in sorted(nodes):
        groups.setdefault(places.get(node, ("", "")), []).append(node)
    return sorted(groups.items())


def _where(zone: str, rack: str) -> str:
    shown = " / ".join(
        x for x in (f"zone {zone}" if zone else "", f"rack {rack}" if rack else "") if x
    )
    return shown or "nodes"


def _map(m: _Measure, nodes: Sequence[str], places: Mapping[str, tuple[str, str]]) -> str:
    legend = (
        f'<div class="legend">{html.escape(m.title)} requested / allocatable:'
        + "".join(
            f'<span style="background:{c}"></span>{n}'
            for c, n in zip(STEPS, STEP_NAMES, strict=True)
        )
        + f'<span style="background:{NONE_COLOUR}"></span>none on the node</div>'
    )
    parts = []
    for (zone, rack), members in _groups_of(nodes, places):
        cells = []
        for node in members:
            name = html.escape(node)
            if node in m.use:
                req, alloc = m.use[node]
                s = _step(req / alloc if alloc else 0.0)
                style = f"background:{STEPS[s]};color:{INK[s]}"
                text = f"{html.escape(m.pair(req, alloc))}<br>{_pct(req, alloc)}"
            else:
                style, text = f"background:{NONE_COLOUR};color:#4a5568", "none"
            cells.append(
                f'<div class="cell" style="{style}" title="{name}"><b>{name}</b>{text}</div>'
            )
        parts.append(
            f"<h3>{html.escape(_where(zone, rack))} ({len(members)})</h3>"
            f'<div class="grid">{"".join(cells)}</div>'
        )
    return legend + "".join(parts)


def _heat_maps(
    ms: Sequence[_Measure],
    result: SimulationResult,
    places: Mapping[str, tuple[str, str]],
    run: str,
) -> str:
    """One map per resource, the cpu one shown first; a radio input per map
    selects it through `:checked` rules (no script)."""
    radios, maps = [], []
    for i, m in enumerate(ms):
        rid = f"{run}-r{i}"
        radios.append(
            f'<input type="radio" name="{run}-use" id="{rid}"{" checked" if i == 0 else ""}>'
            f'<label for="{rid}">{html.escape(m.title)}</label>'
        )
        maps.append(f'<div class="map m{i}">{_map(m, list(result.nodes), places)}</div>')
    return f'<div class="switch">{"".join(radios)}{"".join(maps)}</div>'


def _switch_css(n: int) -> str:
    shown = ",".join(f".switch>input:nth-of-type({i + 1}):checked~.m{i}" for i in range(n))
    printed = "@media print{.switch>.map{display:block}.switch>label,.switch>input{display:none}}"
    return (f"{shown}{{display:block}}" if n else "") + printed


def _totals(
    ms: Sequence[_Measure], places: Mapping[str, tuple[str, str]], nodes: Sequence[str]
) -> str:
    """Requested / allocatable per zone, per rack within it, and the cluster's."""
    rows = []

    def row(zone: str, rack: str, members: Sequence[str], strong: bool) -> str:
        cells = []
        for m in ms:
            pairs = [m.use[n] for n in members if n in m.use]
            req, alloc = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
            cells.append(
                f'<td class="num">{html.escape(m.pair(req, alloc))} ({_pct(req, alloc)})</td>'
                if pairs
                else '<td class="num">-</td>'
            )
        cls = ' class="chg"' if strong else ""
        return (
            f"<tr{cls}><td>{html.escape(zone)}</td><td>{html.escape(rack)}</td>"
            f'<td class="num">{len(members)}</td>{"".join(cells)}</tr>'
        )

    zones: dict[str, list[str]] = {}
    for n in nodes:
        zones.setdefault(places.get(n, ("", ""))[0], []).append(n)
    for zone, members in sorted(zones.items()):
        racks: dict[str, list[str]] = {}
        for n in members:
            racks.setdefault(places.get(n, ("", ""))[1], []).append(n)
        rows.append(row(zone or "(no zone)", "all", members, True))
        if len(racks) > 1 or "" not in racks:
            rows += [row("", rack or "(no rack)", rs, False) for rack, rs in sorted(racks.items())]
    rows.append(row("cluster", "", list(nodes), True))
    head = "".join(f"<th>{html.escape(m.title)}</th>" for m in ms)
    return (
        f'<table class="totals"><tr><th>zone</th><th>rack</th><th>nodes</th>{head}</tr>'
        f"{''.join(rows)}</table>"
    )


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
    min when max leaves the resource unlimited), min marked on it; bytes in
    Gi, Mi, Ki."""
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
            amount = _bytes if _binary(r) else _trim
            shown_min = "-" if lo is None else amount(lo)
            shown_max = "-" if hi is None else amount(hi)
            rows.append(
                f"<tr><td>{html.escape(key)}</td><td>{html.escape(r)}</td><td>{bar}</td>"
                f'<td class="num">{amount(used)}</td><td class="num">{shown_min}</td>'
                f'<td class="num">{shown_max}</td></tr>'
            )
    return (
        "<table><tr><th>ElasticQuota</th><th>resource</th><th></th><th>used</th><th>min</th>"
        f"<th>max</th></tr>{''.join(rows)}</table>"
    )


def _status(p: Mapping[str, Any]) -> str:
    if p.get("preemptedBy"):
        return f"preempted by {p['preemptedBy']}"
    return "placed" if p.get("node") else "pending"


def _placements(result: SimulationResult, places: Mapping[str, tuple[str, str]]) -> str:
    """Where each pod went: node, zone, rack, and the devices of its claims."""
    if not result.pods:
        return "<p>No pod.</p>"
    devices = any(p.get("devices") for p in result.pods.values())
    rows = []
    for k, p in result.pods.items():
        node = str(p.get("node") or p.get("preemptedFrom") or "")
        zone, rack = places.get(node, ("", "")) if node else ("", "")
        devs = ", ".join(d for ids in (p.get("devices") or {}).values() for d in ids)
        rows.append(
            f"<tr><td>{html.escape(k)}</td><td>{html.escape(node or '-')}</td>"
            f"<td>{html.escape(zone or '-')}</td><td>{html.escape(rack or '-')}</td>"
            f"<td>{html.escape(_status(p))}</td>"
            + (f"<td>{html.escape(devs or '-')}</td>" if devices else "")
            + "</tr>"
        )
    return (
        '<table class="placements"><tr><th>pod</th><th>node</th><th>zone</th><th>rack</th>'
        "<th>status</th>"
        + ("<th>devices</th>" if devices else "")
        + f"</tr>{''.join(rows)}</table>"
    )


def _run(
    result: SimulationResult,
    places: Mapping[str, tuple[str, str]],
    ms: Sequence[_Measure],
    run: str,
) -> str:
    placed = sum(1 for p in result.pods.values() if p.get("node") and not p.get("preemptedBy"))
    n_pods, n_nodes = len(result.pods), len(result.nodes)
    return (
        f'<div class="sub">{placed} of {n_pods} pods placed on {n_nodes} nodes, '
        f"{result.cycles} scheduling cycles, {result.virtual_seconds:g} s of virtual time</div>"
        f"<h2>Use per node</h2>{_heat_maps(ms, result, places, run)}"
        f"<h2>Totals per zone and rack</h2>{_totals(ms, places, list(result.nodes))}"
        f"<h2>Pending pods by reason</h2>{_pending(result)}"
        f"<h2>Pod groups</h2>{_groups(result)}"
        f"<h2>Preemptions</h2>{_preemptions(result)}"
        + (f"<h2>Use per quota</h2>{_quotas(result)}" if result.elastic_quotas else "")
        + f"<h2>Placements</h2>{_placements(result, places)}"
    )


def _provenance(p: Provenance, names: Sequence[str] = ()) -> str:
    when = p.time or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    files = "<br>".join(html.escape(f) for f in p.files) or "not given"
    if names:
        configs = "<br>".join(
            f"{html.escape(n)}: {html.escape(c or 'default profile')}"
            for n, c in zip(names, p.configs or ("",) * len(names), strict=True)
        )
    else:
        configs = "<br>".join(html.escape(c or "default profile") for c in p.configs)
    rows = [
        ("input files", files),
        ("configuration", configs or "default profile"),
        ("seed", "default" if p.seed is None else str(p.seed)),
        ("Troupe version", html.escape(p.version)),
        ("generated (UTC)", html.escape(when)),
    ]
    body = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="prov">{body}</table>'


def _page(title: str, body: str, maps: int) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}{_switch_css(maps)}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def render_html(
    result: SimulationResult,
    objects: Sequence[Mapping[str, Any]],
    provenance: Provenance | None = None,
) -> str:
    """One run as a page."""
    ms = measures(result, objects)
    body = _provenance(provenance or Provenance()) + _run(result, node_places(objects), ms, "a")
    return _page("troupe simulate", body, len(ms))


def _side_by_side(
    ms: Sequence[Sequence[_Measure]],
    names: Sequence[str],
    rows: Sequence[tuple[Sequence[str], Sequence[str]]],
    head: Sequence[str],
) -> str:
    """Requested / allocatable under both runs: one row per (leading cells,
    nodes summed), each resource's cell the first run above the second; the
    cells that differ are in bold."""
    titles = list(dict.fromkeys(m.title for run in ms for m in run))
    by_title = [{m.title: m for m in run} for run in ms]
    runs = "<br>".join(html.escape(n) for n in names)
    out = []
    for lead, members in rows:
        cells = []
        for t in titles:
            shown = []
            for run in by_title:
                m = run.get(t)
                pairs = [m.use[n] for n in members if n in m.use] if m else []
                req, alloc = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
                shown.append(
                    (req, f"{m.pair(req, alloc)} ({_pct(req, alloc)})" if m and pairs else "-")
                )
            cls = "num chg" if shown[0][0] != shown[1][0] else "num"
            cells.append(f'<td class="{cls}">' + "<br>".join(html.escape(x) for _, x in shown))
        lead_cells = "".join(f"<td>{html.escape(x)}</td>" for x in lead)
        out.append(f"<tr>{lead_cells}<td>{runs}</td>{'</td>'.join(cells)}</td></tr>")
    th = "".join(f"<th>{html.escape(h)}</th>" for h in (*head, "run", *titles))
    return f'<table class="sbs"><tr>{th}</tr>{"".join(out)}</table>'


def _counts(results: Sequence[SimulationResult], names: Sequence[str]) -> str:
    def figures(r: SimulationResult) -> tuple[int, int, int, int]:
        placed = sum(1 for p in r.pods.values() if p.get("node") and not p.get("preemptedBy"))
        victims = sum(1 for p in r.pods.values() if p.get("preemptedBy"))
        admitted = sum(
            1 for g in r.pod_groups.values() if g.get("phase") in ("Scheduled", "Running")
        )
        return placed, len(r.pods) - placed - victims, victims, admitted

    fa, fb = (figures(r) for r in results)
    labels = ("pods placed", "pods pending", "pods preempted", "PodGroups scheduled or running")
    rows = "".join(
        f'<tr{" class=chg" if x != y else ""}><td>{t}</td><td class="num">{x}</td>'
        f'<td class="num">{y}</td><td class="num">{y - x:+d}</td></tr>'
        for t, x, y in zip(labels, fa, fb, strict=True)
    )
    a, b = (html.escape(n) for n in names)
    return (
        f'<table class="counts"><tr><th></th><th>{a}</th><th>{b}</th><th>{b} − {a}</th></tr>'
        f"{rows}</table>"
    )


def render_compare_html(
    results: Sequence[SimulationResult],
    names: Sequence[str],
    diff: Mapping[str, Any],
    objects: Sequence[Mapping[str, Any]],
    provenance: Provenance | None = None,
) -> str:
    """Two runs' figures side by side, what differs, then both runs."""
    places = node_places(objects)
    ms = [measures(r, objects) for r in results]
    a, b = names

    def at(node: str) -> str:
        zone, rack = places.get(node, ("", ""))
        where = " / ".join(x for x in (zone, rack) if x)
        return f"{node} ({where})" if where else node

    moved = "".join(
        f"<tr><td>{html.escape(m['pod'])}</td><td>{html.escape(at(str(m[a])))}</td>"
        f"<td>{html.escape(at(str(m[b])))}</td></tr>"
        for m in diff["moved"]
    )
    only = ""
    for name, other in ((a, b), (b, a)):
        rows = "".join(
            f"<tr><td>{html.escape(m['pod'])}</td><td>{html.escape(at(str(m['node'])))}</td>"
            f"<td>{html.escape(str(m['reason']))}</td></tr>"
            for m in diff[f"placedOnlyUnder{name}"]
        )
        n_only = len(diff[f"placedOnlyUnder{name}"])
        only += f"<h3>placed under {html.escape(name)} only ({n_only})</h3>" + (
            f"<table><tr><th>pod</th><th>node</th><th>reason under {html.escape(other)}</th>"
            f"</tr>{rows}</table>"
            if rows
            else "<p>None.</p>"
        )
    nodes = sorted(set(results[0].nodes) | set(results[1].nodes))
    zones: dict[tuple[str, str], list[str]] = {}
    for n in nodes:
        zone, rack = places.get(n, ("", ""))
        zones.setdefault((zone, ""), []).append(n)
        if rack:
            zones.setdefault((zone, rack), []).append(n)
    zone_rows = [((z or "(no zone)", r or "all"), ns) for (z, r), ns in sorted(zones.items())]
    zone_rows.append((("cluster", ""), nodes))
    node_rows = [((n, *(x or "-" for x in places.get(n, ("", "")))), [n]) for n in nodes]
    head = (
        _provenance(provenance or Provenance(), names)
        + f"<h2>Figures side by side</h2>{_counts(results, names)}"
        + f"<h3>use per zone and rack</h3>{_side_by_side(ms, names, zone_rows, ('zone', 'rack'))}"
        + f"<h3>use per node</h3>{_side_by_side(ms, names, node_rows, ('node', 'zone', 'rack'))}"
        + f"<h2>What differs</h2><h3>placed on other nodes ({len(diff['moved'])})</h3>"
        + (
            f"<table><tr><th>pod</th><th>{html.escape(a)}</th><th>{html.escape(b)}</th></tr>"
            f"{moved}</table>"
            if moved
            else "<p>None.</p>"
        )
        + only
    )
    runs = "".join(
        f'<div class="run"><h2>{html.escape(n)}</h2>{_run(r, places, m, f"run{i}")}</div>'
        for i, (n, r, m) in enumerate(zip(names, results, ms, strict=True))
    )
    return _page(
        f"troupe simulate: {a} vs {b}",
        head + f'<div class="runs">{runs}</div>',
        max(len(m) for m in ms),
    )
