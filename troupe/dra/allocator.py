"""The structured-parameters allocator: devices for a pod's unallocated claims
on one node, as kube's dynamic-resource-allocation/structured allocator picks
them.

For each claim in order, each request in order (a `firstAvailable` request
tries its alternatives in the order given), the devices are taken from those
published for the node (`DeviceStore.slices_for`) that

- the request's DeviceClass selectors and the request's own selectors select
  (CEL; an expression that fails on a device fails the allocation with its
  error, as kube does),
- are not in use by an allocated or in-flight claim, nor taken by an earlier
  request of this allocation (admin access takes devices in use, and is not
  counted as using them),
- tolerate the device's NoSchedule and NoExecute taints,
- fit what is left of their pool's shared counters (partitionable devices:
  what allocated devices and the devices taken so far use; a pool whose
  counters are inconsistent gives nothing),
- for a device claims share (`allowMultipleAllocations`), have the capacity
  the request asks for left after the other shares, the amount rounded up to
  what the capacity's request policy allows (each share records its shareID
  and what it consumed; the device uses its counters once, with its first
  share).

`ExactCount` takes `count` devices. `All` takes every device the request's
selectors select on the node, at least one: "all" is fixed before the search
(kube's allDevices), so a device in use, or with a taint the request does not
tolerate, rules the node out instead of making "all" smaller; the node's pools
must be complete and valid. A claim gets at most 32 devices
(`resourceapi.AllocationResultsMaxSize`): a claim whose requests ask more at
least (each request's smallest alternative; "all" as many as the node has) is
refused with kube's message, and an alternative that would take the claim past
the limit is not tried. `matchAttribute` constraints hold across the devices
of the requests they name (every request when none are named): each device has
the attribute, all with one value; `distinctAttribute` ones make the values all
differ. When a choice leaves a later request or a constraint unsatisfiable the
search backs up and tries the next device, as kube's allocator does, within a
bound on the steps taken (kube bounds it by time). The search keeps its own
stack (one frame a request), so how deep it goes costs no Python recursion.

Devices with binding conditions are taken from their pools last; their
results carry the conditions, which PreBind waits for.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from troupe.api.quantity import format_quantity
from troupe.api.selectors import parse_node_selector
from troupe.api.taints import DO_NOT_SCHEDULE_EFFECTS
from troupe.dra.cel import CelError
from troupe.dra.store import DeviceStore, Published, device_on_node
from troupe.dra.types import (
    ALL,
    Allocation,
    AllocationResult,
    AttributeValue,
    CapacityPolicy,
    CounterUse,
    DeviceID,
    ExactRequest,
    ResourceClaim,
    ResourceSlice,
    qualified,
)

MAX_STEPS: Final = 20_000
# resourceapi.AllocationResultsMaxSize: the devices of one claim's allocation.
ALLOCATION_RESULTS_MAX: Final = 32
CANNOT_ALLOCATE: Final = "cannot allocate all claims"
_SHARE_NAMESPACE: Final = uuid.UUID("6b1d6f0e-52a4-4c0e-9f57-2f5a1c9a4e11")


class AllocationError(Exception):
    """The claims cannot be allocated on any node, for a reason that names it
    (a missing class, a selector that fails)."""


@dataclass(slots=True)
class _Slot:
    """One request of a claim: its alternatives with the node's devices each
    could take."""

    claim: int
    request: int
    alternatives: tuple[tuple[ExactRequest, Sequence[Published]], ...]
    # How many devices each alternative takes (its count; for "all", how many).
    sizes: tuple[int, ...]
    # The fewest devices the claim's later requests take.
    rest: int = 0


@dataclass(slots=True)
class _Taken:
    """One device taken for a request while the search goes on: its share of
    the device's capacity (devices claims share) and the counters it uses."""

    device: Published
    share: dict[str, Fraction] | None
    counters: tuple[CounterUse, ...]


