"""Parsing whole objects: every Pod field, Nodes, PodGroups, PriorityClasses,
dispatch by kind, and malformed objects as values that name the field."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import PodBuilder, make_node, make_pod
from troupe.api.parse import (
    parse_node,
    parse_object,
    parse_pod,
    parse_pod_group,
    parse_priority_class,
    parse_timestamp,
    parse_workload,
)
from troupe.api.types import (
    ContainerImage,
    HostPort,
    InvalidObject,
    LabelSelector,
    Node,
    ParseError,
    Pod,
    PodGroup,
    PriorityClass,
    Requirement,
    SelectorOp,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOp,
    Workload,
)

GI = 2**30


def ok_pod(obj: dict[str, Any], **kw: Any) -> Pod:
    p = parse_pod(obj, **kw)
    assert isinstance(p, Pod), p
    return p


# ---- priority ----------------------------------------------------------------------------

HIGH = PriorityClass("high", 1000, False)
STD = PriorityClass("std", 10, True)
LOW_DEFAULT = PriorityClass("low-default", 5, True)


@pytest.mark.parametrize(
    ("pod", "classes", "want"),
    [
        (make_pod("p").priority(5), {"high": HIGH, "std": STD}, 5),
        (make_pod("p").priority(0).priority_class("high"), {"high": HIGH}, 0),
        (make_pod("p").priority(-7), {}, -7),
        (make_pod("p").priority_class("high"), {"high": HIGH, "std": STD}, 1000),
        (make_pod("p"), {"high": HIGH, "std": STD}, 10),
        (make_pod("p"), {"std": STD, "low-default": LOW_DEFAULT}, 5),
        (make_pod("p"), {"high": HIGH}, 0),
        (make_pod("p"), {}, 0),
        (make_pod("p").priority_class("unknown"), {"high": HIGH}, 0),
        (make_pod("p").priority_class("unknown"), {"std": STD}, 0),
    ],
    ids=[
        "spec-priority",
        "spec-priority-zero-wins-over-class",
        "negative",
        "named-class",
        "global-default",
        "lowest-of-two-global-defaults",
        "no-default",
        "no-classes",
        "unknown-class",
        "unknown-class-ignores-default",
    ],
)
def test_priority(pod: PodBuilder, classes: dict[str, PriorityClass], want: int) -> None:
    assert ok_pod(pod.obj(), priority_classes=classes).priority == want


def test_priority_without_classes_argument() -> None:
    assert ok_pod(make_pod("p").priority_class("high").obj()).priority == 0


# ---- pod fields --------------------------------------------------------------------------


def full_pod() -> dict[str, Any]:
    sel = {"matchLabels": {"app": "web"}}
    o = (
        make_pod("web-1", "shop")
        .label("app", "web")
        .annotate("troupe.dev/isolated-cpu", "true")
        .group("g")
        .created("2024-01-01T00:00:00Z")
        .host_port(80, "UDP", "0.0.0.0")
        .host_port(443, host_ip="10.0.0.1")
        .image("nginx")
        .container("registry:5000/app")
        .gate("wait-for-quota")
        .toleration("dedicated", "gpu", "NoSchedule")
        .toleration(operator="Exists")
        .node_selector(disk="ssd")
        .required_affinity(
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
        )
        .preferred_affinity(
            7, {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
        )
        .priority_class("high")
        .obj()
    )
    spec = o["spec"]
    spec["initContainers"] = [
        {"name": "setup", "image": "busybox:1.36"},
        {
            "name": "proxy",
            "image": "envoy@sha256:abc",
            "restartPolicy": "Always",
            "ports": [{"containerPort": 9901, "hostPort": 9901}],
        },
    ]
    spec["affinity"]["podAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": sel,
                "topologyKey": "zone",
                "namespaces": ["a", "b"],
                "namespaceSelector": {},
                "matchLabelKeys": ["pod-template-hash"],
                "mismatchLabelKeys": ["tenant"],
            }
        ]
    }
    spec["affinity"]["podAntiAffinity"] = {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
        ]
    }
    spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": sel,
        },
        {
            "maxSkew": 2,
            "topologyKey": "host",
            "whenUnsatisfiable": "ScheduleAnyway",
            "nodeAffinityPolicy": "Ignore",
            "nodeTaintsPolicy": "Honor",
            "matchLabelKeys": ["pod-template-hash"],
        },
        {
            "maxSkew": 1,
            "topologyKey": "rack",
            "whenUnsatisfiable": "DoNotSchedule",
            "minDomains": 3,
        },
    ]
    o["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "web-abc", "uid": "u"}]
    o["metadata"]["deletionTimestamp"] = "2024-01-02T00:00:00Z"
    return o


def test_every_pod_field() -> None:
    obj = full_pod()
    p = ok_pod(obj, priority_classes={"high": HIGH})
    assert (p.namespace, p.name, p.key, p.uid) == ("shop", "web-1", "shop/web-1", "uid-shop-web-1")
    assert p.labels == {"app": "web", "scheduling.x-k8s.io/pod-group": "g"}
    assert p.group_key == "shop/g"
    assert p.is_isolated_cpu
    assert (p.scheduler_name, p.node_name, p.phase) == ("troupe-scheduler", "", "Pending")
    assert p.deleting
    assert p.creation_timestamp == 1704067200.0
    assert (p.priority, p.priority_class_name) == (1000, "high")
    # sidecars first, then containers (GetHostPorts); 0.0.0.0 stored as ""
    assert p.host_ports == (
        HostPort("", "TCP", 9901),
        HostPort("", "UDP", 80),
        HostPort("10.0.0.1", "TCP", 443),
    )
    # every init container, then containers (ImageLocality); tags and digests kept
    assert p.images == (
        "busybox:1.36",
        "envoy@sha256:abc",
        "nginx:latest",
        "registry:5000/app:latest",
    )
    assert p.node_selector == {"disk": "ssd"}
    assert p.required_node_affinity is not None
    assert p.required_node_affinity.terms[0].match_expressions == (
        Requirement("zone", SelectorOp.IN, ("a",)),
    )
    assert [(t.weight, t.preference.match_fields) for t in p.preferred_node_affinity] == [
        (7, (Requirement("metadata.name", SelectorOp.IN, ("n1",)),))
    ]
    assert p.tolerations == (
        Toleration("dedicated", TolerationOp.EQUAL, "gpu", TaintEffect.NO_SCHEDULE),
        Toleration("", TolerationOp.EXISTS),
    )
    web = LabelSelector((Requirement("app", SelectorOp.IN, ("web",)),))
    assert p.pod_affinity is not None and p.pod_affinity.preferred == ()
    (term,) = p.pod_affinity.required
    assert term.label_selector == web
    assert (term.topology_key, term.namespaces) == ("zone", ("a", "b"))
    assert term.namespace_selector == LabelSelector()
    assert (term.match_label_keys, term.mismatch_label_keys) == (
        ("pod-template-hash",),
        ("tenant",),
    )
    assert p.pod_anti_affinity is not None and p.pod_anti_affinity.required == ()
    (weighted,) = p.pod_anti_affinity.preferred
    assert weighted.weight == 50
    assert weighted.term.label_selector is None and weighted.term.namespace_selector is None
    c0, c1, c2 = p.topology_spread_constraints
    assert (c0.max_skew, c0.topology_key, c0.when_unsatisfiable, c0.label_selector) == (
        1,
        "zone",
        "DoNotSchedule",
        web,
    )
    assert (c0.min_domains, c0.node_affinity_policy, c0.node_taints_policy) == (
        None,
        "Honor",
        "Ignore",
    )
    assert (c1.node_affinity_policy, c1.node_taints_policy, c1.match_label_keys) == (
        "Ignore",
        "Honor",
        ("pod-template-hash",),
    )
    assert c1.label_selector is None
    assert c2.min_domains == 3
    assert p.scheduling_gates == ("wait-for-quota",)
    assert p.owner_references == (("ReplicaSet", "web-abc"),)
    assert p.raw is obj


def test_pod_defaults() -> None:
    obj = {"metadata": {"name": "bare"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    p = ok_pod(obj)
    assert (p.namespace, p.uid, p.phase, p.scheduler_name) == (
        "default",
        "",
        "Pending",
        "default-scheduler",
    )
    assert (p.deleting, p.creation_timestamp, p.priority) == (False, 0.0, 0)
    assert p.labels == {} and p.annotations == {} and p.requests == {}
    assert (
        p.required_node_affinity is None and p.pod_affinity is None and p.pod_anti_affinity is None
    )
    assert p.preferred_node_affinity == () and p.tolerations == () and p.host_ports == ()
    assert (
        p.topology_spread_constraints == ()
        and p.scheduling_gates == ()
        and p.owner_references == ()
    )
    assert p.group_key is None and not p.is_isolated_cpu and not p.terminal


def test_bound_and_terminal_pods() -> None:
    p = ok_pod(make_pod("p").node("n1").phase("Succeeded").obj())
    assert (p.node_name, p.phase, p.terminal) == ("n1", "Succeeded", True)


def test_legacy_pod_group_label() -> None:
    p = ok_pod(make_pod("p").label("pod-group.scheduling.sigs.k8s.io", "old").obj())
    assert p.pod_group == "old"


def test_init_container_ports_count_only_for_sidecars() -> None:
    o = make_pod("p").obj()
    o["spec"]["initContainers"] = [
        {"name": "i", "image": "x", "ports": [{"containerPort": 1, "hostPort": 1}]}
    ]
    o["spec"]["containers"][0]["ports"] = [
        {"containerPort": 8080},
        {"containerPort": 2, "hostPort": 0},
    ]
    assert ok_pod(o).host_ports == ()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2024-01-01T00:00:00Z", 1704067200.0),
        ("2024-01-01T00:00:00z", 1704067200.0),
        ("2024-01-01t00:00:00Z", 1704067200.0),
        ("2024-01-01T01:30:00+01:30", 1704067200.0),
        ("2023-12-31T23:00:00-01:00", 1704067200.0),
        ("2024-01-01T00:00:00.5Z", 1704067200.5),
        ("2024-01-01T00:00:00.123456789Z", 1704067200.123456789),
        ("1970-01-01T00:00:00Z", 0.0),
        (None, 0.0),
        ("", 0.0),
        (datetime(2024, 1, 1, tzinfo=UTC), 1704067200.0),
        (datetime(2024, 1, 1), 1704067200.0),
    ],
    ids=[
        "utc",
        "lower-z",
        "lower-t",
        "plus-offset",
        "minus-offset",
        "fraction",
        "nanoseconds",
        "epoch",
        "absent",
        "empty",
        "yaml-datetime",
        "yaml-naive-datetime",
    ],
)
def test_timestamps(text: object, want: float) -> None:
    assert parse_timestamp(text, "t") == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize(
    "text",
    [
        "yesterday",
        "2024-01-01",
        "2024-13-01T00:00:00Z",
        "2024-01-01T00:00:00",
        1704067200,
        "2024-02-30T00:00:00Z",
    ],
    ids=["word", "date-only", "month-13", "no-zone", "number", "feb-30"],
)
def test_bad_timestamps(text: object) -> None:
    with pytest.raises(ParseError) as e:
        parse_timestamp(text, "metadata.creationTimestamp")
    assert e.value.field_path == "metadata.creationTimestamp"


# ---- malformed pods ----------------------------------------------------------------------


def broken(
    path: Sequence[str | int], value: Any, base: dict[str, Any] | None = None
) -> dict[str, Any]:
    o = copy.deepcopy(base) if base is not None else make_pod("bad").obj()
    cur: Any = o
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return o


def deleted(path: Sequence[str | int]) -> dict[str, Any]:
    o = make_pod("bad").obj()
    cur: Any = o
    for k in path[:-1]:
        cur = cur[k]
    del cur[path[-1]]
    return o


BAD_SELECTOR_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]
        }
    }
}

MALFORMED_PODS = [
    pytest.param(
        broken(["spec", "containers", 0, "resources"], {"requests": {"cpu": "two"}}),
        "spec.containers[0].resources.requests.cpu",
        "quantities must match the regular expression",
        id="bad-quantity",
    ),
    pytest.param(
        broken(["spec", "tolerations"], [{"key": "a", "effect": "Sometimes"}]),
        "spec.tolerations[0].effect",
        "Unsupported value",
        id="toleration-effect",
    ),
    pytest.param(broken(["spec"], "not-a-spec"), "spec", "must be an object", id="spec-not-object"),
    pytest.param(broken(["spec"], None), "spec", "Required value", id="spec-null"),
    pytest.param(deleted(["spec"]), "spec", "Required value", id="spec-missing"),
    pytest.param(broken(["metadata", "name"], ""), "metadata.name", "Required", id="empty-name"),
    pytest.param(deleted(["metadata", "name"]), "metadata.name", "Required", id="no-name"),
    pytest.param(broken(["metadata", "name"], 7), "metadata.name", "string", id="name-not-string"),
    pytest.param(broken(["metadata"], []), "metadata", "object", id="metadata-not-object"),
    pytest.param(
        broken(["metadata", "namespace"], 1), "metadata.namespace", "string", id="ns-type"
    ),
    pytest.param(
        broken(["metadata", "labels"], ["a"]), "metadata.labels", "object", id="labels-type"
    ),
    pytest.param(
        broken(["metadata", "labels"], {"a": {"b": 1}}),
        "metadata.labels.a",
        "string",
        id="label-value",
    ),
    pytest.param(
        broken(["spec", "containers"], []), "spec.containers", "at least one", id="no-containers"
    ),
    pytest.param(
        broken(["spec", "containers"], "c"), "spec.containers", "list", id="containers-type"
    ),
    pytest.param(
        broken(["spec", "containers", 0], "c"), "spec.containers[0]", "object", id="container-type"
    ),
    pytest.param(
        broken(["spec", "affinity"], BAD_SELECTOR_AFFINITY),
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
        "nodeSelectorTerms[0].matchExpressions[0].operator",
        "not a valid node selector operator",
        id="selector-operator",
    ),
    pytest.param(
        broken(
            ["spec", "affinity"],
            {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]
                }
            },
        ),
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
        "can not be empty",
        id="affinity-no-topology-key",
    ),
    pytest.param(
        broken(
            ["spec", "affinity"],
            {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 0, "podAffinityTerm": {"topologyKey": "z"}}
                    ]
                }
            },
        ),
        "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        "1-100",
        id="affinity-weight",
    ),
    pytest.param(
        broken(
            ["spec", "affinity"],
            {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": "z",
                            "labelSelector": {
                                "matchExpressions": [
                                    {"key": "a", "operator": "Lt", "values": ["1"]}
                                ]
                            },
                        }
                    ]
                }
            },
        ),
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]."
        "labelSelector.matchExpressions[0].operator",
        "not a valid label selector operator",
        id="affinity-label-selector-operator",
    ),
    pytest.param(
        broken(["metadata", "creationTimestamp"], "yesterday"),
        "metadata.creationTimestamp",
        "RFC 3339",
        id="timestamp",
    ),
    pytest.param(
        broken(["spec", "containers", 0, "ports"], [{"containerPort": 1, "hostPort": 70000}]),
        "spec.containers[0].ports[0].hostPort",
        "65535",
        id="host-port-range",
    ),
    pytest.param(
        broken(["spec", "containers", 0, "ports"], [{"hostPort": 80, "protocol": "HTTP"}]),
        "spec.containers[0].ports[0].protocol",
        "Unsupported value",
        id="host-port-protocol",
    ),
    pytest.param(
        broken(
            ["spec", "topologySpreadConstraints"],
            [{"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}],
        ),
        "spec.topologySpreadConstraints[0].maxSkew",
        "greater than zero",
        id="spread-max-skew",
    ),
    pytest.param(
        broken(
            ["spec", "topologySpreadConstraints"],
            [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "Never"}],
        ),
        "spec.topologySpreadConstraints[0].whenUnsatisfiable",
        "Unsupported value",
        id="spread-when-unsatisfiable",
    ),
    pytest.param(
        broken(
            ["spec", "topologySpreadConstraints"],
            [
                {
                    "maxSkew": 1,
                    "topologyKey": "z",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "minDomains": 2,
                }
            ],
        ),
        "spec.topologySpreadConstraints[0].minDomains",
        "DoNotSchedule",
        id="spread-min-domains-needs-donotschedule",
    ),
    pytest.param(
        broken(
            ["spec", "topologySpreadConstraints"],
            [
                {
                    "maxSkew": 1,
                    "topologyKey": "z",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "nodeTaintsPolicy": "Maybe",
                }
            ],
        ),
        "spec.topologySpreadConstraints[0].nodeTaintsPolicy",
        "Unsupported value",
        id="spread-policy",
    ),
    pytest.param(
        broken(["spec", "schedulingGates"], [{}]),
        "spec.schedulingGates[0].name",
        "Required",
        id="gate-name",
    ),
    pytest.param(
        broken(["spec", "priority"], "high"), "spec.priority", "integer", id="priority-type"
    ),
    pytest.param(
        broken(["spec", "priority"], True), "spec.priority", "integer", id="priority-bool"
    ),
    pytest.param(
        broken(["spec", "nodeSelector"], {"a": None}),
        "spec.nodeSelector.a",
        "string",
        id="node-selector",
    ),
    pytest.param(broken(["status"], "Running"), "status", "object", id="status-type"),
]


@pytest.mark.parametrize(("obj", "field", "text"), MALFORMED_PODS)
def test_malformed_pod_is_a_value_naming_the_field(
    obj: dict[str, Any], field: str, text: str
) -> None:
    p = parse_pod(obj)
    assert isinstance(p, InvalidObject)
    assert p.message.startswith(field + ": "), p.message
    assert text in p.message, p.message
    assert p.kind == "Pod" and p.key in ("default/bad", "default/<unnamed>")


def test_quantity_message_is_kubernetes_wording() -> None:
    p = parse_pod(broken(["spec", "containers", 0, "resources"], {"requests": {"cpu": "two"}}))
    assert isinstance(p, InvalidObject)
    assert p.message == (
        "spec.containers[0].resources.requests.cpu: quantities must match the regular "
        "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )


def test_invalid_object_keeps_the_namespace() -> None:
    o = broken(["spec", "priority"], "x")
    o["metadata"]["namespace"] = "ml"
    p = parse_pod(o)
    assert isinstance(p, InvalidObject) and p.key == "ml/bad"


@pytest.mark.parametrize("obj", [None, "pod", 3, ["a"]], ids=["none", "str", "int", "list"])
def test_not_an_object_at_all(obj: Any) -> None:
    p = parse_pod(obj)
    assert isinstance(p, InvalidObject) and p.key == "default/<unnamed>"
    assert p.message.startswith("object: ")


# Values that break whatever field they land in, and any path into a valid pod.
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


FULL = full_pod()
PATHS = _paths(FULL)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PATHS), JUNK)
def test_parse_pod_never_raises(path: tuple[Any, ...], junk: Any) -> None:
    obj = broken(list(path), junk, FULL)
    p = parse_pod(obj, {"high": HIGH})
    assert isinstance(p, Pod | InvalidObject)


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        JUNK,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(
                st.sampled_from(["metadata", "spec", "name", "containers", "resources", "kind"]),
                children,
                max_size=4,
            ),
        ),
        max_leaves=12,
    )
)
def test_parse_object_never_raises_on_junk(obj: Any) -> None:
    for parse in (
        parse_pod,
        parse_node,
        parse_pod_group,
        parse_priority_class,
        parse_object,
        parse_workload,
    ):
        assert parse(obj) is not None


# ---- nodes -----------------------------------------------------------------------------


def test_node_fields() -> None:
    obj = (
        make_node("n1")
        .capacity(cpu="3500m", memory="8Gi", pods="110", ephemeral_storage="100G")
        .ext("troupe.dev/isolated-cpu", "2")
        .label("zone", "a")
        .taint("dedicated", "gpu", "NoSchedule")
        .taint("soft", effect="PreferNoSchedule")
        .unschedulable()
        .image("nginx", 100)
        .obj()
    )
    obj["status"]["images"].append(
        {"names": ["busybox@sha256:abc", "busybox:1.36"], "sizeBytes": 5}
    )
    n = parse_node(obj)
    assert isinstance(n, Node)
    assert (n.name, n.uid) == ("n1", "uid-node-n1")
    assert n.labels == {"kubernetes.io/hostname": "n1", "zone": "a"}
    assert n.allocatable == {
        "cpu": 3500,
        "memory": 8 * GI,
        "pods": 110,
        "ephemeral-storage": 100 * 10**9,
        "troupe.dev/isolated-cpu": 2000,
    }
    assert n.taints == (
        Taint("dedicated", "gpu", TaintEffect.NO_SCHEDULE),
        Taint("soft", "", TaintEffect.PREFER_NO_SCHEDULE),
    )
    assert n.unschedulable
    assert n.images == (
        ContainerImage(("nginx:latest",), 100),
        ContainerImage(("busybox@sha256:abc", "busybox:1.36"), 5),
    )
    assert n.raw is obj


def test_node_allocatable_falls_back_to_capacity() -> None:
    obj = make_node("n").obj()
    obj["status"] = {"capacity": {"cpu": "2", "memory": "1Gi"}}
    n = parse_node(obj)
    assert isinstance(n, Node) and n.allocatable == {"cpu": 2000, "memory": GI}
    assert not n.unschedulable and n.taints == () and n.images == ()


def test_node_milli_resources_are_configurable() -> None:
    obj = make_node("n").ext("example.com/vcpu", "1.5").obj()
    n = parse_node(obj, milli_resources=frozenset({"cpu", "example.com/vcpu"}))
    assert isinstance(n, Node) and n.allocatable["example.com/vcpu"] == 1500


MALFORMED_NODES = [
    pytest.param(
        ["spec", "taints"],
        [{"key": "a", "effect": "Maybe"}],
        "spec.taints[0].effect",
        id="taint-effect",
    ),
    pytest.param(["spec", "taints"], [{"key": "a"}], "spec.taints[0].effect", id="taint-no-effect"),
    pytest.param(
        ["spec", "taints"], [{"effect": "NoSchedule"}], "spec.taints[0].key", id="taint-no-key"
    ),
    pytest.param(["spec", "unschedulable"], "yes", "spec.unschedulable", id="unschedulable-type"),
    pytest.param(
        ["status", "allocatable"], {"cpu": "lots"}, "status.allocatable.cpu", id="allocatable"
    ),
    pytest.param(
        ["status", "allocatable"], {"memory": "-1Gi"}, "status.allocatable.memory", id="negative"
    ),
    pytest.param(
        ["status", "images"], [{"names": "nginx"}], "status.images[0].names", id="image-names"
    ),
    pytest.param(["metadata", "name"], "", "metadata.name", id="no-name"),
]


@pytest.mark.parametrize(("path", "value", "field"), MALFORMED_NODES)
def test_malformed_node(path: list[str], value: Any, field: str) -> None:
    n = parse_node(broken(path, value, make_node("n").obj()))
    assert isinstance(n, InvalidObject), n
    assert n.kind == "Node" and n.namespace == ""
    assert n.message.startswith(field + ": "), n.message


# ---- pod groups --------------------------------------------------------------------------


def pod_group(spec: Any, api: str | None = "scheduling.x-k8s.io/v1alpha1") -> dict[str, Any]:
    o: dict[str, Any] = {
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "ml", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": spec,
    }
    if api is not None:
        o["apiVersion"] = api
    return o


@pytest.mark.parametrize(
    "api",
    ["scheduling.x-k8s.io/v1alpha1", "scheduling.sigs.k8s.io/v1alpha1", None],
    ids=["x-k8s-io", "sigs-k8s-io", "no-api-version"],
)
def test_pod_group(api: str | None) -> None:
    obj = pod_group(
        {
            "minMember": 4,
            "minResources": {"cpu": "8", "memory": "1Gi"},
            "scheduleTimeoutSeconds": 30,
        },
        api,
    )
    obj["status"] = {"phase": "Scheduling", "scheduled": 2}
    pg = parse_pod_group(obj)
    assert isinstance(pg, PodGroup)
    assert (pg.key, pg.min_member, dict(pg.min_resources), pg.schedule_timeout_seconds) == (
        "ml/job",
        4,
        {"cpu": 8000, "memory": GI},
        30,
    )
    assert pg.creation_timestamp == 1704067200.0
    assert pg.status == {"phase": "Scheduling", "scheduled": 2}
    assert pg.raw is obj


def test_pod_group_defaults() -> None:
    pg = parse_pod_group({"metadata": {"name": "g"}})
    assert isinstance(pg, PodGroup)
    assert (pg.namespace, pg.min_member, pg.min_resources, pg.schedule_timeout_seconds) == (
        "default",
        1,  # scheduler-plugins reads a missing minMember as 0, which admits like 1
        {},
        None,
    )
    assert pg.status == {} and pg.creation_timestamp == 0.0


def test_pod_group_timeout_zero_is_accepted_as_upstream_crd_does() -> None:
    pg = parse_pod_group(pod_group({"scheduleTimeoutSeconds": 0}))
    assert isinstance(pg, PodGroup) and pg.schedule_timeout_seconds == 0


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        pytest.param(pod_group({"minMember": 0}), "spec.minMember", id="min-member-zero"),
        pytest.param(pod_group({"minMember": -1}), "spec.minMember", id="min-member-negative"),
        pytest.param(pod_group({"minMember": "four"}), "spec.minMember", id="min-member-type"),
        pytest.param(
            pod_group({"scheduleTimeoutSeconds": -1}), "spec.scheduleTimeoutSeconds", id="timeout"
        ),
        pytest.param(
            pod_group({"minResources": {"cpu": "x"}}), "spec.minResources.cpu", id="min-resources"
        ),
        pytest.param(
            pod_group({}, "scheduling.volcano.sh/v1beta1"), "apiVersion", id="other-group"
        ),
        pytest.param(pod_group([]), "spec", id="spec-type"),
    ],
)
def test_bad_pod_group(obj: dict[str, Any], field: str) -> None:
    pg = parse_pod_group(obj)
    assert isinstance(pg, InvalidObject) and pg.kind == "PodGroup" and pg.key == "ml/job"
    assert pg.message.startswith(field + ": "), pg.message


# ---- priority classes, workloads, dispatch -----------------------------------------------


def test_priority_class() -> None:
    pc = parse_priority_class({"metadata": {"name": "x"}, "value": 7, "globalDefault": True})
    assert pc == PriorityClass("x", 7, True)
    assert parse_priority_class({"metadata": {"name": "y"}, "value": -3}) == PriorityClass(
        "y", -3, False
    )


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        pytest.param({"metadata": {"name": "x"}}, "value", id="no-value"),
        pytest.param({"metadata": {"name": "x"}, "value": "high"}, "value", id="value-type"),
        pytest.param(
            {"metadata": {"name": "x"}, "value": 1, "globalDefault": "false"},
            "globalDefault",
            id="bool",
        ),
        pytest.param({"value": 1}, "metadata.name", id="no-name"),
    ],
)
def test_bad_priority_class(obj: dict[str, Any], field: str) -> None:
    pc = parse_priority_class(obj)
    assert isinstance(pc, InvalidObject) and pc.message.startswith(field + ": ")


def test_workloads() -> None:
    svc = parse_workload(
        {"kind": "Service", "metadata": {"name": "s"}, "spec": {"selector": {"app": "web"}}}
    )
    assert svc == Workload(
        "Service", "default", "s", LabelSelector((Requirement("app", SelectorOp.IN, ("web",)),))
    )
    empty = parse_workload({"kind": "Service", "metadata": {"name": "s"}, "spec": {}})
    assert isinstance(empty, Workload) and empty.selector is None
    rs = parse_workload(
        {
            "kind": "ReplicaSet",
            "metadata": {"name": "r", "namespace": "x"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}},
        }
    )
    assert isinstance(rs, Workload) and rs.selector is not None and rs.selector.matches({"a": "b"})
    bad = parse_workload({"kind": "Deployment", "metadata": {"name": "d"}})
    assert isinstance(bad, InvalidObject) and bad.message.startswith("kind: ")


@pytest.mark.parametrize(
    ("obj", "want"),
    [
        (make_pod("p").obj(), Pod),
        (make_node("n").obj(), Node),
        (pod_group({"minMember": 2}), PodGroup),
        ({"kind": "PriorityClass", "metadata": {"name": "c"}, "value": 1}, PriorityClass),
        ({"kind": "StatefulSet", "metadata": {"name": "s"}, "spec": {"selector": {}}}, Workload),
        ({"kind": "ConfigMap", "metadata": {"name": "c"}}, InvalidObject),
        ({"metadata": {"name": "c"}}, InvalidObject),
        ("junk", InvalidObject),
    ],
    ids=["pod", "node", "podgroup", "priorityclass", "workload", "other-kind", "no-kind", "junk"],
)
def test_parse_object_dispatches_on_kind(obj: Any, want: type) -> None:
    assert type(parse_object(obj)) is want


def test_parse_object_passes_priority_classes_and_milli_resources() -> None:
    obj = make_pod("p").priority_class("high").ext("example.com/vcpu", "500m").obj()
    p = parse_object(obj, {"high": HIGH}, frozenset({"example.com/vcpu"}))
    assert isinstance(p, Pod)
    assert p.priority == 1000 and p.requests == {"example.com/vcpu": 500}


def test_parse_object_unknown_kind_names_the_field() -> None:
    got = parse_object({"kind": "ConfigMap", "metadata": {"name": "c"}})
    assert isinstance(got, InvalidObject) and got.kind == "ConfigMap"
    assert got.message.startswith('kind: Unsupported value: "ConfigMap"')


# ---- issue #14: absurd quantities are per-object reasons naming the field ----

HUGE = ["1e999999999", "1e30", "8Ei", "10Ei", "9" * 100_000, 10**400]


@pytest.mark.parametrize("amount", HUGE, ids=[repr(a)[:16] for a in HUGE])
def test_issue14_huge_quantities_are_invalid_objects_naming_the_field(amount: object) -> None:
    pod = parse_pod(make_pod("p").req(memory=amount).obj())  # type: ignore[arg-type]
    assert isinstance(pod, InvalidObject)
    assert pod.message.startswith("spec.containers[0].resources.requests.memory: ")
    node_obj = make_node("n").taint("a", "b").unschedulable().obj()
    node_obj["status"]["allocatable"]["memory"] = amount
    node = parse_node(node_obj)
    assert isinstance(node, InvalidObject)
    assert node.message.startswith("status.allocatable.memory: ")
    pg = parse_pod_group(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g"},
            "spec": {"minMember": 2, "minResources": {"memory": amount}},
        }
    )
    assert isinstance(pg, InvalidObject)
    assert pg.message.startswith("spec.minResources.memory: ")


def test_issue14_cpu_is_bounded_in_milli_units() -> None:
    """cpu is charged in milli-units: the bound is int64 milli-cpu."""
    ok = parse_pod(make_pod("p").req(cpu="9223372036854775").obj())
    assert not isinstance(ok, InvalidObject)
    bad = parse_pod(make_pod("p").req(cpu="9223372036854776").obj())
    assert isinstance(bad, InvalidObject)
    assert bad.message.startswith("spec.containers[0].resources.requests.cpu: ")
