"""The device store: DeviceClasses, ResourceSlices and ResourceClaims as the API
has them, the allocations the scheduler assumed on top, and which devices are
in use.

Assumed claims (kube-scheduler's in-flight allocations): Reserve puts a claim
with its new allocation and the pod in `reservedFor` over the API's object
(`assume`); readers (`claim`, `in_use`) see it, so no other pod is given the
same devices while PreBind writes. It stays until PreBind's last write to the
claim has returned (`written`: the API's answer becomes the claim as readers
see it) or Unreserve gives it up (`restore`); no watch event replaces it
meanwhile, since PreBind writes the claim more than once (its finalizer, then
its allocation) and the echo of the first write has no allocation yet. Only
the claim's deletion (or a new claim under its name) drops it. While the API's
version and the assumed one differ, a device either of them allocates is in
use: a device is free only when no view of any claim holds it.

No older view of a claim wins: a version whose resourceVersion is older than
the one held (PreBind's answer can overtake the watch events of the writes
before it) is ignored, as kube's assume cache ignores it.

Devices are read through `devices_for(node)`: the devices of the slices
published for the node by name, by a node selector that matches it or for all
nodes, of each pool's newest generation only (older slices of a pool being
replaced are not used, as in kube's allocator). What each selector says of
each published device is remembered until the slice changes or no claim,
class or DeviceTaintRule held uses the selector: selectors are CEL, and a
slice is read far more often than it changes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from troupe.api.selectors import node_selector_matches
from troupe.api.types import Taint
from troupe.dra.cel import CelError, DeviceEnv, Selector, compile_selector
from troupe.dra.types import (
    Device,
    DeviceClass,
    DeviceID,
    DeviceTaintRule,
    DraObject,
    ResourceClaim,
    ResourceSlice,
)

# How many expressions no held object uses keep their verdicts (see `selects`).
UNOWNED_MAX: Final = 64


def _pool_order(s: ResourceSlice) -> tuple[str, str, str]:
    """Slices in the order kube's allocator gathers pools: by driver and pool."""
    return (s.driver, s.pool, s.name)


@dataclass(frozen=True, slots=True)
class Published:
    """One device as published, with where it came from."""

    device: Device
    slice: ResourceSlice
    index: int  # in slice.devices
    id: DeviceID  # device.id, at hand for the in-use tests

    @property
    def node_local(self) -> bool:
        """Whether an allocation of the device ties the claim to the node."""
        return bool(self.slice.node_name or self.device.node_name or self.device.binds_to_node)

    @property
    def node_selector(self) -> Mapping[str, Any] | None:
        """The node selector (as written) of the nodes that reach the device."""
        if self.slice.per_device:
            return self.device.node_selector_raw if self.device.node_selector is not None else None
        return self.slice.node_selector_raw if self.slice.node_selector is not None else None


def device_on_node(d: Device, node: str, labels: Mapping[str, str]) -> bool:
    """Whether a device of a slice with per-device node selection is usable on the node."""
    if d.node_name:
        return d.node_name == node
    if d.all_nodes:
        return True
    return d.node_selector is not None and node_selector_matches(d.node_selector, labels, node)


def older(rv: str, than: str) -> bool:
    """Whether resourceVersion `rv` is older than `than` (kube's assume cache
    compares them as integers; versions that are not both integers are not
    ordered, and the newer-looking one is taken)."""
    try:
        return int(rv) < int(than)
    except ValueError:
        return False


def selector(expr: str) -> Selector | CelError:
    """The compiled selector, or the error that says why it cannot be."""
    try:
        return compile_selector(expr)
    except CelError as e:
        return e


