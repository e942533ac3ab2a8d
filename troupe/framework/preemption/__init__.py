"""The preemption engine, as kube-scheduler's framework/preemption: an
`Evaluator` that runs an attempt (eligibility, candidates by dry runs on the
cycle's snapshot, the choice of one, the evictions and nominations), and an
`Interface` that a preemption plugin implements to decide who may preempt and
which pods may go (DefaultPreemption; a quota plugin such as scheduler-plugins'
CapacityScheduling the same way, for pods and for gangs).

- evaluator.py: `Evaluator`, `Interface`, the reasons and messages of an attempt;
- candidates.py: `Candidate`, `importance`, `pick_one`;
- dry_run.py: the columnar dry runs a plugin's victim selection runs (with
  the plugin's own check, `VictimsCheck`, if it has one);
- disruption_budgets.py: the PodDisruptionBudget split;
- gangs.py: the rules every preemption keeps for gangs;
- units.py: preemption units (a PodGroup taken whole), victim priorities and
  the order of importance among victims.
"""

from troupe.framework.preemption.candidates import (
    Candidate,
    ScoreFunc,
    Victims,
    importance,
    pick_one,
    start_time,
)
from troupe.framework.preemption.disruption_budgets import split_by_pdb_violation
from troupe.framework.preemption.dry_run import DryRun, VictimsCheck
from troupe.framework.preemption.evaluator import (
    DISRUPTION_TARGET,
    PREEMPTION_BY_SCHEDULER,
    Evaluator,
    Interface,
    nominated_node,
)
from troupe.framework.preemption.units import Units

__all__ = [
    "DISRUPTION_TARGET",
    "PREEMPTION_BY_SCHEDULER",
    "Candidate",
    "DryRun",
    "Evaluator",
    "Interface",
    "ScoreFunc",
    "Units",
    "Victims",
    "VictimsCheck",
    "importance",
    "nominated_node",
    "pick_one",
    "split_by_pdb_violation",
    "start_time",
]
