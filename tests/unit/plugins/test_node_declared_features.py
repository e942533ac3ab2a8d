"""NodeDeclaredFeatures: cases ported from kube-scheduler 1.37's
pkg/scheduler/framework/plugins/nodedeclaredfeatures/nodedeclaredfeatures_test.go
(TestPreFilter, TestFilter, TestEnqueueExtensionsNodeUpdate, TestEventsToRegister)
and from k8s.io/component-helpers' nodedeclaredfeatures tests (framework_test.go
TestInferForPodScheduling; the features' TestInferForScheduling), then the
plugin in Troupe's pipeline: the default profile, the cache and the queue.

Upstream's mock features become `NodeFeature`s whose inference is a function of
the pod; its componentVersion is the plugin's `version`.

Not ported, and why:
- the "plugin disabled" cases: upstream's plugin is inert when the
  NodeDeclaredFeatures gate is off; the gate is GA and locked on in 1.37, and
  Troupe turns the plugin off by disabling it in the profile.
- TestIsSchedulableAfterTargetPodUpdate: a hint for updates of the pending pod
  itself; Troupe's queue requeues a pending pod on any change of its spec without
  asking plugins (kube's isPodUpdated).
- TestNodeDeclaredFeatures_DeferredResizeSkipped: PreFilter's skip for a pod whose
  resize is deferred belongs to InPlacePodVerticalScalingSchedulerPreemption
  (alpha, off in 1.37), which Troupe does not implement.
- "Error getting pre-filter state" is Troupe's StateKeyError (a bug, which the
  runtime turns into an Error status), not a status the plugin returns.
- framework_test's "pre-release target version" and "target version nil": the
  version is Troupe's own constant, never parsed nor missing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from tests.builders import make_node, make_pod, table_of
from tests.unit.plugins.upstream_fit_helpers import filter_statuses
from troupe.api.parse import parse_node, parse_pod
from troupe.api.types import InvalidObject, Node, Pod, PodKey
from troupe.config import parse_config
from troupe.core.cache import Cache
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler
from troupe.core.snapshot import Snapshot
from troupe.framework.cycle_state import CycleState, StateKeyError
from troupe.framework.events import ActionType, ClusterEvent, EventResource, QueueingHint
from troupe.framework.status import Code
from troupe.plugins.node_declared_features import (
    ERR_REASON_UNSATISFIED_REQUIREMENTS,
    FEATURES,
    KUBERNETES_VERSION,
    RESTART_ALL_CONTAINERS,
    USER_NAMESPACES_HOST_NETWORK,
    VOLUME_BIND_MOUNT_OPTIONS,
    NodeDeclaredFeatures,
    NodeFeature,
)
from troupe.plugins.registry import DEFAULT_MULTI_POINT, IN_TREE

UU = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
_STATE_KEY = "PreFilterNodeDeclaredFeatures"


def declaring(name: str, *features: str) -> Node:
    """A node whose status.declaredFeatures are `features` (none: the field unset)."""
    obj = make_node(name).obj()
    if features:
        obj["status"]["declaredFeatures"] = list(features)
    n = parse_node(obj)
    assert not isinstance(n, InvalidObject), n.message
    return n


def pod_with_spec(**spec: Any) -> Pod:
    obj = make_pod("test-pod").obj()
    obj["spec"].update(spec)
    p = parse_pod(obj)
    assert not isinstance(p, InvalidObject), p.message
    return p


def mock(name: str, infer: bool, max_version: tuple[int, int, int] | None = None) -> NodeFeature:
    return NodeFeature(name, lambda pod: infer, max_version)


# ---- TestPreFilter -------------------------------------------------------------------

PRE_FILTER_CASES = [
    # name, features, version, want skip, want state
    (
        "Pod with feature requirements",
        [mock("TestFeature1", True), mock("TestFeature2", False)],
        (1, 35, 0),
        False,
        ("TestFeature1",),
    ),
    (
        "Pod with multiple feature requirements",
        [mock("TestFeature1", True, (1, 38, 0)), mock("TestFeature2", True, (1, 38, 0))],
        (1, 35, 0),
        False,
        ("TestFeature1", "TestFeature2"),
    ),
    (
        "Pod with no requirements",
        [mock("TestFeature1", False), mock("TestFeature2", False)],
        (1, 35, 0),
        True,
        None,
    ),
    (
        "Feature not required, version > MaxVersion",
        [mock("TestFeature1", True, (1, 33, 0)), mock("TestFeature2", False)],
        (1, 34, 0),
        True,
        None,
    ),
]


@pytest.mark.parametrize(
    ("name", "features", "version", "want_skip", "want_state"),
    PRE_FILTER_CASES,
    ids=[c[0] for c in PRE_FILTER_CASES],
)
def test_pre_filter(
    name: str,
    features: list[NodeFeature],
    version: tuple[int, int, int],
    want_skip: bool,
    want_state: tuple[str, ...] | None,
) -> None:
    plugin = NodeDeclaredFeatures(features, version)
    state = CycleState()
    result, status = plugin.pre_filter(state, make_pod("test-pod").build(), table_of([]))
    assert result is None  # PreFilter never narrows the nodes
    assert status.is_skip == want_skip
    if want_state is None:
        assert state.get(_STATE_KEY) is None
    else:
        assert status.is_success
        assert state.read(_STATE_KEY, tuple) == want_state


# ---- TestFilter ----------------------------------------------------------------------

FILTER_CASES = [
    # name, node's declared features, PreFilter's requirements, want rejected
    ("Node matches requirements", ("FeatureA", "FeatureB"), ("FeatureA",), False),
    ("Node does not match requirements", ("FeatureB",), ("FeatureA",), True),
    (
        "Node with multiple features, pod requires subset",
        ("FeatureA", "FeatureB", "FeatureC"),
        ("FeatureA", "FeatureC"),
        False,
    ),
    ("Node has no declared features", (), ("FeatureA",), True),
    ("Node with some but not all required features", ("FeatureA",), ("FeatureA", "FeatureB"), True),
]


@pytest.mark.parametrize(
    ("name", "declared", "required", "want_rejected"),
    FILTER_CASES,
    ids=[c[0] for c in FILTER_CASES],
)
def test_filter(
    name: str, declared: tuple[str, ...], required: tuple[str, ...], want_rejected: bool
) -> None:
    table = table_of([declaring("node-1", *declared)])
    state = CycleState()
    state.write(_STATE_KEY, required)
    res = NodeDeclaredFeatures().filter(
        state, make_pod("test-pod").build(), table, table.valid_rows()
    )
    if want_rejected:
        assert res.reasons == (ERR_REASON_UNSATISFIED_REQUIREMENTS,)
        assert res.codes == (UU,)
        assert res.rejected[:, 0].tolist() == [True]
    else:
        assert res.feasible.tolist() == [True]


def test_filter_error_getting_pre_filter_state() -> None:
    """Upstream's "Error getting pre-filter state": Filter without PreFilter's
    state is a bug; it raises, and the runtime reports an Error."""
    table = table_of([declaring("node-1")])
    with pytest.raises(StateKeyError):
        NodeDeclaredFeatures().filter(
            CycleState(), make_pod("test-pod").build(), table, table.valid_rows()
        )


# ---- TestEnqueueExtensionsNodeUpdate ---------------------------------------------------

NODE_UPDATE_CASES = [
    ("Node Add with feature", None, declaring("node-1", "FeatureA"), QueueingHint.QUEUE),
    (
        "Node Update (Features Added)",
        declaring("node-1"),
        declaring("node-1", "FeatureA"),
        QueueingHint.QUEUE,
    ),
    (
        "Node Update (Features Unchanged)",
        declaring("node-1", "FeatureA"),
        declaring("node-1", "FeatureA"),
        QueueingHint.SKIP,
    ),
]


@pytest.mark.parametrize(
    ("name", "old", "new", "want"), NODE_UPDATE_CASES, ids=[c[0] for c in NODE_UPDATE_CASES]
)
def test_enqueue_extensions_node_update(
    name: str, old: Node | None, new: Node, want: QueueingHint
) -> None:
    plugin = NodeDeclaredFeatures([])
    assert plugin.is_schedulable_after_node_change(make_pod("test-pod").build(), old, new) == want


def test_events_to_register() -> None:
    """Upstream's "plugin enabled" registers two events: the Node one below and
    TargetPod Update, which Troupe leaves to its queue (see the module docstring)."""
    events = NodeDeclaredFeatures().events_to_register()
    assert [e.event for e in events] == [
        ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_DECLARED_FEATURE)
    ]
    # Other node updates do not reach the hint.
    assert not events[0].event.matches(
        ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_LABEL)
    )


def test_hint_queues_for_an_object_that_is_not_a_node() -> None:
    """As upstream's error path (util.As fails): QUEUE."""
    plugin = NodeDeclaredFeatures()
    assert plugin.is_schedulable_after_node_change(make_pod("p").build(), None, "x") is (
        QueueingHint.QUEUE
    )


