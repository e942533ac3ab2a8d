"""DynamicResources: cases ported from kube-scheduler's
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources_test.go
(TestPlugin, TestIsSchedulableAfterClaimChange, TestIsSchedulableAfterPodChange,
Test_computesScore, TestNormalizeScore; the stored version on resource.k8s.io/v1
with extended resources backed by DRA, binding conditions and the scoring of
prioritized lists, ~v1.35/v1.36).

Upstream drives one scheduling cycle per case through the plugin (PreEnqueue,
PreFilter, Filter on each node, Reserve on the first node that passed, then
PreBind, or Unreserve before or after it) against a fake API server, and
compares the statuses and the ResourceClaims stored afterwards. Here the same
steps run Troupe's plugin against the InMemoryCluster, whose claim writes are
fed back into the device store as the informer would (`World` below).
Upstream compares only the message of a failing status (its `verify` uses
ErrorContains), not the code; the codes asserted here are Troupe's, and where
they differ from what kube-scheduler's plugin returns that is said at the case.

Upstream objects carried over: driver "some-driver", class "my-resource-class"
(no selectors), pod default/my-pod with uid 1234, claim "my-pod-my-resource"
with one request "req-1", the node "worker" (and "worker-2", "worker-3") whose
slice publishes "instance-1".

Ported with a difference:
- "wrong-topology": the Filter part here; PostFilter's deallocation
  ("deallocation of ResourceClaim completed") is tested through the pipeline
  in tests/unit/test_dra_binding.py.
- Cases whose upstream want includes a PostFilter status ("no-resources",
  "exhausted-resources", "missing-class", ...): that part is not checked.
- "no-resources", "exhausted-resources", "tainted-device-enabled",
  "extended-resource-name-no-resource": upstream's plugin returns
  UnschedulableAndUnresolvable with "cannot allocate all claims"; Troupe
  returns Unschedulable (preemption may free devices: Troupe counts what
  victims' claims release).
- CEL runtime errors: upstream's Filter returns an Error status (scheduling
  aborts); Troupe returns UnschedulableAndUnresolvable with the same text, so
  that the pod's reason is the CEL error (Troupe's runtime reports a plugin's
  Error as an internal error).
- "extended-resource-name-*": the scheduler_resourceclaim_creates_total
  metric upstream checks is not asserted (Troupe has no such metric).
- Queueing hints: upstream's "backoff-wrong-*" cases return Queue with an
  error; Troupe's hints have no error channel and return QUEUE.

Not ported:
- "CEL-runtime-error-for-one-of-two-nodes", "CEL-runtime-error-for-one-of-three-nodes":
  upstream keeps the pod pending when a CEL runtime error happens on any
  node; Troupe rejects that node only (with the error) and may schedule the
  pod on another. A deliberate difference (see above).
- "extended-resource-name-with-resources-has-claim",
  "extended-resource-name-with-resources-delete-claim": tested through the
  pipeline in tests/unit/test_dra.py (the claim is deleted by PostFilter, then
  made anew).
- Feature gates off: "tainted-device-disabled",
  "request-admin-access-without-DRAAdminAccess-featuregate", "DRA-disabled",
  "claim-with-prioritized-list-feature-disabled", "timeout_disabled": Troupe
  has these features always on.
- "canceled", "timeout", "timeout_zero": the plugin's filterTimeout argument
  and a canceled context; Troupe bounds the allocator's search by steps, takes
  no filterTimeout and its Filter is not cancelable.
- Binding conditions (bindingConditions/bindingFailureConditions, device
  status, binding timeout): "bound-claim-with-succeeded-binding-conditions",
  "bound-claim-with-failed-binding", "bound-claim-with-timed-out-binding",
  "prebind-fail-with-binding-timeout", "bound-claim-with-mixed-binding-conditions",
  "multi-claims-binding-conditions-all-success",
  "multi-claims-binding-conditions-one-fail": their behaviour (wait, failure,
  timeout, a failed claim given up) is tested through the pipeline in
  tests/unit/test_dra_binding.py rather than case by case.
  ("bound-claim-without-binding-conditions" is ported.)
- "implicit-extended-resource-name-with-resources",
  "implicit-extended-resource-name-two-containers-with-resources": the
  implicit deviceclass.resource.kubernetes.io/<class> names and kube's request
  naming are tested in tests/unit/test_dra.py.
- TestIsSchedulableAfterClaimChange "skip-deletes": upstream registers no
  delete event for claims (the hint never sees one); Troupe does, and queues
  a pod when an allocated claim is deleted (its devices are free). Reported.
- TestIsSchedulableAfterPodChange "backoff-wrong-new-object" (Troupe returns
  SKIP for a non-pod, upstream Queue), "missing-claim" and "incomplete"
  (upstream skips when the updated pod still lacks a claim; Troupe queues on
  any change of the pod's claim statuses). Reported.
- TestIsSchedulableAfterResourceSliceChange / TestIsSchedulableAfterClassChange
  do not exist in this version (slice and class events have no hint upstream).
- DeviceTaintRule objects, consumable capacity and partitionable devices:
  this table has no cases of its own for them.

Product change made for this port: the claim hint skips an update of one of
the pod's claims that leaves its status as it was ("skip-adding-finalizer").
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pytest

from tests.builders import NodeBuilder, make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle
from troupe.api.parse import parse_pod
from troupe.api.types import InvalidObject, Pod
from troupe.core.memory_cluster import InMemoryCluster
from troupe.dra.types import (
    FINALIZER,
    Allocation,
    AllocationResult,
    ResourceClaim,
    parse_dra_object,
)
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import EventResource, QueueingHint
from troupe.framework.status import Code, Status
from troupe.plugins.dynamic_resources import DynamicResources, compute_score

API = "resource.k8s.io/v1"
DRIVER = "some-driver"
DRIVER2 = "some-driver-2"
POD = "my-pod"
POD_UID = "1234"
RESOURCE = "my-resource"
RESOURCE2 = "my-resource-2"
CLAIM = f"{POD}-{RESOURCE}"
CLAIM2 = f"{POD}-{RESOURCE2}"
CLASS = "my-resource-class"
NS = "default"
ATTR = "healthy"
GPU = "example.com/gpu"
GPU2 = "example.com/gpu2"
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
EXT_CLAIM = f"{POD}-extended-resources-00000"  # the InMemoryCluster's generated name


# ---- upstream's objects ----------------------------------------------------------


def device_class(name: str = CLASS, extended: str = "", *selectors: str) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if selectors:
        spec["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if extended:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": spec,
    }


def device(name: str, **bools: bool) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name}
    if bools:
        d["attributes"] = {k: {"bool": v} for k, v in bools.items()}
    return d


def resource_slice(node: str, *devices: dict[str, Any], driver: str = DRIVER) -> dict[str, Any]:
    """st.MakeResourceSlice(node, driver): pool named after the node."""
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}", "resourceVersion": "1"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def worker_slice() -> dict[str, Any]:
    return resource_slice("worker", device("instance-1"))


def taint_devices(s: dict[str, Any]) -> dict[str, Any]:
    s = copy.deepcopy(s)
    for d in s["spec"]["devices"]:
        d.setdefault("taints", []).append(
            {"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}
        )
    return s


def exact(cls: str = CLASS, count: int | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"deviceClassName": cls, "allocationMode": "ExactCount"}
    if count is not None:
        e["count"] = count
    return e


def sub(name: str, cls: str = CLASS, count: int = 1, selector: str = "") -> dict[str, Any]:
    s: dict[str, Any] = {
        "name": name,
        "deviceClassName": cls,
        "allocationMode": "ExactCount",
        "count": count,
    }
    if selector:
        s["selectors"] = [{"cel": {"expression": selector}}]
    return s


def claim(
    name: str = CLAIM, *requests: dict[str, Any], owner: bool = False, uid: str = ""
) -> dict[str, Any]:
    """st.MakeResourceClaim().Name(name).Request(className)...; `owner`: the pod
    as controlling owner (pendingClaim)."""
    md: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": uid or f"uid-{name}",
        "resourceVersion": "1",
    }
    if owner:
        md["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": POD_UID, "controller": True}
        ]
    reqs = list(requests) or [{"name": "req-1", "exactly": exact()}]
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": md,
        "spec": {"devices": {"requests": reqs}},
    }


def match_fields(node: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def match_expression(key: str, value: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
        ]
    }


def result(request: str = "req-1", device_: str = "instance-1", **extra: Any) -> dict[str, Any]:
    return {"request": request, "driver": DRIVER, "pool": "worker", "device": device_, **extra}


def allocation(*results: dict[str, Any], selector: Any = None) -> dict[str, Any]:
    return {
        "devices": {"results": list(results or [result()])},
        "nodeSelector": selector if selector is not None else match_fields("worker"),
    }


def allocated(c: dict[str, Any], alloc: dict[str, Any] | None = None) -> dict[str, Any]:
    """st.FromResourceClaim(c).Allocation(...): the allocation and the finalizer."""
    c = copy.deepcopy(c)
    c["metadata"]["finalizers"] = [FINALIZER]
    c.setdefault("status", {})["allocation"] = alloc or allocation()
    return c


def reserved_for(c: dict[str, Any], name: str = POD, uid: str = POD_UID) -> dict[str, Any]:
    c = copy.deepcopy(c)
    c.setdefault("status", {}).setdefault("reservedFor", []).append(
        {"resource": "pods", "name": name, "uid": uid}
    )
    return c


def admin_access(c: dict[str, Any]) -> dict[str, Any]:
    c = copy.deepcopy(c)
    for r in c["spec"]["devices"]["requests"]:
        r["exactly"]["adminAccess"] = True
    for r in (c.get("status", {}).get("allocation") or {}).get("devices", {}).get("results", []):
        r["adminAccess"] = True
    return c


BROKEN = f'device.attributes["{DRIVER}"].{ATTR}'


def break_cel_in_claim(c: dict[str, Any]) -> dict[str, Any]:
    c = copy.deepcopy(c)
    for r in c["spec"]["devices"]["requests"]:
        r["exactly"]["selectors"] = [{"cel": {"expression": BROKEN}}]
    return c


def pending() -> dict[str, Any]:
    return claim(owner=True)


def other_claim() -> dict[str, Any]:
    return claim("not-my-claim")


def other_allocated() -> dict[str, Any]:
    return allocated(other_claim())


def pod_obj(
    *claims: tuple[str, str, str], statuses: dict[str, str] | None = None
) -> dict[str, Any]:
    """(pod claim name, "name"|"template", claim or template name)."""
    o = make_pod(POD).obj()
    o["metadata"]["uid"] = POD_UID
    refs = []
    for name, kind, ref in claims:
        key = "resourceClaimName" if kind == "name" else "resourceClaimTemplateName"
        refs.append({"name": name, key: ref})
    if refs:
        o["spec"]["resourceClaims"] = refs
    if statuses:
        o["status"]["resourceClaimStatuses"] = [
            {"name": k, "resourceClaimName": v} for k, v in statuses.items()
        ]
    return o


def with_claim_name() -> dict[str, Any]:
    return pod_obj((RESOURCE, "name", CLAIM))


def with_claim_template() -> dict[str, Any]:
    return pod_obj((RESOURCE, "template", CLAIM))


def with_claim_template_in_status() -> dict[str, Any]:
    return pod_obj((RESOURCE, "template", CLAIM), statuses={RESOURCE: CLAIM})


def with_two_claim_names() -> dict[str, Any]:
    return pod_obj((RESOURCE, "name", CLAIM), (RESOURCE2, "name", CLAIM2))


def with_two_claim_templates() -> dict[str, Any]:
    return pod_obj((RESOURCE, "template", CLAIM), (RESOURCE2, "template", CLAIM))


def with_extended(*containers: dict[str, str]) -> dict[str, Any]:
    """podWithExtendedResourceName & co: one container per mapping of requests."""
    o = pod_obj()
    o["spec"]["containers"] = [
        {"name": f"c{i}", "image": "busybox", "resources": {"requests": dict(reqs)}}
        for i, reqs in enumerate(containers)
    ]
    return o


def worker(name: str = "worker") -> NodeBuilder:
    return make_node(name)  # labelled kubernetes.io/hostname=<name>


# ---- the plugin against the InMemoryCluster --------------------------------------


def parsed_pod(o: dict[str, Any]) -> Pod:
    p = parse_pod(copy.deepcopy(o))
    assert not isinstance(p, InvalidObject), p.message
    return p


class World:
    """The plugin with its Handle: the InMemoryCluster as API server, its
    ResourceClaim writes fed into the device store (the informer), a node table
    as snapshot, and the plugin's background work (Unreserve's writes) kept
    until `drain`."""

    def __init__(
        self,
        *,
        nodes: list[NodeBuilder] | None = None,
        claims: list[dict[str, Any]] = (),  # type: ignore[assignment]
        classes: list[dict[str, Any]] = (),  # type: ignore[assignment]
        slices: list[dict[str, Any]] = (),  # type: ignore[assignment]
        pod: dict[str, Any] | None = None,
    ) -> None:
        self.handle = make_handle()
        self.cluster = cast(InMemoryCluster, self.handle.client)
        self.store = self.handle.devices
        for o in classes:
            self.feed("DeviceClass", o)
        for o in slices:
            self.feed("ResourceSlice", o)
        for o in claims:
            self.cluster.resource_claims[f"{NS}/{o['metadata']['name']}"] = copy.deepcopy(o)
            self.feed("ResourceClaim", o)
        self.cluster.on_claim_write = lambda o: self.feed("ResourceClaim", o)
        self.cluster.on_claim_deleted = lambda o: self.feed("ResourceClaim", o, True)
        if pod is not None:
            self.cluster.pods[f"{NS}/{POD}"] = copy.deepcopy(pod)
        self.table = table_of([n.build() for n in nodes or [worker()]])
        self.handle.snapshot = lambda: self.table
        self.spawned: list[Coroutine[Any, Any, None]] = []
        self.handle.spawn = self.spawned.append
        self.plugin = DynamicResources.new({}, self.handle)
        self.state = CycleState()
        self.initial = copy.deepcopy(self.cluster.resource_claims)

    def feed(self, kind: str, obj: dict[str, Any], deleted: bool = False) -> None:
        got = parse_dra_object(kind, copy.deepcopy(obj))
        assert not isinstance(got, InvalidObject), got.message
        self.store.set(got, deleted)

    def drain(self) -> None:
        while self.spawned:
            asyncio.run(self.spawned.pop(0))

    def stored(self, name: str = CLAIM) -> dict[str, Any]:
        return self.cluster.resource_claims[f"{NS}/{name}"]

    def in_flight(self) -> dict[str, ResourceClaim]:
        """Claims the plugin assumed over the API's version (kube's in-flight
        allocations and assume cache)."""
        keys = {*self.cluster.resource_claims, f"{NS}/{POD}-extended-resources"}
        out = {}
        for k in sorted(keys):
            c = self.store.claim(k)
            if c is not None and c is not self.store.api_claim(k):
                out[k] = c
        return out


@dataclass
class Cycle:
    pre_enqueue: Status
    pre_filter: Status | None = None
    filter: dict[str, Status] = field(default_factory=dict)
    node: str | None = None
    reserve: Status | None = None
    in_flight_after_reserve: dict[str, ResourceClaim] = field(default_factory=dict)
    pre_bind: Status | None = None
    # Score and NormalizeScore, run (as upstream) when more than one node passed.
    score: dict[str, int] = field(default_factory=dict)
    normalized: dict[str, int] = field(default_factory=dict)


def schedule(
    w: World,
    pod: dict[str, Any],
    *,
    before_pre_bind: Callable[[World], None] | None = None,
    unreserve_before_pre_bind: bool = False,
    unreserve_after_bind_failure: bool = False,
) -> Cycle:
    """Upstream's TestPlugin loop: each step runs if the one before let it."""
    p = parsed_pod(pod)
    out = Cycle(w.plugin.pre_enqueue(p))
    if not out.pre_enqueue.is_success:
        return out
    _, out.pre_filter = w.plugin.pre_filter(w.state, p, w.table)
    if not out.pre_filter.is_success:
        return out
    for r in w.table.valid_rows().tolist():
        out.filter[w.table.names[r]] = w.plugin.filter_node(w.state, p, w.table, r)
    feasible = [n for n, st in out.filter.items() if st.is_success]
    if not feasible:
        return out
    out.node = feasible[0]
    if len(feasible) > 1:
        rows = np.array([w.table.row_of[n] for n in feasible], dtype=np.intp)
        if w.plugin.pre_score(w.state, p, w.table, rows).is_success:
            raw = w.plugin.score(w.state, p, w.table, rows)
            out.score = dict(zip(feasible, raw.tolist(), strict=True))
            norm = w.plugin.normalize_score(w.state, p, raw.copy())
            out.normalized = dict(zip(feasible, norm.tolist(), strict=True))
            # Upstream's loop takes the first node with the highest score.
            out.node = feasible[int(np.argmax(norm))]
    out.reserve = w.plugin.reserve(w.state, p, out.node)
    out.in_flight_after_reserve = w.in_flight()
    if not out.reserve.is_success:
        w.plugin.unreserve(w.state, p, out.node)
        w.drain()
        return out
    if unreserve_before_pre_bind:
        w.plugin.unreserve(w.state, p, out.node)
        w.drain()
        return out
    if before_pre_bind is not None:
        before_pre_bind(w)
    out.pre_bind = asyncio.run(w.plugin.pre_bind(w.state, p, out.node))
    if unreserve_after_bind_failure:
        w.plugin.unreserve(w.state, p, out.node)
        w.drain()
    return out