@dataclass(slots=True)
class _Frame:
    """Where the search stands in one request: the alternative being tried,
    the devices it may take (`free`) and those taken (at which index of
    `free`); `done` once they serve the whole request and the search has gone
    on to the next one."""

    slot: _Slot
    alt: int = -1
    free: Sequence[Published] = ()
    mine: set[DeviceID] = field(default_factory=set)
    took: list[_Taken] = field(default_factory=list)
    at: list[int] = field(default_factory=list)
    done: bool = False


@dataclass(slots=True)
class _Search:
    store: DeviceStore
    claims: Sequence[ResourceClaim]
    slots: list[_Slot]
    taken: set[DeviceID] = field(default_factory=set)
    # claim index -> request name -> chosen devices
    chosen: list[dict[str, list[Published]]] = field(default_factory=list)
    picked: list[list[tuple[ExactRequest, list[_Taken]]]] = field(default_factory=list)
    # claim index -> how many devices its requests took so far
    devices: list[int] = field(default_factory=list)
    steps: int = 0
    # Claims whose devices count as free (their pods are preemption's victims).
    released: AbstractSet[str] = frozenset()
    # Shares of devices claims share, taken in this search.
    sharing: dict[DeviceID, list[dict[str, Fraction]]] = field(default_factory=dict)
    # (driver, pool) -> counter set -> counter -> used by devices taken in this search
    counting: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = field(default_factory=dict)
    # (driver, pool) -> what allocated devices left of its counters, or why it is invalid
    left: dict[tuple[str, str], Mapping[str, Mapping[str, Fraction]] | str] = field(
        default_factory=dict
    )
    # The pools of the node's slices.
    pools: tuple[tuple[str, str], ...] = ()

    def in_use(self, d: DeviceID) -> bool:
        return self.store.in_use(d, self.released)

    def pool_left(self, d: DeviceID) -> Mapping[str, Mapping[str, Fraction]] | str:
        key = (d.driver, d.pool)
        got = self.left.get(key)
        if got is None:
            got = self.left[key] = self.store.counters_left(d.driver, d.pool, self.released)
        return got


def node_selector_term(node: str) -> dict[str, Any]:
    """The allocation's node selector for node-local devices (kube's)."""
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def _selected(store: DeviceStore, exprs: tuple[str, ...], p: Published, where: str) -> bool:
    for i, expr in enumerate(exprs):
        got = store.selects(expr, p)
        if isinstance(got, CelError):
            raise AllocationError(f"{where}: selector #{i}: {got}")
        if not got:
            return False
    return True


def _candidates(
    store: DeviceStore,
    claim: ResourceClaim,
    req: ExactRequest,
    slices: Sequence[ResourceSlice],
    node: str,
    labels: Mapping[str, str],
) -> Sequence[Published]:
    """The devices of `slices` the request could take on the node, in use or
    not (what a slice says is remembered per class version, selectors and
    tolerations; the whole list for the node's own slices too). For `All`,
    every device the selectors select, tainted or not: "all" does not shrink
    with taints (kube's allDevices); the search then checks them."""
    cls = store.device_class(req.device_class)
    if cls is None:
        raise AllocationError(
            f"claim {claim.key}, request {req.name}: could not retrieve device class "
            f'{req.device_class}: deviceclass.resource.k8s.io "{req.device_class}" not found'
        )
    every = req.mode == ALL
    key = (cls.name, cls.resource_version, req.selectors, ALL if every else req.tolerations)
    got = store.node_matches(node, key)
    if got is not None:
        return got  # Filter's common case, once per node and pod: nothing more to build
    where = f"claim {claim.key}"

    def admits(p: Published) -> bool:
        if not _selected(store, cls.selectors, p, f"class {cls.name}"):
            return False
        if not _selected(store, req.selectors, p, where):
            return False
        return every or not _untolerated(store, p, req)

    out: list[Published] = []
    for s in slices:
        found = store.matching(s, key, admits)
        if s.per_device:
            found = tuple(p for p in found if device_on_node(p.device, node, labels))
        out.extend(found)
    if store.incomplete_pools:
        # A driver in the middle of publishing a pool: nothing is taken from it.
        gone = store.incomplete_pools
        out = [p for p in out if (p.id.driver, p.id.pool) not in gone]
    if store.binding_pools:
        # Pools whose devices need binding conditions come last (kube's
        # allocator tries them only when no other pool serves).
        late = store.binding_pools
        out.sort(key=lambda p: (p.id.driver, p.id.pool) in late)
    store.remember_node_matches(node, key, slices, out)
    return out


