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
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np

from troupe.api.types import GroupKey, Pod, PodKey
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
    # A gang's member: the gang's view of its last group cycle (GroupExplanation).
    group: GroupExplanation | None = None

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
            if self.group is not None:
                out["group"] = self.group.to_json_obj()
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
    if ex.group is not None:
        gx = replace(ex.group, members={})  # listed above
        lines.extend("  " + line for line in render_group_table(gx))
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
        # The gangs asked about (a member or the PodGroup annotated): their trials.
        self._gangs: dict[str, GangTrace] = {}

        self._asked: dict[str, tuple[int, bool]] = {}  # gang -> (cycle, asks)

    def _asks(self, gang: str, cycle: int) -> bool:
        """Whether the gang asks to be explained: its PodGroup or a member is
        annotated (looked at once per cycle)."""
        got = self._asked.get(gang)
        if got is not None and got[0] == cycle:
            return got[1]
        cache = self.ctx.cache
        pg = cache.pod_group(GroupKey(gang))
        md = pg.raw.get("metadata") if pg is not None else None
        notes = md.get("annotations") if isinstance(md, Mapping) else None
        asks = isinstance(notes, Mapping) and notes.get(EXPLAIN_ANNOTATION) == "true"
        asks = asks or any(
            p.annotations.get(EXPLAIN_ANNOTATION) == "true"
            for p in cache.pods_in_group(GroupKey(gang))
        )
        if len(self._asked) >= self.decisions.max_pods:
            self._asked.clear()
        self._asked[gang] = (cycle, asks)
        return asks

    def observe(self, profile: Profile, pod: Pod, result: Any, gang: str, domain: str) -> None:
        """An attempt's search (SchedulerContext.observe)."""
        cycle = self.ctx.counters.cycles
        if gang and self._asks(gang, cycle):
            trace = self._gangs.get(gang)
            if trace is None:
                trace = self._gangs[gang] = GangTrace(gang)
                while len(self._gangs) > self.decisions.max_pods:  # admitted gangs' traces
                    del self._gangs[next(iter(self._gangs))]
            trace.observe(profile, pod, self.ctx.snapshot, result, cycle, domain)
        if pod.annotations.get(EXPLAIN_ANNOTATION) != "true":
            self.decisions.record(pod.key, summary(pod, result, cycle, gang, domain))
            return
        ex = explain_attempt(profile, pod, self.ctx.snapshot, result, cycle, gang, domain)
        if gang:
            self._this_cycle(cycle)[pod.key] = ex
        self._publish(profile, pod, ex)

    def gang_pending(
        self,
        profile: Profile,
        pods: Sequence[Pod],
        gang: str,
        message: str,
        preemption: str = "",
        untried: Sequence[tuple[str, str]] = (),
    ) -> None:
        """The group cycle could not place the gang (SchedulerContext.gang_pending).
        A gang asked about keeps its group view (`GroupExplanation`) in each
        member's decision, under "group"."""
        cycle = self.ctx.counters.cycles
        trials = self._this_cycle(cycle)
        gx: GroupExplanation | None = None
        view: dict[str, Any] | None = None
        trace = self._gangs.pop(gang, None)
        if trace is not None:
            gx = trace.finish(cycle, message, preemption, untried)
            view = gx.to_json_obj()
        for pod in pods:
            if pod.annotations.get(EXPLAIN_ANNOTATION) == "true":
                trial = trials.pop(pod.key, None)
                ex = explain_gang_pending(
                    trial, profile, pod, self.ctx.snapshot, message, cycle, gang
                )
                ex.group = gx
                self._publish(profile, pod, ex)
                continue
            got = self.decisions.get(pod.key)
            if got is None or got.get("attempt") != cycle:
                got = summary(pod, Status(Code.UNSCHEDULABLE, (message,)), cycle, gang, "")
            got["trialNode"] = got.get("trialNode") or got.get("chosen")
            got["chosen"], got["outcome"] = None, message
            got.pop("evaluated", None)
            got.pop("feasibleFound", None)
            if view is not None:
                got["group"] = view
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


# ---- a gang as a whole ------------------------------------------------------------------