def assert_status(st: Status | None, code: Code, text: str) -> None:
    """Upstream compares a failing status by its message (ErrorContains)."""
    assert st is not None
    assert st.code == code, st
    assert text in st.message, st.message


def patch(w: World, name: str, body: dict[str, Any]) -> None:
    """A concurrent change through the API server (upstream's `prepare`)."""
    key = f"{NS}/{name}"
    rv = w.stored(name)["metadata"]["resourceVersion"]
    asyncio.run(w.cluster.patch_resource_claim(key, {"metadata": {"resourceVersion": rv, **body}}))


def status_of(c: dict[str, Any]) -> dict[str, Any]:
    return dict(c.get("status") or {})


RESERVED = [{"resource": "pods", "name": POD, "uid": POD_UID}]


# ---- TestPlugin: PreEnqueue and PreFilter ----------------------------------------


@pytest.mark.parametrize(
    ("pod", "classes"),
    [
        pytest.param(make_pod("foo").obj(), [], id="upstream: empty"),
        pytest.param(
            make_pod("foo").obj(),
            [device_class(extended=GPU)],
            id="upstream: empty-with-extended-resources-enabled",
        ),
        pytest.param(
            with_extended({GPU: "1"}),
            [device_class()],
            # The node lists example.com/gpu with 0 allocatable, but no class backs
            # it: nothing for this plugin.
            id="upstream: non-DRA-extended-resource-name-with-zero-allocatable",
        ),
    ],
)
def test_pre_filter_skips_a_pod_without_claims(
    pod: dict[str, Any], classes: list[dict[str, Any]]
) -> None:
    w = World(
        classes=classes,
        slices=[worker_slice()],
        nodes=[worker().ext(GPU, 0)],
    )
    got = schedule(w, pod)
    assert got.pre_enqueue.is_success
    assert got.pre_filter is not None and got.pre_filter.is_skip


