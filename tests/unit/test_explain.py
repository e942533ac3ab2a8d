"""`troupe simulate --explain`: each node's Filter verdict and each Score
plugin's scores for a pod's last attempt, without changing what is scheduled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from troupe.cli import main
from troupe.config import default_config
from troupe.plugins.registry import IN_TREE
from troupe.simulate import simulate


def cluster() -> list[dict[str, Any]]:
    return [
        make_node("big").capacity(cpu=16, memory="64Gi", pods=110).obj(),
        make_node("small").capacity(cpu=4, memory="16Gi", pods=110).obj(),
        make_node("tiny").capacity(cpu=1, memory="2Gi", pods=110).obj(),
        make_node("tainted").capacity(cpu=16, memory="64Gi", pods=110).taint("gpu").obj(),
        make_pod("web").req(cpu="2", memory="1Gi").obj(),
        make_pod("huge").req(cpu="32").obj(),
    ]


def test_a_placed_pod_shows_each_nodes_verdict_and_each_plugins_scores() -> None:
    result = simulate(cluster(), default_config(IN_TREE), explain=["default/web"])
    ex = result.to_json_obj()["explain"]["default/web"]
    assert ex["outcome"] == "placed on big" and ex["chosen"] == "big"
    assert ex["nodes"] == 4 and ex["feasible"] == 2
    assert {(r["plugin"], r["reason"], r["nodes"]) for r in ex["rejected"]} == {
        ("NodeResourcesFit", "Insufficient cpu", 1),
        ("TaintToleration", "node(s) had untolerated taint {gpu: }", 1),
    }
    best, other = ex["scores"]
    assert (best["node"], other["node"]) == ("big", "small")
    fit = best["plugins"]["NodeResourcesFit"]
    assert fit["weighted"] == fit["normalized"] * fit["weight"]
    assert best["total"] == sum(p["weighted"] for p in best["plugins"].values())
    assert best["total"] > other["total"]


def test_a_pending_pod_shows_why_each_node_said_no() -> None:
    result = simulate(cluster(), default_config(IN_TREE), explain=["default/huge"])
    ex = result.to_json_obj()["explain"]["default/huge"]
    assert ex["chosen"] is None and ex["outcome"].startswith("0/4 nodes are available")
    assert ex["scores"] == []
    fit = next(r for r in ex["rejected"] if r["plugin"] == "NodeResourcesFit")
    assert fit["nodes"] == 3 and fit["nodeNames"] == ["big", "small", "tiny"]


def test_explaining_changes_nothing_that_is_scheduled() -> None:
    plain = simulate(cluster(), default_config(IN_TREE)).to_json_obj()
    asked = simulate(cluster(), default_config(IN_TREE), explain=["default/web"]).to_json_obj()
    assert plain["pods"] == asked["pods"] and plain["nodes"] == asked["nodes"]


def test_a_pod_not_in_the_input_is_said_so() -> None:
    result = simulate(cluster(), default_config(IN_TREE), explain=["default/nope"])
    assert result.to_json_obj()["explain"]["default/nope"]["outcome"] == "not in the input"


def test_the_table_for_people(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster()}))
    assert main(["simulate", str(f), "--explain", "default/web"]) == 0
    text = capsys.readouterr().out
    assert "EXPLAIN default/web: scheduling cycle 2, 4 nodes" in text  # huge went first
    assert "NodeResourcesFit      1  Insufficient cpu  (tiny)" in text
    line = next(x for x in text.splitlines() if x.strip().startswith("big "))
    assert line.endswith("<- chosen")
    assert main(["simulate", str(f), "--explain", "default/web", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["explain"]["default/web"]["chosen"] == "big"


LEAST = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: troupe-scheduler
"""
NO_TAINTS = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: troupe-scheduler
  plugins:
    multiPoint:
      disabled: [{name: TaintToleration}]
  pluginConfig:
  - name: NodeResourcesFit
    args: {scoringStrategy: {type: MostAllocated}}
