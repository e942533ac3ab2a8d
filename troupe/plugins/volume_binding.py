"""VolumeBinding: a pod's PersistentVolumeClaims against the nodes
(volumebinding/volume_binding.go and binder.go).

PreFilter sorts the pod's claims (generic ephemeral volumes count as their
generated claim ``<pod>-<volume>``): fully bound ones, unbound ones whose
StorageClass is WaitForFirstConsumer (decided here), and the rest, which make
the pod wait ("pod has unbound immediate PersistentVolumeClaims") until the PV
controller binds them. A pod without claims is skipped.

Filter answers for all candidate rows at once: a bound claim's PV node
affinity is a NodeSelector evaluated over the node table's label columns; an
unbound claim is matched, smallest first, to an available static PV of its class
(size, access modes, volume mode, selector, node affinity), greedily per row as
FindMatchingVolume does; what finds no PV (or already carries the
selected-node annotation) is provisioned where the class has a provisioner,
its allowedTopologies match and, for CSI drivers that publish capacity, a
CSIStorageCapacity reachable from the node is large enough.

Reserve assumes the chosen bindings in the volume store (the PV's claimRef, the
claim's selected-node annotation) so that the next pod sees them; Unreserve
drops them, and undoes what PreBind wrote to a claim or PV that is still
unbound (the pod never reached that node, so nothing is provisioned or bound
for it there). PreBind writes them (PV claimRef by merge patch with the PV's
resourceVersion as precondition; the claim's
``volume.kubernetes.io/selected-node``) and waits, up to
``bindTimeoutSeconds`` (default 600), for the PV controller and the
provisioner to bind every claim (checkBindings), before the pod's Binding. A
gang's members reach PreBind only after the group's Permit, so nothing is
written for a gang that is not admitted.

Score (StorageCapacityScoring, a feature gate on by default as in
kube-scheduler 1.37) rates each candidate node by the utilization of the
storage the pod would take there, per StorageClass: where some claim would
bind a static PV, the claims' requests against those PVs' capacities; else the
claims to provision against the capacity of the CSIStorageCapacity that lets
the node provision them. The `shape` argument maps utilization to score
(default: 0% -> 10, 100% -> 0, i.e. the node with the most room); classes are
averaged (scorer.go). Score reads back what Filter found per row (upstream's
podVolumesByNode) rather than matching the claims again. With the gate off
there is no Score, and `shape` is an error, as upstream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Self

import numpy as np

from troupe.api.selectors import node_selector_matches
from troupe.api.storage import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    CSIDriver,
    CSINode,
    CSIStorageCapacity,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    pod_claim_names,
    pod_volumes,
)
from troupe.api.types import LabelSelector, NodeName, Pod, PodKey
from troupe.core.snapshot import NodeTable
from troupe.core.volumes import VolumeStore, claim_ref_body
from troupe.framework.columns import node_selector_mask, requirement_mask
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from troupe.framework.features import STORAGE_CAPACITY_SCORING
from troupe.framework.filtering import FilterResult
from troupe.framework.handle import Handle
from troupe.framework.interface import (
    BoolArray,
    EnqueueExtensions,
    FilterPlugin,
    Int64Array,
    IntpArray,
    PluginArgsError,
    PreBindPlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
)
from troupe.framework.status import SKIP, SUCCESS, Code, Status, error, unresolvable
from troupe.plugins.helper import (
    MAX_CUSTOM_PRIORITY_SCORE,
    MAX_UTILIZATION,
    ShapePoint,
    parse_shape,
    scaled,
    shape_table,
)

log = logging.getLogger(__name__)

ERR_REASON_NODE_CONFLICT: Final = "node(s) had volume node affinity conflict"
ERR_REASON_BIND_CONFLICT: Final = "node(s) didn't find available persistent volumes to bind"
ERR_REASON_NOT_ENOUGH_SPACE: Final = "node(s) did not have enough free storage"
ERR_REASON_PV_NOT_EXIST: Final = (
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
)
ERR_UNBOUND_IMMEDIATE: Final = "pod has unbound immediate PersistentVolumeClaims"
REASONS: Final = (
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_BIND_CONFLICT,
    ERR_REASON_NOT_ENOUGH_SPACE,
    ERR_REASON_PV_NOT_EXIST,
)
DEFAULT_BIND_TIMEOUT_SECONDS: Final = 600
_STATE_KEY: Final = "VolumeBinding"
# How often PreBind looks again without an event (upstream polls every second).
_POLL_SECONDS: Final = 1.0


# SetDefaults_VolumeBindingArgs with StorageCapacityScoring on: prefer the node
# with the lowest utilization (the most room left).
DEFAULT_SHAPE: Final = (ShapePoint(0, MAX_CUSTOM_PRIORITY_SCORE), ShapePoint(MAX_UTILIZATION, 0))
ERR_SHAPE_WITHOUT_GATE: Final = (
    "unexpected field `shape`, remove it or turn on the feature gate " + STORAGE_CAPACITY_SCORING
)


@dataclass(frozen=True, slots=True)
class VolumeBindingArgs:
    bind_timeout_seconds: int = DEFAULT_BIND_TIMEOUT_SECONDS
    # Score's utilization shape; () when StorageCapacityScoring is off (no Score).
    shape: tuple[ShapePoint, ...] = ()


def parse_volume_binding_args(args: Mapping[str, Any], capacity_scoring: bool) -> VolumeBindingArgs:
    """SetDefaults_VolumeBindingArgs and ValidateVolumeBindingArgsWithOptions."""
    timeout = DEFAULT_BIND_TIMEOUT_SECONDS
    for k in args:
        if k not in ("bindTimeoutSeconds", "shape"):
            raise PluginArgsError(str(k), "unknown field")
    v = args.get("bindTimeoutSeconds")
    if v is not None:
        if isinstance(v, bool) or not isinstance(v, int):
            raise PluginArgsError("bindTimeoutSeconds", f"Invalid value: {v!r}: must be an integer")
        if v < 0:
            raise PluginArgsError(
                "bindTimeoutSeconds",
                f"Invalid value: {v}: invalid BindTimeoutSeconds, should not be a negative value",
            )
        timeout = v
    raw = args.get("shape")
    if not capacity_scoring:
        if raw is not None:
            raise PluginArgsError("shape", f"Invalid value: {raw!r}: {ERR_SHAPE_WITHOUT_GATE}")
        return VolumeBindingArgs(timeout)
    if raw is None or raw == []:
        return VolumeBindingArgs(timeout, DEFAULT_SHAPE)
    return VolumeBindingArgs(timeout, parse_shape(raw, "shape"))


@dataclass(slots=True)
class PodVolumes:
    """What Reserve assumed for the chosen node, and what PreBind wrote."""

    static: list[tuple[PersistentVolume, PersistentVolumeClaim]] = field(default_factory=list)
    provisions: list[PersistentVolumeClaim] = field(default_factory=list)
    # What PreBind wrote: PV name / claim key -> its resourceVersion before the
    # write (until the watch brings a newer one, the write has not come back).
    written_pvs: dict[str, str] = field(default_factory=dict)
    written_claims: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _State:
    bound: tuple[PersistentVolumeClaim, ...]
    delayed: tuple[PersistentVolumeClaim, ...]
    reserved: PodVolumes | None = None
    all_bound: bool = False
    # What Filter found, per call (its rows): Score reads it back, as upstream's
    # podVolumesByNode, instead of matching the claims again.
    found: list[tuple[IntpArray, _Found]] = field(default_factory=list)


@dataclass(slots=True)
class _Found:
    rejected: BoolArray  # (rows, 4) in REASONS order
    static: list[tuple[PersistentVolumeClaim, list[PersistentVolume], IntpArray]]
    provisions: list[tuple[PersistentVolumeClaim, BoolArray]]


def label_selector_mask(sel: LabelSelector, nodes: NodeTable, rows: IntpArray) -> BoolArray:
    """A metav1.LabelSelector over node labels (an empty one matches every row)."""
    mask = np.ones(len(rows), dtype=bool)
    for req in sel.requirements:
        mask &= requirement_mask(req, nodes, rows)
    return mask


def pv_matches_claim_statically(pv: PersistentVolume, claim: PersistentVolumeClaim) -> bool:
    """FindMatchingVolume's node-independent checks for a PV not pre-bound to the
    claim: free, Available, same class, large enough, same volume mode, the
    claim's access modes, its selector; not being deleted."""
    return (
        pv.claim_ref is None
        and not pv.deleting
        and pv.phase == "Available"
        and pv.storage_class == claim.storage_class
        and pv.capacity >= claim.request
        and pv.volume_mode == claim.volume_mode
        and all(m in pv.access_modes for m in claim.access_modes)
        and (claim.selector is None or claim.selector.matches(pv.labels))
    )


