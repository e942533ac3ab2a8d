"""Preemption candidates and how one is picked (kube-scheduler's
framework/preemption Candidate and pickOneNodeForPreemption; facts carried
over, code not).

A `Candidate` is a node and the pods to evict for it (there, and the members
of a whole PodGroup elsewhere), most important unit first
(`units.Units.importance`, upstream's MoreImportantVictim). `pick_one` ranks
candidates by kube-scheduler's criteria, or by the ordered score functions a
preemption plugin gives (`Interface.ordered_score_funcs`), then by the order
they were found.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from troupe.api.parse import parse_timestamp
from troupe.api.types import NodeName, Pod, PodKey

# A score of a candidate's node (higher is better), as upstream's OrderedScoreFuncs.
ScoreFunc = Callable[[NodeName], int]


def start_time(pod: Pod) -> float:
    """status.startTime, else "now" (upstream's GetPodStartTime): a pod not started
    yet counts as the most recent."""
    status = pod.raw.get("status")
    v = status.get("startTime") if isinstance(status, Mapping) else None
    if v is None:
        return float("inf")
    try:
        return parse_timestamp(v, "status.startTime")
    except Exception:
        return float("inf")


def importance(pod: Pod) -> tuple[int, int, float, PodKey]:
    """A pod's own sort key, most important first (upstream's MoreImportantPod:
    higher priority, then earlier start; at equal priority a group's member
    before a lone pod), kept per pod by the dry runs. Victims are ordered by
    their unit's importance (`units.Units.importance`), which agrees with this
    for pods outside groups."""
    return (-pod.priority, 0 if pod.group_key is not None else 1, start_time(pod), pod.key)


@dataclass(slots=True)
class Candidate:
    node: NodeName
    victims: list[Pod]  # most important first
    pdb_violations: int
    order: int = 0  # when it was found (the last tie-break)

    @property
    def gangs_broken(self) -> int:
        return len({p.group_key for p in self.victims if p.group_key is not None})


@dataclass(frozen=True, slots=True)
class Victims:
    """A candidate's victims and its PodDisruptionBudget violations (upstream's
    extenderv1.Victims), what `Interface.candidates_to_victims_map` gives."""

    pods: Sequence[Pod]
    num_pdb_violations: int


def pick_one(
    candidates: Sequence[Candidate], score_funcs: Sequence[ScoreFunc] | None = None
) -> Candidate | None:
    """kube-scheduler's pickOneNodeForPreemption: fewest PDB violations, lowest
    highest-victim priority, smallest sum of priorities, fewest victims, latest
    start of the highest-priority victims; then fewest gangs touched. With
    `score_funcs`, those rank instead (each, in order, keeps the candidates of
    its highest score), then the first found."""
    if not candidates:
        return None
    for c in candidates:
        if not c.victims:
            return c
    if score_funcs is not None:
        best = sorted(candidates, key=lambda c: c.order)
        for f in score_funcs:
            scores = [f(c.node) for c in best]
            top = max(scores)
            best = [c for c, s in zip(best, scores, strict=True) if s == top]
            if len(best) == 1:
                break
        return best[0]

    def earliest_top_start(c: Candidate) -> float:
        top = c.victims[0].priority
        return min(start_time(p) for p in c.victims if p.priority == top)

    def key(c: Candidate) -> tuple[int, int, int, int, float, int, int]:
        # kube-scheduler's criteria in its order; then Troupe's: fewest gangs
        # touched, before the order found.
        return (
            c.pdb_violations,
            c.victims[0].priority,
            sum(p.priority + 2**31 for p in c.victims),
            len(c.victims),
            -earliest_top_start(c),
            c.gangs_broken,
            c.order,
        )

    return min(candidates, key=key)