def _untolerated(store: DeviceStore, p: Published, req: ExactRequest) -> bool:
    """Whether the device has a NoSchedule or NoExecute taint the request does
    not tolerate (kube's taintPreventsAllocation)."""
    return any(
        t.effect in DO_NOT_SCHEDULE_EFFECTS and not any(tol.tolerates(t) for tol in req.tolerations)
        for t in store.taints(p)
    )


def _within_limit(claim: ResourceClaim, fewest: int) -> None:
    if fewest > ALLOCATION_RESULTS_MAX:
        raise AllocationError(
            f"claim {claim.key}: number of requested devices {fewest} exceeds the claim limit "
            f"of {ALLOCATION_RESULTS_MAX}"
        )


def _fewest_counted(claim: ResourceClaim) -> int:
    """The fewest devices the claim's requests take, "all" not counted (how
    many that is depends on the node)."""
    return sum(min(0 if a.mode == ALL else a.count for a in r.alternatives) for r in claim.requests)


def allocate(
    store: DeviceStore,
    claims: Sequence[ResourceClaim],
    node: str,
    labels: Mapping[str, str],
    taken: set[DeviceID] | None = None,
    build: bool = True,
    released: AbstractSet[str] = frozenset(),
) -> list[Allocation] | None:
    """One allocation per claim on `node`, or None when they do not all fit.
    `taken`: devices that other claims being allocated in the same decision
    hold already. `build` False: only whether they fit (an empty list), as
    Filter asks. `released`: claims whose devices count as free (preemption's
    dry run: the pods holding them are the victims). AllocationError when a
    claim can never be allocated as it stands (one asking more devices than a
    claim can have among them, as kube checks before it searches)."""
    slices = store.slices_for(node, labels)
    if not slices:
        for claim in claims:
            _within_limit(claim, _fewest_counted(claim))
        return None
    if not build and not taken and len(claims) == 1:
        lone = _lone_request(claims[0])
        if lone is not None:
            if lone.count > ALLOCATION_RESULTS_MAX:  # inline: Filter asks it per node
                _within_limit(claims[0], lone.count)
            fits = _enough_free(store, claims[0], lone, slices, node, labels, released)
            if fits is not None:
                return [] if fits else None
    search = _Search(
        store,
        claims,
        [],
        set(taken or ()),
        released=released,
        pools=tuple(dict.fromkeys((s.driver, s.pool) for s in slices)),
    )
    for ci, claim in enumerate(claims):
        _within_limit(claim, _fewest_counted(claim))
        first = len(search.slots)
        for ri, r in enumerate(claim.requests):
            alts = []
            sizes = []
            for alt in r.alternatives:
                cands = _candidates(store, claim, alt, slices, node, labels)
                if alt.mode == ALL:
                    cands = _all_devices(search, claim, alt, cands)
                alts.append((alt, cands))
                sizes.append(len(cands) if alt.mode == ALL else alt.count)
            search.slots.append(_Slot(ci, ri, tuple(alts), tuple(sizes)))
        rest = 0
        for slot in reversed(search.slots[first:]):
            slot.rest = rest
            rest += min(slot.sizes)
        _within_limit(claim, rest)
    search.chosen = [{} for _ in claims]
    search.picked = [[] for _ in claims]
    search.devices = [0] * len(claims)
    if not _search(search):
        return None
    if not build:
        return []
    return [_allocation(store, claim, search.picked[ci], node) for ci, claim in enumerate(claims)]


