"""Event handling: cluster events into the cache, the queue and the plugins
(kube-scheduler's eventhandlers.go), and the reports written on objects that
cannot be read. Which handler takes a kind's events is its row of
`troupe.api.kinds.KINDS` (`handlers`, the dispatch the operator and the
simulator feed). A standby replica handles every event too (its cache stays
warm) but writes nothing until it leads (`enable_writes`)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from troupe.api.elasticquota import parse_elastic_quota
from troupe.api.kinds import KINDS, Kind
from troupe.api.parse import (
    parse_composite_pod_group,
    parse_node,
    parse_pdb,
    parse_pod_group,
    parse_priority_class,
    parse_workload,
)
from troupe.api.storage import parse_storage_object
from troupe.api.types import (
    NATIVE_POD_GROUP_API,
    GroupKey,
    InvalidObject,
    Node,
    Pod,
    PodKey,
    composite_key,
    pod_group_key,
)
from troupe.core.context import (
    SchedulerContext,
    as_mapping,
    object_ref,
    pod_ref,
    pod_scheduled_condition,
)
from troupe.core.queue import pod_updated
from troupe.dra.types import ResourceClaim, parse_dra_object
from troupe.framework.events import (
    ActionType,
    ClusterEvent,
    EventResource,
)
from troupe.framework.status import Status

log = logging.getLogger(__name__)
# What a new pending pod is to the queue and the plugins watching (made once:
# every pod added emits it).
_UNSCHEDULED_POD_ADD = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.ADD)

# What takes one object's event: the object, and whether it was deleted.
Handler = Callable[[Mapping[str, Any], bool], None]

_ASSIGNED_POD_ADD = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD)


class EventHandlers:
    """The on_* handlers the operator (or the simulator) feeds cluster events to."""

    def __init__(self, ctx: SchedulerContext) -> None:
        self.ctx = ctx
        # What it writes to (shared objects, never replaced).
        self.cache = ctx.cache
        self.queue = ctx.queue
        self.handle = ctx.handle
        self.profiles = ctx.profiles
        self.invalid = ctx.invalid
        self.priority_classes = ctx.priority_classes
        self.pod_parser = ctx.pod_parser
        self.milli = ctx.milli
        self.waiting_pods = ctx.waiting_pods
        self.metrics = ctx.metrics

    def handler(self, kind: Kind) -> Handler:
        """The handler its row of `troupe.api.kinds.KINDS` names for `kind`; a
        handler of several kinds (its first parameter is `kind`) is told which."""
        if kind.handler is None:
            raise ValueError(f"{kind.kind} is not watched")
        method: Callable[..., None] = getattr(self, kind.handler)
        first = next(iter(inspect.signature(method).parameters))
        return functools.partial(method, kind.kind) if first == "kind" else method

    def handlers(self) -> dict[str, Handler]:
        """The event dispatch: every reflector's key (`troupe.api.kinds.WATCHED`)
        -> the handler that takes its events."""
        return {key: self.handler(k) for k in KINDS if k.watched for key in k.keys}

    def handles(self, pod: Pod) -> bool:
        return pod.scheduler_name in self.profiles

    def pre_enqueue(self, pod: Pod) -> Status:
        profile = self.profiles[pod.scheduler_name]
        st = profile.run_pre_enqueue(pod)
        self._report_gate(pod, st, st.is_success or not profile.reports_pre_enqueue(st.plugin))
        return st

    def _report_gate(self, pod: Pod, st: Status, silent: bool) -> None:
        """Say on the pod why PreEnqueue keeps it waiting (a missing or invalid
        PodGroup...): PodScheduled=False, reason Unschedulable, and an event, once
        per change of the message, however often the pod's events repeat.
        `silent`: it passed, or the plugin that keeps it waiting declares that
        the pod's own spec says why (SchedulingGates)."""
        ctx, key = self.ctx, pod.key
        records = ctx.records
        if silent:
            rec = records.get(key)
            if rec is not None:
                rec.gate_reported = rec.held_gate = None
                records.prune(key)
            return
        message = st.message or f"rejected by PreEnqueue plugin {st.plugin}"
        rec = records.of(key)
        if rec.gate_reported == message:
            return
        records.set_failure(key, message, st.code)
        if not ctx.writes_enabled:
            rec.held_gate = (pod, message)
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no running loop (a synchronous caller): next time
            return
        ctx.spawn(ctx.report_failure(pod_ref(pod), message, pod_scheduled_condition(pod.raw)))
        rec.gate_reported = message

    def on_priority_class(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        pc = parse_priority_class(obj)
        if isinstance(pc, InvalidObject):
            self._report_invalid(pc)
            return
        if deleted:
            self.priority_classes.pop(pc.name, None)
        else:
            self.priority_classes[pc.name] = pc

    def on_workload(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        """A Service, ReplicaSet, StatefulSet or ReplicationController (spreading
        defaults build their selector from them)."""
        w = parse_workload(obj)
        if isinstance(w, InvalidObject):
            self._report_invalid(w)
            return
        self.cache.set_workload(w.kind, w.namespace, w.name, None if deleted else w)

    def on_pdb(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        """A policy/v1 PodDisruptionBudget (preemption respects them, best effort)."""
        pdb = parse_pdb(obj)
        if isinstance(pdb, InvalidObject):
            self._report_invalid(pdb)
            return
        if deleted:
            self.handle.pdbs.pop(pdb.key, None)
        else:
            self.handle.pdbs[pdb.key] = pdb

    def on_elastic_quota(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        """An ElasticQuota (scheduling.x-k8s.io), kept in the Handle for
        CapacityScheduling and told about when its min or max changes (a change
        of its status alone, our own write coming back, is not an event)."""
        eq = parse_elastic_quota(obj, self.milli)
        if isinstance(eq, InvalidObject):
            self._report_invalid(eq)
            return
        self.invalid.pop(eq.key, None)
        quotas = self.handle.elastic_quotas
        old = quotas.get(eq.key)
        if deleted:
            quotas.pop(eq.key, None)
            gone = old if old is not None else eq
            self.ctx.emit(ClusterEvent(EventResource.ELASTIC_QUOTA, ActionType.DELETE), gone, None)
        else:
            quotas[eq.key] = eq
            if old is not None and old.same_spec(eq):
                return
            action = ActionType.ADD if old is None else ActionType.UPDATE_OTHER
            self.ctx.emit(ClusterEvent(EventResource.ELASTIC_QUOTA, action), old, eq)
        self.ctx.notify()

    def on_namespace(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        md = obj.get("metadata")
        if not isinstance(md, Mapping) or not isinstance(md.get("name"), str):
            log.warning("ignoring a Namespace without metadata.name")
            return
        labels = md.get("labels") if isinstance(md.get("labels"), Mapping) else {}
        self.cache.set_namespace(md["name"], None if deleted else labels)

    def on_volume_object(self, kind: str, obj: Mapping[str, Any], deleted: bool = False) -> None:
        """A PersistentVolume, PersistentVolumeClaim, StorageClass, CSINode,
        CSIDriver or CSIStorageCapacity (`kind`), into the volume store."""
        new = parse_storage_object(kind, obj)
        if isinstance(new, InvalidObject):
            self._report_invalid(new)
            return
        self.invalid.pop(new.key if hasattr(new, "key") else new.name, None)
        old = self.cache.volumes.set(new, deleted)
        action = ActionType.DELETE if deleted else ActionType.UPDATE if old else ActionType.ADD
        self.ctx.emit(ClusterEvent(EventResource(kind), action), old, None if deleted else new)
        self.ctx.notify()

    def on_dra_object(self, kind: str, obj: Mapping[str, Any], deleted: bool = False) -> None:
        """A ResourceClaim, ResourceSlice or DeviceClass (`kind`, resource.k8s.io/v1),
        into the device store."""
        new = parse_dra_object(kind, obj)
        if isinstance(new, InvalidObject):
            self._report_invalid(new)
            return
        self.invalid.pop(new.key, None)
        if isinstance(new, ResourceClaim) and not deleted and self.cache.devices.stale(new):
            return  # older than what PreBind's own write returned: no change
        old = self.cache.devices.set(new, deleted)
        action = ActionType.DELETE if deleted else ActionType.UPDATE if old else ActionType.ADD
        self.ctx.emit(ClusterEvent(EventResource(kind), action), old, None if deleted else new)
        self.ctx.notify()

    def on_node(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        if deleted:
            name = str((obj.get("metadata") or {}).get("name", ""))
            old = self.cache.node(name)
            self.cache.remove_node(name)
            self.invalid.pop(name, None)
            self.ctx.emit(ClusterEvent(EventResource.NODE, ActionType.DELETE), old, None)
            return
        node = parse_node(obj, self.milli)
        if isinstance(node, InvalidObject):
            self._report_invalid(node)
            # A node we cannot read is not one we place pods on: a known node
            # updated to an unreadable state leaves scheduling (its pods stay
            # known and are charged again when a readable version arrives).
            # kube's admission would have refused such an update.
            gone = self.cache.node(node.name)
            if gone is not None:
                self.cache.remove_node(node.name)
                self.ctx.emit(ClusterEvent(EventResource.NODE, ActionType.DELETE), gone, None)
            return
        self.invalid.pop(node.name, None)
        old = self.cache.node(node.name)
        if old is None:
            self.cache.add_node(node)
            event = ClusterEvent(EventResource.NODE, ActionType.ADD)
        else:
            self.cache.update_node(node)
            action = _node_update_action(old, node)
            if not action:
                return
            event = ClusterEvent(EventResource.NODE, action)
        self.ctx.emit(event, old, node)
        self.ctx.notify()

    def on_pod(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        pod = self.pod_parser.parse(obj, self.priority_classes, self.milli)
        if deleted:
            self.pod_parser.forget(obj)
        if isinstance(pod, InvalidObject):
            if deleted:
                self._forget_pod(PodKey(pod.key))
            else:
                self._report_invalid(pod, obj)
            return
        self.invalid.pop(pod.key, None)
        key = pod.key
        if deleted:
            self._forget_pod(key)
            self._on_pod_deleted(pod)
            return
        if pod.node_name:
            self._on_assigned_pod(pod)
            return
        if not self.handles(pod):
            return
        if self._known_elsewhere(pod):
            return
        old = self.queue.get(key)
        self.cache.track_pending(pod)
        self._track_nomination(pod)
        if pod.deleting:
            self.queue.delete(key)
            return
        if old is None:
            if self.cache.is_assumed(key):
                return  # being bound by us; the bound event will follow
            self.queue.add(pod)
            qpi = self.queue.get(key)
            where = "gated" if qpi is not None and qpi.gated else "active"
            self.metrics.queue_incoming.labels(where, "PodAdd").inc()
            self.ctx.emit(_UNSCHEDULED_POD_ADD, None, pod)
        else:
            changed = pod_updated(old.pod, pod)
            self.queue.update(old.pod, pod)
            if not changed:
                # Only status or bookkeeping changed (our own PodScheduled condition
                # coming back, a re-list): kube-scheduler ignores such updates.
                return
            self.ctx.emit(
                ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE), old.pod, pod
            )
        self.ctx.notify()

    def _track_nomination(self, pod: Pod) -> None:
        """A pending pod's status.nominatedNodeName into the nominator; an update
        without one keeps the nomination we hold (our write may not be back yet),
        as kube-scheduler's nominator does."""
        status = as_mapping(pod.raw.get("status"))
        node = status.get("nominatedNodeName")
        if isinstance(node, str) and node:
            self.handle.nominator.add(pod, node)
        else:
            self.handle.nominator.update(pod)

    def _known_elsewhere(self, pod: Pod) -> bool:
        """Whether a pending pod's event is stale: the cache holds the pod bound.

        A new leader's first list, a replayed watch or a simulator input may show a
        pod pending after we saw it bound; queueing it would schedule it twice.
        A different uid under the same name is a re-created pod: the bound one
        is gone (its delete was missed), so it leaves the cache.
        """
        key = pod.key
        cached = self.cache.pod(key)
        if cached is None or self.cache.is_assumed(key):
            return False  # an assumed pod's pending updates are tracked below
        if pod.uid and cached.uid and pod.uid != cached.uid:
            log.info("pod %s was re-created (uid %s); dropping the old one", key, pod.uid)
            self.cache.remove_pod(key)
            self.ctx.emit(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), cached, None)
            return False
        log.info("ignoring a pending event of pod %s: it is bound to %s", key, cached.node_name)
        if key in self.queue:
            self.queue.delete(key)
        return True

    def _on_assigned_pod(self, pod: Pod) -> None:
        key = pod.key
        rec = self.ctx.records.get(key)
        if rec is not None:
            rec.gate_reported = None
        self.handle.nominator.delete(key)
        if key in self.queue:
            self.queue.delete(key)
        self.cache.untrack_pending(key)
        old = self.cache.pod(key)
        if old is None or self.cache.is_assumed(key):
            # The first bound version of a pod, ours (it confirms what we
            # assumed) or another's, is AssignedPod/Add, as kube-scheduler's
            # addAssignedPodToCache: a re-list that brings an assumed pod
            # already Running says so too. Consumers that counted the pod from
            # Reserve (QuotaLedger) take it as the same pod, not a second one.
            self.cache.add_pod(pod)
            self.ctx.records.clear_failure(key)
            self.ctx.emit(_ASSIGNED_POD_ADD, None, pod)
        else:
            self.cache.update_pod(old, pod)
            action = _pod_update_action(old, pod)
            if action:
                self.ctx.emit(ClusterEvent(EventResource.ASSIGNED_POD, action), old, pod)
        self.ctx.notify()

    def _forget_pod(self, key: PodKey) -> None:
        """A deleted pod leaves nothing behind: every per-pod record of its
        failures and of what was reported on it goes here, in one place."""
        self.invalid.pop(key, None)
        self.ctx.records.forget(key)

    def _on_pod_deleted(self, pod: Pod) -> None:
        key = pod.key
        self.handle.nominator.delete(key)
        self.queue.delete(key)
        self.cache.untrack_pending(key)
        wp = self.waiting_pods.get(key)
        if wp is not None:
            wp.reject("", "pod deleted while waiting at Permit")
        old = self.cache.pod(key)
        if old is None:
            self.ctx.emit(ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.DELETE), pod, None)
        elif not self.cache.is_assumed(key):
            self.cache.remove_pod(key)
            self.ctx.emit(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), old, None)
            self.ctx.notify()

    def on_pod_group(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        pg = parse_pod_group(obj)
        if isinstance(pg, InvalidObject):
            api = str(obj.get("apiVersion") or "")
            native = api.split("/")[0] == NATIVE_POD_GROUP_API
            self._on_invalid_pod_group(pg, deleted, pod_group_key(pg.namespace, pg.name, native))
            return
        old = self.cache.pod_group(pg.key)
        if deleted:
            self.cache.remove_pod_group(pg.key)
            action = ActionType.DELETE
        elif old is None:
            self.cache.add_pod_group(pg)
            action = ActionType.ADD
        else:
            self.cache.update_pod_group(pg)
            action = ActionType.UPDATE
            if replace(old, status=pg.status) == pg:
                return  # only the status changed (our own patch coming back)
        self.ctx.emit(ClusterEvent(EventResource.POD_GROUP, action), old, pg)
        self.ctx.notify()

    def on_composite_pod_group(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        """A CompositePodGroup (scheduling.k8s.io/v1alpha3): kept in the cache
        with its place in the tree; a change of its status alone (our own patch
        coming back) is not an event."""
        c = parse_composite_pod_group(obj)
        if isinstance(c, InvalidObject):
            key = composite_key(c.namespace, c.name)
            old_c = self.cache.composite(key)
            if deleted:
                self.cache.remove_composite(key)
                self.invalid.pop(c.key, None)
            else:
                self._report_invalid(c)
                self.cache.set_invalid_pod_group(key, c.message)
            if old_c is not None:
                event = ClusterEvent(EventResource.COMPOSITE_POD_GROUP, ActionType.DELETE)
                self.ctx.emit(event, old_c, None)
            self.ctx.notify()
            return
        self.invalid.pop(f"{c.namespace}/{c.name}", None)
        old = self.cache.composite(c.key)
        if deleted:
            self.cache.remove_composite(c.key)
            action = ActionType.DELETE
        else:
            self.cache.add_composite(c)
            action = ActionType.ADD if old is None else ActionType.UPDATE
            if old is not None and replace(old, status=c.status) == c:
                return  # only the status changed
        self.ctx.emit(ClusterEvent(EventResource.COMPOSITE_POD_GROUP, action), old, c)
        self.ctx.notify()

    def _on_invalid_pod_group(self, bad: InvalidObject, deleted: bool, key: GroupKey) -> None:
        """An unreadable PodGroup: its members wait and say why ("is invalid:
        spec.minMember: ..."), not "not found"; a readable version known before
        stops being used."""
        old = self.cache.pod_group(key)
        if deleted:
            self.cache.remove_pod_group(key)
            self.invalid.pop(bad.key, None)
        else:
            self._report_invalid(bad)
            self.cache.set_invalid_pod_group(key, bad.message)
        if old is not None:
            self.ctx.emit(ClusterEvent(EventResource.POD_GROUP, ActionType.DELETE), old, None)
        # Members gated on the group run PreEnqueue again, so their reason changes.
        self.ctx.activate(p.key for p in self.cache.pods_in_group(key))

    def _report_invalid(self, bad: InvalidObject, obj: Mapping[str, Any] | None = None) -> None:
        """Log a malformed object once per change and, for a pod that is ours,
        report it on the pod (FailedScheduling event and PodScheduled condition)."""
        if bad.kind != "Pod":
            if self.invalid.get(bad.key) != bad:
                log.warning("ignoring malformed %s %s: %s", bad.kind, bad.key, bad.message)
            self.invalid[bad.key] = bad
            return
        raw: Mapping[str, Any] = obj if isinstance(obj, Mapping) else {}
        spec = as_mapping(raw.get("spec"))
        key = PodKey(bad.key)
        if self.invalid.get(bad.key) != bad:
            log.warning("ignoring malformed %s %s: %s", bad.kind, bad.key, bad.message)
        self.invalid[bad.key] = bad
        self.ctx.records.set_failure(key, bad.message)
        if spec.get("schedulerName", "default-scheduler") not in self.profiles:
            return  # not ours: another scheduler reports it
        node = spec.get("nodeName")
        if isinstance(node, str) and node:
            return  # already bound: nothing for a scheduler to say
        ref = object_ref(raw, "Pod", bad.namespace, bad.name)
        rec = self.ctx.records.of(key)
        if rec.reported == (ref.uid, bad.message):
            return  # said already for this pod and this problem
        if not self.ctx.writes_enabled:
            rec.held_report = (ref, bad.message)
            return
        rec.reported = (ref.uid, bad.message)
        self.ctx.spawn(self.ctx.report_failure(ref, bad.message, pod_scheduled_condition(raw)))

    def enable_writes(self) -> None:
        """This replica leads now: write what was held back while standing by."""
        ctx = self.ctx
        ctx.writes_enabled = True
        # Statuses computed while standing by were not written: recompute them.
        for pg in self.cache.pod_groups():
            event = ClusterEvent(EventResource.POD_GROUP, ActionType.UPDATE)
            for watcher in self.handle.watchers:
                try:
                    watcher(event, pg, pg)
                except Exception:
                    log.exception("event watcher failed on %s", event)
        for key, rec in ctx.records.items():
            if rec.held_gate is not None:
                (gated, why), rec.held_gate = rec.held_gate, None
                if key in ctx.queue and rec.gate_reported != why:
                    rec.gate_reported = why
                    ctx.spawn(
                        ctx.report_failure(pod_ref(gated), why, pod_scheduled_condition(gated.raw))
                    )
            if rec.held_report is not None:
                (ref, message), rec.held_report = rec.held_report, None
                if self.invalid.get(key) is not None:  # not fixed or deleted meanwhile
                    rec.reported = (ref.uid, message)
                    ctx.spawn(ctx.report_failure(ref, message, None))
            ctx.records.prune(key)


def _node_update_action(old: Node, new: Node) -> ActionType:
    """Which scheduling properties changed (kube-scheduler's nodeSchedulingPropertiesChange)."""
    action = ActionType(0)
    if old.allocatable != new.allocatable:
        action |= ActionType.UPDATE_NODE_ALLOCATABLE
    if old.labels != new.labels:
        action |= ActionType.UPDATE_NODE_LABEL
    if old.taints != new.taints or old.unschedulable != new.unschedulable:
        action |= ActionType.UPDATE_NODE_TAINT
    if old.images != new.images:
        action |= ActionType.UPDATE_OTHER
    if old.declared_features != new.declared_features:
        action |= ActionType.UPDATE_NODE_DECLARED_FEATURE
    return action


def _pod_update_action(old: Pod, new: Pod) -> ActionType:
    action = ActionType(0)
    if old.labels != new.labels:
        action |= ActionType.UPDATE_POD_LABEL
    if old.requests != new.requests or (new.terminal and not old.terminal):
        action |= ActionType.UPDATE_POD_SCALE_DOWN
    if not action and old.raw is not new.raw:
        action |= ActionType.UPDATE_OTHER
    return action
