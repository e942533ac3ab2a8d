"""Gang scheduling end to end in the simulator: PodGroups, all or nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from troupe.config import default_config, load_config
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import load_objects, simulate

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gang"


def run(name: str, config: str | None = None, until: float | None = None) -> dict[str, Any]:
    cfg = load_config(str(FIXTURES / config), IN_TREE) if config else default_config(IN_TREE)
    return simulate(load_objects([str(FIXTURES / name)]), cfg, until=until).to_json_obj()


def bound(out: dict[str, Any], prefix: str) -> list[str]:
    return [k for k, v in out["pods"].items() if k.startswith(prefix) and v["node"]]


def test_seed_four_fit_four_run_two_pending() -> None:
    out = run("seed-four-fit.yaml")
    assert len(bound(out, "default/job-")) == 4
    pending = [v for v in out["pods"].values() if v["node"] is None]
    assert len(pending) == 2
    for v in pending:
        assert "Insufficient cpu" in v["reason"]
    nodes = [v["node"] for v in out["pods"].values() if v["node"]]
    assert len(set(nodes)) == 4  # one 3-CPU pod per 4-CPU node
    pg = out["podGroups"]["default/job"]
    assert pg["scheduled"] == 4
    assert pg["phase"] in ("Scheduling", "Running")  # Running once the kubelet says so


def test_seed_three_fit_none_bind() -> None:
    out = run("seed-three-fit.yaml")
    assert bound(out, "default/job-") == []
    for v in out["pods"].values():
        assert v["node"] is None
        assert 'PodGroup "default/job"' in v["reason"]
        assert "minMember 4" in v["reason"]
    assert all(u["cpu"]["requested"] == 0 for u in out["nodes"].values())
    assert out["podGroups"]["default/job"]["scheduled"] == 0


def test_too_few_member_pods_wait_with_a_message() -> None:
    out = run("too-few-members.yaml")
    for v in out["pods"].values():
        assert v["node"] is None
        assert "minMember" in v["reason"] and "4" in v["reason"]


def test_missing_group_does_not_block_ordinary_pods() -> None:
    out = run("missing-group.yaml")
    assert out["pods"]["default/plain"]["node"] == "n0"
    orphan = out["pods"]["default/orphan"]
    assert orphan["node"] is None
    assert "default/nowhere" in orphan["reason"] and "not found" in orphan["reason"]


def test_min_resources_cannot_be_met() -> None:
    out = run("min-resources.yaml")
    for v in out["pods"].values():
        assert v["node"] is None
        assert "cpu" in v["reason"]


def test_legacy_api_group_and_label() -> None:
    out = run("legacy-group.yaml")
    assert len(bound(out, "default/old-")) == 2


def test_two_gangs_competing_exactly_one_runs() -> None:
    out = run("two-gangs.yaml")
    a, b = len(bound(out, "default/a-")), len(bound(out, "default/b-"))
    assert sorted((a, b)) == [0, 4]


def test_three_gangs_competing_exactly_one_runs() -> None:
    out = run("three-gangs.yaml")
    counts = sorted(len(bound(out, f"default/{g}-")) for g in "abc")
    assert counts == [0, 0, 3]


def test_timeout_releases_all_with_group_cycle_off() -> None:
    # Nine of ten fit: they wait at Permit; at 30s all are rejected and released.
    before = run("timeout.yaml", config="group-cycle-off.yaml", until=29.0)
    assert sum(u["cpu"]["requested"] for u in before["nodes"].values()) == 27
    after = run("timeout.yaml", config="group-cycle-off.yaml", until=30.5)
    assert bound(after, "default/job-") == []
    reasons = [v["reason"] for v in after["pods"].values()]
    assert sum("rejected due to timeout after waiting 30s" in r for r in reasons) == 9
    # The nine reservations are gone; the tenth member took one freed slot and now
    # waits in its turn (scheduler-plugins' behaviour without the group cycle).
    assert sum(u["cpu"]["requested"] for u in after["nodes"].values()) == 3
    assert sum("waiting at Permit" in r for r in reasons) == 1
    # Left alone it never binds a partial gang and ends holding nothing.
    end = run("timeout.yaml", config="group-cycle-off.yaml")
    assert bound(end, "default/job-") == []
    assert all(u["cpu"]["requested"] == 0 for u in end["nodes"].values())
    assert end["podGroups"]["default/job"]["scheduled"] == 0


def test_group_cycle_holds_nothing_when_the_gang_cannot_fit() -> None:
    out = run("timeout.yaml", until=5.0)
    assert all(u["cpu"]["requested"] == 0 for u in out["nodes"].values())
    for v in out["pods"].values():
        assert v["reason"].startswith('PodGroup "default/job": 9 of minMember 10 pods fit;')