def _enough_free(
    store: DeviceStore,
    claim: ResourceClaim,
    lone: ExactRequest,
    slices: Sequence[ResourceSlice],
    node: str,
    labels: Mapping[str, str],
    released: AbstractSet[str],
) -> bool | None:
    """One request for some devices of one kind and nothing binding them
    together: whether it fits is whether enough of them are free. None when
    that is not the question (devices that share counters or capacity)."""
    used = store.used
    need = lone.count
    cands = _candidates(store, claim, lone, slices, node, labels)
    if store.plain:
        for p in cands:
            if (d := p.id) not in used or (released and not store.in_use(d, released)):
                need -= 1
                if not need:
                    return True
        return False
    partitioned = store.partitioned
    for p in cands:
        if p.device.multi or p.device.policies:
            return None
        if need > 1 and (p.id.driver, p.id.pool) in partitioned:
            return None  # which devices fit together is a search
    for p in cands:
        d = p.id
        if d in used and not (released and not store.in_use(d, released)):
            continue
        if (d.driver, d.pool) in partitioned:
            # One device: it fits if what its pool's counters have left covers it.
            left = store.counters_left(d.driver, d.pool, released)
            if isinstance(left, str) or not _covers(left, p.device.consumes):
                continue
        need -= 1
        if not need:
            return True
    return False


def _covers(left: Mapping[str, Mapping[str, Fraction]], uses: Sequence[CounterUse]) -> bool:
    for use in uses:
        have = left.get(use.counter_set, {})
        for c, q in use.counters.items():
            if q > have.get(c, 0):
                return False
    return True


def _allocation(
    store: DeviceStore,
    claim: ResourceClaim,
    picked: Sequence[tuple[ExactRequest, list[_Taken]]],
    node: str,
) -> Allocation:
    results: list[AllocationResult] = []
    node_local = False
    selectors: list[Mapping[str, Any]] = []
    for alt, took in picked:
        for t in took:
            p = t.device
            share = ""
            if t.share is not None:
                share = str(
                    uuid.uuid5(_SHARE_NAMESPACE, f"{claim.uid}/{alt.name}/{p.id}/{len(results)}")
                )
            results.append(
                AllocationResult(
                    alt.name,
                    p.id.driver,
                    p.id.pool,
                    p.id.device,
                    alt.admin_access,
                    share_id=share,
                    consumed=t.share or {},
                    binding_conditions=p.device.binding_conditions,
                    binding_failure_conditions=p.device.binding_failure_conditions,
                )
            )
            node_local = node_local or p.node_local
            where = p.node_selector
            if where is not None:
                selectors.append(where)
    raw_sel: Any = None
    if node_local:
        # Once there is any device of the node's own, the selector is that node.
        raw_sel = node_selector_term(node)
    elif selectors:
        # Network-attached devices: where all their slices reach.
        raw_sel = _union(selectors)
    sel = parse_node_selector(raw_sel, "nodeSelector") if raw_sel is not None else None
    bodies = []
    alts = [alt for alt, took in picked for _ in took]
    for r, t, alt in zip(results, (t for _, took in picked for t in took), alts, strict=True):
        body = _result_body(r)
        if alt.tolerations_raw:
            # The tolerations the device was allocated with (kube writes them).
            body["tolerations"] = [dict(x) for x in alt.tolerations_raw]
        if t.share is not None:
            published = t.device.device.published
            body["consumedCapacity"] = {
                published.get(name, name): format_quantity(q) for name, q in t.share.items()
            }
        bodies.append(body)
    raw: dict[str, Any] = {"devices": {"results": bodies}}
    config = _config(store, claim, [(alt, [t.device for t in took]) for alt, took in picked])
    if config:
        raw["devices"]["config"] = config
    if raw_sel is not None:
        raw["nodeSelector"] = raw_sel
    return Allocation(tuple(results), sel, raw=raw)