def test_hint_compares_declared_features_in_order() -> None:
    """slices.Equal: the same features in another order are a change."""
    plugin = NodeDeclaredFeatures()
    old, new = declaring("n", "A", "B"), declaring("n", "B", "A")
    assert plugin.is_schedulable_after_node_change(make_pod("p").build(), old, new) is (
        QueueingHint.QUEUE
    )


# ---- component-helpers: framework_test.go TestInferForPodScheduling ------------------


def has_pod_level_resources(pod: Pod) -> bool:
    """Upstream's mock inference: the pod sets spec.resources (the only requests
    these pods have)."""
    return bool(pod.requests)


POD_LEVEL = NodeFeature("PodLevelResources", has_pod_level_resources)
POD_LEVEL_MAX_1_30 = NodeFeature("PodLevelResources", has_pod_level_resources, (1, 30, 0))
WITH_RESOURCES = {"resources": {"requests": {"cpu": "500m"}}}

INFER_CASES = [
    ("pod with feature, inferred during scheduling", POD_LEVEL, WITH_RESOURCES, (1, 30, 0), True),
    ("pod without feature", POD_LEVEL, {}, (1, 30, 0), False),
    (
        "feature universally available, not inferred during create",
        POD_LEVEL_MAX_1_30,
        WITH_RESOURCES,
        (1, 31, 0),
        False,
    ),
    ("exceeds max version", POD_LEVEL_MAX_1_30, WITH_RESOURCES, (1, 40, 0), False),
]


