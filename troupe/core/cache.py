"""The scheduler's cache: nodes, assigned and assumed pods, PodGroups.

It owns the master `NodeTable` and keeps it up to date incrementally; each
scheduling cycle copies the rows that changed into its `Snapshot`
(`update_snapshot`), tracked by a dirty-row set so an idle cycle costs nothing.

Pod state machine (as kube-scheduler's backend/cache):

    Initial --assume--> Assumed --add (the API confirms the binding)--> Added
    Assumed --forget--> Initial           (the binding cycle failed)
    Assumed --finish_binding, TTL passes--> Expired (removed by cleanup_expired)
    Added --update--> Added;  Added --remove--> Initial

Every charge goes through `snapshot.pod_charge`, so an isolated-CPU pod is
charged to the isolated resource and not to `cpu` on add, update, remove,
assume and forget alike. Terminal pods (Succeeded, Failed) are not charged.
Pods whose node is not known yet are remembered and charged when it arrives.

The volumes of charged pods are counted in `volumes` (troupe.core.volumes), which
also holds the storage objects the volume plugins read.

The cache also indexes every known pod by PodGroup (pending ones too, through
`track_pending`), which is what the gang plugin lists.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from troupe.api.types import (
    INT64_MAX,
    INT64_MIN,
    CompositePodGroup,
    GroupKey,
    IsolatedCPU,
    LabelSelector,
    Node,
    NodeName,
    Pod,
    PodGroup,
    PodKey,
    Requirement,
    Workload,
    composite_key,
)
from troupe.core.clock import Clock
from troupe.core.snapshot import (
    NodeTable,
    Snapshot,
    check_node,
    pod_charge,
)
from troupe.core.volumes import VolumeStore
from troupe.dra.store import DeviceStore

log = logging.getLogger(__name__)


class PodAlreadyInCache(ValueError):
    """`assume_pod` of a pod the cache holds (bound or assumed): nothing changed."""

    def __init__(self, key: PodKey) -> None:
        super().__init__(f"pod {key} is in the cache already, so can't be assumed")
        self.key = key


@dataclass(frozen=True, slots=True)
class CacheStats:
    nodes: int
    pods: int
    assumed_pods: int
    pending_pods: int
    pod_groups: int


@dataclass(slots=True)
class _PodState:
    pod: Pod
    node: NodeName
    assumed: bool
    binding_finished: bool = False
    deadline: float | None = None
    charged: bool = False


def _charged_alike(a: Pod, b: Pod) -> bool:
    """Whether two views of one pod charge its node alike: what NodeTable.charge
    counts (requests, host ports, the label and affinity-term counters), the
    isolated-CPU rule (annotations) and the volume store (spec.volumes) read."""
    return (
        not b.terminal
        and a.requests == b.requests
        and a.nonzero_cpu == b.nonzero_cpu
        and a.nonzero_memory == b.nonzero_memory
        and a.host_ports == b.host_ports
        and a.namespace == b.namespace
        and a.labels == b.labels
        and a.annotations == b.annotations
        and a.pod_affinity == b.pod_affinity
        and a.pod_anti_affinity == b.pod_anti_affinity
        and _spec_volumes(a) == _spec_volumes(b)
    )


def _spec_volumes(pod: Pod) -> object:
    spec = pod.raw.get("spec")
    return spec.get("volumes") if isinstance(spec, Mapping) else None


class Cache:
    def __init__(
        self, clock: Clock, isolated: IsolatedCPU | None = None, assumed_ttl: float = 0.0
    ) -> None:
        self.clock = clock
        self.isolated = isolated or IsolatedCPU()
        self.assumed_ttl = assumed_ttl
        self.table = NodeTable()
        self.volumes = VolumeStore()
        self.devices = DeviceStore()
        self._pods: dict[PodKey, _PodState] = {}
        self._nodes: dict[str, Node] = {}
        self._on_missing_node: dict[str, set[PodKey]] = {}
        self._pending: dict[PodKey, Pod] = {}
        self._groups: dict[GroupKey, PodGroup] = {}
        self._invalid_groups: dict[GroupKey, str] = {}
        # CompositePodGroups, and every composite's children (PodGroups and
        # composites naming it as their parent) by the composite's key.
        self._composites: dict[GroupKey, CompositePodGroup] = {}
        self._children: dict[GroupKey, set[GroupKey]] = {}
        self._workloads: dict[tuple[str, str, str], Workload] = {}
        self._group_pods: dict[GroupKey, set[PodKey]] = {}
        self._dirty: set[int] = set()
        self._structure_version = 0
        self._snapshot_structure = -1

    # ---- nodes ---------------------------------------------------------------------

    def node(self, name: str) -> Node | None:
        return self._nodes.get(name)

    def nodes(self) -> Iterable[Node]:
        return self._nodes.values()

    def _structure_changed(self) -> None:
        self._structure_version += 1

    def _shape(self) -> tuple[int, int, int, int, int]:
        t = self.table
        return (
            t.capacity,
            len(t.resources),
            len(t.taint_list),
            len(t.feature_list),
            len(t.labels),
        )

    def add_node(self, node: Node) -> None:
        """Add (or update) a node. Raises ValueError, changing nothing, for a node
        that no row can hold (an amount beyond int64; the parser refuses those)."""
        check_node(node)
        if node.name in self._nodes:
            self.update_node(node)
            return
        row = self.table.allocate_row(node.name)
        self.table.set_node(row, node)
        self._nodes[node.name] = node
        self._structure_changed()
        self._dirty.add(row)
        for key in self._on_missing_node.pop(node.name, set()):
            st = self._pods.get(key)
            if st is not None and not st.charged:
                self._charge(st, +1)

    def update_node(self, node: Node) -> None:
        check_node(node)
        row = self.table.row_of.get(node.name)
        if row is None:
            self.add_node(node)
            return
        shape = self._shape()
        self.table.set_node(row, node)
        self._nodes[node.name] = node
        if self._shape() != shape:
            self._structure_changed()
        self._dirty.add(row)

    def remove_node(self, name: str) -> None:
        row = self.table.row_of.get(name)
        if row is None:
            return
        # Pods stay known: charged again if the node comes back.
        for key in list(self.table.pods[row]):
            st = self._pods.get(key)
            if st is not None:
                st.charged = False
                self._on_missing_node.setdefault(name, set()).add(key)
        self.table.clear_row(row)
        self.volumes.node_removed(name)
        del self._nodes[name]
        self._dirty.add(row)
        self._structure_changed()

    # ---- charging ------------------------------------------------------------------

    def _charge(self, st: _PodState, sign: int) -> None:
        if sign > 0 and (st.charged or st.pod.terminal):
            return
        if sign < 0 and not st.charged:
            self._on_missing_node.get(st.node, set()).discard(st.pod.key)
            return
        row = self.table.row_of.get(st.node)
        if row is None:
            if sign > 0:
                self._on_missing_node.setdefault(st.node, set()).add(st.pod.key)
            return
        shape = self._shape()
        self.table.charge(row, st.pod, pod_charge(st.pod, self.isolated), sign)
        if sign > 0:
            self.volumes.pod_added(st.node, st.pod)
        else:
            self.volumes.pod_removed(st.pod)
        if self._shape() != shape:
            self._structure_changed()
        st.charged = sign > 0
        self._dirty.add(row)

    # ---- pods ----------------------------------------------------------------------

    def assume_pod(self, pod: Pod, node: NodeName) -> None:
        """Charge `pod` to `node` ahead of its binding. Raises `PodAlreadyInCache`,
        changing nothing, if the pod is bound or assumed already."""
        if pod.key in self._pods:
            raise PodAlreadyInCache(pod.key)
        st = _PodState(pod, node, assumed=True)
        self._pods[pod.key] = st
        self._charge(st, +1)

    def finish_binding(self, key: PodKey) -> None:
        st = self._pods.get(key)
        if st is None or not st.assumed:
            return
        st.binding_finished = True
        if self.assumed_ttl > 0:
            st.deadline = self.clock.now() + self.assumed_ttl

    def forget_pod(self, key: PodKey) -> None:
        st = self._pods.get(key)
        if st is None:
            return
        if not st.assumed:
            log.warning("not forgetting pod %s: it is bound, not assumed", key)
            return
        self._charge(st, -1)
        del self._pods[key]

    def add_pod(self, pod: Pod) -> None:
        """An assigned pod from the API (confirms an assumed one)."""
        key = pod.key
        st = self._pods.get(key)
        if st is not None:
            row = self.table.row_of.get(st.node) if st.charged else None
            if row is not None and st.node == pod.node_name and _charged_alike(st.pod, pod):
                # Our own bind coming back (the pod as assumed, now bound), or
                # an update of nothing a node is charged for: the charges stand,
                # the row holds the new view.
                self._pods[key] = _PodState(pod, st.node, assumed=False, charged=True)
                self.table.pods[row][key] = pod
                self.table.generation[row] += 1
                self._dirty.add(row)
                self._index_group(pod)
                return
            if st.assumed and st.node != pod.node_name:
                log.warning("pod %s was assumed on %s but bound to %s", key, st.node, pod.node_name)
            self._charge(st, -1)
            self._pods[key] = st = _PodState(pod, NodeName(pod.node_name), assumed=False)
        else:
            st = _PodState(pod, NodeName(pod.node_name), assumed=False)
            self._pods[key] = st
        self._charge(st, +1)
        self._index_group(pod)

    def update_pod(self, old: Pod, new: Pod) -> None:
        st = self._pods.get(new.key)
        if st is None:
            self.add_pod(new)
            return
        self._charge(st, -1)
        st.pod = new
        st.node = NodeName(new.node_name or st.node)
        st.assumed = False
        self._charge(st, +1)
        self._index_group(new)

    def remove_pod(self, key: PodKey) -> None:
        st = self._pods.pop(key, None)
        if st is not None:
            self._charge(st, -1)
            self._unindex_group(st.pod)

    def cleanup_expired(self) -> list[PodKey]:
        if self.assumed_ttl <= 0:
            return []
        now = self.clock.now()
        expired = [
            k
            for k, st in self._pods.items()
            if st.assumed and st.binding_finished and st.deadline is not None and st.deadline <= now
        ]
        for k in expired:
            log.warning("assumed pod %s expired", k)
            st = self._pods.pop(k)
            self._charge(st, -1)
        return expired

    def is_assumed(self, key: PodKey) -> bool:
        st = self._pods.get(key)
        return st is not None and st.assumed

    def pod(self, key: PodKey) -> Pod | None:
        """An assumed or added pod."""
        st = self._pods.get(key)
        return st.pod if st is not None else None

    def pod_node(self, key: PodKey) -> NodeName | None:
        st = self._pods.get(key)
        return st.node if st is not None else None

    def known_pod(self, key: PodKey) -> Pod | None:
        st = self._pods.get(key)
        return st.pod if st is not None else self._pending.get(key)

    # ---- pending pods and groups -----------------------------------------------------

    def track_pending(self, pod: Pod) -> None:
        self._pending[pod.key] = pod
        self._index_group(pod)

    def untrack_pending(self, key: PodKey) -> None:
        pod = self._pending.pop(key, None)
        if pod is not None and key not in self._pods:
            self._unindex_group(pod)

    def _index_group(self, pod: Pod) -> None:
        g = pod.group_key
        if g is not None:
            self._group_pods.setdefault(g, set()).add(pod.key)

    def _unindex_group(self, pod: Pod) -> None:
        g = pod.group_key
        if g is not None and pod.key not in self._pending and pod.key not in self._pods:
            members = self._group_pods.get(g)
            if members is not None:
                members.discard(pod.key)
                if not members:
                    del self._group_pods[g]

    def set_workload(self, kind: str, namespace: str, name: str, w: Workload | None) -> None:
        """Services and controllers, for spreading's default selector (None: deleted)."""
        if w is None:
            self._workloads.pop((kind, namespace, name), None)
        else:
            self._workloads[(kind, namespace, name)] = w

    def default_selector(self, pod: Pod) -> LabelSelector | None:
        """The selector kube-scheduler's spreading defaults use for `pod`: the
        selectors of the Services that select it, and of its controlling
        ReplicaSet, StatefulSet or ReplicationController (helper.DefaultSelector)."""
        reqs: list[Requirement] = []
        for (kind, ns, _), w in self._workloads.items():
            if (
                kind == "Service"
                and ns == pod.namespace
                and w.selector is not None
                and w.selector.matches(pod.labels)
            ):
                reqs += [r for r in w.selector.requirements if r not in reqs]
        for kind, name in pod.owner_references:
            owner = self._workloads.get((kind, pod.namespace, name))
            if owner is not None and kind != "Service" and owner.selector is not None:
                reqs += [r for r in owner.selector.requirements if r not in reqs]
                break
        return LabelSelector(tuple(reqs)) if reqs else None

    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        """Namespace labels, for affinity terms' namespaceSelector (None: deleted)."""
        if labels is None:
            self.table.namespace_labels.pop(name, None)
        else:
            self.table.namespace_labels[name] = dict(labels)

    def add_pod_group(self, pg: PodGroup) -> None:
        self._unlink(self._groups.get(pg.key))
        self._groups[pg.key] = pg
        self._invalid_groups.pop(pg.key, None)
        self._link(pg)

    def update_pod_group(self, pg: PodGroup) -> None:
        self.add_pod_group(pg)

    def remove_pod_group(self, key: GroupKey) -> None:
        self._unlink(self._groups.pop(key, None))
        self._invalid_groups.pop(key, None)

    def set_invalid_pod_group(self, key: GroupKey, message: str) -> None:
        """A PodGroup that exists but cannot be read: its members wait, and say why
        (not "not found"). A readable version that was known is dropped. (Also
        for a CompositePodGroup, by its key.)"""
        self._unlink(self._groups.pop(key, None))
        self._unlink(self._composites.pop(key, None))
        self._invalid_groups[key] = message

    # ---- CompositePodGroups ------------------------------------------------------------

    def add_composite(self, c: CompositePodGroup) -> None:
        self._unlink(self._composites.get(c.key))
        self._composites[c.key] = c
        self._invalid_groups.pop(c.key, None)
        self._link(c)

    def remove_composite(self, key: GroupKey) -> None:
        self._unlink(self._composites.pop(key, None))
        self._invalid_groups.pop(key, None)

    def composite(self, key: GroupKey) -> CompositePodGroup | None:
        return self._composites.get(key)

    def composites(self) -> list[CompositePodGroup]:
        return list(self._composites.values())

    def composite_children(self, key: GroupKey) -> list[GroupKey]:
        """The keys of the PodGroups and CompositePodGroups whose parent is the
        composite `key`, sorted."""
        return sorted(self._children.get(key, ()))

    def _link(self, g: PodGroup | CompositePodGroup) -> None:
        if g.parent:
            self._children.setdefault(composite_key(g.namespace, g.parent), set()).add(g.key)

    def _unlink(self, g: PodGroup | CompositePodGroup | None) -> None:
        if g is None or not g.parent:
            return
        parent = composite_key(g.namespace, g.parent)
        children = self._children.get(parent)
        if children is not None:
            children.discard(g.key)
            if not children:
                del self._children[parent]

    def invalid_pod_group(self, key: GroupKey) -> str | None:
        """Why the PodGroup `key` is invalid (the field and the problem), if it is."""
        return self._invalid_groups.get(key)

    def pod_groups(self) -> list[PodGroup]:
        return list(self._groups.values())

    def pod_group(self, key: GroupKey) -> PodGroup | None:
        return self._groups.get(key)

    def pods_in_group(self, key: GroupKey) -> list[Pod]:
        out = []
        for k in sorted(self._group_pods.get(key, ())):
            p = self.known_pod(k)
            if p is not None:
                out.append(p)
        return out

    # ---- snapshot --------------------------------------------------------------------

    def update_snapshot(self, snapshot: Snapshot) -> None:
        """Copy into `snapshot` the rows changed since the last call.

        Counters a plugin registered on the snapshot are built here too, so that
        the cache keeps them up to date from now on."""
        for matcher in snapshot.counters.keys() - self.table.counters.keys():
            self.table.match_counts(matcher)
        if (
            self._snapshot_structure != self._structure_version
            or snapshot.capacity != self.table.capacity
        ):
            snapshot.copy_rows_from(self.table, None)
            self._snapshot_structure = self._structure_version
        elif self._dirty:
            snapshot.copy_rows_from(
                self.table, np.fromiter(self._dirty, dtype=np.intp, count=len(self._dirty))
            )
        self._dirty.clear()

    def node_usage(self) -> dict[str, dict[str, tuple[int, int]]]:
        t = self.table
        out: dict[str, dict[str, tuple[int, int]]] = {}
        for row in t.valid_rows().tolist():
            out[t.names[row]] = {
                r: (int(t.requested[row, c]), int(t.allocatable[row, c])) for r, c in t.col.items()
            }
        return out

    def recompute_requested(self) -> np.ndarray:
        """Requested columns recomputed from every charged pod (tests compare), held
        as the table holds them: a sum beyond int64 at the nearest bound."""
        t = self.table
        exact: dict[tuple[int, int], int] = {}
        for st in self._pods.values():
            if not st.charged:
                continue
            row = t.row_of[st.node]
            for r, v in pod_charge(st.pod, self.isolated).resources.items():
                cell = (row, t.col[r])
                exact[cell] = exact.get(cell, 0) + v
        req = np.zeros_like(t.requested)
        for (row, col), v in exact.items():
            req[row, col] = min(max(v, INT64_MIN), INT64_MAX)
        return req

    def requested_exact(self) -> dict[tuple[str, str], int]:
        """Every non-zero requested amount, exactly, by (node, resource)."""
        t = self.table
        out: dict[tuple[str, str], int] = {}
        for row in t.valid_rows().tolist():
            for r, c in t.col.items():
                v = t.requested_exact(row, c)
                if v:
                    out[(t.names[row], r)] = v
        return out

    def statistics(self) -> CacheStats:
        return CacheStats(
            nodes=len(self._nodes),
            pods=sum(1 for s in self._pods.values() if not s.assumed),
            assumed_pods=sum(1 for s in self._pods.values() if s.assumed),
            pending_pods=len(self._pending),
            pod_groups=len(self._groups),
        )
