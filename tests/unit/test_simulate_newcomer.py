"""What a newcomer to `troupe simulate` runs into (issue #31, item 4): the order
of pods without creation timestamps, workloads whose pods are not in the
input, flags that do not combine, and the documented dump command."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from troupe.api.kinds import KINDS
from troupe.cli import main
from troupe.config import default_config, parse_config
from troupe.plugins.registry import IN_TREE
from troupe.tools.live import LISTED, dump_command, resource_name
from troupe.tools.simulate import load_objects, simulate, workloads_without_pods

REPO = Path(__file__).resolve().parents[2]


def pod(name: str, created: str | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": "default"}
    if created:
        md["creationTimestamp"] = created
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": md,
        "spec": {
            "schedulerName": "troupe-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


# Room for two of the four pods: which two shows the order they were tried in.
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n"},
    "status": {
        "allocatable": {"cpu": "2", "memory": "1Gi", "pods": "10"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}
PODS = [
    pod("no-time-1"),
    pod("newer", "2024-01-02T00:00:00Z"),
    pod("older", "2024-01-01T00:00:00Z"),
    pod("no-time-2"),
]
PRIORITY_SORT = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: troupe-scheduler
  plugins:
    queueSort: {enabled: [{name: PrioritySort}], disabled: [{name: "*"}]}
"""


def placed(config: Any, pods: list[dict[str, Any]]) -> set[str]:
    # (a run writes into the objects it schedules, as the API would)
    result = simulate(copy.deepcopy([NODE, *pods]), config)
    return {k.partition("/")[2] for k, v in result.pods.items() if v["node"]}


def test_pods_without_a_timestamp_come_after_those_with_one_in_input_order() -> None:
    """A pod without a creationTimestamp is created after everything in the
    input, as the API server would stamp it now: under either QueueSort
    (Coscheduling's creation time, PrioritySort's order of creation) it goes
    after the pods of its priority that have one, and such pods keep their
    input order."""
    for config in (default_config(IN_TREE), parse_config(yaml.safe_load(PRIORITY_SORT), IN_TREE)):
        assert placed(config, PODS) == {"older", "newer"}
        assert placed(config, [pod("no-time-0"), *PODS]) == {"older", "newer"}
        assert placed(config, [*PODS[2:], pod("no-time-3")]) == {"older", "no-time-2"}
        assert placed(config, [pod(f"p{i}") for i in range(4)]) == {"p0", "p1"}


def workload(kind: str, name: str, owner: str | None = None, **extra: Any) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": "shop"}
    if owner:
        okind, oname = owner.split("/")
        md["ownerReferences"] = [{"kind": okind, "name": oname}]
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": md, **extra}


def test_a_workload_without_its_pods_is_named(tmp_path: Path) -> None:
    owned = pod("web-abc-1")
    owned["metadata"] |= {"namespace": "shop", "ownerReferences": [
        {"kind": "ReplicaSet", "name": "web-abc"}]}  # fmt: skip
    docs = [
        workload("Deployment", "web"),  # covered through its ReplicaSet's pod
        workload("ReplicaSet", "web-abc", "Deployment/web"),
        workload("ReplicaSet", "web-old", "Deployment/web", spec={"replicas": 0}),
        workload("Deployment", "api"),  # no pods: named
        workload("Job", "done", status={"completionTime": "2024-01-01T00:00:00Z"}),
        workload("Job", "train"),  # no pods: named
        owned,
    ]
    f = tmp_path / "dump.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    found: list[tuple[str, dict[str, Any]]] = []
    objects = load_objects([str(f)], workloads=found)
    assert [w["metadata"]["name"] for _, w in found] == ["web", "web-abc", "web-old", "api",
                                                          "done", "train"]  # fmt: skip
    warned = workloads_without_pods(found, objects)
    assert warned == [
        f"{f}: document 4: Deployment shop/api has none of its pods in the input: the "
        "simulator makes no pods from templates (give its Pods, e.g. from kubectl get pods "
        "-o yaml, or write them out)",
        f"{f}: document 6: Job shop/train has none of its pods in the input: the simulator "
        "makes no pods from templates (give its Pods, e.g. from kubectl get pods -o yaml, "
        "or write them out)",
    ]


def test_the_cli_warns_of_a_workload_without_pods_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all([NODE, workload("Deployment", "web"), pod("p")]))
    assert main(["simulate", str(f), "-o", "json"]) == 0
    out = capsys.readouterr()
    assert '"default/p"' in out.out
    assert f"troupe: warning: {f}: document 2: Deployment shop/web has none" in out.err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--explain", "default/p", "--compare", "a.yaml", "b.yaml"],
         "--explain does not combine with --compare"),
        (["--explain-all"], "--explain-all only widens --explain NS/NAME"),
        (["--save", "dump.yaml"], "--save keeps what --kubeconfig read; give --kubeconfig"),
    ],
)  # fmt: skip
def test_flags_that_would_be_ignored_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all([NODE, pod("p")]))
    assert main(["simulate", str(f), *args]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == f"troupe: {said}" + out.err.partition(said)[2]
    assert out.err.endswith("\n") and out.err.count("\n") == 1


def test_no_input_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate"]) == 2
    assert (
        capsys.readouterr().err == "troupe: give input files, or --kubeconfig to read the cluster\n"
    )


def test_the_dump_command_names_every_kind_the_simulator_reads() -> None:
    cmd = dump_command()
    names = cmd.split(" in ", 1)[1].split("; do")[0].replace("\\", " ").split()
    want = list(dict.fromkeys(resource_name(k) for k in KINDS if k.simulated))
    assert names == want
    assert "podgroups.scheduling.x-k8s.io" in names and "podgroups.scheduling.k8s.io" in names
    # what --kubeconfig lists is the same, but ResourceClaimTemplates (troupe run
    # does not read them)
    listed = [n for n in want if not n.startswith("resourceclaimtemplates.")]
    assert [resource_name(k) for k in LISTED] == listed
    for doc in ("docs/simulate.md", "README.md"):
        assert cmd in (REPO / doc).read_text(), f"{doc}: the dump command is not today's"


def test_a_kubeconfig_that_cannot_be_read_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.kubeconfig"
    assert main(["simulate", "--kubeconfig", str(missing)]) == 1
    err = capsys.readouterr().err
    assert (
        err
        == f"troupe: cannot read the cluster: --kubeconfig {missing}: No such file or directory\n"
    )