@dataclass
class DomainTrial:
    """One placement of a gang's members in a topology domain (or over every
    node, `domain` ""): who fit where and, over the domain's nodes, what
    stopped the others."""

    domain: str
    nodes: int = 0  # the domain's nodes
    placed: dict[str, str] = field(default_factory=dict)  # member -> node
    # (plugin, reason) -> the members it stopped, and the nodes that said it
    stopped: dict[tuple[str, str], tuple[set[str], set[str]]] = field(default_factory=dict)
    # node -> (plugin, reason) -> the members it stopped there
    per_node: dict[str, dict[tuple[str, str], set[str]]] = field(default_factory=dict)
    unplaced: list[str] = field(default_factory=list)

    def reject(self, member: str, plugin: str, reason: str, nodes: Sequence[str]) -> None:
        ms, ns = self.stopped.setdefault((plugin, reason), (set(), set()))
        ms.add(member)
        ns.update(nodes)
        for n in nodes:
            self.per_node.setdefault(n, {}).setdefault((plugin, reason), set()).add(member)

    def reasons(self) -> list[dict[str, Any]]:
        """What stopped the members that did not fit, most members first."""
        rows = sorted(
            ((p, r, len(ms), len(ns)) for (p, r), (ms, ns) in self.stopped.items()),
            key=lambda t: (-t[2], -t[3], t[0], t[1]),
        )
        return [{"plugin": p, "reason": r, "members": m, "nodes": n} for p, r, m, n in rows]

    def node_rows(self) -> list[dict[str, Any]]:
        """Per node: how many members fit there and what stopped the others there."""
        fits = Counter(self.placed.values())
        out = []
        for node in sorted(fits.keys() | self.per_node.keys()):
            stopped = self.per_node.get(node, {})
            out.append(
                {
                    "node": node,
                    "fits": fits.get(node, 0),
                    "stopped": [
                        {"plugin": p, "reason": r, "members": len(ms)}
                        for (p, r), ms in sorted(stopped.items(), key=lambda t: (-len(t[1]), t[0]))
                    ],
                }
            )
        return out

    def to_json_obj(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "domain": self.domain or None,
            "nodes": self.nodes,
            "members": len(self.placed) + len(self.unplaced),
            "fits": len(self.placed),
            "placed": dict(self.placed),
            "stopped": self.reasons(),
        }
        if not self.domain:
            out["perNode"] = self.node_rows()
        return out


@dataclass
class GroupExplanation:
    """Why a gang waits (or where it went): its last group cycle, domain by
    domain, and whether preemption was tried."""

    group: str
    attempt: int = 0  # the scheduling cycle of the gang's last group cycle
    outcome: str = ""
    domains: list[DomainTrial] = field(default_factory=list)
    preemption: str = ""  # what preemption did for the gang, "" when it was not needed
    # The required level's domains the cycle did not place the gang in, and why.
    not_tried: list[tuple[str, str]] = field(default_factory=list)
    # The members at the end (`troupe simulate`): pod -> node, or why not.
    members: dict[str, str] = field(default_factory=dict)

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "podGroup": self.group,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "domains": [d.to_json_obj() for d in self.domains],
            "notTried": [{"domain": d, "why": why} for d, why in self.not_tried],
            "preemption": self.preemption or None,
            "members": self.members,
        }


def domain_rows(snap: NodeTable, domain: str) -> Any:
    """The rows of the nodes of `domain` ("rack=r1" or "zone=a,rack=r1"; "" for
    every node)."""
    rows = snap.valid_rows()
    for part in filter(None, domain.split(",")):
        key, _, value = part.partition("=")
        ids = snap.label_ids.get(key, {})
        if value not in ids:
            return rows[:0]
        rows = rows[snap.labels[key][rows] == ids[value]]
    return rows


