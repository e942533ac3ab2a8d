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
