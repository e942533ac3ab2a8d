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
from troupe.tools.simulate import simulate


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
    maps = page.count('<div class="map ')  # one heat map per resource, each every node
    assert maps >= 2 and page.count('<div class="cell"') == 4 * maps
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

    from troupe.core.clock import VirtualClock
    from troupe.core.memory_cluster import InMemoryCluster
    from troupe.core.scheduler import Scheduler

    config = default_config(IN_TREE)
    config = replace(config, troupe=replace(config.troupe, explain_enabled=True))
    cluster = InMemoryCluster()
    s = Scheduler(config, cluster, VirtualClock(), registry=IN_TREE)
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


# ---- a gang member whose gang could not be placed ---------------------------------------


def gang_of_three() -> list[dict[str, Any]]:
    """Two nodes, room for two of the three 3-cpu members: the trial places two,
    the gang (minMember 3) is not placed."""
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"minMember": 3},
    }
    return [
        make_node("n0").capacity(cpu=4, memory="16Gi", pods=110).obj(),
        make_node("n1").capacity(cpu=4, memory="16Gi", pods=110).obj(),
        group,
        *(
            make_pod(f"m{i}").req(cpu="3").group("g").annotate("troupe.dev/explain", "true").obj()
            for i in range(3)
        ),
    ]


GANG_WAITS = 'PodGroup "default/g": 2 of minMember 3 pods fit; '