class GangTrace:
    """A gang's group cycles as `SchedulerContext.observe` and `gang_pending`
    see them: each member's search, domain by domain, and then the cycle's
    outcome. Costs a filter pass over the domain for each member that did not
    fit: kept only for the gangs asked about."""

    def __init__(self, group: str) -> None:
        self.current = GroupExplanation(group)
        self.last: GroupExplanation | None = None  # the last finished cycle

    def observe(
        self, profile: Profile, pod: Pod, snap: NodeTable, result: Any, attempt: int, domain: str
    ) -> None:
        """One member's search in the gang's trial (on the snapshot it saw)."""
        cur = self.current
        if cur.attempt != attempt:
            cur = self.current = GroupExplanation(cur.group, attempt)
        name = domain.removeprefix("node(s) outside ")
        member = str(pod.key)
        d = cur.domains[-1] if cur.domains else None
        if d is None or d.domain != name or member in d.placed or member in d.unplaced:
            # A new trial; a domain tried again in the cycle keeps its last trial only.
            cur.domains = [t for t in cur.domains if t.domain != name]
            d = DomainTrial(name)
            cur.domains.append(d)
        rows = domain_rows(snap, name)
        d.nodes = len(rows)
        if isinstance(result, ScheduleResult):
            d.placed[member] = str(result.node)
            return
        d.unplaced.append(member)
        state = CycleState()
        _, st = profile.run_pre_filter(state, pod, snap)
        if not st.is_success:
            # A member's own name in the message would keep each member apart.
            reason = st.message.replace(member, "<member>")
            d.reject(member, f"{st.plugin} (PreFilter)", reason, [])
            return
        out = profile.run_filters(state, pod, snap, rows)
        if isinstance(out, Status):
            d.reject(member, out.plugin, out.message, [])
            return
        by_reason: dict[tuple[str, str], list[str]] = {}
        for node, status in out.node_statuses(snap).items():
            for reason in status.reasons:
                by_reason.setdefault((status.plugin, reason), []).append(node)
        for (plugin, reason), nodes in by_reason.items():
            d.reject(member, plugin, reason, nodes)
        if not by_reason:
            # Feasible alone: room taken by the members placed before it, or the
            # search gave up (an error).
            d.reject(member, "", _outcome(result), [])

    def finish(
        self,
        attempt: int,
        outcome: str,
        preemption: str = "",
        untried: Sequence[tuple[str, str]] = (),
    ) -> GroupExplanation:
        """The group cycle `attempt` ended with `outcome` (the gang's message),
        what preemption did, and the domains it did not place the gang in."""
        cur = self.current
        if cur.attempt != attempt:
            cur = self.current = GroupExplanation(cur.group, attempt)
        cur.outcome, cur.preemption = outcome, preemption
        placed_in = {d.domain for d in cur.domains}
        cur.not_tried = [(d, why) for d, why in untried if d not in placed_in]
        self.last = cur
        self.current = GroupExplanation(cur.group)
        return cur


_NOT_TRIED: Final = {
    "too small": "their free cpu and memory cannot hold the gang (as predicted)",
    "not tried in this cycle": "tried in an earlier cycle, or left for the next",
}


def render_group_table(gx: GroupExplanation, nodes_shown: int | None = 10) -> list[str]:
    """A gang's explanation for people."""
    lines = [f"EXPLAIN PodGroup {gx.group}: scheduling cycle {gx.attempt}"]
    if gx.attempt == 0 and not gx.domains:
        lines.append(f"  outcome: {gx.outcome}")
        return lines
    lines.append(f"  outcome: {gx.outcome}")
    for d in gx.domains:
        where = d.domain or "every node"
        total = len(d.placed) + len(d.unplaced)
        lines.append(f"  {where} ({d.nodes} nodes): {len(d.placed)} of {total} members fit")
        if d.placed:
            on = Counter(d.placed.values())
            lines.append("    placed: " + ", ".join(f"{n} x{c}" for n, c in sorted(on.items())))
        rs = d.reasons()
        if rs:
            pw = max(len(r["plugin"]) for r in rs)
            lines.append(f"    stopped: {len(d.unplaced)} member(s)")
            for r in rs:
                lines.append(
                    f"      {r['plugin']:<{pw}}  {r['members']:>3} member(s)  "
                    f"{r['nodes']:>5} node(s)  {r['reason']}"
                )
        if not d.domain:
            rows = d.node_rows()
            shown = rows if nodes_shown is None else rows[:nodes_shown]
            nw = max(len("NODE"), *(len(r["node"]) for r in shown)) if shown else 4
            if shown:
                lines.append(f"    {'NODE':<{nw}}  FITS  STOPPED BY")
            for r in shown:
                why = "; ".join(
                    f"{s['plugin']}: {s['reason']} ({s['members']})" for s in r["stopped"]
                )
                lines.append(f"    {r['node']:<{nw}}  {r['fits']:>4}  {why}".rstrip())
            if len(shown) < len(rows):
                lines.append(f"    ... {len(rows) - len(shown)} more node(s) (--explain-all)")
    by_why: dict[str, list[str]] = {}
    for name, why in gx.not_tried:
        by_why.setdefault(why, []).append(name)
    for why, names in by_why.items():
        more = f", ... ({len(names)} in all)" if len(names) > 5 else ""
        lines.append(f"  not tried: {', '.join(names[:5])}{more}: {_NOT_TRIED.get(why, why)}")
    if gx.preemption or gx.domains:
        lines.append(f"  preemption: {gx.preemption or 'not tried'}")
    if gx.members:
        lines.append("  members now:")
    for member, where in sorted(gx.members.items()):
        lines.append(f"    {member}: {where}")
    return lines