def _union(selectors: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One node selector that all of `selectors` admit, as kube's allocator
    makes it: the requirements of their single terms joined in one term (a
    selector of several terms is taken as it is when it is the only kind)."""
    expressions: list[Any] = []
    fields: list[Any] = []
    seen = set()
    for sel in selectors:
        terms = sel.get("nodeSelectorTerms") or []
        if len(terms) != 1:
            return dict(sel)
        for kind, into in (("matchExpressions", expressions), ("matchFields", fields)):
            for req in terms[0].get(kind) or []:
                key = (kind, repr(req))
                if key not in seen:
                    seen.add(key)
                    into.append(req)
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = expressions
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def _lone_request(claim: ResourceClaim) -> ExactRequest | None:
    """The claim's request when it is its only one, for a count of devices of
    one kind, with no constraint or admin access: then only counting matters."""
    if claim.constraints or len(claim.requests) != 1:
        return None
    alts = claim.requests[0].alternatives
    if len(alts) != 1 or alts[0].mode == ALL or alts[0].admin_access:
        return None
    return alts[0]


def _config(
    store: DeviceStore,
    claim: ResourceClaim,
    picked: Sequence[tuple[ExactRequest, list[Published]]],
) -> list[dict[str, Any]]:
    """The configuration the driver gets with the allocation, as kube's
    allocator copies it: each used class's (FromClass, for the requests that
    used it), then the claim's own (FromClaim)."""
    out: list[dict[str, Any]] = []
    by_class: dict[str, list[str]] = {}
    for alt, _ in picked:
        by_class.setdefault(alt.device_class, []).append(alt.name)
    for name, requests in by_class.items():
        cls = store.device_class(name)
        for c in cls.config if cls is not None else ():
            if c.get("opaque") is not None:
                out.append({"source": "FromClass", "requests": requests, "opaque": c["opaque"]})
    for c in claim.config:
        if c.get("opaque") is not None:
            out.append(
                {
                    "source": "FromClaim",
                    "requests": list(c.get("requests") or []),
                    "opaque": c["opaque"],
                }
            )
    return out


def _result_body(r: AllocationResult) -> dict[str, Any]:
    body: dict[str, Any] = {
        "request": r.request,
        "driver": r.driver,
        "pool": r.pool,
        "device": r.device,
    }
    if r.admin_access:
        body["adminAccess"] = True
    if r.share_id:
        body["shareID"] = r.share_id
    if r.binding_conditions:
        body["bindingConditions"] = list(r.binding_conditions)
    if r.binding_failure_conditions:
        body["bindingFailureConditions"] = list(r.binding_failure_conditions)
    return body


def _attribute(p: Published, name: str) -> AttributeValue | None:
    attrs = p.device.attributes
    return attrs.get(name) if "/" in name else attrs.get(f"{p.device.id.driver}/{name}")


def _constraints_hold(search: _Search, ci: int) -> bool:
    claim = search.claims[ci]
    chosen = search.chosen[ci]
    for c in claim.constraints:
        name = c.match_attribute or c.distinct_attribute
        values: list[AttributeValue] = []
        for req_name, picked in chosen.items():
            base = req_name.partition("/")[0]
            if c.requests and req_name not in c.requests and base not in c.requests:
                continue
            for p in picked:
                v = _attribute(p, name)
                if v is None:
                    return False
                if c.match_attribute:
                    if values and v != values[0]:
                        return False
                elif v in values:
                    return False
                values.append(v)
    return True