def _deleted() -> dict[str, Any]:
    c = allocated(pending())
    c["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return c


def _wrong_owner() -> dict[str, Any]:
    c = allocated(pending())
    c["metadata"]["ownerReferences"][0]["uid"] += "123"
    return c


def test_upstream_missing_claim() -> None:
    """upstream: missing-claim: the claim from the template is not made yet."""
    w = World(claims=[allocated(pending())])
    got = schedule(w, with_claim_template())
    text = 'pod "default/my-pod": ResourceClaim not created yet'
    assert_status(got.pre_enqueue, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, text)
    assert got.pre_filter is None


@pytest.mark.parametrize(
    ("claims", "text"),
    [
        pytest.param(
            [_deleted()],
            'resourceclaim "my-pod-my-resource" is being deleted',
            id="upstream: deleted-claim",
        ),
        pytest.param(
            [_wrong_owner()],
            "ResourceClaim default/my-pod-my-resource was not created for pod default/my-pod "
            "(pod is not owner)",
            id="upstream: wrong-claim",
        ),
    ],
)
def test_pre_enqueue_rejects_a_claim_the_pod_cannot_use(
    claims: list[dict[str, Any]], text: str
) -> None:
    w = World(claims=claims)
    got = schedule(w, with_claim_template_in_status())
    assert_status(got.pre_enqueue, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, text)
    assert got.pre_enqueue.message == text
    assert got.pre_filter is None
    assert w.cluster.resource_claims == w.initial


def _prioritized(cls: str = CLASS) -> dict[str, Any]:
    return claim(CLAIM, {"name": "req-1", "firstAvailable": [sub("subreq-1", cls)]})


@pytest.mark.parametrize(
    ("claims", "text"),
    [
        pytest.param(
            [pending()],
            f"request req-1: device class {CLASS} does not exist",
            id="upstream: missing-class",
        ),
        pytest.param(
            [claim(CLAIM, {"name": "req-1", "exactly": exact("does-not-exist")})],
            "request req-1: device class does-not-exist does not exist",
            id="upstream: claim-with-request-with-unknown-device-class",
        ),
        pytest.param(
            [_prioritized("does-not-exist")],
            "request req-1/subreq-1: device class does-not-exist does not exist",
            id="upstream: claim-with-prioritized-list-unknown-device-class",
        ),
    ],
)
def test_pre_filter_needs_the_device_classes(claims: list[dict[str, Any]], text: str) -> None:
    w = World(claims=claims, slices=[worker_slice()])
    got = schedule(w, with_claim_name())
    assert got.pre_enqueue.is_success
    # Upstream: UnschedulableAndUnresolvable (statusUnschedulable) for both.
    assert_status(got.pre_filter, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, text)
    assert got.pre_filter is not None and got.pre_filter.message == text
    assert got.filter == {}


# ---- TestPlugin: claims allocated already ----------------------------------------


@pytest.mark.parametrize(
    ("pod", "claims"),
    [
        pytest.param(
            with_claim_name(),
            [allocated(pending()), other_claim()],
            id="upstream: claim-reference",
        ),
        pytest.param(
            with_claim_template_in_status(),
            [allocated(pending()), other_claim()],
            id="upstream: claim-template",
        ),
        pytest.param(
            with_claim_template_in_status(),
            [allocated(pending()), other_claim()],
            id="upstream: bound-claim-without-binding-conditions",
        ),
        pytest.param(
            with_claim_name(),
            [
                allocated(
                    pending(),
                    allocation(selector=match_expression("kubernetes.io/hostname", "worker")),
                )
            ],
            id="upstream: good-topology",
        ),
    ],
)
def test_pre_bind_reserves_an_allocated_claim_for_the_pod(
    pod: dict[str, Any], claims: list[dict[str, Any]]
) -> None:
    w = World(claims=claims)
    got = schedule(w, pod)
    assert got.pre_filter is not None and got.pre_filter.is_success
    assert got.filter == {"worker": got.filter["worker"]} and got.filter["worker"].is_success
    assert got.reserve is not None and got.reserve.is_success
    # Reserve assumes the claim reserved for the pod; nothing is written yet.
    assumed = got.in_flight_after_reserve[f"{NS}/{CLAIM}"]
    assert [(c.name, c.uid) for c in assumed.reserved_for] == [(POD, POD_UID)]
    assert got.pre_bind is not None and got.pre_bind.is_success
    # PreBind: only status.reservedFor changes; the other claim is untouched.
    want = reserved_for(w.initial[f"{NS}/{CLAIM}"])
    assert status_of(w.stored()) == status_of(want)
    assert w.stored()["metadata"]["finalizers"] == [FINALIZER]
    for key, obj in w.initial.items():
        if key != f"{NS}/{CLAIM}":
            assert w.cluster.resource_claims[key] == obj


def test_upstream_reserved_okay() -> None:
    """upstream: reserved-okay — the claim is allocated and reserved for the pod
    already: every step succeeds and nothing is written."""
    in_use = reserved_for(allocated(pending()))
    w = World(claims=[in_use])
    got = schedule(w, with_claim_name())
    assert got.filter["worker"].is_success
    assert got.reserve is not None and got.reserve.is_success
    assert got.pre_bind is not None and got.pre_bind.is_success
    assert w.cluster.resource_claims == w.initial
    assert w.cluster.claim_writes == 0


def test_upstream_wrong_topology() -> None:
    """upstream: wrong-topology — the allocation's node selector does not admit
    the node (upstream's PostFilter then deallocates the claim; Troupe's plugin
    has no PostFilter)."""
    wrong = allocated(pending(), allocation(selector=match_expression("no-such-label", "x")))
    w = World(claims=[wrong])
    got = schedule(w, with_claim_name())
    assert_status(
        got.filter["worker"],
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        "resourceclaim not available on the node",
    )
    assert got.node is None
    assert w.cluster.resource_claims == w.initial


def test_upstream_bind_failure() -> None:
    """upstream: bind-failure — PreBind reserves the allocated claim for the pod;
    Unreserve after a failed Bind takes the pod out of reservedFor again and
    leaves the allocation."""
    good = allocated(
        pending(), allocation(selector=match_expression("kubernetes.io/hostname", "worker"))
    )
    w = World(claims=[good])
    got = schedule(w, with_claim_name(), unreserve_after_bind_failure=True)
    assert got.pre_bind is not None and got.pre_bind.is_success
    after = w.stored()
    assert not after["status"].get("reservedFor")  # upstream: []
    assert after["status"]["allocation"] == good["status"]["allocation"]
    assert after["metadata"]["finalizers"] == [FINALIZER]
    assert w.in_flight() == {}


# ---- TestPlugin: claims the scheduler allocates ----------------------------------


def _with_finalizer() -> dict[str, Any]:
    c = pending()
    c["metadata"]["finalizers"] = [FINALIZER]
    return c


def _remove_finalizer(w: World) -> None:
    patch(w, CLAIM, {"finalizers": None})


def _add_finalizer(w: World) -> None:
    patch(w, CLAIM, {"finalizers": [FINALIZER]})


@pytest.mark.parametrize(
    ("claims", "before_pre_bind"),
    [
        pytest.param([pending()], None, id="upstream: with-resources"),
        pytest.param([_with_finalizer()], None, id="upstream: with-resources-has-finalizer"),
        pytest.param(
            [_with_finalizer()],
            _remove_finalizer,
            id="upstream: with-resources-finalizer-gets-removed",
        ),
        pytest.param(
            [pending()], _add_finalizer, id="upstream: with-resources-finalizer-gets-added"
        ),
    ],
)
def test_pre_bind_writes_the_allocation_with_the_finalizer(
    claims: list[dict[str, Any]], before_pre_bind: Callable[[World], None] | None
) -> None:
    w = World(claims=claims, classes=[device_class()], slices=[worker_slice()])
    got = schedule(w, with_claim_name(), before_pre_bind=before_pre_bind)
    assert got.filter["worker"].is_success
    assert got.reserve is not None and got.reserve.is_success
    # Reserve: the allocation is in flight (assumed), not written.
    flight = got.in_flight_after_reserve[f"{NS}/{CLAIM}"]
    assert flight.allocation is not None
    assert [str(r.device_id) for r in flight.allocation.results] == [f"{DRIVER}/worker/instance-1"]
    assert got.pre_bind is not None and got.pre_bind.is_success
    stored = w.stored()
    assert stored["metadata"]["finalizers"] == [FINALIZER]  # once, whatever happened
    assert stored["status"] == {"allocation": allocation(), "reservedFor": RESERVED}
    assert w.in_flight() == {}


def test_upstream_skip_bind() -> None:
    """upstream: skip-bind — Unreserve before PreBind (another PreBind plugin
    failed): the in-flight allocation is dropped and nothing was written."""
    w = World(claims=[pending()], classes=[device_class()], slices=[worker_slice()])
    got = schedule(w, with_claim_name(), unreserve_before_pre_bind=True)
    assert got.reserve is not None and got.reserve.is_success
    assert list(got.in_flight_after_reserve) == [f"{NS}/{CLAIM}"]
    assert got.pre_bind is None
    assert w.in_flight() == {}
    assert w.cluster.resource_claims == w.initial
    assert w.store.used == {}


@pytest.mark.parametrize(
    ("claims", "slices"),
    [
        pytest.param([pending()], [], id="upstream: no-resources"),
        pytest.param(
            [pending(), other_allocated()], [worker_slice()], id="upstream: exhausted-resources"
        ),
        pytest.param(
            [pending()], [taint_devices(worker_slice())], id="upstream: tainted-device-enabled"
        ),
    ],
)
def test_filter_cannot_allocate_all_claims(
    claims: list[dict[str, Any]], slices: list[dict[str, Any]]
) -> None:
    w = World(claims=claims, classes=[device_class()], slices=slices)
    got = schedule(w, with_claim_name())
    assert got.pre_filter is not None and got.pre_filter.is_success
    # Upstream: UnschedulableAndUnresolvable; Troupe: Unschedulable.
    assert_status(got.filter["worker"], Code.UNSCHEDULABLE, "cannot allocate all claims")
    assert got.node is None
    assert w.cluster.resource_claims == w.initial


@pytest.mark.parametrize(
    ("claims", "want_results"),
    [
        pytest.param(
            [admin_access(pending()), other_allocated()],
            [result(adminAccess=True)],
            # The pending claim asks for admin access: allocated although the
            # device is in use.
            id="upstream: request-admin-access-with-DRAAdminAccess-featuregate",
        ),
        pytest.param(
            [pending(), admin_access(other_allocated())],
            [result()],
            # The other claim uses the device with admin access: still free.
            id="upstream: structured-ignore-allocated-admin-access",
        ),
    ],
)
def test_admin_access(claims: list[dict[str, Any]], want_results: list[dict[str, Any]]) -> None:
    w = World(claims=claims, classes=[device_class()], slices=[worker_slice()])
    got = schedule(w, with_claim_name())
    assert got.filter["worker"].is_success
    assert got.reserve is not None and got.reserve.is_success
    assert got.pre_bind is not None and got.pre_bind.is_success
    stored = w.stored()
    assert stored["status"] == {
        "allocation": allocation(*want_results),
        "reservedFor": RESERVED,
    }
    assert stored["metadata"]["finalizers"] == [FINALIZER]
    other = w.stored("not-my-claim")
    assert other == w.initial[f"{NS}/not-my-claim"]


@pytest.mark.parametrize(
    ("claims", "classes", "text"),
    [
        pytest.param(
            [break_cel_in_claim(pending())],
            [device_class()],
            f"claim default/my-pod-my-resource: selector #0: CEL runtime error: "
            f"no such key: {ATTR}",
            id="upstream: claim-parameters-CEL-runtime-error",
        ),
        pytest.param(
            [pending()],
            [device_class(CLASS, "", BROKEN)],
            f"class my-resource-class: selector #0: CEL runtime error: no such key: {ATTR}",
            id="upstream: class-parameters-CEL-runtime-error",
        ),
    ],
)
def test_filter_reports_cel_runtime_errors(
    claims: list[dict[str, Any]], classes: list[dict[str, Any]], text: str
) -> None:
    w = World(claims=claims, classes=classes, slices=[worker_slice()])
    got = schedule(w, with_claim_name())
    # Upstream: an Error status (scheduling aborts) with this text.
    assert_status(got.filter["worker"], Code.UNSCHEDULABLE_AND_UNRESOLVABLE, text)
    assert got.node is None
    assert w.cluster.resource_claims == w.initial


def test_upstream_claim_with_prioritized_list() -> None:
    """upstream: claim-with-prioritized-list — firstAvailable with one
    subrequest: the result names "req-1/subreq-1"."""
    c = copy.deepcopy(_prioritized())
    c["metadata"]["ownerReferences"] = pending()["metadata"]["ownerReferences"]
    w = World(claims=[c], classes=[device_class()], slices=[worker_slice()])
    got = schedule(w, with_claim_name())
    assert got.filter["worker"].is_success
    assert got.reserve is not None and got.reserve.is_success
    assert got.pre_bind is not None and got.pre_bind.is_success
    assert w.stored()["status"] == {
        "allocation": allocation(result("req-1/subreq-1")),
        "reservedFor": RESERVED,
    }
    assert w.stored()["metadata"]["finalizers"] == [FINALIZER]


# ---- TestPlugin: scoring of prioritized lists ------------------------------------

HEALTHY = f'device.attributes["{DRIVER}"].{ATTR}'


def prioritized(name: str, *requests: list[dict[str, Any]]) -> dict[str, Any]:
    """st.MakeResourceClaim().RequestWithPrioritizedList(...)...: requests
    req-1, req-2, ..., the pod as owner (pendingClaim...)."""
    return claim(
        name,
        *({"name": f"req-{i}", "firstAvailable": subs} for i, subs in enumerate(requests, 1)),
        owner=True,
    )


def results_of(c: dict[str, Any]) -> list[str]:
    """The requests an allocation's results name (upstream ignores which
    device each got)."""
    return [r["request"] for r in c["status"]["allocation"]["devices"]["results"]]


def test_upstream_single_claim_prioritized_list_scoring() -> None:
    """upstream: single-claim-prioritized-list-scoring — the first
    subrequest selects healthy devices: worker (healthy) takes it and scores
    8, worker-2 only the second (7); normalised 100 and 87, worker chosen."""
    c = prioritized(CLAIM, [sub("subreq-1", selector=HEALTHY), sub("subreq-2")])
    w = World(
        nodes=[worker(), worker("worker-2")],
        claims=[c],
        classes=[device_class()],
        slices=[
            resource_slice("worker", device("instance-1", healthy=True)),
            resource_slice("worker-2", device("instance-1", healthy=False)),
        ],
    )
    got = schedule(w, with_claim_name())
    assert got.score == {"worker": 8, "worker-2": 7}
    assert got.normalized == {"worker": 100, "worker-2": 87}
    assert got.node == "worker"
    assert got.pre_bind is not None and got.pre_bind.is_success
    assert results_of(w.stored()) == ["req-1/subreq-1"]
    assert w.stored()["status"]["reservedFor"] == RESERVED


def test_upstream_multiple_claims_prioritized_list_scoring() -> None:
    """upstream: multiple-claims-prioritized-list-scoring — claim 1 takes one
    device (8 everywhere); claim 2 takes 4, 3, 2 or 1: worker (4 devices)
    gives it 3 (7), worker-2 (2 devices) 1 (5), worker-3 (1 device) nothing."""
    c1 = prioritized(CLAIM, [sub("subreq-1")])
    c2 = prioritized(
        CLAIM2,
        [sub(f"subreq-{i}", count=5 - i) for i in range(1, 5)],
    )
    w = World(
        nodes=[worker(), worker("worker-2"), worker("worker-3")],
        claims=[c1, c2],
        classes=[device_class()],
        slices=[
            resource_slice("worker", *(device(f"instance-{i}") for i in range(1, 5))),
            resource_slice("worker-2", device("instance-1"), device("instance-2")),
            resource_slice("worker-3", device("instance-1")),
        ],
    )
    got = schedule(w, with_two_claim_names())
    # Troupe: Unschedulable (upstream UnschedulableAndUnresolvable), see above.
    assert_status(got.filter["worker-3"], Code.UNSCHEDULABLE, "cannot allocate all claims")
    assert got.score == {"worker": 15, "worker-2": 13}
    assert got.normalized == {"worker": 100, "worker-2": 86}
    assert got.node == "worker"
    assert got.pre_bind is not None and got.pre_bind.is_success
    assert results_of(w.stored()) == ["req-1/subreq-1"]
    assert results_of(w.stored(CLAIM2)) == ["req-1/subreq-2"] * 3


def test_upstream_multiple_requests_prioritized_list_scoring() -> None:
    """upstream: multiple-requests-prioritized-list-scoring — two requests of
    one claim, each two devices or else one: 4 devices give 8 + 8, 3 give
    8 + 7, 2 give 7 + 7; normalised 100, 93, 87."""
    subs = [sub("subreq-1", count=2), sub("subreq-2", count=1)]
    w = World(
        nodes=[worker(), worker("worker-2"), worker("worker-3")],
        claims=[prioritized(CLAIM, subs, subs)],
        classes=[device_class()],
        slices=[
            resource_slice(n, *(device(f"instance-{i}") for i in range(1, k + 1)))
            for n, k in (("worker", 4), ("worker-2", 3), ("worker-3", 2))
        ],
    )
    got = schedule(w, with_claim_name())
    assert got.score == {"worker": 16, "worker-2": 15, "worker-3": 14}
    assert got.normalized == {"worker": 100, "worker-2": 93, "worker-3": 87}
    assert got.node == "worker"
    assert got.pre_bind is not None and got.pre_bind.is_success
    assert results_of(w.stored()) == ["req-1/subreq-1"] * 2 + ["req-2/subreq-1"] * 2


def test_no_score_without_prioritized_lists() -> None:
    """A pod whose claims have no `firstAvailable` request skips Score (kube's
    Score gives 0 everywhere, which normalises to 0), and its Filter only asks
    whether the claims fit."""
    w = World(
        nodes=[worker(), worker("worker-2")],
        claims=[pending()],
        classes=[device_class()],
        slices=[worker_slice(), resource_slice("worker-2", device("instance-1"))],
    )
    got = schedule(w, with_claim_name())
    assert got.filter["worker"].is_success and got.filter["worker-2"].is_success
    assert got.score == {} and got.node == "worker"
    p = parsed_pod(with_claim_name())
    rows = np.arange(2, dtype=np.intp)
    assert w.plugin.pre_score(w.state, p, w.table, rows).code is Code.SKIP
    # A pod without claims: PreFilter skips, and so does PreScore.
    plain = parsed_pod(pod_obj())
    state = CycleState()
    assert w.plugin.pre_filter(state, plain, w.table)[1].code is Code.SKIP
    assert w.plugin.pre_score(state, plain, w.table, rows).code is Code.SKIP


# ---- Test_computesScore, TestNormalizeScore --------------------------------------


def _claim(c: dict[str, Any]) -> ResourceClaim:
    got = parse_dra_object("ResourceClaim", copy.deepcopy(c))
    assert isinstance(got, ResourceClaim)
    return got


def _named(*requests: tuple[str, int]) -> ResourceClaim:
    """st.MakeResourceClaim().NamedRequestWithPrioritizedList(name, n subrequests)..."""
    return _claim(
        claim(
            CLAIM,
            *(
                {"name": name, "firstAvailable": [sub(f"subreq-{i}") for i in range(1, n + 1)]}
                for name, n in requests
            ),
        )
    )


def _results(*requests: str) -> Allocation:
    return Allocation(tuple(AllocationResult(r, DRIVER, "worker", "instance-1") for r in requests))


@pytest.mark.parametrize(
    ("claims", "allocations", "want"),
    [
        pytest.param(
            [_named(("req-1", 1))],
            [_results("req-1/subreq-1")],
            8,
            id="single-request-only-subrequest-allocated",
        ),
        pytest.param(
            [_named(("req-1", 8))],
            [_results("req-1/subreq-8")],
            1,
            id="single-request-last-subrequest-allocated",
        ),
        pytest.param(
            [_named(("req-1", 4), ("req-2", 5))],
            [_results("req-1/subreq-4", "req-2/subreq-5")],
            9,
            id="multiple-requests-with-middle-subrequests-allocated",
        ),
        pytest.param(
            [_named(("req-1", 8), ("req-2", 1))],
            [_results("req-1/subreq-8", "req-2/subreq-1")],
            9,
            id="multiple-requests-with-top-subrequests-allocated",
        ),
        pytest.param(
            [_named(("req-1", 8)), _named(("req-2", 8))],
            [_results("req-1/subreq-8"), _results("req-2/subreq-8")],
            2,
            id="multiple-claims-with-last-subrequests-allocated",
        ),
        pytest.param(
            [_named(("req-1", 1)), _named(("req-2", 1))],
            [_results("req-1/subreq-1"), _results("req-2/subreq-1")],
            16,
            id="multiple-claims-with-top-subrequests-allocated",
        ),
        pytest.param(
            [_claim(allocated(pending())), _claim(claim(CLAIM2, owner=True))],
            [_results("req-2")],
            0,
            id="mix-of-allocated-and-unallocated-claims",
        ),
    ],
)
def test_upstream_compute_score(
    claims: list[ResourceClaim], allocations: list[Allocation], want: int
) -> None:
    """upstream: Test_computesScore."""
    assert compute_score(claims, allocations) == want


def test_upstream_compute_score_more_claims_than_allocations() -> None:
    """upstream: Test_computesScore more-claims-than-allocations — an error."""
    with pytest.raises(ValueError, match="smaller than number of claims"):
        compute_score([_named(("req-1", 1)), _named(("req-2", 1))], [])


MAX_INT32 = 2**31 - 1


@pytest.mark.parametrize(
    ("scores", "want"),
    [
        pytest.param([], [], id="empty"),
        pytest.param([42], [100], id="single-score"),
        pytest.param([8, 8], [100, 100], id="all-same"),
        pytest.param([MAX_INT32, MAX_INT32], [100, 100], id="all-same-very-large"),
        pytest.param([MAX_INT32, 0], [100, 0], id="max-and-min-values"),
        pytest.param([99, 98, 97], [100, 98, 97], id="mid-value"),
        pytest.param(
            [MAX_INT32, MAX_INT32 - 1, 1, 0], [100, 99, 0, 0], id="large-spread-lost-precision"
        ),
    ],
)
def test_upstream_normalize_score(scores: list[int], want: list[int]) -> None:
    """upstream: TestNormalizeScore (DefaultNormalizeScore)."""
    w = World()
    got = w.plugin.normalize_score(
        w.state, parsed_pod(with_claim_name()), np.array(scores, dtype=np.int64)
    )
    assert got.tolist() == want


# ---- TestPlugin: extended resources backed by DRA --------------------------------


def ext_claim_spec(*requests: tuple[str, str, int]) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {"name": name, "exactly": exact(cls, count)} for name, cls, count in requests
            ]
        }
    }


