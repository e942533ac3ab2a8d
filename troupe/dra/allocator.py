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
- tolerate the device's NoSchedule and NoExecute taints.

`ExactCount` takes `count` devices, `All` every matching device (at least one,
none in use, and the pool must be complete). `matchAttribute` constraints hold
across the devices of the requests they name (every request when none are
named): each device has the attribute, all with one value. When a choice
leaves a later request or a constraint unsatisfiable the search backs up and
tries the next device, as kube's allocator does, within a bound on the steps
taken (kube bounds it by time).

A device or claim using a field the allocator does not handle yet (shared
counters, consumable capacity, distinctAttribute...) is never allocated as if
the field were not there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Final

from troupe.api.selectors import parse_node_selector
from troupe.api.taints import DO_NOT_SCHEDULE_EFFECTS
from troupe.dra.cel import CelError
from troupe.dra.store import DeviceStore, Published
from troupe.dra.types import (
    ALL,
    Allocation,
    AllocationResult,
    AttributeValue,
    DeviceID,
    ExactRequest,
    ResourceClaim,
    ResourceSlice,
)

MAX_STEPS: Final = 20_000
CANNOT_ALLOCATE: Final = "cannot allocate all claims"


class AllocationError(Exception):
    """The claims cannot be allocated on any node, for a reason that names it
    (a missing class, a selector that fails)."""


@dataclass(slots=True)
class _Slot:
    claim: int
    request: int
    alternatives: tuple[tuple[ExactRequest, Sequence[Published]], ...]


@dataclass(slots=True)
class _Search:
    store: DeviceStore
    claims: Sequence[ResourceClaim]
    slots: list[_Slot]
    taken: set[DeviceID] = field(default_factory=set)
    # claim index -> request name -> chosen devices
    chosen: list[dict[str, list[Published]]] = field(default_factory=list)
    picked: list[list[tuple[ExactRequest, list[Published]]]] = field(default_factory=list)
    steps: int = 0
    # Devices in use that count as free (their pods are preemption's victims).
    released: AbstractSet[DeviceID] = frozenset()

    def in_use(self, d: DeviceID) -> bool:
        return d in self.store.used and d not in self.released


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
    node: str = "",
) -> Sequence[Published]:
    """The devices of `slices` the request could take, in use or not (what a
    slice says is remembered per class version, selectors and tolerations; with
    `node`, the whole list for the node's own slices too)."""
    cls = store.device_class(req.device_class)
    if cls is None:
        raise AllocationError(
            f"claim {claim.key}, request {req.name}: could not retrieve device class "
            f'{req.device_class}: deviceclass.resource.k8s.io "{req.device_class}" not found'
        )
    where = f"claim {claim.key}"

    def admits(p: Published) -> bool:
        if p.device.unsupported or p.slice.unsupported:
            return False
        if not _selected(store, cls.selectors, p, f"class {cls.name}"):
            return False
        if not _selected(store, req.selectors, p, where):
            return False
        return not any(
            t.effect in DO_NOT_SCHEDULE_EFFECTS
            and not any(tol.tolerates(t) for tol in req.tolerations)
            for t in p.device.taints
        )

    key = (cls.name, cls.resource_version, req.selectors, req.tolerations)
    if node:
        got = store.node_matches(node, key)
        if got is not None:
            return got
    out: list[Published] = []
    for s in slices:
        out.extend(store.matching(s, key, admits))
    if node:
        store.remember_node_matches(node, key, slices, out)
    return out


def allocate(
    store: DeviceStore,
    claims: Sequence[ResourceClaim],
    node: str,
    labels: Mapping[str, str],
    taken: set[DeviceID] | None = None,
    build: bool = True,
    released: AbstractSet[DeviceID] = frozenset(),
) -> list[Allocation] | None:
    """One allocation per claim on `node`, or None when they do not all fit.
    `taken`: devices that other claims being allocated in the same decision
    hold already. `build` False: only whether they fit (an empty list), as
    Filter asks. `released`: devices in use that count as free (preemption's
    dry run: the pods holding them are the victims). AllocationError when a
    claim can never be allocated as it stands."""
    slices = store.slices_for(node, labels)
    if not slices:
        return None
    if not build and not taken and len(claims) == 1:
        lone = _lone_request(claims[0])
        if lone is not None:
            # One request for some devices of one kind and nothing binding them
            # together: whether it fits is whether enough of them are free.
            used = store.used
            need = lone.count
            for p in _candidates(store, claims[0], lone, slices, node):
                if (d := p.id) not in used or d in released:
                    need -= 1
                    if not need:
                        return []
            return None
    slots = []
    for ci, claim in enumerate(claims):
        for ri, r in enumerate(claim.requests):
            alts = tuple(
                (alt, _candidates(store, claim, alt, slices, node)) for alt in r.alternatives
            )
            slots.append(_Slot(ci, ri, alts))
    search = _Search(store, claims, slots, set(taken or ()), released=released)
    search.chosen = [{} for _ in claims]
    search.picked = [[] for _ in claims]
    if not _fill(search, 0):
        return None
    if not build:
        return []
    out = []
    for ci, _claim in enumerate(claims):
        results = []
        node_local = False
        selectors = []
        for alt, picked in search.picked[ci]:
            for p in picked:
                results.append(
                    AllocationResult(
                        alt.name,
                        p.device.id.driver,
                        p.device.id.pool,
                        p.device.id.device,
                        alt.admin_access,
                    )
                )
                node_local = node_local or p.node_local
                if p.slice.node_selector is not None:
                    selectors.append(p.slice.node_selector)
        raw_sel: Any = None
        sel = None
        if node_local:
            # Once there is any device of the node's own, the selector is that node.
            raw_sel = node_selector_term(node)
        elif selectors:
            # Network-attached devices: where all their slices reach.
            raw_sel = _union(
                [
                    p.slice.node_selector_raw
                    for _, ps in search.picked[ci]
                    for p in ps
                    if p.slice.node_selector is not None
                ]
            )
        if raw_sel is not None:
            sel = parse_node_selector(raw_sel, "nodeSelector")
        raw: dict[str, Any] = {
            "devices": {"results": [_result_body(r) for r in results]},
        }
        config = _config(store, claims[ci], search.picked[ci])
        if config:
            raw["devices"]["config"] = config
        if raw_sel is not None:
            raw["nodeSelector"] = raw_sel
        out.append(Allocation(tuple(results), sel, raw))
    return out


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
    return body