def _in_claim(search: _Search, ci: int) -> set[DeviceID]:
    """The devices this claim's earlier requests took (a device serves one
    request of a claim, admin access or not, unless claims share it)."""
    return {p.device.id for ps in search.chosen[ci].values() for p in ps if not p.device.multi}


def _share(
    search: _Search, alt: ExactRequest, p: Published, in_flight: bool = True
) -> dict[str, Fraction] | None:
    """What taking the device for the request takes of each of its capacities
    (kube's consumable capacity: the amount asked, rounded up to what the
    device's request policy allows, else its default, else all of it), or
    None when the device cannot give it: it lacks a capacity asked for, an
    amount breaks its policy, or the device has too little left."""
    dev = p.device
    asked: dict[str, Fraction] = {}
    for name, q in alt.capacity:
        full = qualified(name, dev.id.driver)
        if full not in dev.capacity:
            return None
        asked[full] = q
    before = search.store.consumed(dev.id, search.released) if dev.multi else {}
    now = search.sharing.get(dev.id, ()) if in_flight else ()
    out: dict[str, Fraction] = {}
    for name, total in dev.capacity.items():
        policy = dev.policies.get(name)
        want = asked.get(name)
        took = _consumed(want, total, policy)
        if took < 0:
            raise AllocationError(
                f'claim request {alt.name}: capacity "{name}": capacity value is negative'
            )
        if policy is not None and _violates(took, policy):
            return None
        used = before.get(name, Fraction(0)) + sum(
            (s.get(name, Fraction(0)) for s in now), Fraction(0)
        )
        if used + took > total:
            return None
        out[name] = took
    return out


def _consumed(want: Fraction | None, total: Fraction, policy: CapacityPolicy | None) -> Fraction:
    if want is None:
        return policy.default if policy is not None and policy.default is not None else total
    if policy is None:
        return want
    if policy.min is not None:
        if want < policy.min:
            return policy.min
        if policy.step is None:
            return want
        steps = math.ceil((want - policy.min) / policy.step)
        return policy.min + steps * policy.step
    for v in policy.valid_values:
        if want <= v:
            return v
    return want


def _violates(took: Fraction, policy: CapacityPolicy) -> bool:
    if policy.default is not None and took == policy.default:
        return False
    if policy.min is not None:
        if policy.max is not None and took > policy.max:
            return True
        return policy.step is not None and (took - policy.min) % policy.step != 0
    if policy.valid_values:
        return took not in policy.valid_values
    return False


def _try(
    search: _Search, ci: int, alt: ExactRequest, p: Published, mine: set[DeviceID]
) -> _Taken | None:
    """Take the device for the request if it can be taken now, or None."""
    d = p.id
    dev = p.device
    if dev.multi:
        if not alt.admin_access and search.in_use(d):
            return None
    elif alt.admin_access:
        # Admin access takes devices whoever holds them, other claims being
        # allocated now included; only this claim's own are off limits.
        if d in mine:
            return None
    elif d in search.taken or d in mine or search.in_use(d):
        return None
    store = search.store
    partitioned = store.partitioned and (d.driver, d.pool) in store.partitioned
    left: Mapping[str, Mapping[str, Fraction]] | str = {}
    if partitioned:
        left = search.pool_left(d)
        if isinstance(left, str):
            return None  # an invalid pool gives nothing
    share: dict[str, Fraction] | None = None
    if alt.capacity or dev.multi or dev.policies:
        share = _share(search, alt, p)
        if share is None:
            return None
    counters: tuple[CounterUse, ...] = ()
    # A device claims share uses its counters once, with its first share.
    if dev.consumes and not (
        dev.multi and (d in search.sharing or store.allocated(d, search.released))
    ):
        assert not isinstance(left, str)
        pool = search.counting.setdefault((d.driver, d.pool), {})
        for use in dev.consumes:
            have = left.get(use.counter_set, {})
            used = pool.get(use.counter_set, {})
            for c, q in use.counters.items():
                if used.get(c, Fraction(0)) + q > have.get(c, Fraction(0)):
                    return None
        for use in dev.consumes:
            used = pool.setdefault(use.counter_set, {})
            for c, q in use.counters.items():
                used[c] = used.get(c, Fraction(0)) + q
        counters = dev.consumes
    if dev.multi:
        assert share is not None
        search.sharing.setdefault(d, []).append(share)
    elif not alt.admin_access:
        search.taken.add(d)
    return _Taken(p, share if dev.multi else None, counters)


