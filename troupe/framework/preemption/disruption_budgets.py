"""Which potential victims a PodDisruptionBudget protects (kube-scheduler's
filterPodsWithPDBViolation; facts carried over, code not): the dry runs try to
reprieve those first, and a candidate counts how many of its victims still
violate a budget."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from troupe.api.types import Pod, PodDisruptionBudget


def split_by_pdb_violation(
    pods: Sequence[Pod], pdbs: Iterable[PodDisruptionBudget]
) -> tuple[list[Pod], list[Pod]]:
    """(violating, non-violating), order kept: kube-scheduler's filterPodsWithPDBViolation."""
    budgets = [(pdb, pdb.disruptions_allowed) for pdb in pdbs]
    allowed = [a for _, a in budgets]
    violating: list[Pod] = []
    ok: list[Pod] = []
    for pod in pods:
        violated = False
        for i, (pdb, _) in enumerate(budgets):
            if not pdb.matches(pod) or pod.name in pdb.disrupted_pods:
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                violated = True
        (violating if violated else ok).append(pod)
    return violating, ok