class DeviceStore:
    def __init__(self) -> None:
        self._classes: dict[str, DeviceClass] = {}
        self._slices: dict[str, ResourceSlice] = {}
        self._claims: dict[str, ResourceClaim] = {}
        self._assumed: dict[str, ResourceClaim] = {}
        self._by_node: dict[str, set[str]] = {}  # node name -> slice names
        self._network: set[str] = set()  # slices with a node selector or for all nodes
        self._generation: dict[tuple[str, str], int] = {}  # (driver, pool) -> newest
        self._pools: dict[tuple[str, str], set[str]] = {}  # (driver, pool) -> slice names
        # Devices in use by allocated claims (as readers see them) -> claim keys.
        self._in_use: dict[DeviceID, set[str]] = {}
        # Claim key -> the versions of it whose allocations are indexed (the
        # API's, the assumed one): what to take out again, without a copy of
        # their device ids per claim.
        self._indexed: dict[str, tuple[ResourceClaim, ...]] = {}
        # Devices claims share (consumable capacity) -> claim key -> what each
        # of its shares takes.
        self._shared: dict[DeviceID, dict[str, list[Mapping[str, Fraction]]]] = {}
        # (driver, pool) -> counter set -> counter -> what allocated devices left
        # of it, or the reason the pool's counters cannot be trusted.
        self._counters: dict[tuple[str, str], dict[str, dict[str, Fraction]] | str] = {}
        # Pools with shared counters (partitionable devices): (driver, pool).
        self.partitioned: set[tuple[str, str]] = set()
        # Slices with counters, devices claims share or request policies.
        self._special: set[str] = set()
        # Pools with devices that need binding conditions: (driver, pool).
        self.binding_pools: set[tuple[str, str]] = set()
        # Pools whose newest generation has another number of slices than it
        # says (a driver publishing it): nothing is allocated from them.
        self.incomplete_pools: set[tuple[str, str]] = set()
        self._local: dict[str, list[ResourceSlice]] = {}  # node -> its slices in use
        # node -> request key -> admitted devices (node-local slices only)
        self._node_matches: dict[str, dict[tuple[object, ...], tuple[Published, ...]]] = {}
        self._published: dict[str, tuple[Published, ...]] = {}
        self._matching: dict[str, dict[tuple[object, ...], tuple[Published, ...]]] = {}
        # What selectors say of published devices: expression -> slice name ->
        # (the slice's resourceVersion, device index -> verdict); see `selects`.
        self._verdicts: dict[str, dict[str, tuple[str, dict[int, bool | CelError]]]] = {}
        self._uses: dict[str, int] = {}  # expression -> held objects whose selector it is
        self._unowned: dict[str, None] = {}  # expressions judged that none uses, oldest first
        # Expressions whose verdicts went, whose request keys `_matching` and
        # `_node_matches` may still hold (dropped in batches: see `_forget`).
        self._dead: set[str] = set()
        self.listeners: list[Callable[[], None]] = []
        self._rules: dict[str, DeviceTaintRule] = {}
        # (slice name, device index) -> (the slice, its taints with the rules')
        self._rule_taints: dict[tuple[str, int], tuple[ResourceSlice, tuple[Taint, ...]]] = {}
        self._extended: dict[str, str] | None = None  # extendedResourceName -> class

    # ---- API objects -----------------------------------------------------------------

    def set(self, obj: DraObject, deleted: bool = False) -> DraObject | None:
        """Store (or, `deleted`, drop) an object from the API; returns the version
        readers saw before, or None."""
        old: DraObject | None
        uses = self._selector_uses(obj)
        if isinstance(obj, ResourceClaim):
            old = self.claim(obj.key)
            if not deleted and self.stale(obj):
                return old  # an older view than the one held changes nothing
            assumed = self._assumed.get(obj.key)
            if assumed is not None and (deleted or assumed.uid != obj.uid):
                self._assumed.pop(obj.key, None)
            if deleted:
                self._claims.pop(obj.key, None)
            else:
                self._claims[obj.key] = obj
            self._reindex_claim(obj.key)
        elif isinstance(obj, ResourceSlice):
            old = self._slices.pop(obj.name, None)
            if old is not None:
                self._unindex_slice(old)
            self._special.discard(obj.name)
            if not deleted:
                self._slices[obj.name] = obj
                self._index_slice(obj)
                if obj.counter_sets or any(
                    d.consumes or d.multi or d.policies for d in obj.devices
                ):
                    self._special.add(obj.name)
            self._refresh_generation(obj.driver, obj.pool)
            self._counters.pop((obj.driver, obj.pool), None)
            self._refresh_partitioned(obj.driver, obj.pool)
            self._local.clear()
            self._node_matches.clear()
            self._published.pop(obj.name, None)
            self._matching.pop(obj.name, None)
        elif isinstance(obj, DeviceTaintRule):
            old = self._rules.pop(obj.name, None)
            if not deleted:
                self._rules[obj.name] = obj
            # What each device admits depends on the rules: judged again.
            self._rule_taints.clear()
            self._matching.clear()
            self._node_matches.clear()
        else:
            old = self._classes.pop(obj.name, None)
            if not deleted:
                self._classes[obj.name] = obj
            self._extended = None
            if self._rules:
                self._rule_taints.clear()  # a rule may select by class
        self._recount(uses, self._selector_uses(obj))
        for fn in self.listeners:
            fn()
        return old

    def taints(self, p: Published) -> tuple[Taint, ...]:
        """The device's taints: its slice's, and those of the DeviceTaintRules
        that select it."""
        if not self._rules:
            return p.device.taints
        key = (p.slice.name, p.index)
        got = self._rule_taints.get(key)
        if got is None or got[0] is not p.slice:
            extra = tuple(
                r.taint
                for _, r in sorted(self._rules.items())
                if r.taint is not None and self._selects(r, p)
            )
            got = self._rule_taints[key] = (p.slice, p.device.taints + extra)
        return got[1]

    def _selects(self, r: DeviceTaintRule, p: Published) -> bool:
        if not r.selected:
            return False
        d = p.id
        if (r.driver and r.driver != d.driver) or (r.pool and r.pool != d.pool):
            return False
        if r.device and r.device != d.device:
            return False
        exprs = list(r.selectors)
        if r.device_class:
            cls = self._classes.get(r.device_class)
            if cls is None:
                return False
            exprs[:0] = cls.selectors
        # A selector that fails on the device does not select it.
        return all(self.selects(e, p) is True for e in exprs)

    def _index_slice(self, s: ResourceSlice) -> None:
        self._pools.setdefault((s.driver, s.pool), set()).add(s.name)
        if s.node_name:
            self._by_node.setdefault(s.node_name, set()).add(s.name)
        else:
            self._network.add(s.name)

    def _unindex_slice(self, s: ResourceSlice) -> None:
        pool = self._pools.get((s.driver, s.pool))
        if pool is not None:
            pool.discard(s.name)
            if not pool:
                del self._pools[(s.driver, s.pool)]
        if s.node_name:
            names = self._by_node.get(s.node_name)
            if names is not None:
                names.discard(s.name)
                if not names:
                    del self._by_node[s.node_name]
        else:
            self._network.discard(s.name)
        for per_slice in self._verdicts.values():
            per_slice.pop(s.name, None)

    def _refresh_partitioned(self, driver: str, pool: str) -> None:
        slices = [self._slices[n] for n in self._pools.get((driver, pool), ())]
        for flag, kind in (
            (
                any(s.counter_sets or any(d.consumes for d in s.devices) for s in slices),
                self.partitioned,
            ),
            (any(d.binding_conditions for s in slices for d in s.devices), self.binding_pools),
            (bool(slices) and self.pool_incomplete(driver, pool), self.incomplete_pools),
        ):
            if flag:
                kind.add((driver, pool))
            else:
                kind.discard((driver, pool))

    def _refresh_generation(self, driver: str, pool: str) -> None:
        names = self._pools.get((driver, pool), set())
        gens = [self._slices[n].generation for n in names]
        if gens:
            self._generation[(driver, pool)] = max(gens)
        else:
            self._generation.pop((driver, pool), None)

    # ---- readers ---------------------------------------------------------------------

    def device_class(self, name: str) -> DeviceClass | None:
        return self._classes.get(name)

    def has_classes(self) -> bool:
        return bool(self._classes)

    def extended_classes(self) -> Mapping[str, str]:
        """The class each extended resource name stands for (spec.extendedResourceName;
        of two classes naming one resource, the first by name)."""
        if self._extended is None:
            self._extended = {}
            for name in sorted(self._classes):
                r = self._classes[name].extended_resource_name
                if r:
                    self._extended.setdefault(r, name)
        return self._extended

    def claim(self, key: str) -> ResourceClaim | None:
        """The claim as readers see it: an assumed allocation over the API's."""
        return self._assumed.get(key) or self._claims.get(key)

    def api_claim(self, key: str) -> ResourceClaim | None:
        return self._claims.get(key)

    @property
    def used(self) -> Mapping[DeviceID, AbstractSet[str]]:
        """Devices in use (allocated or in flight), for membership tests."""
        return self._in_use

    def users(self, device: DeviceID) -> Collection[str]:
        """The claims holding the device, whole or a share of it."""
        whole = self._in_use.get(device)
        shared = self._shared.get(device)
        if shared is None:
            return whole or ()
        return [*(whole or ()), *shared]

    @property
    def plain(self) -> bool:
        """Whether every device is taken whole and on its own: no shared
        counters, no devices claims share, no request policies."""
        return not self._special

    def consumed(
        self, device: DeviceID, released: AbstractSet[str] = frozenset()
    ) -> dict[str, Fraction]:
        """What the shares of a device allocated to claims (but those in
        `released`) take of its capacities, by qualified name."""
        out: dict[str, Fraction] = {}
        for key, shares in self._shared.get(device, {}).items():
            if key in released:
                continue
            for share in shares:
                for name, q in share.items():
                    out[name] = out.get(name, Fraction(0)) + q
        return out

    def allocated(self, device: DeviceID, released: AbstractSet[str] = frozenset()) -> bool:
        """Whether some claim not in `released` holds the device or a share of it."""
        users = self._in_use.get(device)
        if users and (not released or not users <= released):
            return True
        shared = self._shared.get(device)
        return shared is not None and (not released or not shared.keys() <= released)

    def in_use(self, device: DeviceID, released: AbstractSet[str] = frozenset()) -> bool:
        """Whether a claim not in `released` holds the whole device."""
        users = self._in_use.get(device)
        return users is not None and (not released or not users <= released)

    def counters_left(
        self, driver: str, pool: str, released: AbstractSet[str] = frozenset()
    ) -> Mapping[str, Mapping[str, Fraction]] | str:
        """The pool's shared counters less what its allocated devices use (kept
        until a claim or slice of the pool changes: read it, do not change it),
        or why the pool cannot be allocated from: a counter set named twice, or
        a device using a counter set or counter the pool lacks (kube's invalid
        pool). Devices held only by `released` claims use nothing."""
        got = self._counters.get((driver, pool)) if not released else None
        if got is None:
            got = self._count(driver, pool, released)
            if not released:
                self._counters[(driver, pool)] = got
        return got

    def _count(
        self, driver: str, pool: str, released: AbstractSet[str]
    ) -> dict[str, dict[str, Fraction]] | str:
        gen = self._generation.get((driver, pool))
        slices = sorted(
            (
                s
                for n in self._pools.get((driver, pool), ())
                if (s := self._slices[n]).generation == gen
            ),
            key=lambda s: s.name,
        )
        sets: dict[str, dict[str, Fraction]] = {}
        for s in slices:
            for name, counters in s.counter_sets.items():
                if name in sets:
                    return f"duplicate counter set name {name}"
                sets[name] = dict(counters)
        for s in slices:
            for d in s.devices:
                for use in d.consumes:
                    have = sets.get(use.counter_set)
                    if have is None:
                        return f"counter set {use.counter_set} not found"
                    for c in use.counters:
                        if c not in have:
                            return f"counter {c} not found in counter set {use.counter_set}"
        for s in slices:
            for d in s.devices:
                if d.consumes and self.allocated(d.id, released):
                    for use in d.consumes:
                        have = sets[use.counter_set]
                        for c, q in use.counters.items():
                            have[c] -= q
        return sets

    def slices_for(self, node: str, labels: Mapping[str, str]) -> list[ResourceSlice]:
        """The slices whose devices are usable on the node, of each pool's newest
        generation (remembered per node until a slice changes; a node's labels
        matter only to slices with a node selector, which are then looked at
        again)."""
        local = self._local.get(node)
        if local is None:
            local = sorted(
                (
                    s
                    for name in self._by_node.get(node, ())
                    if (s := self._slices[name]).generation
                    >= self._generation.get((s.driver, s.pool), 0)
                ),
                key=_pool_order,
            )
            self._local[node] = local
        if not self._network:
            return local
        out = list(local)
        for name in sorted(self._network):
            s = self._slices[name]
            if s.generation < self._generation.get((s.driver, s.pool), 0):
                continue
            if (
                s.all_nodes
                or (
                    s.node_selector is not None
                    and node_selector_matches(s.node_selector, labels, node)
                )
                or (s.per_device and any(device_on_node(d, node, labels) for d in s.devices))
            ):
                out.append(s)
        if len(out) > len(local):
            out.sort(key=_pool_order)
        return out

    def node_matches(self, node: str, key: tuple[object, ...]) -> tuple[Published, ...] | None:
        """What `remember_node_matches` kept for the node and request key."""
        per = self._node_matches.get(node)
        return per.get(key) if per is not None else None

    def remember_node_matches(
        self,
        node: str,
        key: tuple[object, ...],
        slices: Sequence[ResourceSlice],
        found: Sequence[Published],
    ) -> None:
        """Keep the devices a request key admits on the node, until a slice
        changes; only when the node's slices are its own (a node selector
        depends on the node's labels, which are not part of the key)."""
        if all(s.node_name == node for s in slices):
            self._node_matches.setdefault(node, {})[key] = tuple(found)

    def devices_for(self, node: str, labels: Mapping[str, str]) -> list[Published]:
        """The devices usable on the node (see `slices_for`)."""
        return [p for s in self.slices_for(node, labels) for p in self.published(s)]

    def published(self, s: ResourceSlice) -> tuple[Published, ...]:
        got = self._published.get(s.name)
        if got is None or (got and got[0].slice is not s):
            got = self._published[s.name] = tuple(
                Published(d, s, i, d.id) for i, d in enumerate(s.devices)
            )
        return got

    def matching(
        self, s: ResourceSlice, key: tuple[object, ...], test: Callable[[Published], bool]
    ) -> tuple[Published, ...]:
        """The slice's devices that `test` admits, remembered under `key` (what
        the test depends on: a class and its version, a request's selectors and
        tolerations) until the slice changes. `test` may raise; nothing is
        remembered then."""
        per_slice = self._matching.setdefault(s.name, {})
        got = per_slice.get(key)
        if got is None or (got and got[0].slice is not s):
            got = per_slice[key] = tuple(p for p in self.published(s) if test(p))
        return got

    def pool_incomplete(self, driver: str, pool: str) -> bool:
        """Whether the pool's newest generation has another number of slices
        than it says (kube's incomplete pool: a driver in the middle of
        publishing it)."""
        gen = self._generation.get((driver, pool))
        slices = [self._slices[n] for n in self._pools.get((driver, pool), ())]
        if gen is None or not slices:
            return True
        current = sorted((s for s in slices if s.generation == gen), key=lambda s: s.name)
        return len(current) != current[0].slice_count

    def selects(self, expr: str, p: Published) -> bool | CelError:
        """What the selector says of the published device, remembered until the
        slice changes or no object the store holds uses the expression.

        The verdicts are bounded by what exists, not by a size to tune: `set`
        counts the claims, classes and DeviceTaintRules whose selector each
        expression is (it sees every add, update and delete), and the verdicts
        of an expression go when its count does; so the hot path stays three
        dictionary lookups, with no recency to record on every hit as an LRU
        would. Expressions no held object uses (claims judged without being
        stored: a simulation's or a dry run's) keep their verdicts only while
        they are among the last UNOWNED_MAX such expressions judged."""
        per_slice = self._verdicts.get(expr)
        if per_slice is None:
            per_slice = self._verdicts[expr] = {}
            if expr not in self._uses:
                self._unowned[expr] = None
                if len(self._unowned) > UNOWNED_MAX:
                    oldest = next(iter(self._unowned))
                    del self._unowned[oldest]
                    self._forget(oldest)
        s = p.slice
        of_slice = per_slice.get(s.name)
        if of_slice is None or of_slice[0] != s.resource_version:
            of_slice = per_slice[s.name] = (s.resource_version, {})
        got = of_slice[1].get(p.index)
        if got is None:
            sel = selector(expr)
            if isinstance(sel, CelError):
                got = sel
            else:
                # The device as selectors see it is built for this evaluation
                # only: verdicts are remembered, and keeping every device's CEL
                # environment cost ~50 KiB a device (5000 nodes x 8 devices: most
                # of a 590 MiB peak).
                try:
                    got = sel.matches(DeviceEnv(p.device))
                except CelError as e:
                    got = e
            of_slice[1][p.index] = got
        return got

    def _selector_uses(self, obj: DraObject) -> list[str]:
        """The selectors of the object held under `obj`'s kind and name."""
        if isinstance(obj, ResourceClaim):
            held = self._claims.get(obj.key)
            if held is None:
                return []
            return [e for r in held.requests for a in r.alternatives for e in a.selectors]
        if isinstance(obj, DeviceTaintRule):
            rule = self._rules.get(obj.name)
            return list(rule.selectors) if rule is not None else []
        if isinstance(obj, DeviceClass):
            cls = self._classes.get(obj.name)
            return list(cls.selectors) if cls is not None else []
        return []

    def _recount(self, before: list[str], after: list[str]) -> None:
        """Count the selectors an object uses now instead of those it used;
        drop the verdicts of expressions nothing uses any more."""
        if before == after:
            return
        for e in after:
            self._uses[e] = self._uses.get(e, 0) + 1
            self._unowned.pop(e, None)
        for e in before:
            n = self._uses[e] - 1
            if n:
                self._uses[e] = n
            else:
                del self._uses[e]
                self._forget(e)

    def _forget(self, expr: str) -> None:
        """Drop what is remembered of an expression no object uses: its
        verdicts at once; the request keys naming it (what requests admit, per
        slice and per node) once as many expressions went as are in use, so
        that sweeping those caches costs each deleted claim about what its
        own entries cost, and what lingers is bounded by what exists."""
        self._verdicts.pop(expr, None)
        self._dead.add(expr)
        if len(self._dead) < max(UNOWNED_MAX, len(self._uses)):
            return
        dead, self._dead = self._dead, set()
        for cache in (self._matching, self._node_matches):
            for per in cache.values():
                gone = [
                    k
                    for k in per
                    if any(isinstance(part, tuple) and not dead.isdisjoint(part) for part in k)
                ]
                for k in gone:
                    del per[k]

    # ---- assumed claims --------------------------------------------------------------

    def stale(self, claim: ResourceClaim) -> bool:
        """Whether the claim is an older version than the one held (the same
        claim, by uid): such a view changes nothing (`set` ignores it)."""
        held = self._claims.get(claim.key)
        return (
            held is not None
            and held.uid == claim.uid
            and older(claim.resource_version, held.resource_version)
        )

    def assume(self, claim: ResourceClaim) -> ResourceClaim:
        """Put the claim (with an allocation and consumers not yet written) over
        the API's until `written` or `restore`; returns the version readers saw
        before."""
        before = self.claim(claim.key)
        self._assumed[claim.key] = claim
        self._reindex_claim(claim.key)
        return before or claim

    def written(self, claim: ResourceClaim) -> None:
        """PreBind's write of the claim returned this version (the API's
        answer): readers see it from now on (unless the watch already brought a
        newer one), and the version assumed at Reserve is given up."""
        if not self.stale(claim):
            self._claims[claim.key] = claim
        self._assumed.pop(claim.key, None)
        self._reindex_claim(claim.key)
        for fn in self.listeners:
            fn()

    def restore(self, key: str) -> None:
        """Drop the assumed version of a claim (Unreserve)."""
        if self._assumed.pop(key, None) is not None:
            self._reindex_claim(key)
            for fn in self.listeners:
                fn()

    def _reindex_claim(self, key: str) -> None:
        """Index the devices the claim holds: those its API version allocates
        and those of the version assumed over it (a device either holds is in
        use)."""
        for c in self._indexed.pop(key, ()):
            for r in c.allocation.results if c.allocation is not None else ():
                if r.admin_access:
                    continue
                d = r.device_id
                if r.share_id:
                    shares = self._shared.get(d)
                    if shares is not None:
                        shares.pop(key, None)
                        if not shares:
                            del self._shared[d]
                else:
                    users = self._in_use.get(d)
                    if users is not None:
                        users.discard(key)
                        if not users:
                            del self._in_use[d]
                if self._counters:
                    self._counters.pop((d.driver, d.pool), None)
        held = tuple(
            c
            for c in (self._claims.get(key), self._assumed.get(key))
            if c is not None and c.allocation is not None
        )
        seen: set[tuple[DeviceID, str]] = set()
        for c in held:
            for r in c.allocation.results if c.allocation is not None else ():
                d = r.device_id
                if r.admin_access or (d, r.share_id) in seen:
                    continue
                seen.add((d, r.share_id))
                if r.share_id:
                    self._shared.setdefault(d, {}).setdefault(key, []).append(r.consumed)
                else:
                    self._in_use.setdefault(d, set()).add(key)
                if self._counters:
                    self._counters.pop((d.driver, d.pool), None)
        if held:
            self._indexed[key] = held