def _give_back(search: _Search, t: _Taken, admin: bool) -> None:
    d = t.device.id
    if t.share is not None:
        shares = search.sharing[d]
        shares.remove(t.share)
        if not shares:
            del search.sharing[d]
    elif not admin:
        search.taken.discard(d)
    if t.counters:
        pool = search.counting[(d.driver, d.pool)]
        for use in t.counters:
            used = pool[use.counter_set]
            for c, q in use.counters.items():
                used[c] -= q


def _all_devices(
    search: _Search, claim: ResourceClaim, alt: ExactRequest, cands: Sequence[Published]
) -> Sequence[Published]:
    """What "all" is for the request on the node, fixed before the search as
    kube fixes it: every device selected, but those that cannot give the
    capacity the request asks of them. A pool being published or whose
    counters are inconsistent makes it unknowable: an error, as kube's."""
    store = search.store
    where = f"claim {claim.key}, request {alt.name}: asks for all devices, but resource pool"
    for pool in search.pools:
        if pool in store.incomplete_pools:
            raise AllocationError(f"{where} {pool[0]}/{pool[1]} is currently being updated")
        if pool in store.partitioned and isinstance(
            store.counters_left(*pool, search.released), str
        ):
            raise AllocationError(f"{where} {pool[0]}/{pool[1]} is currently invalid")
    if alt.capacity or any(p.device.multi or p.device.policies for p in cands):
        return [
            p
            for p in cands
            if not (alt.capacity or p.device.multi or p.device.policies)
            or _share(search, alt, p, in_flight=False) is not None
        ]
    return cands


def _search(search: _Search) -> bool:
    """Depth first through the slots, one frame a request on a stack of our
    own: a frame that finds a way to serve its request lets the next request
    start; one that has none left is dropped and the frame before it tries its
    next way. False when the first frame runs out, or the steps do."""
    slots = search.slots
    frames: list[_Frame] = []
    while len(frames) < len(slots):
        f = _Frame(slots[len(frames)])
        frames.append(f)
        while not _advance(search, f):
            frames.pop()
            if not frames or search.steps > MAX_STEPS:
                return False
            f = frames[-1]
    return True


def _advance(search: _Search, f: _Frame) -> bool:
    """Move the frame to the next way of serving its request and record it;
    False when there is none left (the frame then holds nothing) or the steps
    ran out (the search is then abandoned as it stands)."""
    slot = f.slot
    ci = slot.claim
    if f.done:
        f.done = False
        alt = slot.alternatives[f.alt][0]
        search.picked[ci].pop()
        search.devices[ci] -= len(f.took)
        if alt.mode == ALL:
            _drop(search, f, alt)
        elif _pick(search, f, alt, _back(search, f, alt)):
            return _record(search, f, alt)
        elif search.steps > MAX_STEPS:
            return False
    while f.alt + 1 < len(slot.alternatives):
        f.alt += 1
        alt, cands = slot.alternatives[f.alt]
        if search.devices[ci] + slot.sizes[f.alt] + slot.rest > ALLOCATION_RESULTS_MAX:
            continue  # the claim would get more devices than it can have
        f.mine = _in_claim(search, ci)
        if alt.mode == ALL:
            found = _take_all(search, f, alt, cands)
        else:
            f.free = _free(search, f, alt, cands)
            found = len(f.free) >= alt.count and _pick(search, f, alt, 0)
        if found:
            return _record(search, f, alt)
        if search.steps > MAX_STEPS:
            return False
    return False


