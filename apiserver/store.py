"""Objects, resource versions, the event log and watch fan-out: the etcd and watch
cache of the embedded API server.

Every write goes through `_commit`, which bumps the cluster-global resourceVersion,
stores a fresh dict (stored dicts are never mutated, so a watcher or a list may
hold one without copying), appends the event to the resource's bounded log and
puts it on the queue of every watcher whose namespace and selector it concerns.
All of it is synchronous and runs on the server's event loop, so a write, a list
and the registration of a watcher are atomic with respect to each other.

Costs: get/create/update/delete O(log n) plus O(watchers); list O(matched) (a
page seeks into a sorted index); a watch resume O(events since its version).
Nothing walks the request or event history.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import random
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from sortedcontainers import SortedDict

from apiserver import resources
from apiserver.patch import json_patch, merge_patch, strategic_merge_patch
from apiserver.resources import Registry, Resource
from apiserver.selectors import Predicate

SYSTEM_NAMESPACES: Final = ("default", "kube-system", "kube-public", "kube-node-lease")
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_PATCH: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"

Key = tuple[str, str]  # (namespace or "", name)


class ApiError(Exception):
    """An error answer, carried as kube's Status."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.reason, self.message, self.details)


def status_body(
    code: int, reason: str = "", message: str = "", details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "code": code,
    }
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    return body


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{res.qualified} "{name}" not found',
        {"name": name, "group": res.group, "kind": res.plural},
    )


def conflict(what: str, name: str, why: str, kind: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {what} "{name}": {why}',
        {"name": name, "kind": kind},
    )


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_NAME_CHARS: Final = "bcdfghjklmnpqrstvwxz2456789"  # as apiserver's names.SimpleNameGenerator


@dataclass(slots=True)
class Event:
    type: str
    obj: dict[str, Any]
    old: dict[str, Any] | None
    rv: int
    _lines: dict[str, bytes] = field(default_factory=dict)

    def line(self, type_: str | None = None) -> bytes:
        """The JSON line of this event (as `type_` when a selector changes it), encoded once."""
        t = type_ or self.type
        out = self._lines.get(t)
        if out is None:
            out = self._lines[t] = json.dumps({"type": t, "object": self.obj}).encode() + b"\n"
        return out


DROP: Final = object()  # queue sentinel: end the stream without a final event
STOP: Final = object()  # queue sentinel: the server stops


@dataclass(eq=False)
class Watcher:
    res: Resource
    namespace: str | None
    predicate: Predicate | None
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)

    def offer(self, ev: Event) -> None:
        """Queue `ev` as this watcher sees it: a change in or out of its selector is an
        ADDED or DELETED, as kube's watch cache sends."""
        if self.namespace is not None and ev.obj["metadata"].get("namespace") != self.namespace:
            return
        if self.predicate is None:
            self.queue.put_nowait((ev, None))
            return
        now_in = self.predicate(ev.obj)
        was_in = ev.old is not None and self.predicate(ev.old)
        if ev.type == "MODIFIED":
            if now_in and was_in:
                self.queue.put_nowait((ev, None))
            elif now_in:
                self.queue.put_nowait((ev, "ADDED"))
            elif was_in:
                self.queue.put_nowait((ev, "DELETED"))
        elif now_in:
            self.queue.put_nowait((ev, None))


@dataclass
class Bucket:
    """One resource's objects, event log and watchers."""

    res: Resource
    log_size: int
    log_start: int  # events at or before this version may be gone from the log
    objects: SortedDict = field(default_factory=SortedDict)
    log: deque[Event] = field(default_factory=deque)
    watchers: set[Watcher] = field(default_factory=set)