def assert_extended_claim(
    w: World,
    requests: list[tuple[str, str, int]],
    results: list[tuple[str, str]],
    mappings: list[tuple[str, str, str]],
) -> None:
    """The claim PreBind created for the pod: annotated, owned by the pod,
    allocated and reserved for it, and named in the pod's status."""
    (key,) = w.cluster.resource_claims.keys() - w.initial.keys()
    c = w.cluster.resource_claims[key]
    md = c["metadata"]
    assert md["name"] == EXT_CLAIM
    assert md["generateName"] == f"{POD}-extended-resources-"
    assert md["annotations"] == {ANNOTATION: "true"}
    assert md["finalizers"] == [FINALIZER]
    (owner,) = md["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        POD,
        POD_UID,
        True,
    )
    assert c["spec"] == ext_claim_spec(*requests)
    got = c["status"]["allocation"]
    assert [(r["request"], r["driver"]) for r in got["devices"]["results"]] == [
        (req, drv) for req, drv in results
    ]
    assert got["nodeSelector"] == match_fields("worker")
    assert c["status"]["reservedFor"] == RESERVED
    assert w.cluster.pods[f"{NS}/{POD}"]["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": EXT_CLAIM,
        "requestMappings": [
            {"containerName": cn, "resourceName": rn, "requestName": req}
            for cn, rn, req in mappings
        ],
    }


