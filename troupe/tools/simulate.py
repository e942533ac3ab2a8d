"""`troupe simulate`: the real pipeline on a cluster described in YAML or JSON.

Input files hold Kubernetes objects as kubectl prints them (multi-document
YAML, or `kind: List` in YAML or JSON, as `kubectl get nodes,pods -A -o json`
prints it), of the kinds whose row of `troupe.api.kinds.KINDS` says the
simulator reads them (every watched kind, and ResourceClaimTemplates), fed
in the table's order to the handlers its rows name: Nodes, Pods,
PriorityClasses, PodGroups (scheduler-plugins' and Kubernetes' own,
scheduling.k8s.io v1beta1/v1alpha3/v1alpha2), their owners, storage and devices. A
file is JSON if its name ends in .json or its text starts with `{` or `[` and
parses as JSON; JSON
goes through `troupe.api.jsonio` (orjson), YAML through libyaml's parser
(`load_yaml_documents`), both with the same bounds. Pods with
spec.nodeName are running; pending pods whose schedulerName matches a profile
are created in creationTimestamp order, then file order, and scheduled by the
real scheduler with the in-memory ClusterClient and a virtual clock, until
nothing can change any more (no pod to pop, none backing off, no timer due) or
the virtual clock reaches `until`.

Storage goes through the scheduler's volume store as the watch would deliver
it, and the controllers VolumeBinding waits for are simulated
(`troupe.tools.volume_sim`): a claim of a class with a provisioner gets a PV on
the node its pod was given (WaitForFirstConsumer), and a static PV that
VolumeBinding pre-binds binds its claim, both at once on the virtual clock.
Each scheduled pod's result names the claims bound or provisioned for it
(``volumes``). Nothing binds Immediate claims nobody pre-bound: their pods wait,
as with kube-scheduler, on "pod has unbound immediate PersistentVolumeClaims".

Preemption runs as on a cluster: the simulator plays the API server and the
kubelets. A victim the scheduler deletes is updated at once (its
deletionTimestamp, as the watch would deliver it) and removed after its grace
period on the virtual clock; the run goes on while any such removal is due.
Pods without metadata.uid get one (a stable uuid5 of their namespace/name), as
the API server would give them, so that the `Preempted` events, which name the
preemptor by uid, can be read back. Victims stay in the output with node null,
`preemptedBy` naming their preemptor (a pod, or a gang's PodGroup) and the node
they were taken from in `preemptedFrom`.

ElasticQuotas are kept by the simulated cluster (CapacityScheduling writes
their status.used there), and the output's `elasticQuotas` section shows each
one's min and max as its spec writes them and what its namespace's pods use at
the end (placed, not terminal: what the plugin counts), whether or not the
profile enables the plugin.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import numpy as np
import yaml

from troupe.api import jsonio
from troupe.api.kinds import (
    CLUSTER_SCOPED,
    KINDS,
    RESOURCE_API,
    SIMULATED,
)
from troupe.api.parse import parse_pod, parse_timestamp
from troupe.api.storage import STORAGE_PARSERS, pod_claim_names
from troupe.api.types import (
    NATIVE_POD_GROUP_API,
    NATIVE_POD_GROUP_VERSIONS,
    GroupKey,
    ParseError,
    Pod,
    PodKey,
    pod_group_key,
)
from troupe.api.yamlio import MAX_YAML_DEPTH, load_yaml_documents
from troupe.config import SchedulerConfig
from troupe.core.clock import VirtualClock
from troupe.core.explain import (
    Explanation,
    GangTrace,
    GroupExplanation,
    explain_attempt,
    explain_gang_pending,
    render_group_table,
    render_table,
)
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.metrics import Metrics
from troupe.core.recorder import rfc3339
from troupe.core.scheduler import Scheduler
from troupe.core.snapshot import NodeTable
from troupe.core.topology import group_placement, has_topology
from troupe.dra.claims import claim_devices
from troupe.dra.controller import (
    claim_from_template,
    pending_template_claims,
    readied_devices,
    record_claim,
    release_pod,
)
from troupe.plugins.registry import IN_TREE
from troupe.tools.volume_sim import VolumeControllers

POD_GROUP_API_GROUPS = (
    "scheduling.x-k8s.io/",
    "scheduling.sigs.k8s.io/",
    *(f"{NATIVE_POD_GROUP_API}/{v}" for v in NATIVE_POD_GROUP_VERSIONS),
)
# resource.k8s.io objects are read in the versions the scheduler watches.
DRA_API_VERSIONS: Final = {
    k.kind: k.api_versions for k in KINDS if k.simulated and k.group == RESOURCE_API
}
# The Preempted events' messages (DefaultPreemption's and the gang cycle's text).
_PREEMPTED_BY_POD = re.compile(r"^Preempted by pod (\S*) on node ")
_PREEMPTED_BY_GANG = re.compile(r"^Preempted by gang (\S+) on node ")
_UID_NAMESPACE = uuid.UUID("6f1d3a52-6c1b-4c55-9a3e-2f1b7d0c9e41")


class InputError(Exception):
    """Unreadable input; the message names the file and the problem."""


def _latest_timestamp(stamps: Iterable[str]) -> int | None:
    """The latest of RFC 3339 times, in whole seconds since the epoch, or None."""
    best: float | None = None
    for ts in stamps:
        try:
            t = parse_timestamp(ts, "metadata.creationTimestamp")
        except ParseError:
            continue
        best = t if best is None else max(best, t)
    return None if best is None else int(best)


def load_objects(
    paths: Sequence[str],
    base: Sequence[dict[str, Any]] = (),
    workloads: list[tuple[str, dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """Read every object from the files, in file order, after `base` (a live
    cluster's objects, `troupe.tools.live`). Raises InputError.

    Hostile input is refused in bounded time and memory: text that is not UTF-8,
    YAML or JSON nested too deeply, YAML whose aliases expand too far
    (`load_yaml_documents`), NaN or Infinity in JSON,
    names that are not strings, and two objects of one kind, namespace and name
    (naming both places: a later one would silently replace the first; an
    object of the files that `base` has already is "first in the cluster").
    Workloads that make pods from a template (`WORKLOAD_KINDS`) are appended
    to `workloads` with where they were read, whether or not the simulator
    reads them (`workloads_without_pods`).
    """
    with _no_cyclic_gc() as size:
        return _load_objects(paths, size, base, workloads)


def _load_objects(
    paths: Sequence[str],
    size: list[int],
    base: Sequence[dict[str, Any]],
    workloads: list[tuple[str, dict[str, Any]]] | None,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = list(base)
    seen: dict[tuple[str, str, str], str] = {
        _identity(o, "the cluster"): "the cluster" for o in base
    }
    for path in paths:
        docs = _documents(path, size)
        for i, doc in enumerate(docs):
            if doc is None:
                continue
            for obj, where in _flatten(doc, f"{path}: document {i + 1}", workloads):
                key = _identity(obj, where)
                first = seen.get(key)
                if first is not None:
                    kind, ns, name = key
                    shown = f"{ns}/{name}" if ns else name
                    raise InputError(f"{where}: duplicate {kind} {shown} (first in {first})")
                seen[key] = where
                out.append(obj)
    return out


# Input at least this large is frozen out of the cyclic collector once read.
_FREEZE_BYTES: Final = 4 << 20
# A simulation of at least this many objects is frozen once they are loaded.
_FREEZE_OBJECTS: Final = 2000


@contextlib.contextmanager
def _no_cyclic_gc(threshold: int = _FREEZE_BYTES) -> Iterator[list[int]]:
    """The cyclic collector off while the files are read, or while the
    scheduler takes in what was read: building millions of dicts and lists
    (or the scheduler's views of them) triggers it again and again over the
    growing, acyclic result (a third of the reading time of a large dump; as
    much as the scheduler's intake of the objects takes again), and it finds
    nothing to free; reference counting still frees what is dropped. A large
    result is then frozen (gc.freeze, before the collector is back on):
    otherwise its first collections walk every object of it, once per
    generation, for nothing. The caller adds its size (bytes read, objects
    taken in) to the list it is given; `threshold` is the size frozen."""
    was = gc.isenabled()
    gc.disable()
    size = [0]
    try:
        yield size
        if size[0] >= threshold:
            gc.freeze()
    finally:
        if was:
            gc.enable()


def _documents(path: str, size: list[int]) -> list[Any]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from e
    size[0] += len(data)
    try:
        if path.endswith(".json") or _JSON_START.match(data):
            try:
                return [_json(data)]  # kubectl get -o json
            except jsonio.JSONError as e:
                if path.endswith(".json") or e.msg == _TOO_DEEP:
                    raise InputError(f"{path}: {_json_problem(data, e)}") from e
                # YAML in flow style: the YAML parser says what is wrong
        return load_yaml_documents(_utf8(path, data))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise InputError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', e)}") from e
    except RecursionError as e:
        raise InputError(f"{path}: nested too deeply") from e
    except ValueError as e:  # an integer of thousands of digits, nested too deeply...
        raise InputError(f"{path}: {e}") from e


# A document that opens with either is tried as JSON first (kubectl get -o json).
_JSON_START: Final = re.compile(rb"[ \t\r\n]*[{\[]")
# What orjson says of nesting past its bound (1024 levels).
_TOO_DEEP: Final = "depth limit exceeded"
_NON_FINITE: Final = ("NaN", "Infinity")


def _utf8(path: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not valid UTF-8 (byte {e.start})") from e


def _json_problem(data: bytes, e: json.JSONDecodeError) -> str:
    """What is wrong with a JSON document the decoder refused (the error path
    only: the text is decoded again to name the byte that is not UTF-8)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as u:
        return f"not valid UTF-8 (byte {u.start})"
    if e.msg == _TOO_DEEP:
        return "nested too deeply"
    # The decoder stops at the N of NaN, the I of Infinity and -Infinity.
    name = next((n for n in _NON_FINITE if e.doc.startswith(n, e.pos)), None)
    if name is not None:
        sign = "-" if e.doc[e.pos - 1 : e.pos] == "-" else ""
        return (
            f"not valid JSON (line {e.lineno}): {sign}{name} is not a number "
            "(JSON has no non-finite numbers)"
        )
    return f"not valid JSON (line {e.lineno}): {e.msg}"


def _json(data: bytes) -> Any:
    """The document, by `troupe.api.jsonio` (which refuses NaN, Infinity and
    text that is not UTF-8), refused past MAX_YAML_DEPTH as the YAML loader
    does (ValueError)."""
    obj = jsonio.loads(data)
    if _json_depth(data) > MAX_YAML_DEPTH:
        raise ValueError(f"nested more than {MAX_YAML_DEPTH} levels deep")
    return obj


# What nesting is counted on: quotes, brackets and backslashes; the rest is dropped.
_NOT_COUNTED: Final = bytes(b for b in range(256) if b not in b'\\"[]{}')
_QUOTE: Final = ord('"')
_BACKSLASH: Final = ord("\\")
_STEP: Final = np.zeros(256, np.int8)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1
# The text is searched for backslashes in pieces of this size (a piece's
# comparison is a byte per byte of it).
_DEPTH_CHUNK: Final = 8 << 20


def _json_depth(data: bytes) -> int:
    """How deeply arrays and objects nest in a document the decoder accepted,
    counted on its text: a walk of the decoded objects took longer than
    decoding them (1.9 s for the 141 MiB of a 5000-node dump, this 0.35 s).

    Only quotes, brackets and backslashes are kept. A quote is escaped when the
    backslash before it in the text starts an escape (is the first, third...
    of a run of backslashes); the kept text holds the text's backslashes in
    order, each followed by what it escapes if that is a quote. A bracket after
    an even number of unescaped quotes is outside every string, and counts."""
    kept = data.translate(None, _NOT_COUNTED)
    if not kept:
        return 0
    text = np.frombuffer(kept, np.uint8)
    quotes = text == _QUOTE
    slashes = np.flatnonzero(text == _BACKSLASH)
    if len(slashes):
        quotes[slashes[_escapes_a_quote(data)] + 1] = False
    # the quotes' count's parity (uint8 wraps, parity stays), 0 outside strings
    outside = (np.cumsum(quotes, dtype=np.uint8) & 1) == 0
    # depths fit int16: the decoder refuses nesting past 1024 levels
    levels = np.cumsum(_STEP[text] * outside, dtype=np.int16)
    return int(levels.max())


def _escapes_a_quote(data: bytes) -> np.ndarray:
    """For each backslash of the text, in order: whether it starts an escape
    and the byte after it is a quote."""
    raw = np.frombuffer(data, np.uint8)
    at = np.concatenate(
        [
            np.flatnonzero(raw[i : i + _DEPTH_CHUNK] == _BACKSLASH) + i
            for i in range(0, len(raw), _DEPTH_CHUNK)
        ]
    )
    n = np.arange(len(at))
    run_starts = np.ones(len(at), bool)
    run_starts[1:] = at[1:] != at[:-1] + 1
    first_of_run = np.maximum.accumulate(np.where(run_starts, n, 0))
    starts_escape = (n - first_of_run) % 2 == 0
    # a text the decoder accepted does not end in a backslash
    escapes: np.ndarray = starts_escape & (raw[np.minimum(at + 1, len(raw) - 1)] == _QUOTE)
    return escapes


def _flatten(
    doc: object, where: str, workloads: list[tuple[str, dict[str, Any]]] | None = None
) -> Iterable[tuple[dict[str, Any], str]]:
    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected a Kubernetes object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise InputError(f"{where}: items must be a list")
        for j, item in enumerate(items):
            yield from _flatten(item, f"{where}, items[{j}]", workloads)
        return
    if not isinstance(kind, str) or not kind:
        raise InputError(f"{where}: object has no kind")
    if workloads is not None and kind in WORKLOAD_KINDS:
        workloads.append((where, doc))
    if kind not in SIMULATED:
        return  # other kinds (Deployments, Services...) are not simulated
    if kind == "PodDisruptionBudget" and not str(doc.get("apiVersion", "")).startswith("policy/"):
        raise InputError(
            f"{where}: PodDisruptionBudget apiVersion {doc.get('apiVersion')!r} is not policy/v1"
        )
    dra = DRA_API_VERSIONS.get(kind)
    if dra is not None and doc.get("apiVersion") not in dra:
        if len(dra) > 1:
            raise InputError(
                f"{where}: {kind} apiVersion {doc.get('apiVersion')!r} is not one of "
                f"{', '.join(dra)}"
            )
        raise InputError(
            f"{where}: {kind} apiVersion {doc.get('apiVersion')!r} is not {dra[0]} "
            "(convert older versions with kubectl convert or re-export from a 1.34+ cluster)"
        )
    if kind == "PodGroup" and not str(doc.get("apiVersion", "")).startswith(POD_GROUP_API_GROUPS):
        raise InputError(
            f"{where}: PodGroup apiVersion {doc.get('apiVersion')!r} is not "
            "scheduling.x-k8s.io/v1alpha1, scheduling.sigs.k8s.io/v1alpha1, "
            "scheduling.k8s.io/v1beta1, scheduling.k8s.io/v1alpha3 or scheduling.k8s.io/v1alpha2"
        )
    yield doc, where


# Workloads whose controllers make pods from a template. The simulator runs no
# such controller: only the Pods in the input are scheduled (ReplicaSets,
# StatefulSets and ReplicationControllers are read, for spreading, but make
# no pods either).
WORKLOAD_KINDS: Final = frozenset(
    {"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "ReplicationController"}
)


def workloads_without_pods(
    workloads: Sequence[tuple[str, Mapping[str, Any]]], objects: Sequence[Mapping[str, Any]]
) -> list[str]:
    """A warning for each workload of the input none of whose pods is in it
    (directly, or through the ReplicaSets or Jobs it owns, by ownerReferences'
    kind and name in its namespace): its pods would not be simulated, and
    nothing else would say so."""
    owners: dict[tuple[str, str, str], tuple[str, str, str]] = {}
    pods: list[tuple[str, str, str]] = []
    for o in [*objects, *(w for _, w in workloads)]:
        md = o.get("metadata")
        if not isinstance(md, dict):
            continue
        me = (str(o.get("kind")), str(md.get("namespace") or "default"), str(md.get("name")))
        for ref in md.get("ownerReferences") or []:
            if isinstance(ref, dict):
                owners[me] = (str(ref.get("kind")), me[1], str(ref.get("name")))
        if me[0] == "Pod":
            pods.append(me)
    covered: set[tuple[str, str, str]] = set()
    for p in pods:
        at: tuple[str, str, str] | None = p
        while at is not None and at not in covered:
            covered.add(at)
            at = owners.get(at)
    out = []
    for where, w in workloads:
        md = w.get("metadata") if isinstance(w.get("metadata"), dict) else {}
        assert isinstance(md, dict)
        me = (str(w.get("kind")), str(md.get("namespace") or "default"), str(md.get("name")))
        spec = w.get("spec") if isinstance(w.get("spec"), dict) else {}
        status = w.get("status") if isinstance(w.get("status"), dict) else {}
        assert isinstance(spec, dict) and isinstance(status, dict)
        idle = spec.get("replicas") == 0 or bool(status.get("completionTime"))
        if me not in covered and not idle:  # (a Deployment's old ReplicaSets are idle)
            out.append(
                f"{where}: {me[0]} {me[1]}/{me[2]} has none of its pods in the input: "
                "the simulator makes no pods from templates (give its Pods, e.g. from "
                "kubectl get pods -o yaml, or write them out)"
            )
    return out


def _identity(obj: Mapping[str, Any], where: str) -> tuple[str, str, str]:
    """(kind, namespace, name), the names type-checked (the output prints them)."""
    kind = str(obj.get("kind"))
    md = obj.get("metadata")
    if not isinstance(md, dict):
        raise InputError(f"{where}: {kind} has no metadata")
    name = md.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(f"{where}: {kind} metadata.name must be a non-empty string, got {name!r}")
    ns = md.get("namespace")
    if ns is not None and not isinstance(ns, str):
        raise InputError(f"{where}: {kind} {name}: metadata.namespace must be a string, got {ns!r}")
    spec = obj.get("spec")
    if kind == "Pod" and isinstance(spec, dict):
        for field_name in ("nodeName", "schedulerName"):
            v = spec.get(field_name)
            if v is not None and not isinstance(v, str):
                raise InputError(
                    f"{where}: Pod {name}: spec.{field_name} must be a string, got {v!r}"
                )
    if kind == "PodGroup" and _native(obj):
        kind = f"PodGroup.{NATIVE_POD_GROUP_API}"  # not the same object as a CRD's
    return kind, "" if kind in CLUSTER_SCOPED else (ns or "default"), name


def _native(obj: Mapping[str, Any]) -> bool:
    return str(obj.get("apiVersion", "")).split("/")[0] == NATIVE_POD_GROUP_API


def _group_key(obj: Mapping[str, Any]) -> GroupKey:
    md = obj.get("metadata") or {}
    ns = str(md.get("namespace") or "default") if isinstance(md, dict) else "default"
    name = str(md.get("name", "?")) if isinstance(md, dict) else "?"
    return pod_group_key(ns, name, _native(obj))


def _key(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    if not isinstance(md, dict):
        return "?"
    return f"{md.get('namespace') or 'default'}/{md.get('name', '?')}"


@dataclass
class SimulationResult:
    pods: dict[str, dict[str, Any]]
    pod_groups: dict[str, dict[str, Any]]
    nodes: dict[str, dict[str, dict[str, float | int]]]
    virtual_seconds: float
    cycles: int
    events: list[dict[str, str]] = field(default_factory=list)
    # `--explain`: the last attempt of each pod asked about, by ns/name.
    explanations: dict[str, Explanation] = field(default_factory=dict)
    explain_top: int | None = 10
    # `--explain` naming a PodGroup: its last group cycle, by group key.
    group_explanations: dict[str, GroupExplanation] = field(default_factory=dict)
    # ElasticQuotas by ns/name: min and max as their spec writes them, and what
    # their namespace's pods use at the end (assigned, not terminal: what
    # CapacityScheduling counts), in the nodes' units.
    elastic_quotas: dict[str, dict[str, dict[str, float | int]]] = field(default_factory=dict)
    # Seconds (wall) the scheduler took to take in the objects before its
    # first cycle (parsed, cached, queued): `--timings` prints it.
    load_seconds: float = 0.0

    def to_json_obj(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pods": self.pods, "podGroups": self.pod_groups, "nodes": self.nodes}
        if self.elastic_quotas:
            out["elasticQuotas"] = self.elastic_quotas
        if self.explanations:
            out["explain"] = {
                k: e.to_json_obj(self.explain_top) for k, e in self.explanations.items()
            }
        if self.group_explanations:
            out["explainPodGroups"] = {
                k: g.to_json_obj() for k, g in self.group_explanations.items()
            }
        return out


def _amount(resource: str, milli: set[str], v: int) -> float | int:
    if resource in milli:
        return v // 1000 if v % 1000 == 0 else v / 1000
    return v


def node_usage(table: NodeTable, milli: set[str]) -> dict[str, dict[str, dict[str, float | int]]]:
    out: dict[str, dict[str, dict[str, float | int]]] = {}
    for row in table.valid_rows().tolist():
        name = table.names[row]
        use: dict[str, dict[str, float | int]] = {}
        for r, c in table.col.items():
            alloc = int(table.allocatable[row, c])
            req = int(table.requested[row, c])
            if alloc == 0 and req == 0:
                continue
            use[r] = {"requested": _amount(r, milli, req), "allocatable": _amount(r, milli, alloc)}
        out[name] = use
    return out


class Simulation:
    def __init__(
        self,
        objects: Sequence[Mapping[str, Any]],
        config: SchedulerConfig,
        metrics: Metrics | None = None,
        explain: Sequence[str] = (),
    ) -> None:
        self.objects = list(objects)
        # `--explain` names pods and PodGroups (either API; "ns/name", or a
        # native group's full key): the PodGroups are explained as gangs.
        named = frozenset(explain)
        groups = [o for o in self.objects if o.get("kind") == "PodGroup"]
        self.explain_groups = {
            str(k): GangTrace(str(k))
            for o in groups
            if (k := _group_key(o)) in named or _key(o) in named
        }
        pods = {_key(o) for o in self.objects if o.get("kind") == "Pod"}
        group_names = {n for o in groups for n in (_key(o), str(_group_key(o)))}
        self.explain = frozenset(n for n in named if n in pods or n not in group_names)
        self.explanations: dict[str, Explanation] = {}
        # Gangs traced because a member is asked about (by cycle: asked or not).
        self._traced: dict[str, tuple[int, bool]] = {}
        self.clock = VirtualClock()
        self.cluster = InMemoryCluster()
        self.scheduler = Scheduler(
            config, self.cluster, self.clock, metrics=metrics, registry=IN_TREE
        )
        self.cluster.on_pod_bound = self._bound
        if self.explain or self.explain_groups:
            self.scheduler.ctx.observe = self._observe
            self.scheduler.ctx.gang_pending = self._gang_pending
        self.volumes: VolumeControllers | None = None
        self.claim_templates: dict[str, dict[str, Any]] = {}
        self.cluster.on_pod_deleted = self._deleted
        # Pods removed after their grace period: (object, node it was on).
        self.removed: dict[str, tuple[dict[str, Any], str | None]] = {}
        self.terminating = 0  # deleted pods whose removal is still due

    def _trace(self, gang: str) -> GangTrace | None:
        """The gang's trace if it is asked about, itself or through a member."""
        if not gang:
            return None
        trace = self.explain_groups.get(gang)
        if trace is not None or not self.explain:
            return trace
        cycle = self.scheduler.cycle
        seen = self._traced.get(gang)
        if seen is None or seen[0] != cycle:
            members = self.scheduler.cache.pods_in_group(GroupKey(gang))
            seen = self._traced[gang] = (cycle, any(p.key in self.explain for p in members))
        if not seen[1]:
            return None
        return self.explain_groups.setdefault(gang, GangTrace(gang))

    def _observe(self, profile: Any, pod: Pod, result: Any, gang: str, domain: str) -> None:
        """An attempt of a pod asked about (or of a member of a gang asked about):
        explained on the snapshot it saw."""
        s = self.scheduler
        trace = self._trace(gang)
        if trace is not None:
            trace.observe(profile, pod, s.ctx.snapshot, result, s.cycle, domain)
        if pod.key not in self.explain:
            return
        self.explanations[pod.key] = explain_attempt(
            profile, pod, s.ctx.snapshot, result, s.cycle, gang, domain
        )

    def _gang_pending(
        self,
        profile: Any,
        pods: list[Pod],
        gang: str,
        message: str,
        preemption: str,
        untried: list[tuple[str, str]],
    ) -> None:
        """A gang not placed: its members asked about wait with its message."""
        snap, cycle = self.scheduler.ctx.snapshot, self.scheduler.cycle
        trace = self._trace(gang)
        if trace is not None:
            trace.finish(cycle, message, preemption, untried)
        for pod in pods:
            if pod.key in self.explain:
                trial = self.explanations.get(pod.key)
                self.explanations[pod.key] = explain_gang_pending(
                    trial, profile, pod, snap, message, cycle, gang
                )

    def _bound(self, key: PodKey, node: str) -> None:
        obj = self.cluster.pods[key]
        if self.cluster.elastic_quotas:
            # The binding, then the kubelet's Running as an update of its own (a
            # new object, as the watch delivers it): a quota's status.used counts
            # Running pods, and the scheduler passes on no change of a pod it
            # assumed when the watch confirms it. Without quotas nothing reads
            # the phase change, and one update is enough.
            self.scheduler.on_pod(obj)
            obj = self.cluster.pods[key] = {**obj, "status": {**obj.get("status", {})}}
        obj.setdefault("status", {})["phase"] = "Running"
        self.scheduler.on_pod(obj)

    def _deleted(self, key: PodKey, grace: int) -> None:
        """A delete (a preemption's victim): the update with the deletionTimestamp
        now, the removal once the grace period has passed, as a kubelet would."""
        obj = self.cluster.pods.get(key)
        if obj is None:
            return
        self.scheduler.on_pod(obj)
        self.terminating += 1
        self.clock.call_at(self.clock.now() + max(0, grace), lambda: self._remove(key))

    def _remove(self, key: PodKey) -> None:
        self.terminating -= 1
        obj = self.cluster.pods.pop(key, None)
        if obj is None:
            return
        spec = obj.get("spec")
        node = spec.get("nodeName") if isinstance(spec, dict) else None
        self.removed[key] = (obj, node if isinstance(node, str) and node else None)
        self.scheduler.on_pod(obj, deleted=True)
        for claim, deleted in release_pod(self.cluster.resource_claims, obj):
            self.scheduler.on_dra_object("ResourceClaim", claim, deleted=deleted)

    def _load(self) -> list[str]:
        """The dump's objects, kind by kind in the order of `troupe.api.kinds.KINDS`
        (as the operator's reflectors fill the caches), each to the handler its
        row names, and into the simulated cluster where it plays a controller or
        the API server (`_serve`); pods last, running ones first."""
        s = self.scheduler
        by_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in SIMULATED}
        for o in self.objects:
            by_kind[str(o.get("kind"))].append(dict(o))
        feed = {k.kind: s.events.handler(k) for k in KINDS if k.simulated and k.watched}
        for kind, objects in by_kind.items():
            if kind == "Pod":
                continue
            for o in objects:
                self._serve(kind, o)
                if kind in feed:
                    feed[kind](o, False)
        self._start_controllers(by_kind)
        order: list[str] = []
        pending: list[tuple[str, int, dict[str, Any]]] = []
        for i, o in enumerate(by_kind["Pod"]):
            k = _key(o)
            md = o.get("metadata")
            if isinstance(md, dict) and not md.get("uid"):
                # as the API server would; a copy: the caller's object is left as it is
                o["metadata"] = {**md, "uid": str(uuid.uuid5(_UID_NAMESPACE, k))}
            order.append(k)
            self.cluster.pods[k] = o
            spec = o.get("spec")
            if isinstance(spec, dict) and spec.get("nodeName"):
                s.on_pod(o)
            else:
                md = o.get("metadata")
                ts = md.get("creationTimestamp") if isinstance(md, dict) else None
                pending.append((str(ts or ""), i, o))
        pending.sort(key=lambda t: (t[0] == "", t[0], t[1]))
        # A pod without a creationTimestamp is created now, after everything the
        # input holds, as the API server would stamp it: a second apart in input
        # order, after the latest time of the input. It goes after the pods of
        # its priority that have one whichever QueueSort is configured, and the
        # pods without one keep their input order (Coscheduling breaks a tie of
        # times by name).
        latest = _latest_timestamp(ts for ts, _, _ in pending if ts)
        stamped = 0
        for ts, _, o in pending:
            md = o.get("metadata")
            if not ts and latest is not None and isinstance(md, dict):
                stamped += 1
                when = datetime.fromtimestamp(latest + stamped, UTC)
                o["metadata"] = {**md, "creationTimestamp": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
            self._create_claims(o)
            s.on_pod(o)
        return order

    def _serve(self, kind: str, o: dict[str, Any]) -> None:
        """What the simulated cluster keeps of an object it serves before the
        scheduler sees it: the volumes, claims and PodGroups the scheduler writes
        and the controllers read, the templates claims are made from (a
        PodGroup's claims made from them first)."""
        if kind == "PersistentVolume":
            self.cluster.volumes[str(o["metadata"]["name"])] = o
        elif kind == "PersistentVolumeClaim":
            self.cluster.claims[_key(o)] = o
        elif kind == "ResourceClaim":
            self.cluster.resource_claims[_key(o)] = o
        elif kind == "ResourceClaimTemplate":
            self.claim_templates[_key(o)] = o
        elif kind == "PodGroup":
            self._create_claims(o)
            self.cluster.pod_groups[_group_key(o)] = o
        elif kind == "ElasticQuota":  # CapacityScheduling writes its status.used
            self.cluster.elastic_quotas[_key(o)] = o

    def _start_controllers(self, by_kind: Mapping[str, list[dict[str, Any]]]) -> None:
        """The controllers the scheduler's writes wake: the driver readying
        devices of claims written, and, with storage in the dump, the volume
        controllers (which then see every write, and what was pre-bound before)."""
        feed = self.scheduler.on_dra_object

        def written(o: dict[str, Any]) -> None:
            # The driver's part: devices with binding conditions are readied
            # at once (status.devices, conditions True).
            devices = readied_devices(o, rfc3339(self.clock.now()))
            if devices is not None:
                md = o.setdefault("metadata", {})
                md["resourceVersion"] = str(int(md.get("resourceVersion") or 0) + 1)
                o["status"] = {**(o.get("status") or {}), "devices": devices}
                self.cluster.resource_claims[_key(o)] = o
            feed("ResourceClaim", o)

        self.cluster.on_claim_write = written
        self.cluster.on_claim_deleted = lambda o: feed("ResourceClaim", o, True)
        if not any(by_kind[k] for k in STORAGE_PARSERS):
            return
        classes = {str(o["metadata"]["name"]): o for o in by_kind["StorageClass"]}
        self.volumes = VolumeControllers(self.cluster, self.scheduler.on_volume_object, classes)
        self.volumes.sync()

    def _create_claims(self, pod: dict[str, Any]) -> None:
        """The resourceclaim controller's part: the claims a pod (or a native
        PodGroup) takes from templates created, with it as owner, and recorded
        in its status."""
        if not self.claim_templates:
            return
        ns = str((pod.get("metadata") or {}).get("namespace") or "default")
        group = (pod.get("spec") or {}).get("schedulingGroup") or {}
        group_obj = (
            self.cluster.pod_groups.get(pod_group_key(ns, str(group["podGroupName"]), native=True))
            if pod.get("kind") == "Pod" and isinstance(group, dict) and group.get("podGroupName")
            else None
        )
        shared = list(((group_obj or {}).get("spec") or {}).get("resourceClaims") or [])
        for pod_claim, template in pending_template_claims(pod, shared):
            t = self.claim_templates.get(f"{ns}/{template}")
            if t is None:
                continue  # as the controller: nothing to create from; the pod waits
            claim = claim_from_template(pod, pod_claim, t)
            key = f"{ns}/{claim['metadata']['name']}"
            claim["metadata"].setdefault("uid", str(uuid.uuid5(_UID_NAMESPACE, "claim/" + key)))
            claim["metadata"].setdefault("resourceVersion", "1")
            self.cluster.resource_claims[key] = claim
            self.scheduler.on_dra_object("ResourceClaim", claim)
            # (the pod is a shallow copy of the caller's: its status is copied
            # before it is written, so that the caller's object stays as it was)
            pod["status"] = dict(pod.get("status") or {})
            record_claim(pod, pod_claim, str(claim["metadata"]["name"]))

    def _devices_of(self, obj: Mapping[str, Any]) -> dict[str, list[str]]:
        spec = obj.get("spec")
        status = obj.get("status")
        extended = status.get("extendedResourceClaimStatus") if isinstance(status, dict) else None
        if not isinstance(spec, dict) or not (spec.get("resourceClaims") or extended):
            return {}
        pod = parse_pod(obj)
        if not isinstance(pod, Pod):
            return {}
        key = pod.group_key
        group = self.scheduler.cache.pod_group(key) if key is not None else None
        out = claim_devices(self.scheduler.cache.devices, pod, group)
        if isinstance(extended, dict):
            out.update(self._extended_devices(pod.namespace, extended))
        return out

    def _extended_devices(self, ns: str, status: Mapping[str, Any]) -> dict[str, list[str]]:
        """The devices of the claim made for the pod's extended resources, by
        resource name (status.extendedResourceClaimStatus maps the requests)."""
        claim = self.cluster.resource_claims.get(f"{ns}/{status.get('resourceClaimName')}")
        alloc = ((claim or {}).get("status") or {}).get("allocation") or {}
        resource_of = {
            m.get("requestName"): m.get("resourceName") for m in status.get("requestMappings") or []
        }
        out: dict[str, list[str]] = {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            name = str(resource_of.get(r.get("request")) or r.get("request"))
            out.setdefault(name, []).append(f"{r['driver']}/{r['pool']}/{r['device']}")
        return out

    async def run(self, until: float | None = None) -> SimulationResult:
        """Schedule until nothing can change, or until virtual time `until`.

        "Nothing can change" also covers pods that keep retrying without
        effect (a gang that never fits keeps timing out at Permit): once no pod
        has been bound for a quiet period (the unschedulable flush plus the
        maximum backoff) we stop, and pods still waiting at Permit then are
        released, so the result shows no reservation that nothing would bind.
        """
        s = self.scheduler
        # (the scheduler keeps what it builds from the objects for the whole run)
        t0 = time.perf_counter()
        with _no_cyclic_gc(_FREEZE_OBJECTS) as size:
            order = self._load()
            size[0] = len(self.objects)
        load_seconds = time.perf_counter() - t0
        q = s.queue
        cfg = s.config
        quiet = cfg.troupe.unschedulable_flush_seconds + cfg.pod_max_backoff_seconds
        binds, last_change = self.cluster.binds, self.clock.now()
        removed = 0
        while True:
            while s.schedule_one():
                pass
            await s.settle()
            if q.statistics().active:
                continue
            if self.cluster.binds != binds:
                binds, last_change = self.cluster.binds, self.clock.now()
            if self.terminating or len(self.removed) != removed:
                # a victim's removal is still due, or one has just happened
                removed, last_change = len(self.removed), self.clock.now()
            if until is None and self.clock.now() - last_change >= quiet:
                break
            nxt = self._next_time(until)
            if nxt is None:
                break
            self.clock.advance_to(nxt)
            q.flush()
            s.cache.cleanup_expired()
            await s.settle()
        if until is None:
            for wp in s.waiting_pods:
                wp.reject(
                    "",
                    "still waiting at Permit for the rest of its PodGroup when the "
                    "simulation ended",
                )
            await s.settle()
        # Let coalesced writes (PodGroup status) that are due soon go out.
        end = self.clock.now() + 10.0 if until is None else max(until, self.clock.now())
        while (d := self.clock.next_deadline()) is not None and d <= end:
            self.clock.advance_to(d)
            await s.settle()
        result = self._result(order)
        result.load_seconds = load_seconds
        return result

    def _next_time(self, until: float | None) -> float | None:
        """When something can next change, or None if nothing can."""
        q = self.scheduler.queue
        stats = q.statistics()
        candidates = []
        d = self.clock.next_deadline()
        if d is not None:
            candidates.append(d)
        w = q.next_wakeup()
        if w is not None and (stats.backoff or until is not None):
            candidates.append(w)
        if not candidates:
            return None
        t = min(candidates)
        if until is not None and t > until:
            return None
        return t

    def _volumes_of(self, obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """The pod's claims that the simulation bound or provisioned, by claim name."""
        if self.volumes is None or not self.volumes.outcomes:
            return {}
        spec = obj.get("spec")
        if not isinstance(spec, dict) or not spec.get("volumes"):
            return {}
        pod = parse_pod(obj)
        if not isinstance(pod, Pod):
            return {}
        out: dict[str, dict[str, Any]] = {}
        for name in pod_claim_names(pod):
            done = self.volumes.outcomes.get(f"{pod.namespace}/{name}")
            if done is not None:
                out[name] = {"pv": done.pv, "provisioned": done.provisioned}
        return out

    def _explained(self, pods: Mapping[str, Any]) -> dict[str, Explanation]:
        """The explanations asked for; a pod never tried says why."""
        out: dict[str, Explanation] = {}
        for key in sorted(self.explain):
            got = self.explanations.get(key)
            if got is None:
                where = pods.get(key)
                why = (
                    "not in the input"
                    if where is None
                    else f"never tried by the scheduler: {where.get('reason') or 'bound already'}"
                )
                got = Explanation(pod=key, attempt=0, nodes=0, outcome=why)
            if got.gang:
                got.members = self._members(got.gang, pods)
                got.group = self._group_explained(got.gang, pods)
            out[key] = got
        return out

    def _members(self, gang: str, pods: Mapping[str, Any]) -> dict[str, str]:
        """The gang's members at the end: pod -> node, or why not."""
        return {
            str(p.key): (pods.get(p.key) or {}).get("node")
            or str((pods.get(p.key) or {}).get("reason") or "pending")
            for p in self.scheduler.cache.pods_in_group(GroupKey(gang))
        }

    def _group_explained(self, gang: str, pods: Mapping[str, Any]) -> GroupExplanation | None:
        """The gang's last group cycle: pending (its trace's last), or the one
        that placed it (traced, never finished); None if it is not traced."""
        trace = self.explain_groups.get(gang)
        if trace is None:
            return None
        last, cur = trace.last, trace.current
        if cur.domains and (last is None or cur.attempt > last.attempt):
            placed = sum(len(d.placed) for d in cur.domains[-1:])
            where = cur.domains[-1].domain or "the cluster"
            cur.outcome = f"admitted: {placed} member(s) placed in {where}"
            cur.preemption = "not needed"
            gx = cur
        elif last is not None:
            gx = last
        else:
            pg = self.scheduler.cache.pod_group(GroupKey(gang))
            why = "never tried by the scheduler" if pg is not None else "not read"
            gx = GroupExplanation(gang, outcome=why)
        gx.members = self._members(gang, pods)
        return gx

    def preempted_by(self) -> dict[str, str]:
        """Each victim's preemptor (pod or gang ns/name), from the Preempted events
        recorded on pods (the last one wins)."""
        by_uid: dict[str, str] = {}
        for k, obj in self.cluster.pods.items():
            by_uid[_uid(obj)] = k
        for k, (obj, _) in self.removed.items():
            by_uid[_uid(obj)] = k
        out: dict[str, str] = {}
        for e in self.cluster.events:
            if e.reason != "Preempted" or e.obj is None or e.obj.kind != "Pod":
                continue
            if m := _PREEMPTED_BY_GANG.match(e.message):
                out[e.pod] = m.group(1)
            elif (m := _PREEMPTED_BY_POD.match(e.message)) and m.group(1) in by_uid:
                out[e.pod] = by_uid[m.group(1)]
        return out

    def _result(self, order: list[str]) -> SimulationResult:
        s = self.scheduler
        pods: dict[str, dict[str, Any]] = {}
        victims = self.preempted_by()
        for k in order:
            by = victims.get(k)
            gone = self.removed.get(k)
            if gone is not None:
                pods[k] = {
                    "node": None,
                    "reason": f"preempted by {by}" if by else "deleted",
                    "preemptedBy": by,
                    "preemptedFrom": gone[1],
                }
                continue
            obj = self.cluster.pods[k]
            spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
            node = spec.get("nodeName") if isinstance(spec, dict) else None
            if node and isinstance(node, str):
                md = obj.get("metadata")
                deleting = isinstance(md, dict) and bool(md.get("deletionTimestamp"))
                bad = s.invalid.get(k)
                reason = f"terminating: preempted by {by}" if by and deleting else None
                if bad is not None:  # placed, but unreadable: left out of its node's use
                    reason = f"not read (its node does not count it): {bad.message}"
                pods[k] = {"node": node, "reason": reason, "preemptedBy": by}
                vols = self._volumes_of(obj)
                if vols:
                    pods[k]["volumes"] = vols
                devices = self._devices_of(obj)
                if devices:
                    pods[k]["devices"] = devices
                continue
            wp = s.waiting_pods.get(PodKey(k))
            reason = s.last_failure.get(PodKey(k))
            if wp is not None:
                reason = f"waiting at Permit on node {wp.node} for the rest of its PodGroup"
            if reason is None:
                bad = s.invalid.get(k)
                if bad is not None:
                    reason = bad.message
                else:
                    qpi = s.queue.get(k)
                    name = (
                        spec.get("schedulerName", "default-scheduler")
                        if isinstance(spec, dict)
                        else "default-scheduler"
                    )
                    if name not in s.profiles:
                        reason = f'not scheduled by Troupe: spec.schedulerName is "{name}"'
                    elif qpi is not None and qpi.message:
                        reason = qpi.message
                    else:
                        reason = "pending"
            pods[k] = {"node": None, "reason": reason, "preemptedBy": by}
        groups: dict[str, dict[str, Any]] = {}
        for k, o in self.cluster.pod_groups.items():
            st = o.get("status") if isinstance(o.get("status"), dict) else {}
            assert isinstance(st, dict)
            native = k.startswith(f"{NATIVE_POD_GROUP_API}/")
            groups[k] = {
                "phase": s.group_phase(str(o.get("apiVersion") or ""), st),
                # placed members (bound or assumed): PodGroup status has no such count
                "scheduled": sum(
                    1 for p in s.cache.pods_in_group(GroupKey(k)) if s.cache.pod(p.key) is not None
                ),
                "running": int(st.get("running", 0) or 0),
                "succeeded": int(st.get("succeeded", 0) or 0),
                "failed": int(st.get("failed", 0) or 0),
            }
            if native:
                groups[k]["conditions"] = list(st.get("conditions") or [])
        s.cache.update_snapshot(s.snapshot)
        for k in groups:
            pg = s.cache.pod_group(GroupKey(k))
            if pg is None or not has_topology(pg):
                continue
            where = [
                n for p in s.cache.pods_in_group(GroupKey(k)) if (n := s.cache.pod_node(p.key))
            ]
            groups[k]["domain"] = group_placement(s.snapshot, pg, where)
        milli = {"cpu", s.isolated.resource}
        return SimulationResult(
            elastic_quotas=self._elastic_quotas(milli),
            explanations=self._explained(pods),
            group_explanations={
                k: g
                for k in sorted(self.explain_groups)
                if k not in self._traced and (g := self._group_explained(k, pods)) is not None
            },
            pods=pods,
            pod_groups=groups,
            nodes=node_usage(s.snapshot, milli),
            virtual_seconds=self.clock.now(),
            cycles=s.cycle,
            events=[
                {"pod": e.pod, "type": e.type, "reason": e.reason, "message": e.message}
                for e in self.cluster.events
            ],
        )

    def _elastic_quotas(self, milli: set[str]) -> dict[str, dict[str, dict[str, float | int]]]:
        """Each ElasticQuota read: its min and max, and the use of its namespace's
        pods placed at the end (not terminal), as CapacityScheduling counts it."""
        s = self.scheduler
        quotas = s.ctx.handle.elastic_quotas
        if not quotas:
            return {}
        spaces = {eq.namespace for eq in quotas.values()}
        used: dict[str, dict[str, int]] = {ns: {} for ns in spaces}
        for k in self.cluster.pods:
            ns = k.partition("/")[0]
            if ns not in spaces:
                continue
            pod = s.cache.pod(PodKey(k))
            if pod is None or pod.terminal:
                continue
            total = used[ns]
            for r, q in pod.requests.items():
                total[r] = total.get(r, 0) + q

        def shown(amounts: Mapping[str, int], zeros: bool = True) -> dict[str, float | int]:
            return {r: _amount(r, milli, q) for r, q in sorted(amounts.items()) if q or zeros}

        return {
            key: {
                "used": shown(used[eq.namespace], zeros=False),
                "min": shown(eq.min or {}),
                "max": shown(eq.max or {}),
            }
            for key, eq in sorted(quotas.items())
        }


def _uid(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata")
    uid = md.get("uid") if isinstance(md, dict) else None
    return uid if isinstance(uid, str) else ""


def unknown_explained(objects: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[str]:
    """The names given to `--explain` that are neither a pod nor a PodGroup of
    the input (either API), in the order given."""
    known: set[str] = set()
    for o in objects:
        kind = o.get("kind")
        if kind == "Pod":
            known.add(_key(o))
        elif kind == "PodGroup":
            known |= {_key(o), str(_group_key(o))}
    return [n for n in names if n not in known]


def simulate(
    objects: Sequence[Mapping[str, Any]],
    config: SchedulerConfig,
    until: float | None = None,
    explain: Sequence[str] = (),
) -> SimulationResult:
    # The result is handed out through a list, not as the task's result: on
    # Python 3.11 asyncio.run's SIGINT clean-up (signal.getsignal) builds the
    # repr of its handler, a partial holding the main task, and a finished
    # task's repr includes its result's: the whole SimulationResult, pods and
    # nodes, formatted only to be thrown away (a large cost on big inputs).
    out: list[SimulationResult] = []

    async def main() -> None:
        out.append(await Simulation(objects, config, explain=explain).run(until))

    with _fewer_collections():
        asyncio.run(main())
    return out[0]


# Allocations between two young collections while simulating (Python's default: 700).
_SIMULATION_GC_THRESHOLD: Final = 20_000


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """The cyclic collector runs less often while simulating: the scheduler
    keeps what it builds (parsed pods, cache and queue entries) for the whole
    run, so with the default threshold the collector walks that growing, live
    heap again and again (a sizeable share of the CPU on large inputs; see
    docs/benchmarks-side-by-side.md) and finds little to free. Reference counting frees the rest as
    before; cyclic garbage (a failed task's traceback) is still collected,
    later. The thresholds are restored afterwards."""
    before = gc.get_threshold()
    if before[0]:  # 0: automatic collection is off, and stays off
        gc.set_threshold(max(before[0], _SIMULATION_GC_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _human(resource: str, v: float | int) -> str:
    """Bytes in binary units for people (the JSON output keeps plain numbers)."""
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if v >= size:
                return f"{v / size:.1f}".removesuffix(".0") + unit
    return f"{v:g}" if isinstance(v, float) else str(v)


def _node_shown(v: Mapping[str, Any]) -> str:
    if v["node"]:
        return str(v["node"])
    return "<preempted>" if "preemptedFrom" in v else "<pending>"


def _claim_section(
    result: SimulationResult, field: str, head: str, show: Callable[[Any], str]
) -> list[str]:
    """A `POD  CLAIM  <head>` section of what the pods' claims got (volumes,
    devices), or nothing when no pod has any."""
    rows = [(k, c, v) for k, p in result.pods.items() for c, v in p.get(field, {}).items()]
    if not rows:
        return []
    pw = max([len("POD"), *(len(k) for k, _, _ in rows)])
    cw = max([len("CLAIM"), *(len(c) for _, c, _ in rows)])
    out = ["", f"{'POD':<{pw}}  {'CLAIM':<{cw}}  {head}"]
    out += [f"{k:<{pw}}  {c:<{cw}}  {show(v)}" for k, c, v in rows]
    return out


def _quota_section(result: SimulationResult) -> list[str]:
    """`ELASTICQUOTA  USE (used/min/max)`: each resource a quota names or its pods
    use; `-` where its spec leaves min (0) or max (unlimited) out."""
    if not result.elastic_quotas:
        return []
    qw = max([len("ELASTICQUOTA"), *(len(k) for k in result.elastic_quotas)])
    out = ["", f"{'ELASTICQUOTA':<{qw}}  USE (used/min/max)"]
    for key, q in result.elastic_quotas.items():
        parts = []
        for r in sorted(q["used"].keys() | q["min"].keys() | q["max"].keys()):
            vals = [
                _human(r, q[f][r]) if r in q[f] else ("0" if f == "used" else "-")
                for f in ("used", "min", "max")
            ]
            parts.append(f"{r} {'/'.join(vals)}")
        out.append(f"{key:<{qw}}  {', '.join(parts)}".rstrip())
    return out


def format_table(result: SimulationResult) -> str:
    lines = []
    for gx in result.group_explanations.values():
        lines.extend(render_group_table(gx, result.explain_top))
        lines.append("")
    for e in result.explanations.values():
        lines.extend(render_table(e, result.explain_top))
        lines.append("")
    w = max([len("POD"), *(len(k) for k in result.pods)])
    shown = {k: _node_shown(v) for k, v in result.pods.items()}
    nw = max([len("NODE"), *(len(n) for n in shown.values())])
    lines.append(f"{'POD':<{w}}  {'NODE':<{nw}}  REASON")
    for k, v in result.pods.items():
        lines.append(f"{k:<{w}}  {shown[k]:<{nw}}  {v['reason'] or ''}".rstrip())
    victims = {k: v for k, v in result.pods.items() if v.get("preemptedBy")}
    if victims:
        lines.append("")
        vw = max([len("PREEMPTED"), *(len(k) for k in victims)])
        bw = max([len("PREEMPTED BY"), *(len(v["preemptedBy"]) for v in victims.values())])
        lines.append(f"{'PREEMPTED':<{vw}}  {'PREEMPTED BY':<{bw}}  FROM NODE")
        for k, v in victims.items():
            where = v.get("preemptedFrom") or v["node"] or ""
            lines.append(f"{k:<{vw}}  {v['preemptedBy']:<{bw}}  {where}".rstrip())
    lines += _claim_section(
        result,
        "volumes",
        "VOLUME",
        lambda v: f"{v['pv']} ({'provisioned' if v['provisioned'] else 'bound'})",
    )
    lines += _claim_section(result, "devices", "DEVICES", ", ".join)
    if result.pod_groups:
        lines.append("")
        gw = max([len("PODGROUP"), *(len(k) for k in result.pod_groups)])
        # DOMAIN only when some group asks for topology (the others' tables stay as they were)
        domain = any("domain" in g for g in result.pod_groups.values())
        head = f"{'PODGROUP':<{gw}}  {'PHASE':<12}  SCHEDULED  RUNNING"
        lines.append(head + ("  DOMAIN" if domain else ""))
        for k, g in result.pod_groups.items():
            line = f"{k:<{gw}}  {g['phase']:<12}  {g['scheduled']:<9}  {g['running']}"
            if domain:
                line = f"{line:<{len(head)}}  {g.get('domain') or '-'}"
            lines.append(line)
    lines += _quota_section(result)
    lines.append("")
    nw2 = max([len("NODE"), *(len(k) for k in result.nodes)])
    lines.append(f"{'NODE':<{nw2}}  USE (requested/allocatable)")
    for name, use in result.nodes.items():
        parts = [
            f"{r} {_human(r, u['requested'])}/{_human(r, u['allocatable'])}" for r, u in use.items()
        ]
        lines.append(f"{name:<{nw2}}  {', '.join(parts)}")
    return "\n".join(lines)


def dump_output(obj: Any, fmt: str) -> str:
    """`obj` as JSON or YAML text, the cyclic collector off meanwhile: PyYAML's
    representer builds a node per value (hundreds of thousands for a large
    cluster), all alive until the text is written, and the collections they
    trigger walk them, and the rest of the heap, to free nothing (40 % of the
    time YAML took for 5000 nodes and 11000 pods). JSON is `json.dumps(obj,
    indent=2)`'s text, written by orjson (`troupe.api.jsonio.dumps_indented`)."""
    with _no_cyclic_gc():
        if fmt == "json":
            return jsonio.dumps_indented(obj)
        # libyaml's emitter when PyYAML has it: the same text, four times faster
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        return yaml.dump(obj, Dumper=dumper, sort_keys=False)


def format_output(result: SimulationResult, fmt: str) -> str:
    if fmt in ("json", "yaml"):
        return dump_output(result.to_json_obj(), fmt)
    return format_table(result)