@pytest.mark.parametrize(
    ("name", "feature", "spec", "version", "want"), INFER_CASES, ids=[c[0] for c in INFER_CASES]
)
def test_infer_for_pod_scheduling(
    name: str,
    feature: NodeFeature,
    spec: dict[str, Any],
    version: tuple[int, int, int],
    want: bool,
) -> None:
    plugin = NodeDeclaredFeatures([feature], version)
    got = plugin.required_features(pod_with_spec(**spec))
    assert got == ((feature.name,) if want else ())


# ---- component-helpers: each feature's TestInferForScheduling -----------------------


def restart_all(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": "image",
        "restartPolicy": "Never",
        "restartPolicyRules": [
            {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [1]}}
        ],
    }


PLAIN = {"name": "name", "image": "image"}
PLAIN2 = {"name": "name2", "image": "image"}

FEATURE_CASES = [
    # restartallcontainers/restart_all_containers_test.go
    (
        RESTART_ALL_CONTAINERS,
        "init container with rules",
        {"initContainers": [restart_all("container")], "containers": [PLAIN]},
        True,
    ),
    (
        RESTART_ALL_CONTAINERS,
        "regular container with rules",
        {"initContainers": [PLAIN], "containers": [restart_all("container")]},
        True,
    ),
    (
        RESTART_ALL_CONTAINERS,
        "no rules",
        {"initContainers": [PLAIN], "containers": [PLAIN2]},
        False,
    ),
    # usernamespaceshostnetwork/user_namespaces_host_network_test.go
    (
        USER_NAMESPACES_HOST_NETWORK,
        "HostNetwork true, HostUsers false",
        {"hostNetwork": True, "hostUsers": False},
        True,
    ),
    (USER_NAMESPACES_HOST_NETWORK, "HostNetwork true, HostUsers nil", {"hostNetwork": True}, False),
    (
        USER_NAMESPACES_HOST_NETWORK,
        "HostNetwork true, HostUsers true",
        {"hostNetwork": True, "hostUsers": True},
        False,
    ),
    (
        USER_NAMESPACES_HOST_NETWORK,
        "HostNetwork false, HostUsers false",
        {"hostNetwork": False, "hostUsers": False},
        False,
    ),
    # volumebindmountoptions/feature.go (upstream has no test of its own for it)
    (
        VOLUME_BIND_MOUNT_OPTIONS,
        "container mount with bindMountOptions",
        {
            "containers": [
                {
                    **PLAIN,
                    "volumeMounts": [{"name": "v", "mountPath": "/v", "bindMountOptions": ["x"]}],
                }
            ]
        },
        True,
    ),
    (
        VOLUME_BIND_MOUNT_OPTIONS,
        "init container mount with bindMountOptions",
        {
            "initContainers": [
                {
                    **PLAIN,
                    "volumeMounts": [{"name": "v", "mountPath": "/v", "bindMountOptions": ["x"]}],
                }
            ],
            "containers": [PLAIN2],
        },
        True,
    ),
    (
        VOLUME_BIND_MOUNT_OPTIONS,
        "ephemeral container mount with bindMountOptions",
        {
            "containers": [PLAIN],
            "ephemeralContainers": [
                {
                    **PLAIN2,
                    "volumeMounts": [{"name": "v", "mountPath": "/v", "bindMountOptions": ["x"]}],
                }
            ],
        },
        True,
    ),
    (
        VOLUME_BIND_MOUNT_OPTIONS,
        "mounts without bindMountOptions",
        {
            "containers": [
                {
                    **PLAIN,
                    "volumeMounts": [{"name": "v", "mountPath": "/v", "bindMountOptions": []}],
                }
            ]
        },
        False,
    ),
]