def test_upstream_extended_resource_name_with_node_resource() -> None:
    """upstream: extended-resource-name-with-node-resource — the node lists
    example.com/gpu itself (a device plugin): nothing for DRA to allocate, no
    claim made."""
    pod = with_extended({GPU: "1"})
    w = World(nodes=[worker().ext(GPU, 1)], classes=[device_class(extended=GPU)], pod=pod)
    got = schedule(w, pod)
    assert got.pre_filter is not None and got.pre_filter.is_success
    assert got.filter["worker"].is_success
    assert got.reserve is not None and got.reserve.is_success
    assert got.in_flight_after_reserve == {}
    assert got.pre_bind is not None and got.pre_bind.is_success
    assert w.cluster.resource_claims == {}


def test_upstream_extended_resource_one_device_plugin_one_dra() -> None:
    """upstream: extended-resource-one-device-plugin-one-dra — example.com/gpu
    from the node's device plugin, example.com/gpu2 from DRA."""
    pod = with_extended({GPU: "1", GPU2: "1"})
    w = World(
        nodes=[worker().ext(GPU, 1)],
        classes=[device_class(extended=GPU), device_class(CLASS + "2", GPU2)],
        slices=[worker_slice()],
        pod=pod,
    )
    got = schedule(w, pod)
    assert got.filter["worker"].is_success
    assert got.reserve is not None and got.reserve.is_success
    assert list(got.in_flight_after_reserve) == [f"{NS}/{POD}-extended-resources"]
    assert got.pre_bind is not None and got.pre_bind.is_success
    assert_extended_claim(
        w,
        [("container-0-request-1", CLASS + "2", 1)],
        [("container-0-request-1", DRIVER)],
        [("c0", GPU2, "container-0-request-1")],
    )


