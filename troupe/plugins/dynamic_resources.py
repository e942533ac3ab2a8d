"""DynamicResources: devices claimed through Dynamic Resource Allocation
(spec.resourceClaims, resource.k8s.io/v1), allocated as kube-scheduler's
plugin of that name does.

- PreEnqueue: each of the pod's claims exists (a claim from a template is
  created by the resourceclaim controller, not by the scheduler: the pod waits
  for it with kube's text), is not being deleted, belongs to the pod when it
  came from a template, and uses nothing Troupe cannot allocate yet.
- PreFilter: the claims already allocated must be usable by one more pod
  (`reservedFor` holds at most 256); the others need a DeviceClass that exists.
- Filter: an allocated claim's node selector admits the node
  ("resourceclaim not available on the node"); the unallocated ones are
  allocated on the node by the structured allocator (troupe.dra.allocator),
  else "cannot allocate all claims". For a pod whose claims have
  `firstAvailable` requests, Filter keeps the node's score from the
  allocation it made there.
- PreScore / Score: those scores, as kube-scheduler's computeScore (a chosen
  subrequest at index i of its list gives 8 - i), normalised by the highest
  (DefaultNormalizeScore). A pod without prioritized lists skips Score.
- Reserve: the allocation for the chosen node is made again against what is
  in use now (another pod of the same cycle, a gang's member, may have taken
  devices since Filter) and assumed in the device store, with the pod in
  `reservedFor`: no other pod is given those devices while it is written.
- Unreserve: the assumption goes; what PreBind already wrote is undone.
- PreBind: the claim gets the finalizer kube's scheduler puts on claims it
  allocates, then `status.allocation` and `status.reservedFor` (a claim
  allocated already only gets the pod added to `reservedFor`). Writes carry
  the resourceVersion they were based on; on a conflict the claim is read
  again and the write retried if it still holds.

The queueing hints wake a pod when one of its claims is added or changes, when
any claim gives up its devices, and when a ResourceSlice or DeviceClass is
added or changes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np

from troupe.api.duration import parse_duration
from troupe.api.selectors import node_selector_matches
from troupe.api.types import InvalidObject, Pod, PodGroup, PodKey
from troupe.core.cluster import Conflict, NotFound
from troupe.core.recorder import ObjectRef, rfc3339
from troupe.core.snapshot import Int64Array, IntpArray, NodeTable
from troupe.dra.allocator import CANNOT_ALLOCATE, AllocationError, allocate
from troupe.dra.claims import claim_name, group_claim
from troupe.dra.extended import (
    ExtendedRequest,
    claim_body,
    claim_for,
    extended_requests,
    placeholder_key,
    status_body,
)
from troupe.dra.store import DeviceStore
from troupe.dra.types import (
    FINALIZER,
    RESERVED_FOR_MAX,
    Allocation,
    Consumer,
    ResourceClaim,
    parse_dra_object,
)
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    EnqueueExtensions,
    NodeFilterPlugin,
    NodeToStatus,
    PluginArgsError,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ReservePlugin,
    ScoreExtensions,
    ScorePlugin,
    TrialChargePlugin,
)
from troupe.framework.status import SKIP, SUCCESS, Code, Status, error, unresolvable

log = logging.getLogger(__name__)

NAME: Final = "DynamicResources"
_STATE_KEY: Final = "PreFilter" + NAME
NOT_AVAILABLE: Final = "resourceclaim not available on the node"
IN_USE: Final = "resourceclaim in use"
_WRITE_ATTEMPTS: Final = 5
ALLOCATION_WAIT_SECONDS: Final = 30.0
# resourceapi.FirstAvailableDeviceRequestMaxSize: the subrequests a request may
# list; the first chosen scores this much, each later one a point less.
FIRST_AVAILABLE_MAX: Final = 8
# DynamicResourcesArgs.bindingTimeout's default: how long PreBind waits for
# the binding conditions of the devices it allocated.
BINDING_TIMEOUT_SECONDS: Final = 600.0


POD_GROUP_API: Final = "scheduling.k8s.io"


def not_created_message(pod: Pod) -> str:
    """kube-scheduler's text for a claim still to be created from its template
    (resourceclaim.Name's error)."""
    return f'pod "{pod.namespace}/{pod.name}": ResourceClaim not created yet'


def consumer_of(pod: Pod, index: int, group: PodGroup | None) -> Consumer:
    """Who the claim is reserved for: the pod, or its PodGroup for the group's claims."""
    if group is not None and group_claim(pod, index, group):
        return Consumer("podgroups", group.name, group.uid, POD_GROUP_API)
    return Consumer("pods", pod.name, pod.uid)


def pod_claims(
    store: DeviceStore, pod: Pod, group: PodGroup | None = None
) -> tuple[list[tuple[ResourceClaim, Consumer]], str]:
    """The pod's claims from the store, each with whom it is reserved for, or
    why they cannot be used (kube's texts); one claim named twice is listed once."""
    out: list[tuple[ResourceClaim, Consumer]] = []
    seen: set[str] = set()
    for i, c in enumerate(pod.resource_claims):
        name = claim_name(pod, i, group)
        if name is None:
            return [], not_created_message(pod)
        claim = store.claim(f"{pod.namespace}/{name}")
        if claim is None:
            return [], f'resourceclaim.resource.k8s.io "{name}" not found'
        if claim.deleting:
            return [], f'resourceclaim "{name}" is being deleted'
        shared = group_claim(pod, i, group)
        if c.template_name and not shared and claim.owner_pod_uid != pod.uid:
            return [], (
                f"ResourceClaim {claim.namespace}/{claim.name} was not created for pod "
                f"{pod.namespace}/{pod.name} (pod is not owner)"
            )
        if claim.key not in seen:
            seen.add(claim.key)
            out.append((claim, consumer_of(pod, i, group)))
    return out, ""


@dataclass(slots=True)
class _State:
    allocated: list[ResourceClaim]
    pending: list[ResourceClaim]
    # Whom each claim is reserved for (the pod, or its PodGroup), by claim key.
    consumers: dict[str, Consumer] = field(default_factory=dict)
    # Extended resources a DeviceClass backs, and (Reserve) those the chosen node
    # leaves to DRA, with the claim made for them once PreBind has created it.
    extended: tuple[ExtendedRequest, ...] = ()
    extended_used: tuple[ExtendedRequest, ...] = ()
    extended_created: str = ""
    # Reserve: the claims assumed (key -> version assumed) and the allocations made.
    assumed: dict[str, ResourceClaim] = field(default_factory=dict)
    allocations: dict[str, Allocation] = field(default_factory=dict)
    # PreBind: what was written (claim key -> whether the allocation was ours,
    # and for whom it was reserved).
    written: dict[str, tuple[bool, Consumer]] = field(default_factory=dict)
    # Allocated claims whose devices' binding failed or timed out.
    binding: frozenset[str] = frozenset()
    # Filter: allocated claims that ruled out a node (PostFilter may give them up).
    unavailable: dict[str, None] = field(default_factory=dict)
    # A claim an earlier attempt made for the pod's extended resources (the
    # scheduler stopped before the pod was bound): PostFilter deletes it.
    stale_extended: str = ""
    # Some claim has a `firstAvailable` request: Filter then keeps each
    # node's raw score (kube's nodeAllocations, which Score reads).
    prioritized: bool = False
    scores: dict[str, int] = field(default_factory=dict)


def binding_ready(claim: ResourceClaim) -> bool | str:
    """Whether the devices of the claim's allocation that have binding
    conditions have them all True in status.devices (kube's
    isClaimReadyForBinding); the failure, in kube's words, when one of their
    binding failure conditions is True."""
    a = claim.allocation
    if a is None:
        return False
    for r in a.results:
        if not r.binding_conditions:
            continue
        conditions = claim.device_status.get(r.device_id)
        if conditions is None:
            return False
        for kind in r.binding_failure_conditions:
            for c in conditions:
                if c.type == kind and c.status == "True":
                    return (
                        f"claim {claim.name} binding failed: reason={c.reason}, "
                        f"message={json.dumps(c.message)}"
                    )
        for kind in r.binding_conditions:
            if not any(c.type == kind and c.status == "True" for c in conditions):
                return False
    return True


def _has_binding_conditions(claim: ResourceClaim | None) -> bool:
    a = claim.allocation if claim is not None else None
    return a is not None and any(r.binding_conditions for r in a.results)


def binding_timed_out(claim: ResourceClaim, now: float, timeout: float) -> bool:
    """Whether the claim's binding conditions were not met within `timeout` of
    its allocationTimestamp."""
    a = claim.allocation
    return (
        a is not None
        and a.timestamp is not None
        and any(r.binding_conditions for r in a.results)
        and a.timestamp + timeout < now
    )


def compute_score(claims: Sequence[ResourceClaim], allocations: Sequence[Allocation]) -> int:
    """A node's raw score for the pod's claims, as kube-scheduler's
    computeScore: each `firstAvailable` request whose subrequest at index i
    of its list was chosen adds FIRST_AVAILABLE_MAX - i. An allocated claim
    counts with its own allocation; the others take `allocations` in order
    (those Filter made on the node). ValueError when there are fewer."""
    score = 0
    left = iter(allocations)
    for claim in claims:
        allocation = claim.allocation
        if allocation is None:
            allocation = next(left, None)
            if allocation is None:
                raise ValueError(
                    f"number of allocations {len(allocations)} is smaller than "
                    "number of claims needing allocation"
                )
        chosen = {r.request for r in allocation.results if "/" in r.request}
        if not chosen:
            continue
        for request in claim.requests:
            if request.first_available:
                for i, alt in enumerate(request.alternatives):
                    if alt.name in chosen:
                        score += FIRST_AVAILABLE_MAX - i
    return score


class DynamicResources(
    PreEnqueuePlugin,
    PreFilterPlugin,
    NodeFilterPlugin,
    PostFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    ScoreExtensions,
    ReservePlugin,
    PreBindPlugin,
    TrialChargePlugin,
    EnqueueExtensions,
):
    NAME: Final = NAME

    def __init__(self, handle: Handle, binding_timeout: float = BINDING_TIMEOUT_SECONDS) -> None:
        self.handle = handle
        self.binding_timeout = binding_timeout
        self.store: DeviceStore = handle.devices
        # A group trial in progress: the claims of the members tried so far, by
        # node, and the node of each; the last joint allocation of each claim.
        self._trial: dict[str, dict[str, ResourceClaim]] = {}
        self._trial_node: dict[str, str] = {}
        self._plan: dict[str, tuple[str, Allocation]] = {}

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> DynamicResources:
        """DynamicResourcesArgs: `bindingTimeout` (a duration, default 10m)."""
        timeout = BINDING_TIMEOUT_SECONDS
        for k, v in args.items():
            if k != "bindingTimeout":
                raise PluginArgsError(str(k), "unknown field")
            got = parse_duration(v)
            if got is None or got <= 0:
                raise PluginArgsError(
                    "bindingTimeout", f"Invalid value: {v!r}: must be a positive duration"
                )
            timeout = got
        return cls(handle, timeout)

    def _group(self, pod: Pod) -> PodGroup | None:
        """The pod's native PodGroup when it has claims of its own."""
        key = pod.group_key
        if key is None:
            return None
        g = self.handle.lister.pod_group(key)
        return g if g is not None and g.resource_claims else None

    # ---- PreEnqueue / PreFilter ------------------------------------------------------

    def pre_enqueue(self, pod: Pod) -> Status:
        if not pod.resource_claims:
            return SUCCESS
        _, why = pod_claims(self.store, pod, self._group(pod))
        if why:
            return unresolvable(why, plugin=NAME)
        return SUCCESS

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        extended = extended_requests(self.store, pod)
        if not pod.resource_claims and not extended:
            return None, SKIP
        claims, why = pod_claims(self.store, pod, self._group(pod))
        if why:
            return None, unresolvable(why, plugin=NAME)
        allocated, pending = [], []
        consumers = {c.key: who for c, who in claims}
        for c, who in claims:
            if c.allocation is not None:
                if who not in c.reserved_for and len(c.reserved_for) >= RESERVED_FOR_MAX:
                    return None, unresolvable(IN_USE, plugin=NAME)
                allocated.append(c)
            else:
                for r in c.requests:
                    for alt in r.alternatives:
                        if self.store.device_class(alt.device_class) is None:
                            return None, unresolvable(
                                f"request {alt.name}: device class {alt.device_class} "
                                "does not exist",
                                plugin=NAME,
                            )
                pending.append(c)
        binding = frozenset(
            c.key
            for c in allocated
            if isinstance(ready := binding_ready(c), str)
            or (not ready and binding_timed_out(c, self.handle.clock.now(), self.binding_timeout))
        )
        state.write(
            _STATE_KEY,
            _State(
                allocated,
                pending,
                consumers,
                extended,
                binding=binding,
                stale_extended=self._stale_extended(pod) if extended else "",
                prioritized=any(
                    r.first_available for c in (*allocated, *pending) for r in c.requests
                ),
            ),
        )
        return None, SUCCESS

    def _stale_extended(self, pod: Pod) -> str:
        """The claim for the pod's extended resources that its status names and
        that still exists, made by an attempt that did not bind the pod."""
        status = pod.raw.get("status")
        ext = status.get("extendedResourceClaimStatus") if isinstance(status, Mapping) else None
        name = ext.get("resourceClaimName") if isinstance(ext, Mapping) else None
        if not isinstance(name, str) or not name:
            return ""
        key = f"{pod.namespace}/{name}"
        return key if self.store.api_claim(key) is not None else ""

    def _pending_on(
        self, s: _State, pod: Pod, nodes: NodeTable, row: int
    ) -> tuple[list[ResourceClaim], tuple[ExtendedRequest, ...]]:
        """The claims to allocate on the node: the pod's unallocated ones, and one
        for the backed extended resources the node does not list itself."""
        if not s.extended:
            return s.pending, ()
        here = tuple(
            r
            for r in s.extended
            if (c := nodes.col.get(r.resource)) is None or int(nodes.allocatable[row, c]) <= 0
        )
        if not here:
            return s.pending, ()
        return [*s.pending, claim_for(pod, here)], here

    # ---- Filter ----------------------------------------------------------------------

    def filter_node(self, state: CycleState, pod: Pod, nodes: NodeTable, row: int) -> Status:
        s = state.read(_STATE_KEY, _State)
        if s.stale_extended:
            return Status(Code.UNSCHEDULABLE, ("cannot schedule extended resource claim",), NAME)
        name = nodes.names[row]
        node = nodes.node_objs[row]
        labels = node.labels if node is not None else {}
        for c in s.allocated:
            sel = c.allocation.node_selector if c.allocation is not None else None
            if (sel is not None and not node_selector_matches(sel, labels, name)) or (
                # Its devices' binding failed or timed out: not usable as allocated.
                s.binding and c.key in s.binding
            ):
                s.unavailable[c.key] = None
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (NOT_AVAILABLE,), NAME)
        pending, _ = self._pending_on(s, pod, nodes, row)
        if not pending:
            return SUCCESS
        claims = pending
        if self._trial_node:
            # A gang's trial: the earlier members' claims tried on this node are
            # allocated together with this member's, so that their choice never
            # shuts out a split that fits all of them.
            for c in pending:
                where = self._trial_node.get(c.key)
                if where is not None and where != name:
                    return Status(Code.UNSCHEDULABLE, (NOT_AVAILABLE,), NAME)
            here = self._trial.get(name)
            if here:
                claims = [*here.values(), *(c for c in pending if c.key not in here)]
        # Only a pod with prioritized lists needs to know which subrequests
        # were chosen (its score); the others ask only whether the claims fit.
        build = s.prioritized
        try:
            got = allocate(self.store, claims, name, labels, build=build)
            if got is None:
                released = self._released(nodes, row, name, labels)
                if released:
                    got = allocate(self.store, claims, name, labels, build=build, released=released)
        except AllocationError as e:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (str(e),), NAME)
        if got is None:
            return Status(Code.UNSCHEDULABLE, (CANNOT_ALLOCATE,), NAME)
        if build:
            by_key = {c.key: a for c, a in zip(claims, got, strict=True)}
            s.scores[name] = compute_score(
                [*s.allocated, *pending], [by_key[c.key] for c in pending]
            )
        return SUCCESS

    def _released(
        self, nodes: NodeTable, row: int, name: str, labels: Mapping[str, str]
    ) -> set[str]:
        """Claims holding devices of the node whose every consumer is a pod the
        cache has on this node but the snapshot does not: preemption's dry run
        took them out, and their devices (or shares of devices) go with them, as
        in kube-scheduler, which counts what victims' claims would free."""
        on_node = nodes.pods[row]
        lister = self.handle.lister
        gone: dict[str, bool] = {}
        users = self.store.users
        claim = self.store.claim
        for p in self.store.devices_for(name, labels):
            for key in users(p.id):
                if key in gone:
                    continue
                c = claim(key)
                if c is None:
                    gone[key] = False
                    continue
                g = bool(c.reserved_for)
                for x in c.reserved_for:
                    # A consumer the snapshot still has on the node (every one,
                    # outside a dry run) needs no look in the cache.
                    if x.resource != "pods" or (k := PodKey(f"{c.namespace}/{x.name}")) in on_node:
                        g = False
                        break
                    q = lister.pod(k)
                    if q is None or q.uid != x.uid or q.node_name != name or q.key in on_node:
                        g = False
                        break
                gone[key] = g
        return {key for key, g in gone.items() if g}

    # ---- PreScore / Score ------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Status:
        """Skip unless Filter kept scores: a pod without claims, or whose claims
        have no `firstAvailable` request, or none left to allocate, scores 0
        everywhere in kube-scheduler, which normalises to 0."""
        s = state.get(_STATE_KEY)
        if not isinstance(s, _State) or not s.scores:
            return SKIP
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        """The scores Filter kept for the nodes (0 for a node it did not keep
        one for), as kube-scheduler's Score reads its nodeAllocations."""
        scores = state.read(_STATE_KEY, _State).scores
        names = nodes.names
        return np.fromiter(
            (scores.get(names[r], 0) for r in rows.tolist()), dtype=np.int64, count=len(rows)
        )

    def normalize_score(self, state: CycleState, pod: Pod, scores: Int64Array) -> Int64Array:
        # DefaultNormalizeScore(MaxNodeScore, reverse=false), as kube-scheduler.
        top = int(scores.max()) if len(scores) else 0
        if top == 0:
            return scores
        return scores * 100 // top

    # ---- PostFilter ------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: Pod, filtered: NodeToStatus
    ) -> tuple[str | None, Status]:
        """No node fits: a claim of the pod allocated where it cannot run (or
        whose binding failed) and used by no other pod is given up, so that the
        next attempt allocates it afresh, as kube-scheduler's PostFilter does.
        Never a success: preemption still runs."""
        s = state.get(_STATE_KEY)
        if not isinstance(s, _State) or not (s.allocated or s.pending or s.stale_extended):
            return None, Status(Code.UNSCHEDULABLE, ("no new claims to deallocate",), NAME)
        for key in s.unavailable:
            c = self.store.api_claim(key)
            if c is None or c.allocation is None:
                continue
            if not c.reserved_for or (
                len(c.reserved_for) == 1 and c.reserved_for[0].uid == pod.uid
            ):
                self.handle.spawn(self._deallocate(pod, c))
                return None, Status(
                    Code.UNSCHEDULABLE, ("deallocation of ResourceClaim completed",), NAME
                )
        if s.stale_extended:
            # A claim an earlier attempt made for the pod's extended resources:
            # deleted, and the next attempt makes one anew.
            self.handle.spawn(self._delete_extended(pod, s.stale_extended))
            return None, Status(Code.UNSCHEDULABLE, ("deletion of ResourceClaim completed",), NAME)
        return None, Status(Code.UNSCHEDULABLE, ("still not schedulable",), NAME)

    async def _deallocate(self, pod: Pod, claim: ResourceClaim) -> None:
        try:
            await self.handle.client.patch_resource_claim(
                claim.key,
                {
                    "metadata": {"resourceVersion": claim.resource_version},
                    "status": {"allocation": None, "reservedFor": None, "devices": None},
                },
                status=True,
            )
            log.info("deallocated resourceclaim %s for %s", claim.key, pod.key)
        except Exception as e:
            log.warning("could not deallocate resourceclaim %s for %s: %s", claim.key, pod.key, e)

    # ---- a group trial's charge ------------------------------------------------------

    def charge(self, state: CycleState, pod: Pod, node: str) -> Callable[[], None] | None:
        """While a gang's members are tried one after another, this member's
        claims are held on `node` (not its devices: the claims of every member
        tried there are allocated together, each time one more joins, and the
        joint choice is what Reserve takes); undone when the trial ends."""
        s = state.get(_STATE_KEY)
        if not isinstance(s, _State):
            return None
        pending, _ = self._pending_at(s, pod, node)
        if not pending:
            return None
        if not self._trial_node:
            self._plan.clear()  # a new trial: older plans were taken or dropped
        here = self._trial.setdefault(node, {})
        added = [c for c in pending if c.key not in here]
        for c in added:
            here[c.key] = self.store.claim(c.key) or c
            self._trial_node[c.key] = node
        got = self._allocate_on(list(here.values()), node)
        if isinstance(got, list):
            for c, a in zip(here.values(), got, strict=True):
                self._plan[c.key] = (node, a)

        def undo() -> None:
            for c in added:
                self._trial_node.pop(c.key, None)
                here.pop(c.key, None)
            if not here:
                self._trial.pop(node, None)

        return undo

    def _pending_at(
        self, s: _State, pod: Pod, node: str
    ) -> tuple[list[ResourceClaim], tuple[ExtendedRequest, ...]]:
        snapshot = self.handle.snapshot()
        row = snapshot.row_of.get(node)
        if row is None:
            return s.pending, ()
        return self._pending_on(s, pod, snapshot, row)

    def _allocate_on(self, claims: list[ResourceClaim], node: str) -> list[Allocation] | Status:
        snapshot = self.handle.snapshot()
        row = snapshot.row_of.get(node)
        node_obj = snapshot.node_objs[row] if row is not None else None
        labels = node_obj.labels if node_obj is not None else {}
        try:
            got = allocate(self.store, claims, node, labels)
        except AllocationError as e:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (str(e),), NAME)
        if got is None:
            return Status(Code.UNSCHEDULABLE, (CANNOT_ALLOCATE,), NAME)
        return got

    # ---- Reserve / Unreserve ---------------------------------------------------------

    def reserve(self, state: CycleState, pod: Pod, node: str) -> Status:
        s = state.get(_STATE_KEY)
        if not isinstance(s, _State):
            return SUCCESS
        mine, s.extended_used = self._pending_at(s, pod, node)
        pending = [self.store.claim(c.key) or c for c in mine]
        # A claim allocated since PreFilter (a gang's member that shares it).
        fresh = [c for c in pending if c.allocation is None]
        allocations: list[Allocation] = []
        if fresh:
            planned = self._planned(fresh, node)
            if planned is None:
                got = self._allocate_on(fresh, node)
                if isinstance(got, Status):
                    return got
                planned = got
            allocations = planned
        for c, a in zip(fresh, allocations, strict=True):
            s.allocations[c.key] = a
            self._assume(s, replace(c, allocation=a), pod)
        for c in [*s.allocated, *(c for c in pending if c.allocation is not None)]:
            self._assume(s, self.store.claim(c.key) or c, pod)
        return SUCCESS

    def _planned(self, claims: list[ResourceClaim], node: str) -> list[Allocation] | None:
        """The allocations a gang's trial chose for the claims on `node`, if
        there is one for each and its devices are still free."""
        out = []
        used = self.store.used
        for c in claims:
            plan = self._plan.pop(c.key, None)
            if plan is None or plan[0] != node:
                return None
            a = plan[1]
            if any(r.device_id in used for r in a.results if not r.admin_access):
                return None
            out.append(a)
        return out

    def _assume(self, s: _State, claim: ResourceClaim, pod: Pod) -> None:
        claim = _reserved(claim, s.consumers.get(claim.key) or Consumer("pods", pod.name, pod.uid))
        s.assumed[claim.key] = claim
        self.store.assume(claim)

    def unreserve(self, state: CycleState, pod: Pod, node: str) -> None:
        s = state.get(_STATE_KEY)
        if not isinstance(s, _State) or not s.assumed:
            return
        for key in s.assumed:
            self.store.restore(key)
        s.assumed = {}
        if s.written:
            written, s.written = s.written, {}
            self.handle.spawn(self._undo(pod, written))
        if s.extended_created:
            created, s.extended_created = s.extended_created, ""
            self.handle.spawn(self._delete_extended(pod, created))

    async def _delete_extended(self, pod: Pod, key: str) -> None:
        """The claim made for a pod's extended resources, when the pod did not
        bind: deleted (a new attempt makes a new one), as kube-scheduler does."""
        try:
            await self._delete_claim(key)
            await self.handle.client.set_extended_resource_claim_status(pod.key, None)
        except Exception as e:
            log.warning("could not delete the claim %s made for %s: %s", key, pod.key, e)

    async def _delete_claim(self, key: str) -> None:
        """Delete a claim Troupe made, as kube-scheduler's deleteClaim: its
        delete-protection finalizer first (else the claim would stay, with its
        devices, marked for deletion), retried on a conflict."""
        client = self.handle.client
        for attempt in range(_WRITE_ATTEMPTS):
            obj = await client.read_resource_claim(key)
            if obj is None:
                return
            md = obj.get("metadata") or {}
            finalizers = list(md.get("finalizers") or [])
            if FINALIZER in finalizers:
                rest = [f for f in finalizers if f != FINALIZER]
                try:
                    await client.patch_resource_claim(
                        key,
                        {
                            "metadata": {
                                "resourceVersion": md.get("resourceVersion"),
                                "finalizers": rest or None,
                            }
                        },
                    )
                except Conflict:
                    if attempt == _WRITE_ATTEMPTS - 1:
                        raise
                    continue
            await client.delete_resource_claim(key)
            return

    # ---- PreBind ---------------------------------------------------------------------

    async def pre_bind(self, state: CycleState, pod: Pod, node: str) -> Status:
        s = state.get(_STATE_KEY)
        if not isinstance(s, _State) or not s.assumed:
            return SUCCESS
        extended = placeholder_key(pod)
        for key in list(s.assumed):
            ours = s.allocations.get(key)
            if key == extended and ours is not None:
                try:
                    await self._create_extended(pod, s, ours)
                except Exception as e:
                    return error(f"claim for extended resources: {e}", plugin=NAME)
                continue
            who = s.consumers.get(key) or Consumer("pods", pod.name, pod.uid)
            try:
                await self._write(pod, key, ours, who)
            except Exception as e:
                return error(f"binding claim {key}: {e}", plugin=NAME)
            s.written[key] = (ours is not None, who)
        keys = [*(c.key for c in s.allocated), *s.written]
        if any(_has_binding_conditions(self.store.claim(k)) for k in keys):
            return await self._wait_for_binding(pod, node, keys)
        return SUCCESS

    async def _wait_for_binding(self, pod: Pod, node: str, keys: Sequence[str]) -> Status:
        """Devices with binding conditions: wait until the driver reports them
        all True in the claims' status.devices (the pod binds then), one of
        their failure conditions True or the binding timeout (an error: the pod
        is tried again, and its claims given up), as kube-scheduler's PreBind."""
        self.handle.spawn(
            self._event(
                pod,
                "BindingConditionsPending",
                f"waiting for binding conditions for device on node {node}",
            )
        )
        clock = self.handle.clock
        deadline = clock.now() + self.binding_timeout
        while True:
            waiting = False
            for key in keys:
                c = self.store.claim(key)
                if c is None:
                    return error(f"resourceclaim {key} is gone", plugin=NAME)
                ready = binding_ready(c)
                if isinstance(ready, str):
                    return error(ready, plugin=NAME)
                if not ready:
                    if binding_timed_out(c, clock.now(), self.binding_timeout):
                        return error(f"claim {c.name} binding timeout", plugin=NAME)
                    waiting = True
            if not waiting:
                return SUCCESS
            if clock.now() >= deadline:
                return error("device binding timeout", plugin=NAME)
            await self._store_change(min(deadline, clock.now() + 5.0))

    async def _event(self, pod: Pod, reason: str, message: str) -> None:
        ref = ObjectRef("Pod", pod.namespace, pod.name, pod.uid)
        try:
            await self.handle.client.record_event(ref, "Normal", reason, message, "Scheduling")
        except Exception as e:
            log.warning("could not record the %s event of %s: %s", reason, pod.key, e)

    async def _create_extended(self, pod: Pod, s: _State, allocation: Allocation) -> None:
        """The claim for the pod's extended resources that DRA serves on its
        node, as kube-scheduler makes it: created, allocated and reserved for
        the pod, and named in the pod's status.extendedResourceClaimStatus."""
        client = self.handle.client
        created = await client.create_resource_claim(
            pod.namespace, claim_body(pod, s.extended_used)
        )
        md = created.get("metadata") or {}
        name = str(md.get("name") or "")
        key = f"{pod.namespace}/{name}"
        s.extended_created = key
        status = {
            "allocation": dict(allocation.raw),
            "reservedFor": [_consumer_body(Consumer("pods", pod.name, pod.uid))],
        }
        got = await client.patch_resource_claim(
            key,
            {"metadata": {"resourceVersion": md.get("resourceVersion")}, "status": status},
            status=True,
        )
        await client.set_extended_resource_claim_status(pod.key, status_body(name, s.extended_used))
        # The claim now holds the devices under its own name, as the API
        # answered (older watch events of it change nothing).
        claim = self._answer(got)
        self.store.written(claim)
        placeholder = placeholder_key(pod)
        self.store.restore(placeholder)
        s.assumed.pop(placeholder, None)
        s.assumed[key] = claim

    async def _write(self, pod: Pod, key: str, ours: Allocation | None, who: Consumer) -> None:
        """The claim allocated (when `ours`) and reserved for `who` (the pod or
        its PodGroup), retried on a conflict against the claim as the API has it
        then. The device store holds the allocation assumed at Reserve until the
        last write returns, then the API's answer."""
        client = self.handle.client
        if ours is None:
            await self._wait_allocated(key)
        base = self.store.api_claim(key)
        obj: Mapping[str, Any] | None = None
        for attempt in range(_WRITE_ATTEMPTS):
            if base is None or attempt:
                obj = await client.read_resource_claim(key)
                if obj is None:
                    raise NotFound(f"resourceclaim {key} is gone")
                base = _read_claim(obj)
            try:
                self.store.written(await self._write_once(base, ours, who))
                return
            except Conflict:
                if attempt == _WRITE_ATTEMPTS - 1:
                    raise
                log.info("conflict writing resourceclaim %s for %s; reading it again", key, pod.key)

    async def _wait_allocated(self, key: str) -> None:
        """A claim this pod shares with another whose binding cycle allocates it
        (a gang's members): wait until that allocation is written and back
        through the watch, as long as it is still in flight (at most
        ALLOCATION_WAIT_SECONDS)."""
        clock = self.handle.clock
        deadline = clock.now() + ALLOCATION_WAIT_SECONDS
        while True:
            api = self.store.api_claim(key)
            if api is not None and api.allocation is not None:
                return
            mine = self.store.claim(key)
            if mine is None or mine.allocation is None or clock.now() >= deadline:
                return  # nothing in flight any more: the write says what is wrong
            await self._store_change(min(deadline, clock.now() + 1.0))

    async def _store_change(self, at: float) -> None:
        """Until the device store changes (a watch event) or the clock reaches `at`."""
        ev = asyncio.Event()
        self.store.listeners.append(ev.set)
        timer = self.handle.clock.call_at(at, ev.set)
        try:
            await ev.wait()
        finally:
            timer.cancel()
            self.store.listeners.remove(ev.set)

    async def _write_once(
        self, base: ResourceClaim, ours: Allocation | None, who: Consumer
    ) -> ResourceClaim:
        """One try at the writes; the claim as the API has it after them."""
        client = self.handle.client
        rv = base.resource_version
        status: dict[str, Any] = {}
        if ours is not None:
            if base.allocation is not None:
                if base.allocation.results != ours.results:
                    raise ValueError(
                        f"resourceclaim {base.key} was allocated meanwhile by someone else"
                    )
            else:
                if FINALIZER not in base.finalizers:
                    got = await client.patch_resource_claim(
                        base.key,
                        {
                            "metadata": {
                                "resourceVersion": rv,
                                "finalizers": [*base.finalizers, FINALIZER],
                            }
                        },
                    )
                    rv = str((got.get("metadata") or {}).get("resourceVersion") or rv)
                status["allocation"] = dict(ours.raw)
                if any(r.binding_conditions for r in ours.results):
                    # When the binding conditions' time starts (kube's allocationTimestamp).
                    status["allocation"]["allocationTimestamp"] = rfc3339(self.handle.clock.now())
        elif base.allocation is None:
            raise ValueError(f"resourceclaim {base.key} is no longer allocated")
        if who not in base.reserved_for:
            if len(base.reserved_for) >= RESERVED_FOR_MAX:
                raise ValueError(IN_USE)
            status["reservedFor"] = [
                *(_consumer_body(c) for c in base.reserved_for),
                _consumer_body(who),
            ]
        if not status:
            return base
        got = await client.patch_resource_claim(
            base.key, {"metadata": {"resourceVersion": rv}, "status": status}, status=True
        )
        return self._answer(got)

    def _answer(self, obj: Mapping[str, Any]) -> ResourceClaim:
        """The claim the API answered a write with. When the watch brought that
        very version first (same uid and resourceVersion: one resourceVersion
        is one content), it is the claim the store holds, not read again."""
        md = obj.get("metadata") or {}
        rv = md.get("resourceVersion")
        held = self.store.api_claim(f"{md.get('namespace')}/{md.get('name')}")
        if held is not None and rv and held.resource_version == rv and held.uid == md.get("uid"):
            return held
        return _read_claim(obj)

    async def _undo(self, pod: Pod, written: Mapping[str, tuple[bool, Consumer]]) -> None:
        """What PreBind wrote for a pod that did not bind: the pod out of
        `reservedFor` and, where the allocation was ours and nobody else uses
        the claim, the allocation and the finalizer. A PodGroup's claim stays
        reserved for the group (its other pods use it, or will)."""
        client = self.handle.client
        for key, (allocated, who) in written.items():
            if who.resource != "pods":
                continue
            try:
                obj = await client.read_resource_claim(key)
                if obj is None:
                    continue
                c = _read_claim(obj)
                if who not in c.reserved_for:
                    continue
                rest = [_consumer_body(x) for x in c.reserved_for if x != who]
                status: dict[str, Any] = {"reservedFor": rest or None}
                if allocated and not rest:
                    status["allocation"] = None
                    status["devices"] = None
                got = await client.patch_resource_claim(
                    key,
                    {"metadata": {"resourceVersion": c.resource_version}, "status": status},
                    status=True,
                )
                if allocated and not rest and FINALIZER in c.finalizers:
                    rv = str((got.get("metadata") or {}).get("resourceVersion") or "")
                    await client.patch_resource_claim(
                        key,
                        {
                            "metadata": {
                                "resourceVersion": rv,
                                "finalizers": [f for f in c.finalizers if f != FINALIZER],
                            }
                        },
                    )
            except Exception as e:
                log.warning("could not undo the reservation of %s for %s: %s", key, pod.key, e)

    # ---- queueing hints --------------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        def claim_created(pod: Pod, old: Any, new: Any) -> QueueingHint:
            if not isinstance(new, Pod) or new.key != pod.key:
                return QueueingHint.SKIP
            if isinstance(old, Pod) and old.claim_statuses == new.claim_statuses:
                return QueueingHint.SKIP
            return QueueingHint.QUEUE

        def uses_devices(pod: Pod) -> bool:
            """Claims, or extended resources a DeviceClass backs."""
            return bool(pod.resource_claims) or bool(extended_requests(self.store, pod))

        def claim_changed(pod: Pod, old: Any, new: Any) -> QueueingHint:
            if not uses_devices(pod):
                return QueueingHint.SKIP
            claim = new if isinstance(new, ResourceClaim) else old
            if not isinstance(claim, ResourceClaim):
                return QueueingHint.QUEUE
            if claim.namespace == pod.namespace and claim.name in _names(pod):
                if (
                    isinstance(old, ResourceClaim)
                    and isinstance(new, ResourceClaim)
                    and old.allocation == new.allocation
                    and old.reserved_for == new.reserved_for
                    and old.device_status == new.device_status
                ):
                    # Its status is as it was (a finalizer added): as kube, skip.
                    return QueueingHint.SKIP
                return QueueingHint.QUEUE
            # Another pod's claim: only devices it gives up matter.
            freed = (
                isinstance(old, ResourceClaim)
                and old.allocation is not None
                and (not isinstance(new, ResourceClaim) or new.allocation is None)
            )
            return QueueingHint.QUEUE if freed else QueueingHint.SKIP

        def devices_changed(pod: Pod, old: Any, new: Any) -> QueueingHint:
            return QueueingHint.QUEUE if uses_devices(pod) else QueueingHint.SKIP

        every = ActionType.ADD | ActionType.UPDATE
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.UNSCHEDULED_POD,
                    ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM | ActionType.UPDATE,
                ),
                claim_created,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.RESOURCE_CLAIM, every | ActionType.DELETE),
                claim_changed,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.RESOURCE_SLICE, every), devices_changed
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.DEVICE_CLASS, every), devices_changed),
            # An admin's taint lifted or changed may free devices.
            ClusterEventWithHint(
                ClusterEvent(EventResource.DEVICE_TAINT_RULE, every | ActionType.DELETE),
                devices_changed,
            ),
        ]


def _reserved(claim: ResourceClaim, who: Consumer) -> ResourceClaim:
    """The claim with `who` among its consumers."""
    if who in claim.reserved_for:
        return claim
    return replace(claim, reserved_for=(*claim.reserved_for, who))


def _read_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    c = parse_dra_object("ResourceClaim", obj)
    if isinstance(c, InvalidObject):
        raise ValueError(c.message)
    assert isinstance(c, ResourceClaim)
    return c


def _names(pod: Pod) -> set[str]:
    return {n for i in range(len(pod.resource_claims)) if (n := claim_name(pod, i))}


def _consumer_body(c: Consumer) -> dict[str, str]:
    body = {"resource": c.resource, "name": c.name, "uid": c.uid}
    if c.api_group:
        body["apiGroup"] = c.api_group
    return body


__all__ = ["NAME", "DynamicResources", "PodKey", "compute_score"]
