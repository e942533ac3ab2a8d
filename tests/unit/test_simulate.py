"""The simulator end to end: YAML fixtures through the real pipeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.cli import main
from scheduler.config import default_config
from scheduler.plugins.registry import IN_TREE
from scheduler.simulate import InputError, load_objects, simulate

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sim"


def run(name: str) -> dict[str, Any]:
    result = simulate(load_objects([str(FIXTURES / name)]), default_config(IN_TREE))
    return result.to_json_obj()


def test_resources() -> None:
    out = run("resources.yaml")
    pods = out["pods"]
    assert {pods["default/big-1"]["node"], pods["default/big-2"]["node"]} == {"small-a", "small-b"}
    assert pods["default/too-big"] == {
        "node": None,
        "reason": "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient memory.",
    }
    assert pods["default/other-scheduler"]["node"] is None
    assert "default-scheduler" in pods["default/other-scheduler"]["reason"]
    assert out["nodes"]["small-a"]["cpu"] == {"requested": 1.5, "allocatable": 2}
    assert out["nodes"]["small-a"]["pods"] == {"requested": 1, "allocatable": 110}


def test_taints_diagnostics_in_kube_scheduler_words() -> None:
    pods = run("taints.yaml")["pods"]
    assert pods["default/plain"] == {
        "node": None,
        "reason": "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: gpu}, "
        "3 Insufficient cpu.",
    }
    assert pods["default/tolerant"]["node"] in ("gpu-1", "gpu-2")


def test_affinity() -> None:
    pods = run("affinity.yaml")["pods"]
    assert pods["default/wants-qa"]["node"] == "qa-1"
    assert pods["default/wants-many-cores"]["node"] == "prod-2"
    assert pods["default/prefers-zone-a-prod"]["node"] == "prod-1"
    assert pods["default/wants-staging"] == {
        "node": None,
        "reason": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
    }


def test_host_ports() -> None:
    pods = run("ports.yaml")["pods"]
    assert pods["default/web-1"]["node"] == "only"
    assert pods["default/dns"]["node"] == "only"
    assert pods["default/web-2"] == {
        "node": None,
        "reason": "0/1 nodes are available: 1 node(s) didn't have free ports for the requested "
        "pod ports.",
    }


def test_priority_order() -> None:
    pods = run("priority.yaml")["pods"]
    assert pods["default/important"]["node"] == "one-cpu"
    assert pods["default/low"] == {
        "node": None,
        "reason": "0/1 nodes are available: 1 Insufficient cpu.",
    }


def test_malformed_pod_among_good_ones() -> None:
    pods = run("malformed.yaml")["pods"]
    assert pods["default/good-1"]["node"] == "n1"
    assert pods["default/good-2"]["node"] == "n1"
    assert pods["default/broken"]["node"] is None
    assert "spec.containers[0].resources.requests.cpu" in pods["default/broken"]["reason"]


def test_isolated_cpus() -> None:
    out = run("isolated.yaml")
    pods = out["pods"]
    assert pods["default/isolated-4"]["node"] == "iso-node"
    assert pods["default/ordinary-4"]["node"] == "iso-node"
    assert pods["default/isolated-1"] == {
        "node": None,
        "reason": "0/1 nodes are available: 1 Insufficient troupe.dev/isolated-cpu.",
    }
    use = out["nodes"]["iso-node"]
    assert use["cpu"] == {"requested": 4, "allocatable": 4}
    assert use["troupe.dev/isolated-cpu"] == {"requested": 4, "allocatable": 4}


def test_seed_makes_ties_reproducible() -> None:
    a = run("resources.yaml")
    b = run("resources.yaml")
    assert a == b


def test_cli_json_output_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(FIXTURES / "ports.yaml"), "--output", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"pods", "podGroups", "nodes"}
    assert set(out["pods"]) == {"default/web-1", "default/web-2", "default/dns"}
    for v in out["pods"].values():
        assert set(v) == {"node", "reason"}


def test_cli_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(FIXTURES / "priority.yaml")]) == 0
    text = capsys.readouterr().out
    assert "default/important" in text and "one-cpu" in text
    assert "0/1 nodes are available: 1 Insufficient cpu." in text


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("a: [1, 2\n", "not valid YAML"),
        ("- 1\n- 2\n", "expected a Kubernetes object"),
        ("apiVersion: v1\nmetadata: {name: x}\n", "object has no kind"),
    ],
    ids=["bad-yaml", "not-an-object", "no-kind"],
)
def test_unreadable_input_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, problem: str
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(content)
    assert main(["simulate", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(f) in err and problem in err


def test_missing_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["simulate", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_load_objects_rejects_unknown_podgroup_api(tmp_path: Path) -> None:
    f = tmp_path / "pg.yaml"
    f.write_text("apiVersion: example.com/v1\nkind: PodGroup\nmetadata: {name: g}\n")
    with pytest.raises(InputError, match="PodGroup apiVersion"):
        load_objects([str(f)])


def test_json_logs() -> None:
    import json as _json
    import logging

    from scheduler.cli import JsonFormatter

    rec = logging.LogRecord(
        "scheduler.scheduler",
        logging.INFO,
        __file__,
        1,
        "pod %s is unschedulable: %s",
        ("default/p", "0/1 nodes"),
        None,
    )
    out = _json.loads(JsonFormatter().format(rec))
    assert out["level"] == "INFO" and out["logger"] == "scheduler.scheduler"
    assert out["msg"] == "pod default/p is unschedulable: 0/1 nodes"