def test_a_member_of_a_gang_that_could_not_be_placed_is_pending_with_the_gangs_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": gang_of_three()}))
    args = ["simulate", str(f), "--explain", "default/m0", "--explain", "default/m2"]
    assert main([*args, "-o", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["explain"]
    placed_in_trial, failed_in_trial = got["default/m0"], got["default/m2"]
    for ex in (placed_in_trial, failed_in_trial):
        assert ex["chosen"] is None and ex["outcome"].startswith(GANG_WAITS)
    # the trial had m0 on a node; nothing is held there
    assert placed_in_trial["trialNode"] in ("n0", "n1")
    assert failed_in_trial["trialNode"] is None
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "placed on" not in text
    assert text.count(f"  outcome: pending: {GANG_WAITS}") == 2
    trial = placed_in_trial["trialNode"]
    assert f"the gang's trial had it on {trial}, but the gang could not be placed" in text
    assert "<- chosen" not in text


def live_scheduler(**troupe: Any) -> tuple[Any, Any]:
    from dataclasses import replace

    from troupe.core.clock import VirtualClock
    from troupe.core.memory_cluster import InMemoryCluster
    from troupe.core.scheduler import Scheduler

    config = default_config(IN_TREE)
    config = replace(config, troupe=replace(config.troupe, explain_enabled=True, **troupe))
    cluster = InMemoryCluster()
    return Scheduler(config, cluster, VirtualClock(), registry=IN_TREE), cluster


def feed(s: Any, cluster: Any, objects: list[dict[str, Any]]) -> None:
    for o in objects:
        o = json.loads(json.dumps(o))  # the watch's copy, not the cluster's object
        if o["kind"] == "Node":
            s.on_node(o)
        elif o["kind"] == "PodGroup":
            s.on_pod_group(o)
        else:
            cluster.pods[f"default/{o['metadata']['name']}"] = json.loads(json.dumps(o))
            s.on_pod(o)


def run_one_cycle(s: Any) -> None:
    import asyncio

    async def cycle() -> None:
        assert s.schedule_one()
        await s.settle()

    asyncio.run(cycle())


def test_live_a_gang_that_could_not_be_placed_leaves_its_members_pending() -> None:
    """/debug/explain and the annotations say pending, with the gang's message, for
    the member the trial placed; one write per annotated member."""
    s, cluster = live_scheduler()
    objects = gang_of_three()
    # m1 does not ask for the whole explanation: its summary says pending too
    del objects[3 + 1]["metadata"]["annotations"]["troupe.dev/explain"]
    feed(s, cluster, objects)
    run_one_cycle(s)
    for name in ("m0", "m1", "m2"):
        got = s.decisions.get(f"default/{name}")
        assert got is not None and got["chosen"] is None, name
        assert got["outcome"].startswith(GANG_WAITS), name
    assert s.decisions.get("default/m0")["trialNode"] in ("n0", "n1")
    assert s.decisions.get("default/m1")["trialNode"] in ("n0", "n1")
    assert "scores" not in s.decisions.get("default/m1")
    notes = cluster.pods["default/m0"]["metadata"]["annotations"]
    assert notes["kube-scheduler-simulator.sigs.k8s.io/selected-node"] == ""
    assert cluster.annotation_writes == 2  # m0 and m2, the pending explanation only
    assert (
        "kube-scheduler-simulator.sigs.k8s.io/filter-result"
        not in (cluster.pods["default/m1"]["metadata"]["annotations"])
    )


# ---- bounded annotations ----------------------------------------------------------------

SIM = "kube-scheduler-simulator.sigs.k8s.io/"
LIMIT = 256 * 1024


def size(notes: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in notes.items())


def long_name(i: int) -> str:
    """A node name as long as kube allows (253 characters, labels of at most 63)."""
    return f"{'a' * 63}.{'b' * 63}.{'c' * 63}.{'d' * 52}{i:05d}"


def test_the_annotations_of_5000_nodes_stay_under_the_api_limit_and_count_what_they_leave_out() -> (
    None
):
    """5000 nodes with names of 253 characters: 2000 too small, 1000 tainted, 500
    cordoned, 1500 feasible. The annotations name the 20 best feasible nodes and
    a few rejected ones per reason, and count the rest."""
    s, cluster = live_scheduler()
    nodes = []
    for i in range(5000):
        n = make_node(long_name(i))
        if i < 2000:
            n = n.capacity(cpu=1, memory="4Gi", pods=110)
        else:
            n = n.capacity(cpu=16 + i % 7, memory="64Gi", pods=110)
        if 2000 <= i < 3000:
            n = n.taint("gpu")
        elif 3000 <= i < 3500:
            n = n.unschedulable()
        nodes.append(n.obj())
    pod = make_pod("web").req(cpu="2", memory="1Gi").annotate("troupe.dev/explain", "true")
    feed(s, cluster, [*nodes, pod.obj()])
    run_one_cycle(s)
    notes = cluster.pods["default/web"]["metadata"]["annotations"]
    assert cluster.pods["default/web"]["spec"].get("nodeName")
    assert size(notes) <= LIMIT
    filters = json.loads(notes[f"{SIM}filter-result"])
    scores = json.loads(notes[f"{SIM}score-result"])
    chosen = notes[f"{SIM}selected-node"]
    assert chosen in scores and chosen in filters
    assert 20 <= len(scores) <= 21 and set(scores) <= set(filters)
    assert json.loads(notes[f"{SIM}finalscore-result"]).keys() == scores.keys()
    omitted = json.loads(notes["troupe.dev/explain-omitted"])
    assert omitted["nodes"] == 5000
    assert len(filters) + omitted["omitted"] == 5000
    feasible, rejected = omitted["feasible"], omitted["rejected"]
    assert feasible == {"nodes": 1500, "shown": len(scores), "omitted": 1500 - len(scores)}
    assert rejected["nodes"] == 3500 and rejected["shown"] == len(filters) - len(scores)
    by_reason = {(r["plugin"], r["nodes"]) for r in rejected["byReason"]}
    assert by_reason == {
        ("NodeResourcesFit", 2000),
        ("TaintToleration", 1000),
        ("NodeUnschedulable", 500),
    }
    assert rejected["reasonsOmitted"] == 0


def test_the_annotations_fit_whatever_the_names_reasons_and_the_pods_own_annotations() -> None:
    """Worst cases: every rejected node with a reason of its own, long; the pod
    already carrying 200 KiB of annotations; then nearly 256 KiB (nothing fits:
    nothing is written rather than a write the API refuses)."""
    from troupe.core.explain import Explanation, simulator_annotations

    filters = ["NodeUnschedulable", "NodeResourcesFit", "TaintToleration"]
    ex = Explanation(pod="default/p", attempt=1, nodes=5000, outcome="placed on x", chosen=None)
    plugins = {p: {"raw": 50, "normalized": 50, "weight": 1, "weighted": 50} for p in filters}
    for i in range(5000):
        if i % 2:
            ex.rejected[long_name(i)] = {
                "plugin": "NodeResourcesFit",
                "reasons": [f"Insufficient example.com/r{i}: " + "x" * 3000],
            }
        else:
            ex.scores[long_name(i)] = {"total": i % 300, "plugins": plugins}
    ex.chosen = long_name(4998)  # not among the best: named all the same
    notes = simulator_annotations(ex, filters)
    assert size(notes) <= 64 * 1024
    assert ex.chosen in json.loads(notes[f"{SIM}filter-result"])
    omitted = json.loads(notes["troupe.dev/explain-omitted"])
    assert omitted["rejected"]["reasonsOmitted"] == 2500 - len(omitted["rejected"]["byReason"])
    own = {"kubectl.kubernetes.io/last-applied-configuration": "y" * 200 * 1024}
    notes = simulator_annotations(ex, filters, own)
    assert notes and size(notes) + size(own) <= LIMIT
    # The explanation's own annotations from an earlier attempt are replaced, not counted.
    earlier = {**own, f"{SIM}filter-result": "z" * 60 * 1024}
    assert simulator_annotations(ex, filters, earlier) == notes
    full = {"kubectl.kubernetes.io/last-applied-configuration": "y" * (LIMIT - 200)}
    assert simulator_annotations(ex, filters, full) == {}