@pytest.mark.parametrize(
    "nodes",
    [
        pytest.param(
            [worker().ext(GPU, 0)], id="upstream: extended-resource-name-with-zero-allocatable"
        ),
        pytest.param([worker()], id="upstream: extended-resource-name-with-resources"),
    ],
)
def test_extended_resource_through_dra(nodes: list[NodeBuilder]) -> None:
    pod = with_extended({GPU: "1"})
    w = World(nodes=nodes, classes=[device_class(extended=GPU)], slices=[worker_slice()], pod=pod)
    got = schedule(w, pod)
    assert got.filter["worker"].is_success
    assert got.reserve is not None and got.reserve.is_success
    # In flight under a placeholder until PreBind creates the claim.
    (flight,) = got.in_flight_after_reserve.values()
    assert flight.allocation is not None
    assert [r.request for r in flight.allocation.results] == ["container-0-request-0"]
    assert got.pre_bind is not None and got.pre_bind.is_success
    assert_extended_claim(
        w,
        [("container-0-request-0", CLASS, 1)],
        [("container-0-request-0", DRIVER)],
        [("c0", GPU, "container-0-request-0")],
    )


def test_upstream_extended_resource_name_no_resource() -> None:
    """upstream: extended-resource-name-no-resource — no device for it."""
    pod = with_extended({GPU: "1"})
    w = World(classes=[device_class(extended=GPU)], pod=pod)
    got = schedule(w, pod)
    assert got.pre_filter is not None and got.pre_filter.is_success
    # Upstream: UnschedulableAndUnresolvable; Troupe: Unschedulable.
    assert_status(got.filter["worker"], Code.UNSCHEDULABLE, "cannot allocate all claims")
    assert w.cluster.resource_claims == {}


