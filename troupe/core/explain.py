"""Why here, why not there: one pod's scheduling attempt, node by node.

`explain_attempt` runs the profile's PreFilter, Filter, PreScore and Score on
the snapshot the attempt saw, over every node (the attempt itself may have
stopped after enough feasible nodes, or scored a sample), and keeps for each
node the plugin that rejected it and its message, or, for feasible nodes, each
Score plugin's raw, normalised and weighted score and the total. It is called
for the pods asked about only (`troupe simulate --explain`, or a pod annotated
`troupe.dev/explain: "true"` when `troupe.explain` is enabled), through the
scheduler's observer, so it costs nothing to the pods nobody asks about.

A gang's members are searched one after another in a trial; when the gang as
a whole cannot be placed, the group cycle says so (`gang_pending`) and each
member's explanation becomes pending with the gang's message, the trial's node
kept as `trialNode` only: nothing is held for it.

In a live scheduler with `troupe.explain.enabled`, `LiveExplain` keeps the last
decision of each pod in a `DecisionLog` (a summary, or the whole explanation for
annotated pods) for `/debug/explain/<namespace>/<name>` on the metrics port, and
writes the annotated pods' explanations back (`simulator_annotations`, bounded
to stay within kube-apiserver's 256 KiB for all of a pod's annotations: see
troupe.core.explain_notes).
"""

from __future__ import annotations

import json
import logging
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from troupe.api.types import Pod, PodKey
from troupe.core.context import SchedulerContext
from troupe.core.explain_notes import (
    ANNOTATIONS_LIMIT,
    EXPLAIN_ANNOTATION,
    EXPLAIN_NOTES_MAX_BYTES,
    EXPLAIN_OMITTED,
    EXPLAIN_PREFIX,
    is_explain_note,
)
from troupe.core.snapshot import NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.framework.fit import FitError, ScheduleResult
from troupe.framework.runtime import Profile
from troupe.framework.status import Code, Status

log = logging.getLogger(__name__)

# The nodes the annotations name, at most (halved until they fit): the best-
# scoring feasible nodes (and the chosen one), and for the reasons that
# rejected most nodes a few of the nodes each rejected.
NOTES_TOP_SCORED: Final = 20
NOTES_PER_REASON: Final = 3
NOTES_REASONS: Final = 16
NOTES_REASON_CHARS: Final = 1024  # a reason's text in the annotations, at most


@dataclass
class Explanation:
    pod: str
    attempt: int  # the scheduler's cycle number of this attempt
    nodes: int
    outcome: str  # "placed on <node>", or the message the pod waits with
    chosen: str | None = None
    evaluated: int = 0  # nodes the attempt filtered before it stopped
    feasible_found: int = 0  # feasible nodes the attempt found (and scored)
    gang: str = ""  # the PodGroup, for a gang's member
    # A member whose gang could not be placed: where the gang's trial had it
    # (it is not placed there: nothing is held).
    trial_node: str | None = None
    domain: str = ""  # the topology domain the gang was tried in, if any
    # The gang's members at the end (`troupe simulate`): pod -> node, or why not.
    members: dict[str, str] = field(default_factory=dict)
    pre_filter: dict[str, str] | None = None  # {"plugin", "reason"} when PreFilter failed
    rejected: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> plugin, reasons
    # node -> {"total": int, "plugins": {name: {"raw", "normalized", "weight", "weighted"}}}
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)

    def gang_pending(self, message: str) -> None:
        """The member's gang could not be placed: the pod waits with the gang's
        message, wherever the trial had it."""
        if self.chosen is not None:
            self.trial_node = self.chosen
        self.chosen = None
        self.outcome = message

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
            out["trialNode"] = self.trial_node
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


def explain_gang_pending(
    trial: Explanation | None,
    profile: Profile,
    pod: Pod,
    snap: NodeTable,
    message: str,
    attempt: int,
    gang: str,
) -> Explanation:
    """A gang member's explanation once the group cycle `attempt` could not place
    its gang: the member's trial in that cycle (or, not tried, its attempt on
    `snap` as if alone), pending with the gang's message."""
    ex = trial
    if ex is None or ex.attempt != attempt:
        plugin = profile.group_scheduling
        failed = Status(Code.UNSCHEDULABLE, (message,), plugin.NAME if plugin is not None else "")
        ex = explain_attempt(profile, pod, snap, failed, attempt, gang)
    ex.gang_pending(message)
    return ex


def _outcome(result: ScheduleResult | FitError | Status) -> str:
    if isinstance(result, ScheduleResult):
        return f"placed on {result.node}"
    if isinstance(result, FitError):
        return result.message
    return result.message or str(result.code)


