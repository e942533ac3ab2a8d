"""Why here, why not there: one pod's scheduling attempt, node by node.

`explain_attempt` runs the profile's PreFilter, Filter, PreScore and Score on
the snapshot the attempt saw, over every node (the attempt itself may have
stopped after enough feasible nodes, or scored a sample), and keeps for each
node the plugin that rejected it and its message, or, for feasible nodes, each
Score plugin's raw, normalised and weighted score and the total. It is called
for the pods asked about only (`troupe simulate --explain`, or a pod annotated
`troupe.dev/explain: "true"` when `troupe.explain` is enabled), through the
scheduler's observer, so it costs nothing to the pods nobody asks about.

In a live scheduler with `troupe.explain.enabled`, `DecisionLog` keeps the last
decision of each pod (a summary, or the whole explanation for annotated pods)
for `/debug/explain/<namespace>/<name>` on the metrics port.
"""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from troupe.api.types import Pod
from troupe.explain_notes import EXPLAIN_PREFIX
from troupe.framework.cycle_state import CycleState
from troupe.framework.fit import FitError, ScheduleResult
from troupe.framework.runtime import Profile
from troupe.framework.status import Status
from troupe.snapshot import NodeTable


@dataclass
class Explanation:
    pod: str
    attempt: int  # the scheduler's cycle number of this attempt
    nodes: int
    outcome: str  # "placed on <node>", or the reason the attempt gave
    chosen: str | None = None
    evaluated: int = 0  # nodes the attempt filtered before it stopped
    feasible_found: int = 0  # feasible nodes the attempt found (and scored)
    gang: str = ""  # the PodGroup, for a gang's member
    domain: str = ""  # the topology domain the gang was tried in, if any
    # The gang's members at the end (`troupe simulate`): pod -> node, or why not.
    members: dict[str, str] = field(default_factory=dict)
    pre_filter: dict[str, str] | None = None  # {"plugin", "reason"} when PreFilter failed
    rejected: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> plugin, reasons
    # node -> {"total": int, "plugins": {name: {"raw", "normalized", "weight", "weighted"}}}
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)

    def ranked(self) -> list[str]:
        """Feasible nodes, best total first (ties by name)."""
        return sorted(self.scores, key=lambda n: (-self.scores[n]["total"], n))

    def rejections(self) -> list[tuple[str, str, int, list[str]]]:
        """(plugin, reason, how many nodes, the nodes) grouped as kube-scheduler
        counts them, most nodes first."""
        groups: dict[tuple[str, str], list[str]] = {}
        for node, r in self.rejected.items():
            for reason in r["reasons"]:
                groups.setdefault((r["plugin"], reason), []).append(node)
        return sorted(
            ((p, reason, len(ns), sorted(ns)) for (p, reason), ns in groups.items()),
            key=lambda t: (-t[2], t[0], t[1]),
        )

    def to_json_obj(self, top: int | None = 10) -> dict[str, Any]:
        ranked = self.ranked()
        shown = ranked if top is None else ranked[:top]
        counts: Counter[str] = Counter()
        for r in self.rejected.values():
            counts.update(r["reasons"])
        out: dict[str, Any] = {
            "pod": self.pod,
            "attempt": self.attempt,
            "nodes": self.nodes,
            "outcome": self.outcome,
            "chosen": self.chosen,
            "evaluated": self.evaluated,
            "feasibleFound": self.feasible_found,
            "feasible": len(self.scores),
            "preFilter": self.pre_filter,
            "rejected": [
                {"plugin": p, "reason": reason, "nodes": n, "nodeNames": names}
                for p, reason, n, names in self.rejections()
            ],
            "scores": [{"node": n, **self.scores[n]} for n in shown],
        }
        if self.gang:
            out["gang"] = self.gang
            out["domain"] = self.domain or None
            out["members"] = self.members
        if top is not None and len(ranked) > top:
            out["scoresLeftOut"] = len(ranked) - top
        return out


