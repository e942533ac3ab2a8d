"""The table of kinds: what is made from it (the reflectors' list and order,
API discovery's kinds, cluster scope, the simulator's intake)."""

from __future__ import annotations

from apiserver.resources import (
    BUILTIN,
    COMPOSITE_PODGROUPS,
    ELASTICQUOTA,
    NATIVE_PODGROUP_VERSIONS,
    PODGROUP,
    native_podgroups,
)
from troupe.api.kinds import (
    CLUSTER_SCOPED,
    KINDS,
    SIMULATED,
    VERSIONED,
    WATCHED,
    object_kind,
)
from troupe.core.eventhandlers import EventHandlers


def test_every_handler_named_is_an_event_handler() -> None:
    for k in KINDS:
        if k.watched:
            assert callable(getattr(EventHandlers, str(k.handler), None)), k


def test_a_kind_in_several_versions_has_one_reflector_per_version() -> None:
    assert [(k.kind, k.group) for k in VERSIONED] == [
        ("DeviceTaintRule", "resource.k8s.io"),
        ("PodGroup", "scheduling.k8s.io"),
    ]
    assert WATCHED["PodGroup.scheduling.k8s.io/v1alpha2"] == (
        "scheduling.k8s.io",
        "v1alpha2",
        "podgroups",
    )
    assert WATCHED["PodGroup"] == ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
    assert WATCHED["Pod"] == ("", "v1", "pods")
    assert object_kind("DeviceTaintRule.resource.k8s.io/v1beta2") == "DeviceTaintRule"


def test_what_others_are_read_with_is_listed_first() -> None:
    order = [object_kind(k) for k in WATCHED]
    assert order[-1] == "Pod"
    first = order.index
    assert first("PriorityClass") < first("Pod")
    for owner in ("Service", "ReplicaSet", "StatefulSet", "ReplicationController"):
        assert first(owner) < first("Pod")
    for kind in ("DeviceClass", "ResourceSlice", "DeviceTaintRule"):
        assert first(kind) < first("ResourceClaim")
    assert first("PersistentVolumeClaim") < first("Pod")


def test_a_dump_is_read_in_the_kinds_of_the_table() -> None:
    # The claim templates are not watched: the simulated resourceclaim
    # controller reads them.
    assert set(SIMULATED) == {object_kind(k) for k in WATCHED} | {"ResourceClaimTemplate"}
    assert len(SIMULATED) == len(set(SIMULATED))  # both PodGroup APIs read as one kind


def test_cluster_scope() -> None:
    assert {"Node", "PriorityClass", "DeviceTaintRule", "PersistentVolume"} <= CLUSTER_SCOPED
    assert not {"Pod", "PodGroup", "ResourceClaim", "PersistentVolumeClaim"} & CLUSTER_SCOPED


def test_the_embedded_api_server_serves_every_watched_kind() -> None:
    """So that the integration tests run a reflector of every kind: a kind
    added to the table is served by apiserver/ too (one version suffices)."""
    served = {r.key for r in (*BUILTIN, PODGROUP, ELASTICQUOTA)}
    served |= {native_podgroups(v).key for v in NATIVE_PODGROUP_VERSIONS}
    served.add(COMPOSITE_PODGROUPS.key)
    for k in KINDS:
        if k.watched:
            assert any((k.group, v, k.plural) in served for v in k.versions), k.kind