def bound_to_claim(pv: PersistentVolume, claim: PersistentVolumeClaim) -> bool:
    """IsVolumeBoundToClaim: the PV's claimRef names the claim (and its uid, if set)."""
    ref = pv.claim_ref
    return (
        ref is not None
        and ref.name == claim.name
        and ref.namespace == claim.namespace
        and (not ref.uid or ref.uid == claim.uid)
    )


class VolumeBinding(
    PreFilterPlugin,
    FilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    ReservePlugin,
    PreBindPlugin,
    EnqueueExtensions,
):
    NAME: Final = "VolumeBinding"

    def __init__(self, args: VolumeBindingArgs, handle: Handle) -> None:
        self.args = args
        self.handle = handle
        self.store: VolumeStore = handle.volumes
        self._waiters: set[asyncio.Event] = set()
        self.store.listeners.append(self._wake)
        # The scorer (buildScorerFunction) tabulated over utilization 0..100;
        # None without StorageCapacityScoring.
        self._score_table: Int64Array | None = (
            shape_table(scaled(args.shape)) if args.shape else None
        )

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        return cls(
            parse_volume_binding_args(args, handle.features.storage_capacity_scoring), handle
        )

    def _wake(self) -> None:
        for ev in list(self._waiters):
            ev.set()

    # ---- PreFilter -------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]:
        vols = [v for v in pod_volumes(pod) if v.claim]
        if not vols:
            return None, SKIP
        bound: list[PersistentVolumeClaim] = []
        delayed: list[PersistentVolumeClaim] = []
        immediate = False
        for v in vols:
            pvc = self.store.pvc(f"{pod.namespace}/{v.claim}")
            if pvc is None:
                if v.ephemeral:
                    why = (
                        "waiting for ephemeral volume controller to create the "
                        f'persistentvolumeclaim "{v.claim}"'
                    )
                else:
                    why = f'persistentvolumeclaim "{v.claim}" not found'
                return None, unresolvable(why, plugin=self.NAME)
            if pvc.phase == "Lost":
                why = (
                    f'persistentvolumeclaim "{pvc.name}" bound to non-existent '
                    f'persistentvolume "{pvc.volume_name}"'
                )
                return None, unresolvable(why, plugin=self.NAME)
            if pvc.deleting:
                why = f'persistentvolumeclaim "{pvc.name}" is being deleted'
                return None, unresolvable(why, plugin=self.NAME)
            if v.ephemeral and pvc.controller_uid != pod.uid:
                why = (
                    f"PVC {pvc.namespace}/{pvc.name} was not created for pod "
                    f"{pod.namespace}/{pod.name} (pod is not owner)"
                )
                return None, unresolvable(why, plugin=self.NAME)
            if pvc.fully_bound:
                bound.append(pvc)
                continue
            sc = self.store.storage_class(pvc.storage_class) if pvc.storage_class else None
            if sc is not None and sc.delayed and not pvc.volume_name:
                delayed.append(pvc)
            else:
                immediate = True
        if immediate:
            return None, unresolvable(ERR_UNBOUND_IMMEDIATE, plugin=self.NAME)
        state.write(_STATE_KEY, _State(tuple(bound), tuple(delayed)))
        return None, SUCCESS

    # ---- Filter ----------------------------------------------------------------------

    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult:
        s = state.read(_STATE_KEY, _State)
        found = self._find(s, nodes, rows)
        if s.delayed and self._score_table is not None:
            s.found.append((rows, found))
        return FilterResult(
            REASONS, found.rejected, (Code.UNSCHEDULABLE_AND_UNRESOLVABLE,) * len(REASONS)
        )

    def _found_for(self, s: _State, nodes: NodeTable, rows: IntpArray) -> _Found:
        """What Filter found for `rows` (the last call that covered each row),
        matching afresh only rows no call covered. Within a scheduling cycle the
        volume store does not change, so a row's answer is the same."""
        n = len(rows)
        entries = list(s.found)
        pos = np.full(nodes.capacity, -1, dtype=np.intp)
        for frows, _ in entries:
            pos[frows] = 0
        covered = pos[rows] >= 0
        if not covered.all():
            rest = rows[~covered]
            entries.append((rest, self._find(s, nodes, rest)))
        first = entries[0][1]
        static = [(c, cands, np.full(n, -1, dtype=np.intp)) for c, cands, _ in first.static]
        provisions = [(c, np.zeros(n, dtype=bool)) for c, _ in first.provisions]
        for frows, f in entries:
            pos[:] = -1
            pos[frows] = np.arange(len(frows))
            idx = pos[rows]
            have = idx >= 0
            at = idx[have]
            for (_, _, choice), (_, _, fchoice) in zip(static, f.static, strict=True):
                choice[have] = fchoice[at]
            for (_, where), (_, fwhere) in zip(provisions, f.provisions, strict=True):
                where[have] = fwhere[at]
        return _Found(np.zeros((n, len(REASONS)), dtype=bool), static, provisions)

    def _find(self, s: _State, nodes: NodeTable, rows: IntpArray) -> _Found:
        """FindPodVolumes for every row at once."""
        n = len(rows)
        rejected = np.zeros((n, len(REASONS)), dtype=bool)
        node_conflict, bind_conflict, no_space, pv_missing = (rejected[:, j] for j in range(4))
        # Bound claims: the PV's node affinity (checkBoundClaims stops at the first
        # mismatch, and at a missing PV).
        done = np.zeros(n, dtype=bool)
        for pvc in s.bound:
            pv = self.store.pv(pvc.volume_name)
            if pv is None:
                pv_missing |= ~done
                break
            if pv.node_affinity is not None:
                bad = ~node_selector_mask(pv.node_affinity, nodes, rows) & ~done
                node_conflict |= bad
                done |= bad
        static: list[tuple[PersistentVolumeClaim, list[PersistentVolume], IntpArray]] = []
        provisions: list[tuple[PersistentVolumeClaim, BoolArray]] = []
        if not s.delayed:
            return _Found(rejected, static, provisions)
        # Claims the provisioner was already asked for: only their node will do.
        active = np.ones(n, dtype=bool)
        selected = [c for c in s.delayed if ANN_SELECTED_NODE in c.annotations]
        for c in selected:
            row = nodes.row_of.get(c.annotations[ANN_SELECTED_NODE], -1)
            here = rows == row
            bind_conflict |= active & ~here
            active &= here
            provisions.append((c, active.copy()))
        # Static PVs, smallest claim first, smallest fitting PV per row.
        to_match = sorted(
            (c for c in s.delayed if ANN_SELECTED_NODE not in c.annotations),
            key=lambda c: c.request,
        )
        taken: dict[str, BoolArray] = {}
        for c in to_match:
            cands, choice = self._match(c, nodes, rows, taken)
            static.append((c, cands, choice))
            provisions.append((c, active & (choice < 0)))
        # Provisioning (checkVolumeProvisions): the first failing claim decides.
        pending = active.copy()
        for c, where in provisions:
            here = pending & where
            if not here.any():
                continue
            sc = self.store.storage_class(c.storage_class)
            if sc is None or not sc.provisions:
                bind_conflict |= here
                pending &= ~here
                continue
            if sc.allowed_topologies is not None:
                bad = here & ~node_selector_mask(sc.allowed_topologies, nodes, rows)
                bind_conflict |= bad
                pending &= ~bad
                here &= ~bad
            cap = self._capacity_ok(c, sc, nodes, rows)
            if cap is not None:
                bad = here & ~cap
                no_space |= bad
                pending &= ~bad
        return _Found(rejected, static, provisions)

    def _match(
        self,
        claim: PersistentVolumeClaim,
        nodes: NodeTable,
        rows: IntpArray,
        taken: dict[str, BoolArray],
    ) -> tuple[list[PersistentVolume], IntpArray]:
        """Per row, the index in the returned candidates of the PV chosen for
        `claim` (-1: none), marking it taken on that row."""
        n = len(rows)
        choice = np.full(n, -1, dtype=np.intp)
        prebound = [
            pv
            for pv in self.store.pvs_claimed_by(claim.key)
            if pv.storage_class == claim.storage_class
            and bound_to_claim(pv, claim)
            and not pv.deleting
            and pv.capacity >= claim.request
            and pv.volume_mode == claim.volume_mode
        ]
        if prebound:
            cands = prebound[:1]
        else:
            cands = sorted(
                (
                    pv
                    for pv in self.store.free_pvs_in_class(claim.storage_class)
                    if pv_matches_claim_statically(pv, claim)
                ),
                key=lambda pv: (pv.capacity, pv.name),
            )
        for j, pv in enumerate(cands):
            free = choice < 0
            if not free.any():
                break  # every row has its PV
            t = taken.get(pv.name)
            if t is not None:
                free &= ~t
                if not free.any():
                    continue  # taken by an earlier claim wherever still needed
            if pv.node_affinity is not None:
                free &= node_selector_mask(pv.node_affinity, nodes, rows)
            choice[free] = j
            if t is None:
                taken[pv.name] = free
            else:
                t |= free
        return cands, choice

    def _capacity_ok(
        self, claim: PersistentVolumeClaim, sc: StorageClass, nodes: NodeTable, rows: IntpArray
    ) -> BoolArray | None:
        """hasEnoughCapacity: None where capacity is not tracked (no request, no
        CSIDriver for the provisioner, or one without storageCapacity)."""
        if not claim.has_request:
            return None
        driver = self.store.csi_driver(sc.provisioner)
        if driver is None or not driver.storage_capacity:
            return None
        ok = np.zeros(len(rows), dtype=bool)
        for cap in self.store.capacities():
            limit = cap.limit
            if (
                cap.storage_class == sc.name
                and limit is not None
                and limit >= claim.request
                and cap.node_topology is not None
            ):
                ok |= label_selector_mask(cap.node_topology, nodes, rows)
        return ok

    # ---- PreScore / Score -----------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Status:
        """Skip without the feature gate, and where every node would score 0
        (upstream scores those 0s): no unbound claim, or none that could bind a
        static PV or be provisioned where capacity is tracked."""
        if self._score_table is None:
            return SKIP
        s = state.get(_STATE_KEY)
        if not isinstance(s, _State) or not any(self._may_score(c) for c in s.delayed):
            return SKIP
        return SUCCESS

    def _may_score(self, claim: PersistentVolumeClaim) -> bool:
        if self.store.has_candidates(claim.storage_class, claim.key):
            return True
        sc = self.store.storage_class(claim.storage_class)
        return sc is not None and self._tracks_capacity(claim, sc)

    def _tracks_capacity(self, claim: PersistentVolumeClaim, sc: StorageClass) -> bool:
        """hasEnoughCapacity looks at CSIStorageCapacity for this claim."""
        if not claim.has_request:
            return False
        driver = self.store.csi_driver(sc.provisioner)
        return driver is not None and driver.storage_capacity

    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        """Score (volume_binding.go) with buildScorerFunction (scorer.go), for
        every row at once: per StorageClass, requested and capacity summed over
        the static bindings on rows that have any, else over the claims to
        provision whose capacity is tracked (the capacity is the node's, taken
        once per class, not summed); the class scores are averaged, rounded."""
        table = self._score_table
        s = state.get(_STATE_KEY)
        n = len(rows)
        if table is None or not isinstance(s, _State) or not s.delayed:
            return np.zeros(n, dtype=np.int64)
        found = self._found_for(s, nodes, rows)
        static: dict[str, ClassColumns] = {}
        has_static = np.zeros(n, dtype=bool)
        for claim, cands, choice in found.static:
            here = choice >= 0
            if not here.any():
                continue
            has_static |= here
            caps = np.array([pv.capacity for pv in cands] + [0], dtype=np.int64)[choice]
            # BindingInfo.StorageClassName is the PV's class (the claim's, as matched).
            req, cap, present = static.setdefault(claim.storage_class, _class_columns(n))
            req += np.where(here, claim.request, 0)
            cap += np.where(here, caps, 0)
            present |= here
        dynamic: dict[str, ClassColumns] = {}
        for claim, where in found.provisions:
            sc = self.store.storage_class(claim.storage_class)
            if sc is None or not where.any() or not self._tracks_capacity(claim, sc):
                continue
            got, node_cap = self._node_capacity(claim, sc, nodes, rows)
            here = where & got & ~has_static
            req, cap, present = dynamic.setdefault(claim.storage_class, _class_columns(n))
            req += np.where(here, claim.request, 0)
            cap[here] = node_cap[here]
            present |= here
        return score_classes(table, n, [*static.values(), *dynamic.values()])

    def _node_capacity(
        self, claim: PersistentVolumeClaim, sc: StorageClass, nodes: NodeTable, rows: IntpArray
    ) -> tuple[BoolArray, Int64Array]:
        """Per row, whether a CSIStorageCapacity lets the node provision the claim,
        and that object's `capacity` (0 when it only sets maximumVolumeSize).
        hasEnoughCapacity takes the first one the lister yields; Troupe the first
        by namespace/name."""
        n = len(rows)
        got = np.zeros(n, dtype=bool)
        value = np.zeros(n, dtype=np.int64)
        for cap in sorted(self.store.capacities(), key=lambda c: c.key):
            limit = cap.limit
            if (
                cap.storage_class != sc.name
                or limit is None
                or limit < claim.request
                or cap.node_topology is None
            ):
                continue
            new = label_selector_mask(cap.node_topology, nodes, rows) & ~got
            value[new] = cap.capacity or 0
            got |= new
            if got.all():
                break
        return got, value

    # ---- Reserve / Unreserve ---------------------------------------------------------

    def reserve(self, state: CycleState, pod: Pod, node: NodeName) -> Status:
        s = state.get(_STATE_KEY)
        if not isinstance(s, _State):
            return SUCCESS  # no claims (PreFilter skipped)
        if not s.delayed:
            s.all_bound = True
            return SUCCESS
        nodes = self.handle.snapshot()
        row = nodes.row_of.get(node)
        if row is None:
            return error(f"node {node!r} is not in the snapshot", plugin=self.NAME)
        found = self._find(s, nodes, np.array([row], dtype=np.intp))
        reasons = tuple(r for j, r in enumerate(REASONS) if found.rejected[0, j])
        if reasons:
            # Another pod of this cycle took the PV meanwhile (a gang's members).
            return Status(Code.UNSCHEDULABLE, reasons, self.NAME)
        result = PodVolumes()
        matched: set[str] = set()
        for claim, cands, choice in found.static:
            if choice[0] >= 0:
                pv = cands[int(choice[0])]
                result.static.append((self.store.assume_pv(pv, claim), claim))
                matched.add(claim.key)
        for claim, where in found.provisions:
            if where[0] and claim.key not in matched:
                result.provisions.append(self.store.assume_pvc(claim, node))
        s.reserved = result
        s.all_bound = False
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node: NodeName) -> None:
        s = state.get(_STATE_KEY)
        if not isinstance(s, _State) or s.reserved is None:
            return
        r, s.reserved = s.reserved, None
        for pv, _ in r.static:
            self.store.restore_pv(pv.name)
        for c in r.provisions:
            self.store.restore_pvc(c.key)
        if r.written_pvs or r.written_claims:
            self.handle.spawn(self._undo_writes(pod.key, node, r))

    async def _undo_writes(self, pod: PodKey, node: str, r: PodVolumes) -> None:
        """What PreBind wrote for a pod that never reached `node`, undone where the
        claim is still unbound: the selected-node annotation (so the provisioner
        does not provision there) and a PV's claimRef."""
        client = self.handle.client
        for c in r.provisions:
            cur = self.store.api_pvc(c.key)
            if (
                c.key in r.written_claims
                and cur is not None
                and not cur.volume_name
                and cur.annotations.get(ANN_SELECTED_NODE) == node
            ):
                patch: dict[str, Any] = {
                    "metadata": {
                        "resourceVersion": cur.resource_version,
                        "annotations": {ANN_SELECTED_NODE: None},
                    }
                }
                try:
                    await client.patch_persistent_volume_claim(c.key, patch)
                except Exception as e:
                    log.warning("could not undo the selected node of %s (%s): %s", c.key, pod, e)
        for pv, claim in r.static:
            cur_pv = self.store.api_pv(pv.name)
            cur_claim = self.store.api_pvc(claim.key)
            if (
                pv.name in r.written_pvs
                and cur_pv is not None
                and bound_to_claim(cur_pv, claim)
                and cur_claim is not None
                and not cur_claim.volume_name
            ):
                patch2: dict[str, Any] = {
                    "metadata": {
                        "resourceVersion": cur_pv.resource_version,
                        "annotations": {ANN_BOUND_BY_CONTROLLER: None},
                    },
                    "spec": {"claimRef": None},
                }
                try:
                    await client.patch_persistent_volume(pv.name, patch2)
                except Exception as e:
                    log.warning("could not undo the claimRef of PV %s (%s): %s", pv.name, pod, e)

    # ---- PreBind ---------------------------------------------------------------------

    async def pre_bind(self, state: CycleState, pod: Pod, node: NodeName) -> Status:
        s = state.get(_STATE_KEY)
        if not isinstance(s, _State) or s.all_bound or s.reserved is None:
            return SUCCESS
        r = s.reserved
        if not r.static and not r.provisions:
            return SUCCESS
        client = self.handle.client
        try:
            for pv, claim in r.static:
                base = self.store.api_pv(pv.name)
                rv = base.resource_version if base else pv.resource_version
                await client.patch_persistent_volume(
                    pv.name,
                    {
                        "metadata": {
                            "resourceVersion": rv,
                            "annotations": {ANN_BOUND_BY_CONTROLLER: "yes"},
                        },
                        "spec": {"claimRef": claim_ref_body(claim)},
                    },
                )
                r.written_pvs[pv.name] = rv
            for c in r.provisions:
                base_c = self.store.api_pvc(c.key)
                rv = base_c.resource_version if base_c else c.resource_version
                await client.patch_persistent_volume_claim(
                    c.key,
                    {"metadata": {"resourceVersion": rv, "annotations": {ANN_SELECTED_NODE: node}}},
                )
                r.written_claims[c.key] = rv
        except Exception as e:
            return error(f"binding volumes: {e}", plugin=self.NAME)
        return await self._wait_bound(pod, node, r)

    async def _wait_bound(self, pod: Pod, node: NodeName, r: PodVolumes) -> Status:
        clock = self.handle.clock
        deadline = clock.now() + self.args.bind_timeout_seconds
        while True:
            done, problem = self._check(node, r)
            if problem:
                return error(f"binding volumes: {problem}", plugin=self.NAME)
            if done:
                return SUCCESS
            now = clock.now()
            if now >= deadline:
                return error(
                    "binding volumes: timed out waiting for the condition", plugin=self.NAME
                )
            ev = asyncio.Event()
            self._waiters.add(ev)
            timer = clock.call_at(min(deadline, now + _POLL_SECONDS), ev.set)
            try:
                await ev.wait()
            finally:
                timer.cancel()
                self._waiters.discard(ev)

    def _check(self, node: NodeName, r: PodVolumes) -> tuple[bool, str]:
        """checkBindings on the API's objects: (all bound, problem)."""
        table = self.handle.snapshot()
        row = table.row_of.get(node)
        labels: Mapping[str, str] = table.node(row).labels if row is not None else {}
        for pv, claim in r.static:
            cur = self.store.api_pv(pv.name)
            cur_claim = self.store.api_pvc(claim.key)
            if cur is None or cur_claim is None:
                return False, f"failed to check binding: {pv.name} or {claim.key} not found"
            if cur.resource_version == r.written_pvs.get(pv.name):
                return False, ""  # our write has not come back through the watch yet
            if not bound_to_claim(cur, claim):
                return False, f'ClaimRef got reset for pv "{pv.name}"'
            if cur.node_affinity is not None and not _selector_matches(cur, labels, node):
                return False, f'pv "{pv.name}" node affinity doesn\'t match node "{node}"'
            if not cur_claim.fully_bound:
                return False, ""
        for c in r.provisions:
            cur_c = self.store.api_pvc(c.key)
            if cur_c is None:
                return False, f'failed to check provisioning pvc: "{c.key}" not found'
            if cur_c.resource_version == r.written_claims.get(c.key):
                return False, ""
            if cur_c.annotations.get(ANN_SELECTED_NODE) != node:
                return False, f'provisioning failed for PVC "{c.name}"'
            if cur_c.volume_name:
                pv2 = self.store.api_pv(cur_c.volume_name)
                if pv2 is None:
                    return False, ""
                if pv2.node_affinity is not None and not _selector_matches(pv2, labels, node):
                    return False, (f'pv "{pv2.name}" node affinity doesn\'t match node "{node}"')
            if not cur_c.fully_bound:
                return False, ""
        return True, ""

    # ---- queueing hints --------------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD | ActionType.UPDATE),
                _after_storage_class_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD | ActionType.UPDATE
                ),
                _after_claim_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE),
                self._after_pv_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_NODE, ActionType.ADD | ActionType.UPDATE),
                _after_csi_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_DRIVER, ActionType.UPDATE),
                self._after_csi_driver_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.CSI_STORAGE_CAPACITY, ActionType.ADD | ActionType.UPDATE
                ),
                _after_capacity_change,
            ),
        ]

    def _after_pv_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        """A PV helps a pod one of whose claims it is bound to, or, free, one whose
        unbound claims are of its class."""
        if not isinstance(new, PersistentVolume):
            return QueueingHint.QUEUE
        for name in pod_claim_names(pod):
            pvc = self.store.pvc(f"{pod.namespace}/{name}")
            if pvc is None:
                continue
            if pvc.volume_name == new.name or (
                not pvc.volume_name and pvc.storage_class == new.storage_class
            ):
                return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _after_csi_driver_change(self, pod: Pod, old: Any, new: Any) -> QueueingHint:
        """Storage capacity tracking turned off for a driver that provisions one of
        the pod's claims."""
        if not isinstance(old, CSIDriver) or not isinstance(new, CSIDriver):
            return QueueingHint.QUEUE
        if not (old.storage_capacity and not new.storage_capacity):
            return QueueingHint.SKIP
        for name in pod_claim_names(pod):
            pvc = self.store.pvc(f"{pod.namespace}/{name}")
            sc = self.store.storage_class(pvc.storage_class) if pvc is not None else None
            if sc is not None and sc.provisioner == new.name:
                return QueueingHint.QUEUE
        return QueueingHint.SKIP


