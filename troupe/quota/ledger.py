"""The quota ledger: what each namespace's ElasticQuota has used, counted in
one place for every plugin that reads quota use (CapacityScheduling limits
with it, CapacityFairSort orders with it; plugins never import each other, so
both hold a `QuotaLedger` of their own, fed by `on_event` with the same
cluster events and from their Reserve/Unreserve).

What scheduler-plugins' CapacityScheduling keeps from its ElasticQuota and Pod
informers (addElasticQuota, updatePod... in capacity_scheduling.go): the
`ElasticQuotaInfos` (one per namespace with a quota), the ElasticQuota objects
they come from, and every assigned or reserved pod by namespace, so that a
quota created while its namespace already runs pods counts them at once, and
a restart rebuilds use from what the API lists (ElasticQuotas are listed
before pods, as the table of kinds orders them).

What counts against a quota: a pod of its namespace from Reserve (or from the
API, bound) until Unreserve, its deletion, or its end (Succeeded or Failed).
A pod's request is its effective request (`Pod.requests`). A ResourceClaim's
devices count against its namespace's quota, under its DeviceClass's extended
resource name (`troupe.dra.claims.device_amounts`), while a counted pod of the
namespace uses it: once, however many pods share it (a claim allocated since
counts what it took). A terminal pod is never counted, not even when first
listed (upstream counts it until an update says so); a pod resized in place is
counted at its new request. One quota per namespace: the first seen counts;
another in the same namespace is ignored until it is the only one, then the
first of the others by name counts (upstream lets a second one's deletion drop
the first's state).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from troupe.api.elasticquota import ElasticQuota
from troupe.api.types import GroupKey, Pod, PodGroup, PodKey, Resources
from troupe.dra.claims import claim_name, device_amounts
from troupe.dra.store import DeviceStore
from troupe.dra.types import ResourceClaim
from troupe.framework.events import ActionType, ClusterEvent, EventResource
from troupe.quota.info import (
    ElasticQuotaInfo,
    ElasticQuotaInfos,
    add_into,
    new_elastic_quota_info,
)


@dataclass(slots=True)
class _ClaimUse:
    """A claim counted against its namespace's quota: its devices by extended
    resource name, and the counted pods that use it."""

    amounts: dict[str, int]
    users: set[PodKey]


def no_group(key: GroupKey) -> PodGroup | None:
    return None


class QuotaLedger:
    """Quota use by namespace. `devices`: the ResourceClaims and DeviceClasses a
    pod's claims are read from; `pod_group`: a pod's PodGroup (a claim the
    group lists is the group's, shared)."""

    def __init__(
        self,
        devices: DeviceStore | None = None,
        pod_group: Callable[[GroupKey], PodGroup | None] = no_group,
    ) -> None:
        self.devices = devices if devices is not None else DeviceStore()
        self.pod_group = pod_group
        self._infos = ElasticQuotaInfos()
        # The last snapshot's copies by namespace, and the namespaces whose info
        # changed since (None: every one): a cycle's snapshot copies only those.
        self._copies: dict[str, ElasticQuotaInfo] = {}
        self._stale: set[str] | None = None
        # That snapshot, given again while no quota changed.
        self._last: ElasticQuotaInfos | None = None
        # The sums of every quota's used and min, kept as they change (PreFilter
        # compares with them on every cycle).
        self.total_used: dict[str, int] = {}
        self.total_min: dict[str, int] = {}
        # The ElasticQuota each namespace's info comes from, and the others seen.
        self.quotas: dict[str, ElasticQuota] = {}
        self._shadowed: dict[str, dict[str, ElasticQuota]] = {}
        # Non-terminal pods assigned or reserved, by namespace.
        self._pods: dict[str, dict[PodKey, Pod]] = {}
        # The ResourceClaims the counted pods use, by namespace: each counts its
        # devices once, however many of the namespace's pods share it.
        self._claims: dict[str, dict[str, _ClaimUse]] = {}
        self._claims_of: dict[PodKey, tuple[str, ...]] = {}

    @property
    def infos(self) -> ElasticQuotaInfos:
        return self._infos

    @infos.setter
    def infos(self, infos: ElasticQuotaInfos) -> None:
        """Replace every quota's state (tests start from upstream's)."""
        self._infos = infos
        self._stale = None
        self.total_used, self.total_min = infos.totals()

    # ---- snapshots ------------------------------------------------------------------

    def snapshot(self) -> ElasticQuotaInfos:
        """A copy of every quota's min, max and used for one cycle (upstream's
        snapshotElasticQuota). The pod sets are shared, not copied: a cycle only
        reads them, and nothing changes them while it runs. The copies of the
        quotas that did not change since the last snapshot are that snapshot's
        (a cycle never changes its snapshot; with 20 quotas, copying each one
        every cycle was most of PreFilter's cost)."""
        infos, stale = self._infos, self._stale
        if not stale and stale is not None and self._last is not None:
            return self._last
        if stale is None:
            self._copies = {ns: info.snapshot() for ns, info in infos.items()}
        else:
            copies = self._copies
            for ns in stale:
                info = infos.get(ns)
                if info is None:
                    copies.pop(ns, None)
                else:
                    copies[ns] = info.snapshot()
        self._stale = set()
        self._last = ElasticQuotaInfos(self._copies)
        return self._last

    def _changed(self, namespace: str) -> None:
        if self._stale is not None:
            self._stale.add(namespace)

    def totals(self) -> tuple[dict[str, int], dict[str, int]]:
        """Copies of the sums of every quota's used and min."""
        return dict(self.total_used), dict(self.total_min)

    def _count(self, info: ElasticQuotaInfo, sign: int) -> None:
        add_into(self.total_used, info.used, sign)
        add_into(self.total_min, info.min, sign)

    def _add(self, info: ElasticQuotaInfo, pod: Pod, key: PodKey) -> bool:
        """`info.add_pod_if_not_present` and the total, in one pass over the
        request (every Reserve, and every gang member's trial charge and undo,
        come here)."""
        pods = info.pods
        if key in pods:
            return False
        pods.add(key)
        self._changed(info.namespace)
        used, total = info.used, self.total_used
        for r, q in pod.requests.items():
            used[r] = used.get(r, 0) + q
            total[r] = total.get(r, 0) + q
        return True

    def _delete(self, info: ElasticQuotaInfo, pod: Pod, key: PodKey) -> bool:
        pods = info.pods
        if key not in pods:
            return False
        pods.discard(key)
        self._changed(info.namespace)
        used, total = info.used, self.total_used
        for r, q in pod.requests.items():
            used[r] = used.get(r, 0) - q
            total[r] = total.get(r, 0) - q
        return True

    def pods_of(self, namespace: str) -> Iterator[Pod]:
        return iter(self._pods.get(namespace, {}).values())

    # ---- ElasticQuota events ----------------------------------------------------------

    def add_elastic_quota(self, eq: ElasticQuota) -> None:
        ns = eq.namespace
        current = self.quotas.get(ns)
        if current is not None and current.name != eq.name:
            self._shadowed.setdefault(ns, {})[eq.name] = eq
            return
        if current is not None:
            self.update_elastic_quota(current, eq)
            return
        self._install(eq, None)

    def update_elastic_quota(self, old: ElasticQuota, new: ElasticQuota) -> None:
        ns = new.namespace
        current = self.quotas.get(ns)
        if current is None:
            self.add_elastic_quota(new)
            return
        if current.name != new.name:
            self._shadowed.setdefault(ns, {})[new.name] = new
            return
        self._install(new, self.infos.get(ns))

    def delete_elastic_quota(self, eq: ElasticQuota) -> None:
        ns = eq.namespace
        shadowed = self._shadowed.get(ns, {})
        current = self.quotas.get(ns)
        if current is None or current.name != eq.name:
            shadowed.pop(eq.name, None)
            if not shadowed:
                self._shadowed.pop(ns, None)
            return
        del self.quotas[ns]
        gone = self._infos.pop(ns, None)
        self._changed(ns)
        if gone is not None:
            self._count(gone, -1)
        if shadowed:
            name = min(shadowed)
            nxt = shadowed.pop(name)
            if not shadowed:
                self._shadowed.pop(ns, None)
            self._install(nxt, None)

    def _install(self, eq: ElasticQuota, keep: ElasticQuotaInfo | None) -> None:
        """The namespace's info from `eq`: its use kept from `keep` (an update, as
        upstream's updateElasticQuota), else counted from its pods."""
        ns = eq.namespace
        info = new_elastic_quota_info(ns, eq.min, eq.max)
        if keep is not None:
            info.pods, info.used = keep.pods, keep.used
        else:
            for p in self.pods_of(ns):
                info.add_pod_if_not_present(p)
            for use in self._claims.get(ns, {}).values():
                info.reserve_resource(use.amounts)
        old = self._infos.get(ns)
        if old is not None:
            self._count(old, -1)
        self.quotas[ns] = eq
        self._infos[ns] = info
        self._changed(ns)
        self._count(info, +1)

    # ---- pods ---------------------------------------------------------------------------

    def add_pod(self, pod: Pod, claims: Mapping[str, Resources] | None = None) -> bool:
        """Count a pod (bound, or reserved); False if it was counted already or
        does not count (terminal). True also for a namespace without a quota.
        `claims`: the devices of each ResourceClaim the pod uses, by claim key
        (None: as counted before); a claim counts once in its namespace."""
        if pod.terminal:
            return False
        key, ns = pod.key, pod.namespace
        by_key = self._pods.get(ns)
        if by_key is None:
            by_key = self._pods[ns] = {}
        known = by_key.get(key)
        by_key[key] = pod
        if claims or (claims is not None and key in self._claims_of):
            self._use_claims(pod, claims)
        info = self._infos.get(ns)
        if known is not None and info is not None and pod.requests != known.requests:
            if self._delete(info, known, key):
                self._add(info, pod, key)
            return True
        if info is None:
            return known is None
        return self._add(info, pod, key)

    def update_pod(
        self, old: Pod | None, new: Pod, claims: Mapping[str, Resources] | None = None
    ) -> bool:
        """A counted pod's new version: terminal, it stops counting; resized, it
        counts its new request. Whether anything changed."""
        if new.terminal:
            return self.delete_pod(new)
        by_key = self._pods.get(new.namespace)
        if by_key is None or new.key not in by_key:
            return self.add_pod(new, claims) if new.node_name else False
        return self.add_pod(new, claims)

    def delete_pod(self, pod: Pod) -> bool:
        key = pod.key
        by_key = self._pods.get(pod.namespace)
        known = by_key.pop(key, None) if by_key is not None else None
        if by_key is not None and not by_key:
            del self._pods[pod.namespace]
        if key in self._claims_of:
            self._release_claims(pod.namespace, key)
        info = self._infos.get(pod.namespace)
        if info is None:
            return known is not None
        return self._delete(info, known if known is not None else pod, key)

    # ---- ResourceClaims -----------------------------------------------------------------

    def _charge_claim(self, namespace: str, amounts: Resources, sign: int) -> None:
        info = self._infos.get(namespace)
        if info is not None:
            self._changed(namespace)
            add_into(info.used, amounts, sign)
            add_into(self.total_used, amounts, sign)

    def _use_claims(self, pod: Pod, claims: Mapping[str, Resources]) -> None:
        ns = pod.namespace
        self._release_claims(ns, pod.key)
        if not claims:
            return
        table = self._claims.setdefault(ns, {})
        for key, amounts in claims.items():
            use = table.get(key)
            if use is None:
                use = table[key] = _ClaimUse(dict(amounts), set())
                self._charge_claim(ns, amounts, +1)
            elif use.amounts != amounts:  # a newer view of the claim (allocated)
                self._charge_claim(ns, use.amounts, -1)
                use.amounts = dict(amounts)
                self._charge_claim(ns, amounts, +1)
            use.users.add(pod.key)
        self._claims_of[pod.key] = tuple(claims)

    def _release_claims(self, namespace: str, pod: PodKey) -> None:
        keys = self._claims_of.pop(pod, ())
        table = self._claims.get(namespace)
        if not keys or table is None:
            return
        for key in keys:
            use = table.get(key)
            if use is None:
                continue
            use.users.discard(pod)
            if not use.users:
                del table[key]
                self._charge_claim(namespace, use.amounts, -1)
        if not table:
            del self._claims[namespace]

    def update_claim(self, key: str, amounts: Resources) -> bool:
        """A counted claim's newer view (its devices allocated): it counts what
        it now takes. Whether anything changed."""
        ns = key.partition("/")[0]
        use = self._claims.get(ns, {}).get(key)
        if use is None or use.amounts == amounts:
            return False
        self._charge_claim(ns, use.amounts, -1)
        use.amounts = dict(amounts)
        self._charge_claim(ns, amounts, +1)
        return True

    def devices_used_by(self, namespace: str, pods: AbstractSet[PodKey]) -> dict[str, int]:
        """The devices of the namespace's counted claims that some of `pods` use."""
        out: dict[str, int] = {}
        for use in self._claims.get(namespace, {}).values():
            if not use.users.isdisjoint(pods):
                add_into(out, use.amounts)
        return out

    def claims_of(self, pod: PodKey, namespace: str) -> dict[str, Resources]:
        """The counted claims a counted pod uses, with their devices."""
        table = self._claims.get(namespace, {})
        return {k: table[k].amounts for k in self._claims_of.get(pod, ()) if k in table}

    def has_claims(self) -> bool:
        return bool(self._claims)

    def counted_claims(self, namespace: str) -> Mapping[str, Resources]:
        """The devices of each claim counted in the namespace, by claim key."""
        return {k: use.amounts for k, use in self._claims.get(namespace, {}).items()}

    def claim_users(self, namespace: str) -> Mapping[str, AbstractSet[PodKey]]:
        """The counted pods that use each claim counted in the namespace."""
        return {k: use.users for k, use in self._claims.get(namespace, {}).items()}

    def counted(self) -> Mapping[str, Mapping[PodKey, Pod]]:
        return self._pods

    # ---- what a pod uses -----------------------------------------------------------------

    def pod_claims(self, pod: Pod) -> dict[str, Resources]:
        """The devices each ResourceClaim the pod uses takes, by claim key (a
        claim the pod's native PodGroup lists is the group's, shared)."""
        if not pod.resource_claims:
            return {}
        store = self.devices
        group = None
        if pod.group_key is not None:
            g = self.pod_group(pod.group_key)
            group = g if g is not None and g.resource_claims else None
        out: dict[str, Resources] = {}
        for i in range(len(pod.resource_claims)):
            name = claim_name(pod, i, group)
            claim = store.claim(f"{pod.namespace}/{name}") if name else None
            if claim is not None and claim.key not in out:
                out[claim.key] = device_amounts(store, claim)
        return out

    def request_of(self, pod: Pod, seen: set[str] | None = None) -> Mapping[str, int]:
        """What the pod would add to its quota: its request, and the devices of
        its claims that no counted pod of its namespace uses yet. `seen`: the
        claims a sum of several pods' requests has counted already (the pod's
        are added to it), so that a claim they share counts once."""
        claims = self.pod_claims(pod)
        if not claims:
            return pod.requests
        counted = self._claims.get(pod.namespace, {})
        req = dict(pod.requests)
        for key, amounts in claims.items():
            if key in counted or (seen is not None and key in seen):
                continue
            if seen is not None:
                seen.add(key)
            add_into(req, amounts)
        return req

    def devices_freed(self, pods: Sequence[Pod]) -> dict[str, Resources]:
        """By namespace, the devices of the counted claims that only `pods` use."""
        out: dict[str, dict[str, int]] = {}
        keys = {p.key for p in pods}
        for ns in {p.namespace for p in pods}:
            amounts = self.counted_claims(ns)
            for key, users in self.claim_users(ns).items():
                if users <= keys:
                    add_into(out.setdefault(ns, {}), amounts[key])
        return dict(out)

    # ---- feeding -------------------------------------------------------------------------

    def reserve(self, pod: Pod) -> bool:
        """The pod counts from its Reserve, with its claims' devices."""
        return self.add_pod(pod, self.pod_claims(pod) if pod.resource_claims else {})

    def charge(self, pod: Pod) -> bool:
        """A group trial's placement counts as a Reserve would, until
        `delete_pod`; False (nothing done) for a pod of a namespace without a
        quota, or one counted already."""
        ns = pod.namespace
        if ns not in self._infos:
            return False
        by_key = self._pods.get(ns)
        if by_key is not None and pod.key in by_key:
            return False
        return self.reserve(pod)

    def unreserve(self, pod: Pod) -> bool:
        return self.delete_pod(pod)

    def on_event(self, event: ClusterEvent, old: Any, new: Any) -> str | None:
        """Count a cluster event (a Handle watcher's arguments): ElasticQuotas
        added, updated or deleted; assigned pods bound, changed or deleted; a
        counted claim allocated; a reserved pod deleted before it was bound. The
        namespace whose quota or use the event may have changed, or None.

        A pod reserved here and then seen bound (AssignedPod/Add, the watch or
        a re-list confirming it) is counted once: its newer version replaces
        the one from Reserve (so its phase is the API's), nothing is added."""
        r, action = event.resource, event.action
        if r is EventResource.ELASTIC_QUOTA:
            if action & ActionType.DELETE:
                if isinstance(old, ElasticQuota):
                    self.delete_elastic_quota(old)
                    return old.namespace
            elif isinstance(new, ElasticQuota):
                if isinstance(old, ElasticQuota):
                    self.update_elastic_quota(old, new)
                else:
                    self.add_elastic_quota(new)
                return new.namespace
            return None
        if r is EventResource.ASSIGNED_POD:
            if action & ActionType.DELETE:
                if isinstance(old, Pod):
                    self.delete_pod(old)
                    return old.namespace
            elif isinstance(new, Pod):
                if isinstance(old, Pod):
                    self.update_pod(old, new, self.pod_claims(new))
                else:
                    self.add_pod(new, self.pod_claims(new))
                return new.namespace
        elif r is EventResource.RESOURCE_CLAIM:
            if isinstance(new, ResourceClaim) and self.update_claim(
                new.key, device_amounts(self.devices, new)
            ):
                return new.namespace
        elif (
            r is EventResource.UNSCHEDULED_POD
            and action & ActionType.DELETE
            and isinstance(old, Pod)
        ):
            self.delete_pod(old)
            return old.namespace
        return None