def test_upstream_extended_resource_name_with_resources_fail_patch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """upstream: extended-resource-name-with-resources-fail-patch — the claim
    is created, allocated and reserved, then patching the pod fails."""
    pod = with_extended({GPU: "1"})
    w = World(classes=[device_class(extended=GPU)], slices=[worker_slice()], pod=pod)

    async def fail(*args: Any) -> None:
        raise RuntimeError("patch error")

    monkeypatch.setattr(w.cluster, "set_extended_resource_claim_status", fail)
    got = schedule(w, pod)
    assert got.pre_bind is not None
    assert not got.pre_bind.is_success
    assert "patch error" in got.pre_bind.message
    c = w.stored(EXT_CLAIM)
    assert c["status"]["reservedFor"] == RESERVED
    assert [r["request"] for r in c["status"]["allocation"]["devices"]["results"]] == [
        "container-0-request-0"
    ]


def test_upstream_extended_resource_name_bind_failure() -> None:
    """upstream: extended-resource-name-bind-failure — Unreserve after a failed
    Bind deletes the claim PreBind created."""
    pod = with_extended({GPU: "1"})
    w = World(classes=[device_class(extended=GPU)], slices=[worker_slice()], pod=pod)
    got = schedule(w, pod, unreserve_after_bind_failure=True)
    assert got.pre_bind is not None and got.pre_bind.is_success
    assert w.cluster.resource_claims == {}
    assert "extendedResourceClaimStatus" not in w.cluster.pods[f"{NS}/{POD}"]["status"]
    assert w.in_flight() == {}
    assert w.store.used == {}