class Store:
    def __init__(
        self,
        *,
        log_size: int = 10000,
        podgroups: bool = False,
        strict_namespaces: bool = False,
        native_podgroups: str | None = None,
    ) -> None:
        self.registry = Registry()
        self.buckets: dict[tuple[str, str, str], Bucket] = {}
        self.rv = 0
        self.log_size = log_size
        self.strict_namespaces = strict_namespaces
        self.binds = 0
        for res in resources.BUILTIN:
            self.register(res)
        if podgroups:  # scheduler-plugins' CRDs
            self.register(resources.PODGROUP)
            self.register(resources.ELASTICQUOTA)
        if native_podgroups is not None:
            self.register(resources.native_podgroups(native_podgroups))
            if native_podgroups == "v1alpha3":
                self.register(resources.COMPOSITE_PODGROUPS)
        ns_res = self._res("", "v1", "namespaces")
        for ns in SYSTEM_NAMESPACES:
            self.create(ns_res, None, {"metadata": {"name": ns}})

    # Resources -----------------------------------------------------------

    def _res(self, group: str, version: str, plural: str) -> Resource:
        res = self.registry.get(group, version, plural)
        assert res is not None, (group, version, plural)
        return res

    def register(self, res: Resource) -> None:
        old = self.buckets.get(res.key)
        self.registry.add(res)
        if old is None:
            self.buckets[res.key] = Bucket(res, self.log_size, self.rv)
        else:
            old.res = res

    def unregister(self, res: Resource) -> None:
        self.registry.remove(res)
        bucket = self.buckets.pop(res.key, None)
        if bucket is not None:
            for w in bucket.watchers:
                w.queue.put_nowait(STOP)

    def bucket(self, res: Resource) -> Bucket:
        return self.buckets[res.key]

    def resolve(self, plural: str) -> Resource:
        """A resource by plural (`pods`) or `plural.group` (`podgroups.scheduling.x-k8s.io`)."""
        name, _, group = plural.partition(".")
        found = [r for r in self.registry.find_plural(name) if not group or r.group == group]
        if not found:
            raise KeyError(plural)
        return found[0]

    # Reads ---------------------------------------------------------------

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.bucket(res).objects.get((namespace or "", name))
        if obj is None:
            raise not_found(res, name)
        return obj  # type: ignore[no-any-return]

    def list(
        self,
        res: Resource,
        namespace: str | None,
        predicate: Predicate | None = None,
        limit: int = 0,
        continue_: str | None = None,
    ) -> tuple[list[dict[str, Any]], int, str | None, int | None]:
        """(items, list resourceVersion, continue token, remainingItemCount)."""
        objects = self.bucket(res).objects
        rv, start = self.rv, None
        if continue_:
            try:
                token = json.loads(base64.urlsafe_b64decode(continue_ + "=="))
                rv, start = int(token["rv"]), tuple(token["start"])
            except (ValueError, KeyError, TypeError) as e:
                raise ApiError(400, "BadRequest", "continue key is not valid") from e
        if namespace is not None:
            lo: Any = (namespace, "") if start is None or start < (namespace, "") else start
            keys = objects.irange(lo, (namespace, "\U0010ffff"), inclusive=(start is None, True))
        else:
            keys = objects.irange(start, inclusive=(False, True)) if start else iter(objects)
        items: list[dict[str, Any]] = []
        last = None
        for key in keys:
            obj = objects[key]
            if predicate is not None and not predicate(obj):
                continue
            if limit and len(items) == limit and last is not None:
                token = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(last)})
                cont = base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")
                remaining = None
                if predicate is None and namespace is None:
                    remaining = len(objects) - objects.index(last) - 1
                return items, rv, cont, remaining
            items.append(obj)
            last = key
        return items, rv, None, None

    def watch(
        self,
        res: Resource,
        namespace: str | None,
        predicate: Predicate | None,
        since: int | None,
        initial_events_end: bool = False,
    ) -> Watcher:
        """A registered watcher, its queue pre-filled: synthetic ADDED for the current
        objects when `since` is None, else the logged events after `since` (410 when
        the log no longer reaches back that far). With `initial_events_end` (a watch-list
        request, sendInitialEvents=true) the ADDED events end with the BOOKMARK annotated
        `k8s.io/initial-events-end` that client-go's reflector waits for."""
        bucket = self.bucket(res)
        w = Watcher(res, namespace, predicate)
        if since is None:
            for obj in self.list(res, namespace, predicate)[0]:
                w.queue.put_nowait((Event("ADDED", obj, None, self.rv), None))
            if initial_events_end:
                meta = {
                    "resourceVersion": str(self.rv),
                    "annotations": {"k8s.io/initial-events-end": "true"},
                }
                mark = {"kind": res.kind, "apiVersion": res.group_version, "metadata": meta}
                w.queue.put_nowait((Event("BOOKMARK", mark, None, self.rv), None))
        else:
            if since < bucket.log_start:
                raise ApiError(
                    410, "Expired", f"too old resource version: {since} ({bucket.log_start + 1})"
                )
            newer = []
            for ev in reversed(bucket.log):
                if ev.rv <= since:
                    break
                newer.append(ev)
            for ev in reversed(newer):
                w.offer(ev)
        bucket.watchers.add(w)
        return w

    def unwatch(self, w: Watcher) -> None:
        bucket = self.buckets.get(w.res.key)
        if bucket is not None:
            bucket.watchers.discard(w)

    def compact(self) -> None:
        """Forget every event log: resuming from any earlier version gets 410 Expired."""
        for bucket in self.buckets.values():
            bucket.log.clear()
            bucket.log_start = self.rv

    # Writes --------------------------------------------------------------

    def _commit(
        self,
        res: Resource,
        type_: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        bucket = self.bucket(res)
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if type_ == "DELETED":
            del bucket.objects[key]
        else:
            bucket.objects[key] = obj
        ev = Event(type_, obj, old, self.rv)
        if len(bucket.log) >= bucket.log_size:
            bucket.log_start = bucket.log.popleft().rv
        bucket.log.append(ev)
        for w in bucket.watchers:
            w.offer(ev)
        if res.key == ("apiextensions.k8s.io", "v1", "customresourcedefinitions"):
            self._sync_crd(old, None if type_ == "DELETED" else obj)
        return obj

    def _sync_crd(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        before = {r.key for r in resources.from_crd(old)} if old else set()
        after = resources.from_crd(new) if new else []
        for res in after:
            self.register(res)
        for key in before - {r.key for r in after}:
            gone = self.registry.by_key.get(key)
            if gone is not None:
                self.unregister(gone)

    def _ensure_namespace(self, namespace: str) -> None:
        ns_res = self._res("", "v1", "namespaces")
        if ("", namespace) in self.bucket(ns_res).objects:
            return
        if self.strict_namespaces:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )
        self.create(ns_res, None, {"metadata": {"name": namespace}})

    def create(
        self,
        res: Resource,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        keep_status: bool = True,
    ) -> dict[str, Any]:
        obj = copy.deepcopy(dict(body))
        meta = obj.setdefault("metadata", {})
        obj["apiVersion"], obj["kind"] = res.group_version, res.kind
        if res.namespaced:
            namespace = namespace or meta.get("namespace") or "default"
            if (meta.get("namespace") or namespace) != namespace:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace "
                    "sent on the request",
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        objects = self.bucket(res).objects
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise ApiError(
                    422,
                    "Invalid",
                    f'{res.kind} "" is invalid: metadata.name: Required value: '
                    "name or generateName is required",
                )
            while True:
                meta["name"] = prefix + "".join(random.choices(_NAME_CHARS, k=5))
                if (namespace or "", meta["name"]) not in objects:
                    break
        name = meta["name"]
        if (meta.get("namespace", ""), name) in objects:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{res.qualified} "{name}" already exists',
                {"name": name, "group": res.group, "kind": res.plural},
            )
        if res.namespaced:
            self._ensure_namespace(namespace or "default")
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now()
        meta["generation"] = 1
        if res.has_status and res.custom and not keep_status:
            obj.pop("status", None)
        self._defaults(res, obj)
        _check_annotations(res, obj)
        return self._commit(res, "ADDED", obj, None)

    def _defaults(self, res: Resource, obj: dict[str, Any]) -> None:
        """The few defaults kube applies that our clients read."""
        if res.kind == "Pod" and res.group == "":
            spec = obj.setdefault("spec", {})
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("priority", 0)
            status = obj.setdefault("status", {})
            status.setdefault("phase", "Pending")
            conds = status.get("conditions") or []
            if spec.get("schedulingGates") and not any(
                c.get("type") == "PodScheduled" for c in conds
            ):
                # as kube-apiserver's applySchedulingGatedCondition (pod strategy)
                status["conditions"] = [
                    *conds,
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "SchedulingGated",
                        "message": "Scheduling is blocked due to non-empty scheduling gates",
                    },
                ]
        elif res.kind == "Namespace":
            obj.setdefault("status", {}).setdefault("phase", "Active")
        elif res.kind == "CustomResourceDefinition":
            spec = obj.get("spec") or {}
            stored = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
            conds = [
                {"type": t, "status": "True", "reason": r, "lastTransitionTime": now()}
                for t, r in (
                    ("NamesAccepted", "NoConflicts"),
                    ("Established", "InitialNamesAccepted"),
                )
            ]
            obj["status"] = {
                "conditions": conds,
                "acceptedNames": spec.get("names") or {},
                "storedVersions": stored,
            }

    def _check_preconditions(
        self, res: Resource, current: Mapping[str, Any], uid: str | None, rv: str | None
    ) -> None:
        meta = current["metadata"]
        what = res.qualified
        if uid and uid != meta["uid"]:
            raise conflict(
                what,
                meta["name"],
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{meta['uid']}",
                res.plural,
            )
        if rv and rv != meta["resourceVersion"]:
            raise conflict(
                what,
                meta["name"],
                "the object has been modified; please apply your changes to the latest "
                "version and try again",
                res.plural,
            )

    def update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        subresource: str = "",
    ) -> dict[str, Any]:
        current = self.get(res, namespace, name)
        meta_in = body.get("metadata") or {}
        if meta_in.get("name", name) != name:
            raise ApiError(
                400, "BadRequest", "the name of the object does not match the name on the URL"
            )
        self._check_preconditions(res, current, meta_in.get("uid"), meta_in.get("resourceVersion"))
        if subresource == "status":
            new = dict(current)
            if "status" in body:
                new["status"] = copy.deepcopy(body["status"])
            else:
                new.pop("status", None)
            new["metadata"] = dict(current["metadata"])
        else:
            new = copy.deepcopy(dict(body))
            meta = new.setdefault("metadata", {})
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "namespace", "generation"):
                if k in current["metadata"]:
                    meta[k] = current["metadata"][k]
                else:
                    meta.pop(k, None)
            meta["name"] = name
            new["apiVersion"], new["kind"] = res.group_version, res.kind
            if res.has_status:
                if "status" in current:
                    new["status"] = current["status"]
                else:
                    new.pop("status", None)
            if _spec_of(new) != _spec_of(current):
                meta["generation"] = int(current["metadata"].get("generation", 1)) + 1
        if _same(new, current):
            return current
        _check_annotations(res, new)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._commit(res, "DELETED", new, current)
        return self._commit(res, "MODIFIED", new, current)

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        content_type: str,
        patch: Any,
        subresource: str = "",
    ) -> dict[str, Any]:
        ctype = content_type.split(";")[0].strip()
        if ctype == APPLY_PATCH:
            return self._apply(res, namespace, name, patch, subresource)
        current = self.get(res, namespace, name)
        if ctype == MERGE_PATCH:
            if not isinstance(patch, Mapping):
                raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
            body = merge_patch(current, patch)
        elif ctype == STRATEGIC_PATCH and not res.custom:
            if not isinstance(patch, Mapping):
                raise ApiError(400, "BadRequest", "a strategic merge patch must be a JSON object")
            body = strategic_merge_patch(current, patch)
        elif ctype == JSON_PATCH:
            body = json_patch(current, patch)
        else:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}"
                + ("" if res.custom else f", {STRATEGIC_PATCH}"),
            )
        return self.update(res, namespace, name, body, subresource)

    def _apply(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        intent: Any,
        subresource: str,
    ) -> dict[str, Any]:
        """Server-side apply, approximated: create when absent, else merge the intent in
        (strategic for built-in kinds). Field ownership (managedFields) is not kept, so a
        field dropped from the intent is not removed."""
        if not isinstance(intent, Mapping):
            raise ApiError(400, "BadRequest", "an apply patch must be an object")
        meta = intent.get("metadata") or {}
        if meta.get("name", name) != name:
            raise ApiError(
                400, "BadRequest", "the name of the object does not match the name on the URL"
            )
        try:
            current = self.get(res, namespace, name)
        except ApiError:
            if subresource:
                raise
            return self.create(res, namespace, intent, keep_status=False)
        merge = merge_patch if res.custom else strategic_merge_patch
        return self.update(res, namespace, name, merge(current, intent), subresource)

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        current = self.get(res, namespace, name)
        pre = (options or {}).get("preconditions") or {}
        self._check_preconditions(res, current, pre.get("uid"), pre.get("resourceVersion"))
        if current["metadata"].get("finalizers"):
            if current["metadata"].get("deletionTimestamp"):
                return current
            new = dict(current)
            new["metadata"] = dict(current["metadata"], deletionTimestamp=now())
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            return self._commit(res, "MODIFIED", new, current)
        new = dict(current)
        new["metadata"] = dict(current["metadata"])
        return self._commit(res, "DELETED", new, current)

    def bind(self, namespace: str, name: str, binding: Mapping[str, Any]) -> None:
        """POST pods/{name}/binding, as kube's BindingREST: set spec.nodeName once, copy
        the binding's annotations, set PodScheduled=True."""
        res = self._res("", "v1", "pods")
        meta = binding.get("metadata") or {}
        if meta.get("name", name) != name:
            raise ApiError(
                400, "BadRequest", "the name of the object does not match the name on the URL"
            )
        node = (binding.get("target") or {}).get("name")
        if not node:
            raise ApiError(422, "Invalid", f'Binding "{name}" is invalid: target.name: Required')
        current = self.get(res, namespace, name)
        self._check_preconditions(res, current, meta.get("uid"), meta.get("resourceVersion"))
        cur_node = (current.get("spec") or {}).get("nodeName")
        if current["metadata"].get("deletionTimestamp"):
            why = f"pod {name} is being deleted, cannot be assigned to a host"
            raise conflict("pods/binding", name, why, "pods/binding")
        if cur_node:
            why = f'pod {name} is already assigned to node "{cur_node}"'
            raise conflict("pods/binding", name, why, "pods/binding")
        new = copy.deepcopy(current)
        new["spec"]["nodeName"] = node
        if meta.get("annotations"):
            new["metadata"].setdefault("annotations", {}).update(meta["annotations"])
        conds = new.setdefault("status", {}).setdefault("conditions", [])
        cond = {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}
        for i, c in enumerate(conds):
            if c.get("type") == "PodScheduled":
                conds[i] = cond
                break
        else:
            conds.append(cond)
        self._commit(res, "MODIFIED", new, current)
        self.binds += 1

    def stop(self) -> None:
        for bucket in self.buckets.values():
            for w in bucket.watchers:
                w.queue.put_nowait(STOP)


# As apimachinery's TotalAnnotationSizeLimitB: the keys and values of an
# object's annotations, in bytes, on create and on every update.
ANNOTATIONS_LIMIT: Final = 256 * 1024


def _check_annotations(res: Resource, obj: Mapping[str, Any]) -> None:
    """422 for annotations over kube's total size, with ValidateAnnotations' message."""
    notes = obj["metadata"].get("annotations") or {}
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in notes.items())
    if size <= ANNOTATIONS_LIMIT:
        return
    kind = f"{res.kind}.{res.group}" if res.group else res.kind
    name = obj["metadata"].get("name", "")
    body = f"Too long: may not be more than {ANNOTATIONS_LIMIT} bytes"
    cause = {"reason": "FieldValueTooLong", "message": body, "field": "metadata.annotations"}
    raise ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: metadata.annotations: {body}',
        {"name": name, "group": res.group, "kind": res.kind, "causes": [cause]},
    )


def _spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    strip: Callable[[Mapping[str, Any]], dict[str, Any]] = lambda o: dict(  # noqa: E731
        o, metadata={k: v for k, v in o["metadata"].items() if k != "resourceVersion"}
    )
    return strip(a) == strip(b)
