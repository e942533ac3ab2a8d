"""The simulator end to end: YAML fixtures through the real pipeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import make_node, make_pod
from troupe.cli import main
from troupe.config import default_config
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import InputError, format_table, load_objects, simulate

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sim"


NV1 = " preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.."


def run(name: str) -> dict[str, Any]:
    result = simulate(load_objects([str(FIXTURES / name)]), default_config(IN_TREE))
    return result.to_json_obj()


def test_resources() -> None:
    out = run("resources.yaml")
    pods = out["pods"]
    assert {pods["default/big-1"]["node"], pods["default/big-2"]["node"]} == {"small-a", "small-b"}
    assert pods["default/too-big"] == {
        "node": None,
        "reason": "0/2 nodes are available: 2 Insufficient cpu, 2 Insufficient memory."
        " preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling..",
        "preemptedBy": None,
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
        "3 Insufficient cpu. preemption: 0/5 nodes are available: 5 Preemption is not helpful "
        "for scheduling..",
        "preemptedBy": None,
    }
    assert pods["default/tolerant"]["node"] in ("gpu-1", "gpu-2")


def test_affinity() -> None:
    pods = run("affinity.yaml")["pods"]
    assert pods["default/wants-qa"]["node"] == "qa-1"
    assert pods["default/wants-many-cores"]["node"] == "prod-2"
    assert pods["default/prefers-zone-a-prod"]["node"] == "prod-1"
    assert pods["default/wants-staging"] == {
        "node": None,
        "reason": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling..",
        "preemptedBy": None,
    }


def test_host_ports() -> None:
    pods = run("ports.yaml")["pods"]
    assert pods["default/web-1"]["node"] == "only"
    assert pods["default/dns"]["node"] == "only"
    assert pods["default/web-2"] == {
        "node": None,
        "reason": "0/1 nodes are available: 1 node(s) didn't have free ports for the requested "
        "pod ports." + NV1,
        "preemptedBy": None,
    }


def test_priority_order() -> None:
    pods = run("priority.yaml")["pods"]
    assert pods["default/important"]["node"] == "one-cpu"
    assert pods["default/low"] == {
        "node": None,
        "reason": "0/1 nodes are available: 1 Insufficient cpu." + NV1,
        "preemptedBy": None,
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
        "reason": "0/1 nodes are available: 1 Insufficient troupe.dev/isolated-cpu." + NV1,
        "preemptedBy": None,
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
        assert set(v) == {"node", "reason", "preemptedBy"}


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

    from troupe.cli import JsonFormatter

    rec = logging.LogRecord(
        "troupe.core.scheduler",
        logging.INFO,
        __file__,
        1,
        "pod %s is unschedulable: %s",
        ("default/p", "0/1 nodes"),
        None,
    )
    out = _json.loads(JsonFormatter().format(rec))
    assert out["level"] == "INFO" and out["logger"] == "troupe.core.scheduler"
    assert out["msg"] == "pod default/p is unschedulable: 0/1 nodes"


# ---- issue #14: hostile input is one line on stderr and exit 2, in bounded time -------

NODE_YAML = (
    "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n"
    "status: {allocatable: {cpu: '4', memory: 8Gi, pods: '110'}}\n"
)


def pod_yaml(name: str, extra: str = "") -> str:
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\n"
        f"spec:\n  schedulerName: troupe-scheduler\n{extra}"
        "  containers: [{name: c, resources: {requests: {cpu: 100m}}}]\n"
    )


def alias_bomb() -> bytes:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 10)}]")
    return (
        "\n".join(["apiVersion: v1", "kind: Node", "metadata: {name: n}", *lines]) + "\n"
    ).encode()


HOSTILE = [
    pytest.param(
        b"kind: Node\nmetadata: {name: \xff}\n", "not valid UTF-8 (byte 28)", id="invalid-utf8"
    ),
    pytest.param(
        b"x: " + b"[" * 3000 + b"]" * 3000 + b"\n",
        "nested more than 200 levels deep",
        id="deep-yaml",
    ),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "nested too deeply", id="deep-json"),
    pytest.param(alias_bomb(), "aliases expand to more than 100000 nodes", id="alias-bomb"),
    pytest.param(
        b"kind: Node\nmetadata: {name: n}\nx: " + b"9" * 5000 + b"\n",
        "integer string",
        id="huge-int",
    ),
    pytest.param(
        (NODE_YAML + "---\n" + pod_yaml("p", "  nodeName: 7\n")).encode(),
        "document 2: Pod p: spec.nodeName must be a string, got 7",
        id="node-name-not-a-string",
    ),
    pytest.param(
        b"apiVersion: v1\nkind: Node\nmetadata: {name: 7}\n",
        "document 1: Node metadata.name must be a non-empty string, got 7",
        id="name-not-a-string",
    ),
    pytest.param(
        (NODE_YAML + "---\n" + pod_yaml("p") + "---\n" + pod_yaml("p", "  nodeName: n\n")).encode(),
        "document 3: duplicate Pod default/p (first in ",
        id="duplicate-pod-running-and-pending",
    ),
    pytest.param(
        (NODE_YAML + "---\n" + NODE_YAML).encode(),
        "document 2: duplicate Node n (first in ",
        id="duplicate-node",
    ),
]


@pytest.mark.parametrize(("text", "problem"), HOSTILE)
def test_issue14_hostile_simulator_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: bytes, problem: str
) -> None:
    f = tmp_path / "in.yaml"
    f.write_bytes(text)
    assert main(["simulate", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"troupe: {f}: "), err
    assert problem in err


def test_issue14_duplicate_names_both_places(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(NODE_YAML + "---\n" + pod_yaml("p"))
    b.write_text(pod_yaml("q") + "---\n" + pod_yaml("p", "  nodeName: n\n"))
    with pytest.raises(InputError) as e:
        load_objects([str(a), str(b)])
    assert str(e.value) == (f"{b}: document 2: duplicate Pod default/p (first in {a}: document 2)")
    # The same name in two namespaces, or of two kinds, is not a duplicate.
    b.write_text(pod_yaml("p").replace("{name: p}", "{name: p, namespace: other}"))
    assert len(load_objects([str(a), str(b)])) == 3


@pytest.mark.parametrize("until", ["inf", "nan", "-1", "-inf"])
def test_issue14_until_must_be_finite(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, until: str
) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(NODE_YAML)
    assert main(["simulate", str(f), f"--until={until}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("troupe: --until: must be a finite number")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param(b"kind: \xff\n", "not UTF-8", id="invalid-utf8"),
        pytest.param(b"a: " + b"[" * 3000 + b"]" * 3000 + b"\n", "nested more than", id="deep"),
        pytest.param(alias_bomb(), "aliases expand", id="alias-bomb"),
        pytest.param(
            b"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            b"podMaxBackoffSeconds: .inf\n",
            "podMaxBackoffSeconds",
            id="inf-duration",
        ),
    ],
)
def test_issue14_hostile_config_for_simulate_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: bytes, problem: str
) -> None:
    cfg, f = tmp_path / "config.yaml", tmp_path / "in.yaml"
    cfg.write_bytes(text)
    f.write_text(NODE_YAML)
    assert main(["simulate", "--config", str(cfg), str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("troupe: configuration: "), err
    assert problem in err


def test_issue14_kubectl_json_list_still_reads(tmp_path: Path) -> None:
    f = tmp_path / "cluster.json"
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n"},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "schedulerName": "troupe-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
    }
    f.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [node, pod]}, indent="\t")
    )
    out = simulate(load_objects([str(f)]), default_config(IN_TREE)).to_json_obj()
    assert out["pods"]["default/p"]["node"] == "n"


def test_issue14_pod_both_running_and_pending_in_a_simulation_has_no_traceback() -> None:
    """The same pod running and pending (objects given directly, past the loader's
    duplicate check): the running one wins; the pending one is not scheduled again."""
    objs = [
        yaml.safe_load(NODE_YAML),
        yaml.safe_load(pod_yaml("p", "  nodeName: n\n")),
        yaml.safe_load(pod_yaml("p")),
    ]
    result = simulate(objs, default_config(IN_TREE))
    assert result.nodes["n"]["cpu"]["requested"] == 0.1
    assert result.nodes["n"]["pods"]["requested"] == 1


def test_issue14_table_output_with_a_non_string_node_name() -> None:
    """Given directly to the simulation, `nodeName: 7` is a malformed pod with a
    reason, and the table prints."""
    objs = [yaml.safe_load(NODE_YAML), yaml.safe_load(pod_yaml("p", "  nodeName: 7\n"))]
    result = simulate(objs, default_config(IN_TREE))
    assert result.pods["default/p"]["node"] is None
    assert "spec.nodeName" in result.pods["default/p"]["reason"]
    assert "default/p" in format_table(result)


def _kube_list(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


JSON_NODE: dict[str, Any] = yaml.safe_load(NODE_YAML)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param('{"kind": "Node", "x": NaN}', "NaN is not a number", id="nan"),
        pytest.param('{"kind": "Node", "x": -Infinity}', "-Infinity is not a number", id="inf"),
        pytest.param(
            '{"kind": "Node", "x": ' + "[" * 300 + "]" * 300 + "}",
            "nested more than 200 levels deep",
            id="deep",
        ),
        pytest.param('{"kind": "Node", "x": 1,}', "not valid JSON (line 1)", id="syntax"),
        pytest.param(
            json.dumps(_kube_list(JSON_NODE, JSON_NODE)),
            "items[1]: duplicate Node n (first in ",
            id="duplicate-node",
        ),
    ],
)
def test_json_input_is_refused_as_yaml_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, problem: str
) -> None:
    f = tmp_path / "in.json"
    f.write_text(text)
    assert main(["simulate", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"troupe: {f}: "), err
    assert problem in err


def test_json_and_yaml_inputs_give_the_same_result(tmp_path: Path) -> None:
    pods = [yaml.safe_load(pod_yaml(f"p{i}")) for i in range(3)]
    j, y = tmp_path / "dump", tmp_path / "dump.yaml"  # JSON found by content, no extension
    j.write_text(json.dumps(_kube_list(JSON_NODE, *pods), indent=4))
    y.write_text(yaml.safe_dump(_kube_list(JSON_NODE, *pods)))
    config = default_config(IN_TREE)
    from_json = simulate(load_objects([str(j)]), config).to_json_obj()
    assert from_json == simulate(load_objects([str(y)]), config).to_json_obj()
    assert {p["node"] for p in from_json["pods"].values()} == {"n"}


def test_flow_style_yaml_is_not_taken_for_json(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    f.write_text("{apiVersion: v1, kind: Node, metadata: {name: n}}\n")
    assert [o["metadata"]["name"] for o in load_objects([str(f)])] == ["n"]


def test_timings_go_to_stderr_on_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(NODE_YAML + "---\n" + pod_yaml("p"))
    assert main(["simulate", "--timings", "-o", "yaml", str(f)]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out)["pods"]["default/p"]["node"] == "n"
    assert err.count("\n") == 1 and err.startswith("troupe: timings: read "), err
    assert "(2 objects)" in err and "1 cycles, 1 pods)" in err and "output " in err
    # make bench reads it (bench/simulate_bench.py): read, schedule, of which load, output
    from bench.simulate_bench import TIMINGS

    m = TIMINGS.search(err)
    assert m is not None, err
    read, schedule, load, output = (float(g) for g in m.groups())
    assert 0 <= load <= schedule and read >= 0 and output >= 0


def test_troupe_command_ends_after_simulate_with_its_output_and_status() -> None:
    # The command ends the process at once after simulate (no orderly shutdown):
    # everything printed must still be there, and the exit status must be kept.
    import subprocess
    import sys

    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "troupe",
            "simulate",
            "-o",
            "json",
            str(FIXTURES / "affinity.yaml"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["pods"]["default/wants-qa"]["node"] == "qa-1"
    bad = subprocess.run(
        [sys.executable, "-m", "troupe", "simulate", str(FIXTURES / "no-such-file.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert "no-such-file.yaml: No such file or directory" in bad.stderr


# ---- issue #23: values that cannot be represented are reasons naming the field ----


def _sim_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], *objs: dict[str, Any]) -> Any:
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all(objs))
    assert main(["simulate", str(f), "--output", "json"]) == 0
    return json.loads(capsys.readouterr().out)["pods"]


def test_issue23_a_node_that_cannot_be_read_is_named_in_its_pods_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a hostile probe: a Node with cpu 1Ei was dropped with a log line
    only, and the pod that would have gone there read "no nodes available"."""
    node = make_node("big").capacity(cpu="4", memory="8Gi", pods=110).obj()
    node["status"]["allocatable"]["cpu"] = "1Ei"
    pods = _sim_json(tmp_path, capsys, node, make_pod("p").req(cpu="1").obj())
    reason = pods["default/p"]["reason"]
    assert reason.startswith("0/1 nodes are available: 1 node(s) could not be read"), reason
    assert "node big: status.allocatable.cpu: " in reason, reason


def test_issue23_a_grace_period_beyond_int64_is_a_reason_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a hostile probe: a victim with terminationGracePeriodSeconds 10**400
    could not be evicted and its preemptor never tried again. The API server
    holds it as an int64: beyond that the pod is not read, and says why."""
    node = make_node("n1").capacity(cpu="1", memory="8Gi", pods=110).obj()
    low = make_pod("low").req(cpu="1").priority(1).node("n1").phase("Running").obj()
    low["spec"]["terminationGracePeriodSeconds"] = 10**400
    pending = make_pod("later").req(cpu="1").priority(1).obj()
    pending["spec"]["terminationGracePeriodSeconds"] = -1
    pods = _sim_json(tmp_path, capsys, node, low, pending)
    assert "spec.terminationGracePeriodSeconds: " in pods["default/low"]["reason"]
    assert "must be a 64-bit integer" in pods["default/low"]["reason"]
    assert pods["default/later"]["node"] is None
    assert pods["default/later"]["reason"].startswith("spec.terminationGracePeriodSeconds: ")