@pytest.mark.parametrize(
    ("feature", "name", "spec", "want"),
    FEATURE_CASES,
    ids=[f"{c[0]}: {c[1]}" for c in FEATURE_CASES],
)
def test_infer_for_scheduling(feature: str, name: str, spec: dict[str, Any], want: bool) -> None:
    (f,) = [f for f in FEATURES if f.name == feature]
    assert f.infer_for_scheduling(pod_with_spec(**spec)) is want
    # Through the default registry, the pod needs that feature only.
    assert NodeDeclaredFeatures().required_features(pod_with_spec(**spec)) == (
        (feature,) if want else ()
    )


# ---- in Troupe's pipeline -------------------------------------------------------------

HOST_NETWORK_USERNS = {"hostNetwork": True, "hostUsers": False}


def test_default_plugin_appended_after_default_binder() -> None:
    """kube-scheduler's applyFeatureGates appends it to the default multiPoint set."""
    assert IN_TREE["NodeDeclaredFeatures"] is NodeDeclaredFeatures
    names = [s.name for s in DEFAULT_MULTI_POINT]
    assert names[-2:] == ["DefaultBinder", "NodeDeclaredFeatures"]
    assert KUBERNETES_VERSION == (1, 37, 0)


def test_filter_over_many_nodes_with_reasons() -> None:
    pod = pod_with_spec(**HOST_NETWORK_USERNS)
    table = table_of(
        [
            declaring("has", USER_NAMESPACES_HOST_NETWORK, RESTART_ALL_CONTAINERS),
            declaring("other", RESTART_ALL_CONTAINERS),
            declaring("none"),
            declaring("also", "Unknown", USER_NAMESPACES_HOST_NETWORK),
        ]
    )
    got = filter_statuses(NodeDeclaredFeatures(), pod, table)
    reason = (UU, (ERR_REASON_UNSATISFIED_REQUIREMENTS,))
    assert got == {"other": reason, "none": reason}