def _attribute(p: Published, name: str) -> AttributeValue | None:
    attrs = p.device.attributes
    return attrs.get(name) if "/" in name else attrs.get(f"{p.device.id.driver}/{name}")


def _constraints_hold(search: _Search, ci: int) -> bool:
    claim = search.claims[ci]
    chosen = search.chosen[ci]
    for c in claim.constraints:
        value: AttributeValue | None = None
        seen = False
        for req_name, picked in chosen.items():
            base = req_name.partition("/")[0]
            if c.requests and req_name not in c.requests and base not in c.requests:
                continue
            for p in picked:
                v = _attribute(p, c.match_attribute)
                if v is None:
                    return False
                if seen and v != value:
                    return False
                value, seen = v, True
    return True


def _free(search: _Search, p: Published, admin: bool) -> bool:
    d = p.device.id
    return admin or (d not in search.taken and not search.in_use(d))


def _fill(search: _Search, i: int) -> bool:
    if i == len(search.slots):
        return True
    slot = search.slots[i]
    for alt, cands in slot.alternatives:
        if _take(search, slot, alt, cands, i):
            return True
        if search.steps > MAX_STEPS:
            return False
    return False


def _in_claim(search: _Search, ci: int) -> set[DeviceID]:
    """The devices this claim's earlier requests took (a device serves one
    request of a claim, admin access or not)."""
    return {p.device.id for ps in search.chosen[ci].values() for p in ps}


def _take(
    search: _Search, slot: _Slot, alt: ExactRequest, cands: Sequence[Published], i: int
) -> bool:
    ci = slot.claim
    claim = search.claims[ci]
    mine = _in_claim(search, ci)
    if alt.mode == ALL:
        if not cands:
            return False
        for p in cands:
            d = p.device.id
            if search.store.pool_incomplete(d.driver, d.pool):
                raise AllocationError(
                    f"claim {claim.key}, request {alt.name}: asks for all devices, but "
                    f"resource pool {d.driver}/{d.pool} is currently being updated"
                )
        if any(p.device.id in mine or not _free(search, p, alt.admin_access) for p in cands):
            return False
        for k in range(1, len(cands) + 1):
            search.chosen[ci][alt.name] = list(cands[:k])
            if not _constraints_hold(search, ci):
                search.chosen[ci].pop(alt.name, None)
                raise AllocationError(
                    f"claim {claim.key}, request {alt.name}: cannot add device "
                    f"{cands[k - 1].device.id} because a claim constraint would not be satisfied"
                )
        search.chosen[ci].pop(alt.name, None)
        return _commit(search, slot, alt, list(cands), i)
    need = alt.count
    taken = search.taken
    if alt.admin_access:
        # Admin access takes devices whoever holds them, other claims being
        # allocated now included; only this claim's own are off limits.
        free = [p for p in cands if p.device.id not in mine]
    elif search.released:
        free = [
            p
            for p in cands
            if (d := p.device.id) not in taken and d not in mine and not search.in_use(d)
        ]
    else:
        used = search.store.used
        free = [
            p for p in cands if (d := p.device.id) not in taken and d not in used and d not in mine
        ]
    if len(free) < need:
        return False
    picked: list[Published] = []

    def pick(start: int) -> bool:
        if len(picked) == need:
            return _commit(search, slot, alt, list(picked), i)
        for j in range(start, len(free) - (need - len(picked)) + 1):
            search.steps += 1
            if search.steps > MAX_STEPS:
                return False
            p = free[j]
            if not alt.admin_access and p.device.id in search.taken:
                continue
            picked.append(p)
            search.chosen[ci][alt.name] = picked
            ok = _constraints_hold(search, ci)
            if ok and pick(j + 1):
                return True
            picked.pop()
            if not picked:
                search.chosen[ci].pop(alt.name, None)
        return False

    return pick(0)


def _commit(
    search: _Search, slot: _Slot, alt: ExactRequest, picked: list[Published], i: int
) -> bool:
    ci = slot.claim
    search.chosen[ci][alt.name] = picked
    if not _constraints_hold(search, ci):
        search.chosen[ci].pop(alt.name, None)
        return False
    # Devices given with admin access stay open to other claims (as kube's allocator).
    ids = [] if alt.admin_access else [p.device.id for p in picked]
    search.taken.update(ids)
    search.picked[ci].append((alt, picked))
    if _fill(search, i + 1):
        return True
    search.picked[ci].pop()
    search.taken.difference_update(ids)
    search.chosen[ci].pop(alt.name, None)
    return False