def render_table(ex: Explanation, top: int | None = 10) -> list[str]:
    """The explanation for people."""
    pending = "pending: " if ex.chosen is None and ex.attempt > 0 else ""
    lines = [
        f"EXPLAIN {ex.pod}: scheduling cycle {ex.attempt}, {ex.nodes} nodes",
        f"  outcome: {pending}{ex.outcome}",
    ]
    if ex.gang:
        lines.append(f"  gang: {ex.gang}" + (f", tried in {ex.domain}" if ex.domain else ""))
        for member, where in sorted(ex.members.items()):
            lines.append(f"    {member}: {where}")
    if ex.trial_node is not None:
        lines.append(
            f"  the gang's trial had it on {ex.trial_node}, but the gang could not be placed: "
            "nothing is held"
        )
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
        if n == ex.trial_node:
            mark = "  <- the gang's trial"
        lines.append(f"    {n:<{nw}}  {s['total']:>5}  " + "  ".join(cells) + mark)
    if ex.chosen is not None and ex.chosen in ex.scores and ranked[0] != ex.chosen:
        best = ex.scores[ranked[0]]["total"]
        got = ex.scores[ex.chosen]["total"]
        why = "a tie, broken at random" if best == got else "the attempt scored a sample"
        lines.append(f"  {ex.chosen} scores {got}, the best {best}: {why}")
    return lines