def test_a_feature_no_node_declares_rejects_every_node() -> None:
    pod = pod_with_spec(**HOST_NETWORK_USERNS)
    table = table_of([declaring("a", "Other"), declaring("b")])
    got = filter_statuses(NodeDeclaredFeatures(), pod, table)
    assert set(got) == {"a", "b"}


def test_pod_without_requirements_skips() -> None:
    state = CycleState()
    _, st = NodeDeclaredFeatures().pre_filter(state, make_pod("p").build(), table_of([]))
    assert st.is_skip


def test_snapshot_follows_declared_features_through_the_cache() -> None:
    """A node that starts declaring a feature (a new name: the table's matrix
    widens) and one that stops are seen by the next snapshot."""
    cache, snap = Cache(VirtualClock()), Snapshot()
    cache.add_node(declaring("a"))
    cache.add_node(declaring("b", USER_NAMESPACES_HOST_NETWORK))
    cache.update_snapshot(snap)
    pod = pod_with_spec(**HOST_NETWORK_USERNS)
    assert set(filter_statuses(NodeDeclaredFeatures(), pod, snap)) == {"a"}

    cache.update_node(declaring("a", RESTART_ALL_CONTAINERS, USER_NAMESPACES_HOST_NETWORK))
    cache.update_node(declaring("b"))
    cache.update_snapshot(snap)
    assert set(filter_statuses(NodeDeclaredFeatures(), pod, snap)) == {"b"}
    rows = snap.valid_rows()
    assert np.array_equal(snap.feature_matrix[rows], cache.table.feature_matrix[rows])

    cache.remove_node("a")
    cache.update_snapshot(snap)
    assert set(filter_statuses(NodeDeclaredFeatures(), pod, snap)) == {"b"}


# ---- the scheduler: default profile, events, queueing hint ---------------------------


def test_scheduler_places_on_a_declaring_node_and_retries_when_one_declares() -> None:
    cluster = InMemoryCluster()
    clock = VirtualClock()
    s = Scheduler(parse_config({}, IN_TREE), cluster, clock, registry=IN_TREE)
    cluster.on_pod_bound = lambda key, node: s.on_pod(cluster.pods[key])
    s.on_node(declaring("plain").raw)
    s.on_node(declaring("other", RESTART_ALL_CONTAINERS).raw)

    async def go() -> None:
        obj = make_pod("userns").obj()
        obj["spec"].update(HOST_NETWORK_USERNS)
        key = PodKey("default/userns")
        cluster.pods[key] = obj
        s.on_pod(obj)
        s.schedule_one()
        await s.settle()
        msg = "0/2 nodes are available: 2 node(s) didn't match Pod's required features."
        assert cluster.events[-1].reason == "FailedScheduling"
        assert cluster.events[-1].message.startswith(msg), cluster.events[-1].message
        assert s.queue.statistics().unschedulable == 1
        # The node starts declaring the feature: the pod is retried and placed there.
        s.on_node(declaring("plain", USER_NAMESPACES_HOST_NETWORK).raw)
        assert s.queue.statistics().backoff == 1
        clock.advance_by(1)
        s.queue.flush()
        s.schedule_one()
        await s.settle()
        assert cluster.events[-1].message == "Successfully assigned default/userns to plain"

    asyncio.run(go())
