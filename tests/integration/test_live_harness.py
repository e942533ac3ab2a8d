"""The live differential harness's short profile (issue 33; the long soak is
`make soak`): scenarios of the corpus through `troupe simulate` and through two
`troupe run` replicas on the embedded API server under injected timing faults,
checked on the API's final state (tests/harness/invariants.py).

The regression cases are the faults of issue 33's table that the harness
catches: each names its fault and runs its scenario under the timing that
showed it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.invariants import check
from tests.harness.live import LiveRun, run_live
from tests.harness.profiles import PROFILES
from tests.harness.scenarios import scenario
from tests.harness.simulated import placement_class, simulate


@dataclass(frozen=True)
class Case:
    scenario: str
    profile: str
    kill_leader: bool = False
    seed: int = 0
    faults: tuple[str, ...] = ()  # faults the run must have injected to show its case


REGRESSIONS = [
    # One GPU went to 4 claims: the finalizer write's watch event replaced the
    # in-memory allocation while PreBind's writes were in flight.
    pytest.param(Case("gpu-rush", "writes-200ms"), id="a-gpu-given-to-four-claims"),
    # Same cause: a device with binding conditions let its pod bind within a
    # second though the driver never reported them.
    pytest.param(Case("binding-conditions", "late-watches"), id="binding-conditions-ignored-live"),
    # Gang preemption's dry run did not count devices: with devices the only
    # shortage the gang never preempted (or evicted and still did not fit).
    pytest.param(
        Case("gang-preemption-devices", "writes-50ms"), id="gang-preemption-counts-devices"
    ),
    # Topology: only the first topologyDomainsPerCycle (16) domains in predicted
    # order were ever tried, the prediction blind to taints: with rack 17 the only
    # one that fits, the gang waited forever.
    pytest.param(Case("seventeen-racks", "writes-50ms"), id="every-topology-domain-is-tried"),
    # A bind made but answered 409 (a retried request) ran Unreserve, which
    # took the claim of the pod that was bound: 9 pods on 8 GPUs. Seed 5 answers
    # the 2nd and 7th binds 409 (binds draw from a stream of their own).
    pytest.param(
        Case("gpu-rush", "bind-conflicts", seed=5, faults=("bind-conflict",)),
        id="a-bind-answered-409-keeps-its-claim",
    ),
]

# Quotas (issue 32) under slow writes and late watches: no team over its max,
# a gang under its quota whole or not at all, GPUs counted through claims.
QUOTAS = [
    pytest.param(Case("quota-rush", "writes-200ms"), id="quotas-under-slow-writes"),
    pytest.param(Case("quota-rush", "late-watches", seed=4), id="quotas-under-late-watches"),
]

# Groups of groups (CompositePodGroup, Kubernetes 1.37) under slow writes and
# late watches: a composite binds nothing unless minGroupCount of its children
# fit, a child that falls short holds nothing, the others run without it.
COMPOSITES = [
    pytest.param(Case("composite-rush", "writes-200ms"), id="composites-under-slow-writes"),
    pytest.param(Case("composite-rush", "late-watches"), id="composites-under-late-watches"),
    # A pod's older failure report landed after its newer one and its condition
    # kept a stale reason ("has fewer pods than minCount 2" though both existed).
    pytest.param(
        Case("composite-rush", "late-watches", seed=1), id="the-newest-reason-is-the-pods"
    ),
]

SHORT = [
    pytest.param(
        Case("gangs-topology", "bunched-watches", kill_leader=True, seed=2),
        id="gangs-topology-bunched-kill",
    ),
    pytest.param(
        Case("shared-claims", "conflicts", kill_leader=True, seed=3),
        id="shared-claims-conflicts-kill",
    ),
]


def report(run: LiveRun, violations: dict[str, list[str]]) -> str:
    lines = [
        f"settled: {run.settled} after {run.seconds:.1f}s; injected {dict(run.injected)}; "
        f"leader killed: {run.killed}"
    ]
    for name, got in violations.items():
        lines.append(f"{name}: {len(got)}")
        lines += [f"  {v}" for v in got[:10]]
    lines += run.controller_errors[:3]
    if violations or not run.settled:
        lines.append(run.log_tail())
    return "\n".join(lines)


def run_case(case: Case, tmp_path: Path) -> None:
    s = scenario(case.scenario)
    simulated = placement_class(s, simulate(s, tmp_path / "sim"))
    run = run_live(
        s,
        PROFILES[case.profile],
        tmp_path / "live",
        seed=case.seed,
        kill_leader=case.kill_leader,
        simulated=simulated,
    )
    violations = check(run.state)
    wrong_sim = {k: simulated.get(k, 0) for k, n in s.expect.items() if simulated.get(k, 0) != n}
    if wrong_sim:
        violations["simulator-expected-placement"] = [
            f"class {k}: {n} bound by troupe simulate, expected {s.expect[k]}"
            for k, n in wrong_sim.items()
        ]
    assert run.settled and not violations and not run.controller_errors, report(run, violations)
    for fault in case.faults:
        assert run.injected[fault], f"no {fault} injected: {report(run, violations)}"


@pytest.mark.parametrize("case", REGRESSIONS)
def test_issue33_regression(case: Case, tmp_path: Path) -> None:
    run_case(case, tmp_path)


@pytest.mark.parametrize("case", QUOTAS)
def test_quotas_hold_live(case: Case, tmp_path: Path) -> None:
    run_case(case, tmp_path)


@pytest.mark.parametrize("case", COMPOSITES)
def test_groups_of_groups_hold_live(case: Case, tmp_path: Path) -> None:
    run_case(case, tmp_path)


@pytest.mark.parametrize("case", SHORT)
def test_live_holds_what_the_simulator_holds(case: Case, tmp_path: Path) -> None:
    run_case(case, tmp_path)