def simulator_annotations(
    ex: Explanation, filters: Sequence[str], others: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The attempt as kube-scheduler-simulator's annotations (troupe.core.explain_notes),
    with `EXPLAIN_OMITTED` counting the nodes they leave out. Bounded: at most
    EXPLAIN_NOTES_MAX_BYTES, and within kube-apiserver's limit together with
    `others` (the pod's annotations; the explanation's own are replaced), the
    node counts halved until they fit. Empty when not even the counts fit."""
    kept = {k: v for k, v in (others or {}).items() if not is_explain_note(k)}
    budget = min(EXPLAIN_NOTES_MAX_BYTES, ANNOTATIONS_LIMIT - _size(kept))
    groups = ex.rejections()
    ranked = ex.ranked()
    top, per, reasons = NOTES_TOP_SCORED, NOTES_PER_REASON, NOTES_REASONS
    while True:
        notes = _notes(ex, filters, groups, ranked, top, per, reasons)
        if _size(notes) <= budget:
            return notes
        if top == per == reasons == 0:
            return {}
        top, per, reasons = top // 2, per // 2, reasons // 2


def _notes(
    ex: Explanation,
    filters: Sequence[str],
    groups: list[tuple[str, str, int, list[str]]],
    ranked: list[str],
    top: int,
    per: int,
    reasons: int,
) -> dict[str, str]:
    """The annotations naming the `top` best feasible nodes (and the chosen one),
    and `per` nodes of each of the `reasons` reasons that rejected most."""
    scored = ranked[:top]
    for node in (ex.chosen, ex.trial_node):
        if top and node is not None and node in ex.scores and node not in scored:
            scored.append(node)
    rejected: dict[str, None] = {}  # ordered, without repeats
    by_reason = []
    for plugin, reason, count, nodes in groups[:reasons]:
        sample = nodes[:per]
        rejected.update(dict.fromkeys(sample))
        by_reason.append(
            {"plugin": plugin, "reason": _clip(reason), "nodes": count, "shown": len(sample)}
        )
    filter_result: dict[str, dict[str, str]] = {}
    for node in [*rejected, *scored]:
        verdicts: dict[str, str] = {}
        r = ex.rejected.get(node)
        for name in filters:
            if r is not None and name == r["plugin"]:
                verdicts[name] = _clip(", ".join(r["reasons"]))
                break
            verdicts[name] = "passed"
        filter_result[node] = verdicts
    plugins = {n: ex.scores[n]["plugins"] for n in scored}
    score = {n: {p: str(v["raw"]) for p, v in ps.items()} for n, ps in plugins.items()}
    final = {n: {p: str(v["weighted"]) for p, v in ps.items()} for n, ps in plugins.items()}
    prefilter = {}
    if ex.pre_filter is not None:
        prefilter = {str(ex.pre_filter["plugin"]): _clip(str(ex.pre_filter["reason"]))}
    omitted = {
        "nodes": ex.nodes,
        "omitted": len(ex.rejected) + len(ex.scores) - len(filter_result),
        "feasible": {
            "nodes": len(ex.scores),
            "shown": len(scored),
            "omitted": len(ex.scores) - len(scored),
        },
        "rejected": {
            "nodes": len(ex.rejected),
            "shown": len(rejected),
            "omitted": len(ex.rejected) - len(rejected),
            "byReason": by_reason,
            "reasonsOmitted": len(groups) - len(by_reason),
        },
    }
    return {
        f"{EXPLAIN_PREFIX}prefilter-result-status": _json(prefilter),
        f"{EXPLAIN_PREFIX}filter-result": _json(filter_result),
        f"{EXPLAIN_PREFIX}score-result": _json(score),
        f"{EXPLAIN_PREFIX}finalscore-result": _json(final),
        f"{EXPLAIN_PREFIX}selected-node": ex.chosen or "",
        EXPLAIN_OMITTED: _json(omitted),
    }


def _json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _clip(text: str) -> str:
    if len(text) <= NOTES_REASON_CHARS:
        return text
    return text[: NOTES_REASON_CHARS - 3] + "..."


def _size(notes: Mapping[str, str]) -> int:
    """What kube-apiserver counts: the bytes of every key and value."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in notes.items())


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
        out["trialNode"] = None
    return out


class LiveExplain:
    """troupe.explain in a live scheduler: the last decision of each pod
    (`decisions`, what /debug/explain serves) and, for the pods that ask, the
    annotations written back. A pod's writes go one at a time and the latest
    wins: a gang member's trial and its gang's failure, decided in one cycle,
    make one write, the pending one."""

    def __init__(self, ctx: SchedulerContext, max_pods: int) -> None:
        self.ctx = ctx
        self.decisions = DecisionLog(max_pods)
        # The explanations of the annotated gang members tried in this cycle.
        self._cycle = -1
        self._trials: dict[PodKey, Explanation] = {}
        self._unwritten: dict[PodKey, dict[str, str]] = {}
        self._writing: set[PodKey] = set()

    def observe(self, profile: Profile, pod: Pod, result: Any, gang: str, domain: str) -> None:
        """An attempt's search (SchedulerContext.observe)."""
        cycle = self.ctx.counters.cycles
        if pod.annotations.get(EXPLAIN_ANNOTATION) != "true":
            self.decisions.record(pod.key, summary(pod, result, cycle, gang, domain))
            return
        ex = explain_attempt(profile, pod, self.ctx.snapshot, result, cycle, gang, domain)
        if gang:
            self._this_cycle(cycle)[pod.key] = ex
        self._publish(profile, pod, ex)

    def gang_pending(self, profile: Profile, pods: Sequence[Pod], gang: str, message: str) -> None:
        """The group cycle could not place the gang (SchedulerContext.gang_pending)."""
        cycle = self.ctx.counters.cycles
        trials = self._this_cycle(cycle)
        for pod in pods:
            if pod.annotations.get(EXPLAIN_ANNOTATION) == "true":
                trial = trials.pop(pod.key, None)
                ex = explain_gang_pending(
                    trial, profile, pod, self.ctx.snapshot, message, cycle, gang
                )
                self._publish(profile, pod, ex)
                continue
            got = self.decisions.get(pod.key)
            if got is None or got.get("attempt") != cycle:
                got = summary(pod, Status(Code.UNSCHEDULABLE, (message,)), cycle, gang, "")
            got["trialNode"] = got.get("trialNode") or got.get("chosen")
            got["chosen"], got["outcome"] = None, message
            got.pop("evaluated", None)
            got.pop("feasibleFound", None)
            self.decisions.record(pod.key, got)

    def _this_cycle(self, cycle: int) -> dict[PodKey, Explanation]:
        if cycle != self._cycle:
            self._cycle, self._trials = cycle, {}
        return self._trials

    def _publish(self, profile: Profile, pod: Pod, ex: Explanation) -> None:
        self.decisions.record(pod.key, ex.to_json_obj())
        notes = simulator_annotations(ex, [name for name, _ in profile.filters], pod.annotations)
        if not notes:
            log.warning("the explanation of %s does not fit in its annotations", pod.key)
            self._unwritten.pop(pod.key, None)
            return
        if pod.key not in self._writing:
            if all(pod.annotations.get(k) == v for k, v in notes.items()):
                return
            self._writing.add(pod.key)
            self.ctx.spawn(self._write(pod.key))
        self._unwritten[pod.key] = notes

    async def _write(self, key: PodKey) -> None:
        try:
            while (notes := self._unwritten.pop(key, None)) is not None:
                try:
                    await self.ctx.client.annotate_pod(key, notes)
                except Exception as e:
                    log.warning("could not write the explanation of %s: %s", key, e)
        finally:
            self._writing.discard(key)


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