def _record(search: _Search, f: _Frame, alt: ExactRequest) -> bool:
    ci = f.slot.claim
    search.picked[ci].append((alt, f.took))
    search.devices[ci] += len(f.took)
    f.done = True
    return True


def _free(
    search: _Search, f: _Frame, alt: ExactRequest, cands: Sequence[Published]
) -> list[Published]:
    """The candidates not taken: by allocated or in-flight claims, by this
    search, or by the claim's other requests (admin access minds only these)."""
    mine = f.mine
    if alt.admin_access:
        return [p for p in cands if p.device.multi or p.id not in mine]
    taken = search.taken
    if search.released:
        return [
            p
            for p in cands
            if p.device.multi
            or ((d := p.id) not in taken and d not in mine and not search.in_use(d))
        ]
    used = search.store.used
    return [
        p
        for p in cands
        if p.device.multi or ((d := p.id) not in taken and d not in used and d not in mine)
    ]


def _pick(search: _Search, f: _Frame, alt: ExactRequest, j: int) -> bool:
    """Go on choosing `alt.count` of the frame's free devices, in order, from
    index `j` on, backing out of a device when no choice after it can
    complete the request under the claim's constraints. True when the frame
    holds a full choice; False when none is left (the frame holds nothing) or
    the steps ran out."""
    ci = f.slot.claim
    need = alt.count
    free, took, at, mine = f.free, f.took, f.at, f.mine
    chosen = search.chosen[ci]
    while True:
        k = len(took)
        if k == need:
            return True
        if j > len(free) - (need - k):
            if not took:
                return False
            j = _back(search, f, alt)
            continue
        search.steps += 1
        if search.steps > MAX_STEPS:
            return False
        t = _try(search, ci, alt, free[j], mine)
        j += 1
        if t is None:
            continue
        took.append(t)
        at.append(j - 1)
        chosen[alt.name] = [x.device for x in took]
        if not _constraints_hold(search, ci):
            j = _back(search, f, alt)


def _back(search: _Search, f: _Frame, alt: ExactRequest) -> int:
    """Give back the frame's last device; the index of `free` to go on from."""
    _give_back(search, f.took.pop(), alt.admin_access)
    j = f.at.pop() + 1
    chosen = search.chosen[f.slot.claim]
    if f.took:
        chosen[alt.name] = [x.device for x in f.took]
    else:
        chosen.pop(alt.name, None)
    return j


def _drop(search: _Search, f: _Frame, alt: ExactRequest) -> None:
    """Give back every device the frame holds."""
    for t in reversed(f.took):
        _give_back(search, t, alt.admin_access)
    f.took.clear()
    f.at.clear()
    search.chosen[f.slot.claim].pop(alt.name, None)


def _take_all(search: _Search, f: _Frame, alt: ExactRequest, cands: Sequence[Published]) -> bool:
    """Take every device of "all", in order, as kube does: one in use, short
    of counters or capacity, or with a taint the request does not tolerate
    means none (the node cannot serve); one that breaks a constraint of the
    claim is an error (such a claim can never be allocated)."""
    if not cands:
        return False  # "all" is at least one device
    ci = f.slot.claim
    claim = search.claims[ci]
    chosen = search.chosen[ci]
    took = f.took
    for p in cands:
        search.steps += 1
        t = None if _untolerated(search.store, p, alt) else _try(search, ci, alt, p, f.mine)
        if t is None:
            _drop(search, f, alt)
            return False
        took.append(t)
        chosen[alt.name] = [x.device for x in took]
        if not _constraints_hold(search, ci):
            _drop(search, f, alt)
            raise AllocationError(
                f"claim {claim.key}, request {alt.name}: cannot add device {p.id} because a "
                "claim constraint would not be satisfied"
            )
    return True
