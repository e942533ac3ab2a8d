"""Preemption end to end in the simulator: victims deleted and removed after their
grace period on the virtual clock, preemptors placed, `preemptedBy` in the output."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from scheduler.config import default_config
from scheduler.plugins.registry import IN_TREE
from scheduler.simulate import Simulation, format_table, load_objects, simulate

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