def test_upstream_extended_resource_name_skip_bind() -> None:
    """upstream: extended-resource-name-skip-bind — Unreserve before PreBind:
    no claim was created, nothing stays in flight."""
    pod = with_extended({GPU: "1"})
    w = World(classes=[device_class(extended=GPU)], slices=[worker_slice()], pod=pod)
    got = schedule(w, pod, unreserve_before_pre_bind=True)
    assert got.reserve is not None and got.reserve.is_success
    assert len(got.in_flight_after_reserve) == 1
    assert w.cluster.resource_claims == {}
    assert w.in_flight() == {}
    assert w.store.used == {}


def test_upstream_extended_resource_name_claim_creation_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """upstream: extended-resource-name-claim-creation-failure — creating the
    claim fails: PreBind fails with the API's error, Unreserve leaves nothing."""
    pod = with_extended({GPU: "1"})
    w = World(classes=[device_class(extended=GPU)], slices=[worker_slice()], pod=pod)

    async def refuse(*args: Any) -> None:
        raise RuntimeError("claim creation errors")

    monkeypatch.setattr(w.cluster, "create_resource_claim", refuse)
    got = schedule(w, pod, unreserve_after_bind_failure=True)
    assert got.pre_bind is not None and not got.pre_bind.is_success
    assert "claim creation errors" in got.pre_bind.message
    assert w.cluster.resource_claims == {}
    assert w.in_flight() == {}
    assert w.store.used == {}


# ---- TestIsSchedulableAfterClaimChange -------------------------------------------


def hint(plugin: DynamicResources, resource: EventResource) -> Any:
    (h,) = [
        e.hint
        for e in plugin.events_to_register()
        if e.event.resource == resource and e.hint is not None
    ]
    return h


def as_claim(o: Any) -> Any:
    if not isinstance(o, dict):
        return o
    c = parse_dra_object("ResourceClaim", copy.deepcopy(o))
    assert isinstance(c, ResourceClaim)
    return c


def _renamed(c: dict[str, Any]) -> dict[str, Any]:
    c = copy.deepcopy(c)
    c["metadata"]["name"] += "-foo"
    c["metadata"]["uid"] += "123"
    return c


def _plus_finalizer(c: dict[str, Any]) -> dict[str, Any]:
    c = copy.deepcopy(c)
    c["metadata"].setdefault("finalizers", []).append("foo")
    c["metadata"]["resourceVersion"] = "2"
    return c


def _allocated_empty(c: dict[str, Any]) -> dict[str, Any]:
    c = copy.deepcopy(c)
    c["status"] = {"allocation": {"devices": {"results": []}}}
    c["metadata"]["resourceVersion"] = "2"
    return c


def _deallocated(c: dict[str, Any]) -> dict[str, Any]:
    c = copy.deepcopy(c)
    c["status"].pop("allocation")
    c["metadata"]["resourceVersion"] = "2"
    return c


@pytest.mark.parametrize(
    ("pod", "claims", "old", "new", "want"),
    [
        pytest.param(
            with_claim_template(),
            [],
            None,
            "not-a-claim",
            QueueingHint.QUEUE,  # upstream: Queue with an error
            id="upstream: backoff-wrong-new-object",
        ),
        pytest.param(
            with_claim_template(),
            [],
            None,
            _wrong_owner(),
            QueueingHint.SKIP,
            id="upstream: skip-wrong-claim",
        ),
        pytest.param(
            with_claim_template(),
            [allocated(pending())],
            None,
            _renamed(allocated(pending())),
            QueueingHint.SKIP,
            id="upstream: skip-unrelated-claim",
        ),
        pytest.param(
            with_claim_name(), [], None, pending(), QueueingHint.QUEUE, id="upstream: queue-on-add"
        ),
        pytest.param(
            with_claim_name(),
            [pending()],
            "not-a-claim",
            pending(),
            QueueingHint.QUEUE,  # upstream: Queue with an error
            id="upstream: backoff-wrong-old-object",
        ),
        pytest.param(
            with_claim_name(),
            [pending()],
            pending(),
            _plus_finalizer(pending()),
            QueueingHint.SKIP,
            id="upstream: skip-adding-finalizer",
        ),
        pytest.param(
            with_claim_name(),
            [pending()],
            pending(),
            _allocated_empty(pending()),
            QueueingHint.QUEUE,
            id="upstream: queue-on-status-change",
        ),
        pytest.param(
            with_claim_name(),
            [pending(), other_allocated()],
            other_allocated(),
            _deallocated(other_allocated()),
            QueueingHint.QUEUE,
            id="upstream: claim-deallocate",
        ),
    ],
)
def test_is_schedulable_after_claim_change(
    pod: dict[str, Any],
    claims: list[dict[str, Any]],
    old: Any,
    new: Any,
    want: QueueingHint,
) -> None:
    w = World(claims=claims)
    if isinstance(new, dict):
        w.feed("ResourceClaim", new)  # the informer has it before the hint runs
    fn = hint(w.plugin, EventResource.RESOURCE_CLAIM)
    assert fn(parsed_pod(pod), as_claim(old), as_claim(new)) == want


# ---- TestIsSchedulableAfterPodChange ---------------------------------------------


def _other_pod() -> dict[str, Any]:
    o = with_claim_template()
    o["metadata"]["name"] += "2"
    o["metadata"]["uid"] += "2"
    return o


@pytest.mark.parametrize(
    ("pod", "claims", "new", "want"),
    [
        pytest.param(
            with_claim_template(),
            [pending()],
            with_claim_template_in_status(),
            QueueingHint.QUEUE,
            id="upstream: complete",
        ),
        pytest.param(
            _other_pod(),
            [pending()],
            with_claim_template_in_status(),
            QueueingHint.SKIP,
            id="upstream: wrong-pod",
        ),
    ],
)
def test_is_schedulable_after_pod_change(
    pod: dict[str, Any], claims: list[dict[str, Any]], new: dict[str, Any], want: QueueingHint
) -> None:
    w = World(claims=claims)
    fn = hint(w.plugin, EventResource.UNSCHEDULED_POD)
    # Upstream calls the hint without the old object.
    assert fn(parsed_pod(pod), None, parsed_pod(new)) == want
