"""`troupe simulate --explain <podgroup>`: why a gang waits, domain by domain
(or node by node without topology), what stopped the members that did not
fit, and what preemption did; a member's explanation carries the same view."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from troupe.cli import main
from troupe.config import default_config, load_config
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import load_objects, simulate

FIXTURES = Path(__file__).parent.parent / "fixtures"
RACKS = str(FIXTURES / "gang" / "topology-racks.yaml")
TOO_BIG = str(FIXTURES / "gang" / "native-too-big.yaml")
QUOTA = str(FIXTURES / "gang" / "quota-gang.yaml")
QUOTA_CONFIG = str(FIXTURES / "quota" / "config.yaml")


def explained(path: str, name: str, config: str | None = None) -> dict[str, Any]:
    cfg = load_config(config, IN_TREE) if config else default_config(IN_TREE)
    return simulate(load_objects([path]), cfg, explain=[name]).to_json_obj()


def test_per_node_without_topology_how_many_fit_and_what_stopped_the_rest() -> None:
    # A native PodGroup, named as ns/name: three of four 3-CPU members fit on
    # three 4-CPU nodes, one each.
    out = explained(TOO_BIG, "default/train")
    assert "explain" not in out  # a PodGroup's name, not a pod's
    gx = out["explainPodGroups"]["scheduling.k8s.io/default/train"]
    assert gx["outcome"].startswith('PodGroup "scheduling.k8s.io/default/train": 3 of minCount 4')
    (d,) = gx["domains"]
    assert d["domain"] is None and d["nodes"] == 3 and gx["notTried"] == []
    assert (d["members"], d["fits"]) == (4, 3)
    assert sorted(d["placed"].values()) == ["n0", "n1", "n2"]
    assert d["stopped"] == [
        {"plugin": "NodeResourcesFit", "reason": "Insufficient cpu", "members": 1, "nodes": 3}
    ]
    assert [(n["node"], n["fits"]) for n in d["perNode"]] == [("n0", 1), ("n1", 1), ("n2", 1)]
    for n in d["perNode"]:
        assert n["stopped"] == [
            {"plugin": "NodeResourcesFit", "reason": "Insufficient cpu", "members": 1}
        ]
    assert gx["preemption"] == "tried: evicting lower-priority pods would place only 3 of 4"
    assert set(gx["members"]) == {f"default/train-{i}" for i in range(4)}


def test_per_rack_with_topology() -> None:
    out = explained(RACKS, "default/train")
    gx = out["explainPodGroups"]["default/train"]
    assert "no rack has room for minMember 3: best rack=r1 fits 2" in gx["outcome"]
    (r1,) = gx["domains"]
    # rack r2's free cpu cannot hold three: not placed in
    assert gx["notTried"] == [{"domain": "rack=r2", "why": "too small"}]
    assert (r1["domain"], r1["nodes"], r1["members"], r1["fits"]) == ("rack=r1", 2, 3, 2)
    assert sorted(r1["placed"].values()) == ["r1-a", "r1-b"]
    assert r1["stopped"] == [
        {"plugin": "NodeResourcesFit", "reason": "Insufficient cpu", "members": 1, "nodes": 2}
    ]
    assert "perNode" not in r1
    # Preemption cleared neither rack: there is nothing lower to evict.
    assert gx["preemption"] == (
        "tried in rack=r1: evicting lower-priority pods would place only 2 of 3; "
        "tried in rack=r2: evicting lower-priority pods would place only 1 of 3"
    )


def test_a_members_explanation_carries_the_gangs_view() -> None:
    out = explained(RACKS, "default/train-2")
    assert "explainPodGroups" not in out
    ex = out["explain"]["default/train-2"]
    assert ex["gang"] == "default/train" and ex["chosen"] is None
    group = ex["group"]
    assert [(d["domain"], d["fits"]) for d in group["domains"]] == [("rack=r1", 2)]
    assert group["preemption"].startswith("tried in rack=r1")


def test_the_quota_that_stopped_the_gang() -> None:
    # team-a's quota holds one more CPU than it uses... less than the gang needs:
    # CapacityScheduling refuses members at PreFilter, on no node in particular.
    out = explained(QUOTA, "team-a/train", QUOTA_CONFIG)
    gx = out["explainPodGroups"]["team-a/train"]
    (d,) = gx["domains"]
    assert (d["members"], d["fits"]) == (3, 1)
    (stop,) = d["stopped"]
    assert stop["plugin"] == "CapacityScheduling (PreFilter)"
    assert stop["members"] == 2 and stop["nodes"] == 0
    assert "Pod <member> is rejected in PreFilter" in stop["reason"]
    assert "ElasticQuota" in stop["reason"]


def test_an_admitted_gang_says_where_it_went() -> None:
    out = explained(str(FIXTURES / "gang" / "native-fits.yaml"), "default/train")
    (gx,) = out["explainPodGroups"].values()
    assert gx["outcome"].startswith("admitted: ")
    assert gx["preemption"] == "not needed"
    (d,) = gx["domains"]
    assert d["fits"] == d["members"] and not d["stopped"]


def test_explaining_a_gang_changes_nothing_that_is_scheduled() -> None:
    cfg = default_config(IN_TREE)
    plain = simulate(load_objects([RACKS]), cfg).to_json_obj()
    asked = simulate(load_objects([RACKS]), cfg, explain=["default/train"]).to_json_obj()
    assert plain["pods"] == asked["pods"] and plain["podGroups"] == asked["podGroups"]


def test_the_group_table_json_and_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", RACKS, "--explain", "default/train"]) == 0
    text = capsys.readouterr().out
    assert "EXPLAIN PodGroup default/train: scheduling cycle 1" in text
    assert "  rack=r1 (2 nodes): 2 of 3 members fit" in text
    assert "NodeResourcesFit    1 member(s)      2 node(s)  Insufficient cpu" in text
    assert "  not tried: rack=r2: their free cpu and memory cannot hold the gang" in text
    assert "  preemption: tried in rack=r1" in text
    assert main(["simulate", RACKS, "--explain", "default/train", "-o", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)["explainPodGroups"]["default/train"]
    assert main(["simulate", RACKS, "--explain", "default/train", "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["explainPodGroups"]["default/train"] == as_json


def test_neither_a_pod_nor_a_podgroup_is_said_so() -> None:
    out = explained(RACKS, "default/nope")
    assert out["explain"]["default/nope"]["outcome"] == "not in the input"
    assert "explainPodGroups" not in out


# ---- the live scheduler (troupe.explain.enabled): /debug/explain's entries --------------


def test_live_a_gang_that_asks_has_its_view_in_each_members_decision() -> None:
    from tests.unit.test_explain import feed, gang_of_three, live_scheduler, run_one_cycle

    s, cluster = live_scheduler()
    objects = gang_of_three()
    for o in objects[3:]:  # no member asks: the PodGroup does
        del o["metadata"]["annotations"]["troupe.dev/explain"]
    objects[2]["metadata"]["annotations"] = {"troupe.dev/explain": "true"}
    feed(s, cluster, objects)
    run_one_cycle(s)
    for name in ("m0", "m1", "m2"):
        got = s.decisions.get(f"default/{name}")
        assert got is not None and got["chosen"] is None, name
        group = got["group"]
        assert group["podGroup"] == "default/g" and group["attempt"] == got["attempt"]
        (d,) = group["domains"]
        assert (d["domain"], d["nodes"], d["members"], d["fits"]) == (None, 2, 3, 2)
        assert d["stopped"] == [
            {"plugin": "NodeResourcesFit", "reason": "Insufficient cpu", "members": 1, "nodes": 2}
        ]
        assert group["preemption"] == "tried: evicting lower-priority pods would place only 2 of 3"
    assert cluster.annotation_writes == 0  # no member asked for the annotations


def test_live_a_gang_nobody_asks_about_costs_no_group_view() -> None:
    from tests.unit.test_explain import feed, gang_of_three, live_scheduler, run_one_cycle

    s, cluster = live_scheduler()
    objects = gang_of_three()
    for o in objects[3:]:
        del o["metadata"]["annotations"]["troupe.dev/explain"]
    feed(s, cluster, objects)
    run_one_cycle(s)
    got = s.decisions.get("default/m0")
    assert got is not None and got["chosen"] is None and "group" not in got


def test_the_cli_refuses_a_name_that_is_neither_a_pod_nor_a_podgroup(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", RACKS, "--explain", "default/nope"]) == 2
    err = capsys.readouterr().err
    assert "--explain default/nope: no pod and no PodGroup of that name" in err
    # a native group's full key is a PodGroup's name too
    assert main(["simulate", TOO_BIG, "--explain", "scheduling.k8s.io/default/train"]) == 0
    assert "EXPLAIN PodGroup scheduling.k8s.io/default/train" in capsys.readouterr().out