def explain_attempt(
    profile: Profile,
    pod: Pod,
    snap: NodeTable,
    result: ScheduleResult | FitError | Status,
    attempt: int,
    gang: str = "",
    domain: str = "",
) -> Explanation:
    """What every node said of `pod` in the attempt that ended in `result`."""
    ex = Explanation(
        pod=str(pod.key),
        attempt=attempt,
        nodes=snap.num_nodes,
        outcome=_outcome(result),
        gang=gang,
        domain=domain.removeprefix("node(s) outside "),
    )
    if isinstance(result, ScheduleResult):
        ex.chosen = str(result.node)
        ex.evaluated, ex.feasible_found = result.evaluated, result.feasible
    state = CycleState()
    _, st = profile.run_pre_filter(state, pod, snap)
    if not st.is_success:
        ex.pre_filter = {"plugin": st.plugin, "reason": st.message}
        return ex
    rows = snap.valid_rows()
    out = profile.run_filters(state, pod, snap, rows)
    if isinstance(out, Status):
        ex.pre_filter = {"plugin": out.plugin, "reason": out.message}
        return ex
    for node, status in out.node_statuses(snap).items():
        ex.rejected[node] = {"plugin": status.plugin, "reasons": list(status.reasons)}
    feasible = rows[np.flatnonzero(out.feasible)]
    if len(feasible) == 0:
        return ex
    profile.run_pre_score(state, pod, snap, feasible)
    breakdown: dict[str, tuple[Any, Any, int]] = {}
    total = profile.run_score(state, pod, snap, feasible, breakdown)
    if isinstance(total, Status):
        return ex
    names = snap.names
    for i, row in enumerate(feasible.tolist()):
        plugins = {
            name: {
                "raw": int(raw[i]),
                "normalized": int(norm[i]),
                "weight": weight,
                "weighted": int(norm[i]) * weight,
            }
            for name, (raw, norm, weight) in breakdown.items()
        }
        ex.scores[names[row]] = {"total": int(total[i]), "plugins": plugins}
    return ex


def _outcome(result: ScheduleResult | FitError | Status) -> str:
    if isinstance(result, ScheduleResult):
        return f"placed on {result.node}"
    if isinstance(result, FitError):
        return result.message
    return result.message or str(result.code)


def render_table(ex: Explanation, top: int | None = 10) -> list[str]:
    """The explanation for people."""
    lines = [
        f"EXPLAIN {ex.pod}: scheduling cycle {ex.attempt}, {ex.nodes} nodes",
        f"  outcome: {ex.outcome}",
    ]
    if ex.gang:
        lines.append(f"  gang: {ex.gang}" + (f", tried in {ex.domain}" if ex.domain else ""))
        for member, where in sorted(ex.members.items()):
            lines.append(f"    {member}: {where}")
    if ex.chosen is not None:
        lines.append(
            f"  the attempt filtered {ex.evaluated} node(s), found {ex.feasible_found} feasible "
            f"and scored those (of {len(ex.scores)} feasible in all)"
        )
    if ex.pre_filter is not None:
        lines.append(f"  PreFilter {ex.pre_filter['plugin']}: {ex.pre_filter['reason']}")
        return lines
    groups = ex.rejections()
    if groups:
        lines.append(f"  rejected: {len(ex.rejected)} node(s)")
        pw = max(len(p) for p, *_ in groups)
        for plugin, reason, count, nodes in groups:
            sample = ", ".join(nodes[:3]) + (", ..." if len(nodes) > 3 else "")
            lines.append(f"    {plugin:<{pw}}  {count:>5}  {reason}  ({sample})")
    ranked = ex.ranked()
    if not ranked:
        return lines
    shown = ranked if top is None else ranked[:top]
    plugins = list(ex.scores[shown[0]]["plugins"])
    more = (
        f", the best {len(shown)} (--explain-all: every node)" if len(shown) < len(ranked) else ""
    )
    lines.append(
        f"  scores: {len(ranked)} feasible node(s){more}; each plugin's normalised score x weight"
    )
    nw = max(len("NODE"), *(len(n) for n in shown))
    head = f"    {'NODE':<{nw}}  TOTAL  " + "  ".join(plugins)
    lines.append(head)
    for n in shown:
        s = ex.scores[n]
        cells = []
        for p in plugins:
            c = s["plugins"][p]
            cells.append(f"{c['normalized']}x{c['weight']}".rjust(len(p)))
        mark = "  <- chosen" if n == ex.chosen else ""
        lines.append(f"    {n:<{nw}}  {s['total']:>5}  " + "  ".join(cells) + mark)
    if ex.chosen is not None and ex.chosen in ex.scores and ranked[0] != ex.chosen:
        best = ex.scores[ranked[0]]["total"]
        got = ex.scores[ex.chosen]["total"]
        why = "a tie, broken at random" if best == got else "the attempt scored a sample"
        lines.append(f"  {ex.chosen} scores {got}, the best {best}: {why}")
    return lines