"""


def test_compare_two_configurations_of_one_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What if: the same input under two configurations, and what differs."""
    f = tmp_path / "c.json"
    objects = [o for o in cluster() if o["metadata"]["name"] != "tainted"]
    objects.append(make_node("gpu").capacity(cpu=64, memory="256Gi", pods=110).taint("gpu").obj())
    f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    (tmp_path / "spread.yaml").write_text(LEAST)
    (tmp_path / "packed.yaml").write_text(NO_TAINTS)
    args = ["simulate", str(f), "--compare", str(tmp_path / "spread.yaml")]
    assert main([*args, str(tmp_path / "packed.yaml"), "-o", "json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    assert diff["configurations"] == ["spread", "packed"]
    assert diff["placed"] == {"spread": 1, "packed": 2}
    # huge fits the tainted 64-cpu node only when taints are not looked at
    (only,) = diff["placedOnlyUnderpacked"]
    assert only["pod"] == "default/huge" and only["node"] == "gpu"
    assert only["reason"].startswith("0/4 nodes are available")
    # web: LeastAllocated spreads it to the big node, MostAllocated packs it onto small
    assert diff["moved"] == [{"pod": "default/web", "spread": "big", "packed": "small"}]
    assert main([*args, str(tmp_path / "packed.yaml")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("COMPARE spread vs packed: 1 vs 2 pods placed")
    assert "placed under packed only: 1" in text


def test_compare_and_config_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "x.yaml", "--config", "a", "--compare", "a", "b"]) == 2
    assert "--compare takes the two configurations" in capsys.readouterr().err


def test_the_html_report_is_one_self_contained_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "c.json"
    objects = cluster()
    objects[0]["metadata"]["labels"]["topology.kubernetes.io/zone"] = "z<1>"
    f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    assert main(["simulate", str(f), "-o", "html"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "http" not in page  # no script, nothing fetched
    assert "zone z&lt;1&gt;" in page  # what comes from the input is escaped
    assert page.count('<rect class="node"') == 4
    assert "Insufficient cpu" in page and 'class="bar"' in page
    (tmp_path / "a.yaml").write_text(LEAST)
    (tmp_path / "b.yaml").write_text(NO_TAINTS)
    args = ["simulate", str(f), "--compare", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]
    assert main([*args, "-o", "html"]) == 0
    both = capsys.readouterr().out
    assert "troupe simulate: a vs b" in both and both.count('<div class="run">') == 2


def test_a_gang_members_explanation_names_its_group_and_where_each_member_went() -> None:
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"minMember": 2},
    }
    objects = [
        make_node("n0").capacity(cpu=4, memory="16Gi", pods=110).obj(),
        make_node("n1").capacity(cpu=4, memory="16Gi", pods=110).obj(),
        group,
        make_pod("m0").req(cpu="3").group("g").obj(),
        make_pod("m1").req(cpu="3").group("g").obj(),
    ]
    result = simulate(objects, default_config(IN_TREE), explain=["default/m1"])
    ex = result.to_json_obj()["explain"]["default/m1"]
    assert ex["gang"] == "default/g"
    placed = result.to_json_obj()["pods"]
    assert ex["members"] == {k: placed[k]["node"] for k in ("default/m0", "default/m1")}
    assert sorted(ex["members"].values()) == ["n0", "n1"]
    # the member was searched with the first one charged: one node left for it
    assert ex["feasible"] == 1


def test_the_explanation_written_on_a_pending_pod_does_not_make_it_try_again() -> None:
    """troupe.explain: an annotated pod that does not fit gets its explanation
    written as annotations; that write comes back as an update of the pod, which
    is the scheduler's own and leaves the pod where it waits."""
    import asyncio
    from dataclasses import replace

    from troupe.clock import VirtualClock
    from troupe.cluster import InMemoryCluster
    from troupe.scheduler import Scheduler

    config = default_config(IN_TREE)
    config = replace(config, troupe=replace(config.troupe, explain_enabled=True))
    cluster = InMemoryCluster()
    s = Scheduler(config, cluster, VirtualClock())
    s.on_node(make_node("n0").capacity(cpu=2, memory="4Gi", pods=10).obj())
    obj = make_pod("huge").req(cpu="8").annotate("troupe.dev/explain", "true").obj()
    cluster.pods["default/huge"] = obj
    s.on_pod(json.loads(json.dumps(obj)))  # the watch's copy, not the cluster's object

    async def cycle() -> None:
        assert s.schedule_one()
        await s.settle()

    asyncio.run(cycle())
    assert s.queue.statistics().unschedulable == 1
    decision = s.decisions.get("default/huge") if s.decisions else None
    assert decision is not None and decision["chosen"] is None
    notes = cluster.pods["default/huge"]["metadata"]["annotations"]
    assert "kube-scheduler-simulator.sigs.k8s.io/filter-result" in notes
    assert cluster.annotation_writes == 1
    # The watch delivers the annotated pod (a new object, as the API sends it).
    s.on_pod(json.loads(json.dumps(cluster.pods["default/huge"])))
    stats = s.queue.statistics()
    assert (stats.unschedulable, stats.active, stats.backoff) == (1, 0, 0)
    # While a label (someone else's change) moves it, as kube-scheduler does.
    relabelled = json.loads(json.dumps(cluster.pods["default/huge"]))
    relabelled["metadata"]["labels"]["team"] = "ml"
    s.on_pod(relabelled)
    assert s.queue.statistics().unschedulable == 0
