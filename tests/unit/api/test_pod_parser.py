"""PodParser: a pod update that changes only what a binding or a status report
writes reuses the parsed view; any other change parses again."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.api.test_parse import full_pod
from troupe.api.parse import PodParser, parse_pod
from troupe.api.types import InvalidObject, Pod, PriorityClass


def parsed(parser: PodParser, obj: dict[str, Any], **kw: Any) -> Pod:
    pod = parser.parse(obj, **kw)
    assert isinstance(pod, Pod), pod
    return pod


def bound(o: dict[str, Any]) -> None:
    o["spec"]["nodeName"] = "n1"
    o["metadata"]["resourceVersion"] = "2"
    o["metadata"]["managedFields"] = [{"manager": "kube-apiserver"}]
    o["status"] = {"conditions": [{"type": "PodScheduled", "status": "True"}]}


def running(o: dict[str, Any]) -> None:
    bound(o)
    o["status"]["phase"] = "Running"


def succeeded(o: dict[str, Any]) -> None:
    bound(o)
    o["status"]["phase"] = "Succeeded"


def condition(o: dict[str, Any]) -> None:
    o["status"] = {"conditions": [{"type": "PodScheduled", "status": "False"}]}


def nominated(o: dict[str, Any]) -> None:
    o["status"] = {"nominatedNodeName": "n2"}


def disrupted(o: dict[str, Any]) -> None:
    running(o)
    o["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    )


@pytest.mark.parametrize("change", [bound, running, succeeded, condition, nominated, disrupted])
def test_status_and_node_name_changes_reuse_the_view(
    change: Callable[[dict[str, Any]], None],
) -> None:
    parser = PodParser()
    first = full_pod()
    old = parsed(parser, first)
    new = copy.deepcopy(first)
    change(new)
    pod = parsed(parser, new)
    assert (parser.parsed, parser.reused) == (1, 1)
    assert pod == parse_pod(new)  # the same view a full parse gives
    assert pod.raw is new
    assert pod.requests is old.requests  # not parsed again


def test_in_place_node_name_and_phase_are_seen() -> None:
    """The in-memory cluster binds by setting spec.nodeName on the same dict."""
    parser = PodParser()
    obj = full_pod()
    parsed(parser, obj)
    obj["spec"]["nodeName"] = "n1"
    obj.setdefault("status", {})["phase"] = "Running"
    pod = parsed(parser, obj)
    assert parser.reused == 1
    assert (pod.node_name, pod.phase, pod.terminal) == ("n1", "Running", False)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(o: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            o = o.setdefault(p, {})
        o[last] = value

    change.__name__ = f"{path}={value!r}"
    return change


def _container_cpu(o: dict[str, Any]) -> None:
    o["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3"}}


@pytest.mark.parametrize(
    "change",
    [
        _container_cpu,
        _set("spec.schedulerName", "other"),
        _set("spec.tolerations", []),
        _set("spec.priority", 42),
        _set("spec.schedulingGates", []),
        _set("metadata.labels", {"app": "db"}),
        _set("metadata.annotations", {}),
        _set("metadata.uid", "another"),
        _set("metadata.deletionTimestamp", "2024-01-03T00:00:00Z"),
        _set("metadata.ownerReferences", [{"kind": "ReplicaSet", "name": "rs"}]),
    ],
    ids=lambda c: c.__name__,
)
def test_other_changes_parse_again(change: Callable[[dict[str, Any]], None]) -> None:
    parser = PodParser()
    first = full_pod()
    parsed(parser, first)
    new = copy.deepcopy(first)
    bound(new)
    change(new)
    pod = parser.parse(new)
    assert (parser.parsed, parser.reused) == (2, 0)
    assert pod == parse_pod(new)


def test_label_changed_in_place_parses_again() -> None:
    parser = PodParser()
    obj = full_pod()
    parsed(parser, obj)
    obj["metadata"]["labels"]["app"] = "db"
    assert parsed(parser, obj).labels["app"] == "db"
    assert parser.reused == 0


def test_priority_follows_the_class_it_names() -> None:
    parser = PodParser()
    obj = full_pod()
    obj["spec"].pop("priority", None)
    obj["spec"].pop("preemptionPolicy", None)
    obj["spec"]["priorityClassName"] = "high"
    low = {"high": PriorityClass("high", 10, False, "Never")}
    high = {"high": PriorityClass("high", 1000, False, "PreemptLowerPriority")}
    assert parsed(parser, obj, priority_classes=low).priority == 10
    pod = parsed(parser, copy.deepcopy(obj), priority_classes=high)
    assert parser.reused == 1
    assert (pod.priority, pod.preemption_policy) == (1000, "PreemptLowerPriority")


def test_unreadable_update_is_reported_and_forgets_the_view() -> None:
    parser = PodParser()
    obj = full_pod()
    parsed(parser, obj)
    bad = copy.deepcopy(obj)
    bad["status"] = {"phase": 7}
    assert isinstance(parser.parse(bad), InvalidObject)
    assert len(parser) == 0
    parsed(parser, obj)
    assert parser.parsed == 3


def test_forget() -> None:
    parser = PodParser()
    obj = full_pod()
    parsed(parser, obj)
    parser.forget(obj)
    parsed(parser, copy.deepcopy(obj))
    assert (parser.parsed, parser.reused, len(parser)) == (2, 0, 1)


@pytest.mark.parametrize(
    ("conditions", "want"),
    [
        pytest.param([], "", id="none"),
        pytest.param(
            [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}],
            "PreemptionByScheduler",
            id="true",
        ),
        pytest.param(
            [{"type": "DisruptionTarget", "status": "False", "reason": "PreemptionByScheduler"}],
            "",
            id="false",
        ),
        pytest.param(
            [
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
            ],
            "EvictionByEvictionAPI",
            id="the-first-counts",
        ),
    ],
)
def test_disruption_reason_is_the_true_disruption_target_condition(
    conditions: list[dict[str, str]], want: str
) -> None:
    obj = full_pod()
    obj["status"] = {"conditions": conditions}
    pod = parse_pod(obj)
    assert isinstance(pod, Pod), pod
    assert pod.disruption_reason == want