def simulator_annotations(ex: Explanation, filters: Sequence[str]) -> dict[str, str]:
    """The attempt as kube-scheduler-simulator's annotations (troupe.explain_notes)."""
    filter_result: dict[str, dict[str, str]] = {}
    for node in [*ex.rejected, *ex.scores]:
        verdicts: dict[str, str] = {}
        rejected = ex.rejected.get(node)
        for name in filters:
            if rejected is not None and name == rejected["plugin"]:
                verdicts[name] = ", ".join(rejected["reasons"])
                break
            verdicts[name] = "passed"
        filter_result[node] = verdicts
    score = {n: {p: str(v["raw"]) for p, v in s["plugins"].items()} for n, s in ex.scores.items()}
    final = {
        n: {p: str(v["weighted"]) for p, v in s["plugins"].items()} for n, s in ex.scores.items()
    }
    out = {
        f"{EXPLAIN_PREFIX}filter-result": json.dumps(filter_result, sort_keys=True),
        f"{EXPLAIN_PREFIX}score-result": json.dumps(score, sort_keys=True),
        f"{EXPLAIN_PREFIX}finalscore-result": json.dumps(final, sort_keys=True),
        f"{EXPLAIN_PREFIX}selected-node": ex.chosen or "",
    }
    if ex.pre_filter is not None:
        out[f"{EXPLAIN_PREFIX}prefilter-result-status"] = json.dumps(
            {ex.pre_filter["plugin"]: ex.pre_filter["reason"]}, sort_keys=True
        )
    return out


def summary(
    pod: Pod, result: ScheduleResult | FitError | Status, attempt: int, gang: str, domain: str
) -> dict[str, Any]:
    """What the live log keeps of a pod nobody asked details for (no extra work)."""
    out: dict[str, Any] = {
        "pod": str(pod.key),
        "attempt": attempt,
        "outcome": _outcome(result),
        "chosen": str(result.node) if isinstance(result, ScheduleResult) else None,
    }
    if isinstance(result, ScheduleResult):
        out["evaluated"], out["feasibleFound"] = result.evaluated, result.feasible
    if gang:
        out["gang"] = gang
        out["domain"] = domain.removeprefix("node(s) outside ") or None
    return out


class DecisionLog:
    """The last decision of each pod, at most `max_pods` (the oldest go first):
    what `/debug/explain/<namespace>/<name>` serves."""

    def __init__(self, max_pods: int) -> None:
        self.max_pods = max_pods
        self._log: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def record(self, key: str, obj: dict[str, Any]) -> None:
        self._log[key] = obj
        self._log.move_to_end(key)
        while len(self._log) > self.max_pods:
            self._log.popitem(last=False)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._log.get(key)

    def __len__(self) -> int:
        return len(self._log)