ClassColumns = tuple[Int64Array, Int64Array, BoolArray]


def score_classes(table: Int64Array, n: int, classes: Sequence[ClassColumns]) -> Int64Array:
    """buildScorerFunction's scorer over n rows: per StorageClass (requested,
    capacity, present on the row), the shape at utilization requested x 100 //
    capacity (100 when the capacity is 0 or exceeded), averaged over the classes
    present and rounded; 0 on a row without any."""
    total = np.zeros(n, dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    for req, cap, present in classes:
        over = (cap == 0) | (req > cap)
        util = np.where(over, MAX_UTILIZATION, req * MAX_UTILIZATION // np.maximum(cap, 1))
        total += np.where(present, table[util], 0)
        count += present
    out: Int64Array = np.where(count > 0, (2 * total + count) // (2 * np.maximum(count, 1)), 0)
    return out


def _class_columns(n: int) -> ClassColumns:
    """(requested, capacity, present) of one StorageClass over n rows."""
    return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)


def _selector_matches(pv: PersistentVolume, labels: Mapping[str, str], node: str) -> bool:
    assert pv.node_affinity is not None
    return node_selector_matches(pv.node_affinity, labels, node)


def _after_claim_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
    if not isinstance(new, PersistentVolumeClaim):
        return QueueingHint.QUEUE
    if new.namespace == pod.namespace and new.name in pod_claim_names(pod):
        return QueueingHint.QUEUE
    return QueueingHint.SKIP


def _after_storage_class_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
    if not isinstance(old, StorageClass) or not isinstance(new, StorageClass):
        return QueueingHint.QUEUE
    if old.allowed_topologies != new.allowed_topologies:
        return QueueingHint.QUEUE
    return QueueingHint.SKIP


def _after_csi_node_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
    # Only a new CSINode matters: Troupe does not translate in-tree PVs to CSI,
    # so the migrated-plugins annotation upstream looks at changes nothing here.
    return QueueingHint.QUEUE if not isinstance(old, CSINode) else QueueingHint.SKIP


def _after_capacity_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
    if not isinstance(old, CSIStorageCapacity) or not isinstance(new, CSIStorageCapacity):
        return QueueingHint.QUEUE
    o, n = old.limit, new.limit
    if n is not None and (o is None or n > o):
        return QueueingHint.QUEUE
    return QueueingHint.SKIP
