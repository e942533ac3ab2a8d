"""Preemption end to end in the simulator: victims deleted and removed after their
grace period on the virtual clock, preemptors placed, `preemptedBy` in the output."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from troupe.config import default_config
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import InputError, Simulation, format_table, load_objects, simulate

FIXTURES = Path(__file__).parent.parent / "fixtures" / "preemption"


def run(name: str) -> dict[str, Any]:
    return simulate(load_objects([str(FIXTURES / name)]), default_config(IN_TREE)).to_json_obj()


def victims(out: dict[str, Any]) -> dict[str, str]:
    return {k: v["preemptedBy"] for k, v in out["pods"].items() if v["preemptedBy"]}


def test_single_preemptor_takes_the_youngest_victims_place() -> None:
    out = run("single.yaml")
    pods = out["pods"]
    assert pods["default/important"] == {"node": "n0", "reason": None, "preemptedBy": None}
    assert pods["default/young"] == {
        "node": None,
        "reason": "preempted by default/important",
        "preemptedBy": "default/important",
        "preemptedFrom": "n0",
    }
    assert pods["default/old"]["node"] == "n0"
    assert out["nodes"]["n0"]["cpu"] == {"requested": 2, "allocatable": 2}


def test_victim_is_removed_after_its_own_grace_period() -> None:
    objs = load_objects([str(FIXTURES / "single.yaml")])

    sim = Simulation(objs, default_config(IN_TREE))
    result = asyncio.run(sim.run())
    assert sim.cluster.deletions == [("default/young", 120)]
    assert result.virtual_seconds >= 120
    # the caller's objects are not given uids
    assert all("uid" not in o["metadata"] for o in objs)


def test_victim_still_terminating_at_until() -> None:

    sim = Simulation(load_objects([str(FIXTURES / "single.yaml")]), default_config(IN_TREE))
    pods = asyncio.run(sim.run(until=60)).to_json_obj()["pods"]
    assert pods["default/young"]["node"] == "n0"
    assert pods["default/young"]["preemptedBy"] == "default/important"
    assert pods["default/young"]["reason"] == "terminating: preempted by default/important"
    assert pods["default/important"]["node"] is None


def test_table_lists_victims() -> None:
    result = simulate(load_objects([str(FIXTURES / "single.yaml")]), default_config(IN_TREE))
    text = format_table(result)
    assert "default/young      <preempted>  preempted by default/important" in text
    assert "PREEMPTED      PREEMPTED BY       FROM NODE" in text
    assert "default/young  default/important  n0" in text


def test_pdb_sends_the_preemptor_to_an_unprotected_victim() -> None:
    out = run("pdb.yaml")
    assert victims(out) == {"default/batch": "default/important"}
    assert out["pods"]["default/important"]["node"] == "n1"
    assert out["pods"]["default/db"]["node"] == "n0"


def test_pdb_objects_must_be_policy_v1(tmp_path: Path) -> None:
    f = tmp_path / "pdb.yaml"
    f.write_text("apiVersion: apps/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\n")
    with pytest.raises(InputError, match="PodDisruptionBudget apiVersion 'apps/v1'"):
        load_objects([str(f)])


def test_preemption_policy_never_evicts_nothing() -> None:
    out = run("never.yaml")
    assert victims(out) == {}
    assert out["pods"]["default/low-0"]["node"] == "n0"
    polite = out["pods"]["default/polite"]
    assert polite["node"] is None
    assert "preemption: not eligible due to preemptionPolicy=Never." in polite["reason"]


def test_nominated_node_is_kept_for_the_preemptor() -> None:
    out = run("nominated.yaml")
    assert victims(out) == {"default/low-0": "default/important"}
    assert out["pods"]["default/important"]["node"] == "n0"
    medium = out["pods"]["default/medium"]
    assert medium["node"] is None
    assert "Insufficient cpu" in medium["reason"]


def test_a_gang_preempts_lone_pods_and_runs() -> None:
    out = run("gang-lone.yaml")
    assert victims(out) == {f"default/lone-{i}": "default/job" for i in range(4)}
    nodes = {out["pods"][f"default/job-{i}"]["node"] for i in range(4)}
    assert nodes == {"n0", "n1", "n2", "n3"}
    assert out["podGroups"]["default/job"]["scheduled"] == 4


def test_a_gang_takes_a_lower_gang_whole() -> None:
    out = run("gang-whole.yaml")
    # two nodes would do, but `old` never runs below minMember: it goes whole
    assert victims(out) == {f"default/old-{i}": "default/new" for i in range(4)}
    assert all(out["pods"][f"default/new-{i}"]["node"] for i in range(2))
    assert out["podGroups"]["default/old"]["scheduled"] == 0
    assert sum(u["cpu"]["requested"] for u in out["nodes"].values()) == 4


def test_a_gang_never_breaks_a_gang_of_equal_priority() -> None:
    out = run("gang-equal.yaml")
    assert victims(out) == {}
    assert all(out["pods"][f"default/old-{i}"]["node"] for i in range(4))
    assert not any(out["pods"][f"default/new-{i}"]["node"] for i in range(2))


def test_two_equal_gangs_one_preempts_and_runs_without_a_loop() -> None:
    result = simulate(load_objects([str(FIXTURES / "two-gangs.yaml")]), default_config(IN_TREE))
    out = result.to_json_obj()
    # the older gang goes first; the other does not evict the room it waits for
    assert victims(out) == {f"default/lone-{i}": "default/a" for i in range(4)}
    assert all(out["pods"][f"default/a-{i}"]["node"] for i in range(4))
    assert not any(out["pods"][f"default/b-{i}"]["node"] for i in range(4))
    preempted = [e for e in result.events if e["reason"] == "Preempted"]
    assert len(preempted) == 4  # each victim once: the second gang took nothing
    assert result.cycles < 20
