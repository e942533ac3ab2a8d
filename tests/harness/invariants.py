"""What must hold on the API's final state whatever the timing: one function per
property, each taking a `FinalState` and returning its violations (sentences
naming the objects), empty when it holds. `check` runs them all.

They read only what the API server holds and its write log (apiserver's
`WriteRecord`s), plus what the harness itself did as the device driver; never
Troupe's memory.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from apiserver import WriteRecord
from tests.harness.scenarios import GROUP_LABEL, Scenario, class_of
from troupe.api.quantity import parse_quantity

ISOLATED_ANNOTATION: Final = "troupe.dev/isolated-cpu"
ISOLATED_RESOURCE: Final = "troupe.dev/isolated-cpu"
# FinalState's keys for Kubernetes' own groups ("podgroups" is scheduler-plugins').
NATIVE_PODGROUPS: Final = "podgroups.scheduling.k8s.io"
COMPOSITE_PODGROUPS: Final = "compositepodgroups.scheduling.k8s.io"

Obj = dict[str, Any]


@dataclass
class FinalState:
    """What a run left: the API's objects by plural, its write log, when the
    harness's driver reported each claim's binding conditions (server time), the
    placement class `troupe simulate` gave (None: not compared)."""

    scenario: Scenario
    objects: Mapping[str, list[Obj]]
    writes: list[WriteRecord] = field(default_factory=list)
    ready_at: Mapping[str, float] = field(default_factory=dict)
    simulated: Mapping[str, int] | None = None

    def of(self, plural: str) -> list[Obj]:
        return list(self.objects.get(plural) or [])


def _key(o: Mapping[str, Any]) -> str:
    md = o.get("metadata") or {}
    ns = md.get("namespace")
    return f"{ns}/{md.get('name')}" if ns else str(md.get("name"))


def _node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _q(v: object) -> Fraction:
    return parse_quantity(v)


def bound_placement(state: FinalState) -> dict[str, int]:
    """Bound pods per class (a pod gone from the API, a preemption's victim, is not bound)."""
    live = {_key(p): p for p in state.of("pods")}
    out: Counter[str] = Counter()
    for p in state.scenario.pods():
        md = p["metadata"]
        got = live.get(f"{md.get('namespace') or 'default'}/{md['name']}")
        out[class_of(p)] += 1 if got is not None and _node_of(got) else 0
    return dict(out)


# Devices ----------------------------------------------------------------------------


def _devices(state: FinalState) -> dict[tuple[str, str, str], Obj]:
    out: dict[tuple[str, str, str], Obj] = {}
    for s in state.of("resourceslices"):
        spec = s.get("spec") or {}
        pool = (spec.get("pool") or {}).get("name")
        for d in spec.get("devices") or []:
            out[(str(spec.get("driver")), str(pool), str(d.get("name")))] = d
    return out


def _results(c: Mapping[str, Any]) -> list[Obj]:
    alloc = (c.get("status") or {}).get("allocation") or {}
    return list((alloc.get("devices") or {}).get("results") or [])


def devices_not_given_twice(state: FinalState) -> list[str]:
    """No device in two claims' allocations, unless it allows several (then their
    consumed capacity fits its capacity); admin access shares nothing."""
    devices = _devices(state)
    users: dict[tuple[str, str, str], list[tuple[str, Obj]]] = defaultdict(list)
    for c in state.of("resourceclaims"):
        for r in _results(c):
            if r.get("adminAccess"):
                continue
            users[(str(r.get("driver")), str(r.get("pool")), str(r.get("device")))].append(
                (_key(c), r)
            )
    out = []
    for dev, got in sorted(users.items()):
        shown = "/".join(dev)
        claims = sorted({k for k, _ in got})
        spec = devices.get(dev) or {}
        if not spec.get("allowMultipleAllocations"):
            if len(got) > 1:
                out.append(f"device {shown} allocated to {len(got)} claims: {', '.join(claims)}")
            continue
        used: Counter[str] = Counter()
        for _, r in got:
            for name, amount in (r.get("consumedCapacity") or {}).items():
                used[name] += _q(amount)  # type: ignore[assignment]
        for name, amount in used.items():
            cap = ((spec.get("capacity") or {}).get(name) or {}).get("value")
            if cap is not None and amount > _q(cap):
                out.append(f"device {shown}: {name} {amount} consumed > capacity {cap} ({claims})")
    return out


def bound_pods_hold_their_claims(state: FinalState) -> list[str]:
    """A bound pod's claims are allocated, reserved for it, and on its node's devices."""
    claims = {_key(c): c for c in state.of("resourceclaims")}
    out = []
    for p in state.of("pods"):
        node = _node_of(p)
        if not node:
            continue
        ns = p["metadata"].get("namespace") or "default"
        uid = p["metadata"].get("uid")
        for ref in (p.get("spec") or {}).get("resourceClaims") or []:
            name = ref.get("resourceClaimName")
            if not name:
                continue
            c = claims.get(f"{ns}/{name}")
            if c is None:
                out.append(f"pod {_key(p)} bound on {node}: its claim {name} does not exist")
                continue
            if not _results(c):
                out.append(f"pod {_key(p)} bound on {node}: its claim {name} is not allocated")
            reserved = (c.get("status") or {}).get("reservedFor") or []
            if not any(r.get("uid") == uid for r in reserved):
                out.append(f"pod {_key(p)} bound on {node}: claim {name} not reserved for it")
            where = _allocation_nodes(c)
            if where is not None and node not in where:
                out.append(f"pod {_key(p)} bound on {node}: claim {name} allocated for {where}")
    return out


def _allocation_nodes(c: Mapping[str, Any]) -> list[str] | None:
    sel = ((c.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    names: list[str] = []
    for term in sel.get("nodeSelectorTerms") or []:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In":
                names += list(f.get("values") or [])
    return names or None


def binds_wait_for_binding_conditions(state: FinalState) -> list[str]:
    """A pod whose devices have binding conditions is bound only after the driver
    reported them (kube-scheduler's PreBind waits for them)."""
    claims = {_key(c): c for c in state.of("resourceclaims")}
    bound_at = _bind_times(state.writes)
    out = []
    for p in state.of("pods"):
        if not _node_of(p):
            continue
        ns = p["metadata"].get("namespace") or "default"
        for ref in (p.get("spec") or {}).get("resourceClaims") or []:
            key = f"{ns}/{ref.get('resourceClaimName')}"
            c = claims.get(key)
            if c is None or not any(r.get("bindingConditions") for r in _results(c)):
                continue
            ready = state.ready_at.get(key)
            when = bound_at.get(_key(p))
            if ready is None:
                out.append(f"pod {_key(p)} bound though the driver never readied claim {key}")
            elif when is not None and when < ready:
                out.append(
                    f"pod {_key(p)} bound {ready - when:.2f}s before the driver readied claim {key}"
                )
    return out


# Nodes --------------------------------------------------------------------------------


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """The pod's effective requests (containers summed, the largest init container,
    overhead), isolated-CPU pods' cpu under troupe.dev/isolated-cpu, one pod slot."""
    spec = pod.get("spec") or {}

    def reqs(c: Mapping[str, Any]) -> dict[str, Fraction]:
        return {k: _q(v) for k, v in (((c.get("resources") or {}).get("requests")) or {}).items()}

    total: dict[str, Fraction] = defaultdict(Fraction)
    for c in spec.get("containers") or []:
        for k, v in reqs(c).items():
            total[k] += v
    for c in spec.get("initContainers") or []:
        for k, v in reqs(c).items():
            total[k] = max(total[k], v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] += _q(v)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if annotations.get(ISOLATED_ANNOTATION) == "true" and "cpu" in total:
        total[ISOLATED_RESOURCE] += total.pop("cpu")
    total["pods"] = Fraction(1)
    return dict(total)


def nodes_not_overcommitted(state: FinalState) -> list[str]:
    """On each node the bound pods' requests (cpu, memory, pods, isolated CPUs,
    any other resource) fit its allocatable, and its CSI volumes its CSINode limit."""
    nodes = {n["metadata"]["name"]: n for n in state.of("nodes")}
    used: dict[str, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    for p in state.of("pods"):
        node = _node_of(p)
        if node:
            for k, v in pod_requests(p).items():
                used[node][k] += v
    out = []
    for node, res in sorted(used.items()):
        alloc = ((nodes.get(node) or {}).get("status") or {}).get("allocatable") or {}
        for k, v in sorted(res.items()):
            have = _q(alloc.get(k, "0"))
            if v > have:
                out.append(f"node {node} over-committed: {k} {float(v):g} > {float(have):g}")
    return out + _volume_limits(state)


DEVICE_CLASS_RESOURCE: Final = "deviceclass.resource.kubernetes.io/"


def _claim_devices(state: FinalState) -> dict[str, dict[str, Fraction]]:
    """Each allocated claim's devices by its requests' DeviceClass, under the
    name a quota counts them by (extendedResourceName, else the class's)."""
    classes = {
        c["metadata"]["name"]: (c.get("spec") or {}).get("extendedResourceName")
        or DEVICE_CLASS_RESOURCE + c["metadata"]["name"]
        for c in state.of("deviceclasses")
    }
    out: dict[str, dict[str, Fraction]] = {}
    for c in state.of("resourceclaims"):
        requests = ((c.get("spec") or {}).get("devices") or {}).get("requests") or []
        class_of = {r.get("name"): (r.get("exactly") or r).get("deviceClassName") for r in requests}
        got: dict[str, Fraction] = defaultdict(Fraction)
        for r in _results(c):
            name = classes.get(class_of.get(str(r.get("request", "")).split("/")[0]) or "")
            if name:
                got[name] += 1
        out[_key(c)] = dict(got)
    return out


def quotas_not_exceeded(state: FinalState) -> list[str]:
    """No namespace's bound pods use more than its ElasticQuota's max: their
    requests, and the devices of the claims they use (each claim once)."""
    devices = _claim_devices(state)
    out = []
    for q in state.of("elasticquotas"):
        ns = q["metadata"]["namespace"]
        max_ = {k: _q(v) for k, v in ((q.get("spec") or {}).get("max") or {}).items()}
        used: dict[str, Fraction] = defaultdict(Fraction)
        claims: set[str] = set()
        for p in state.of("pods"):
            if (p.get("metadata") or {}).get("namespace", "default") != ns or not _node_of(p):
                continue
            for k, v in pod_requests(p).items():
                used[k] += v
            for rc in (p.get("spec") or {}).get("resourceClaims") or []:
                if rc.get("resourceClaimName"):
                    claims.add(f"{ns}/{rc['resourceClaimName']}")
        for key in claims:
            for k, v in devices.get(key, {}).items():
                used[k] += v
        for k, limit in sorted(max_.items()):
            if used.get(k, Fraction(0)) > limit:
                out.append(f"quota {ns} over max: {k} {float(used[k]):g} > {float(limit):g}")
    return out


def _volume_limits(state: FinalState) -> list[str]:
    pvcs = {_key(c): c for c in state.of("persistentvolumeclaims")}
    pvs = {p["metadata"]["name"]: p for p in state.of("persistentvolumes")}
    per_node: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for p in state.of("pods"):
        node = _node_of(p)
        if not node:
            continue
        ns = p["metadata"].get("namespace") or "default"
        for v in (p.get("spec") or {}).get("volumes") or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            pvc = pvcs.get(f"{ns}/{claim}") if claim else None
            pv = pvs.get(str(((pvc or {}).get("spec") or {}).get("volumeName")))
            driver = (((pv or {}).get("spec") or {}).get("csi") or {}).get("driver")
            if driver:
                per_node[node][driver].add(pv["metadata"]["name"])  # type: ignore[index]
    out = []
    for csinode in state.of("csinodes"):
        node = csinode["metadata"]["name"]
        for d in (csinode.get("spec") or {}).get("drivers") or []:
            count = (d.get("allocatable") or {}).get("count")
            have = len(per_node[node][d.get("name")])
            if count is not None and have > int(count):
                out.append(f"node {node}: {have} volumes of {d.get('name')} > limit {count}")
    return out


# Pods and gangs -------------------------------------------------------------------------


def _min_members(state: FinalState) -> dict[str, int]:
    return {
        _key(g): int((g.get("spec") or {}).get("minMember") or 0) for g in state.of("podgroups")
    }


def _gang_policy(group: Mapping[str, Any], field_: str) -> int | None:
    """spec.schedulingPolicy.gang's `field_` (minCount, minGroupCount); None: not a gang."""
    gang = ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang")
    return None if gang is None else int(gang.get(field_) or 0)


def _native_bound(state: FinalState) -> Counter[str]:
    """Bound pods per native PodGroup (spec.schedulingGroup.podGroupName)."""
    bound: Counter[str] = Counter()
    for p in state.of("pods"):
        name = ((p.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
        if name and _node_of(p):
            bound[f"{p['metadata'].get('namespace') or 'default'}/{name}"] += 1
    return bound


def gangs_all_or_nothing(state: FinalState) -> list[str]:
    """A PodGroup has no member bound, or at least its quorum: scheduler-plugins'
    minMember, a native gang PodGroup's minCount (a CompositePodGroup's child
    or not)."""
    bound: Counter[str] = Counter()
    for p in state.of("pods"):
        group = ((p.get("metadata") or {}).get("labels") or {}).get(GROUP_LABEL)
        if group and _node_of(p):
            bound[f"{p['metadata'].get('namespace') or 'default'}/{group}"] += 1
    out = [
        f"gang {g}: {bound[g]} bound, fewer than minMember {mm}"
        for g, mm in sorted(_min_members(state).items())
        if 0 < bound[g] < mm
    ]
    native = _native_bound(state)
    for g in sorted(state.of(NATIVE_PODGROUPS), key=_key):
        count = _gang_policy(g, "minCount")
        if count is not None and 0 < native[_key(g)] < count:
            out.append(f"gang {_key(g)}: {native[_key(g)]} bound, fewer than minCount {count}")
    return out


def composites_all_or_nothing(state: FinalState) -> list[str]:
    """A gang CompositePodGroup has no pod of its subtree bound, or at least
    minGroupCount of its children satisfied: a child PodGroup with minCount
    pods bound (a basic one: any), a child composite by its own count (a basic
    one: one child satisfied). A child PodGroup short of its minCount is
    gangs_all_or_nothing's."""
    groups = {_key(g): g for g in state.of(NATIVE_PODGROUPS)}
    composites = {_key(c): c for c in state.of(COMPOSITE_PODGROUPS)}
    children: dict[str, list[str]] = defaultdict(list)
    for key, g in (*groups.items(), *composites.items()):
        parent = (g.get("spec") or {}).get("parentCompositePodGroupName")
        if parent:
            ns = g["metadata"].get("namespace") or "default"
            children[f"{ns}/{parent}"].append(key)
    bound = _native_bound(state)

    def subtree_bound(key: str, seen: frozenset[str]) -> int:
        if key in groups:
            return bound[key]
        if key in seen:  # a cycle of parents: Troupe binds none of it
            return 0
        return sum(subtree_bound(k, seen | {key}) for k in children[key])

    def satisfied(key: str, seen: frozenset[str]) -> bool:
        if key in groups:
            count = _gang_policy(groups[key], "minCount")
            return bound[key] >= max(count or 1, 1)
        if key in seen:
            return False
        need = _gang_policy(composites[key], "minGroupCount")
        got = sum(satisfied(k, seen | {key}) for k in children[key])
        return got >= max(need or 1, 1)

    out = []
    for key, c in sorted(composites.items()):
        need = _gang_policy(c, "minGroupCount")
        if need is None:
            continue
        pods = subtree_bound(key, frozenset())
        got = sum(satisfied(k, frozenset({key})) for k in children[key])
        if pods and got < need:
            out.append(
                f"composite {key}: {pods} pods bound, "
                f"{got} of minGroupCount {need} children satisfied"
            )
    return out


def _bind_times(writes: Iterable[WriteRecord]) -> dict[str, float]:
    return {
        f"{w.namespace}/{w.name}": w.time
        for w in writes
        if w.verb == "bind" and w.status < 300 and w.name
    }


def no_pod_bound_twice(state: FinalState) -> list[str]:
    """Each pod was bound by at most one successful pods/binding call."""
    binds = Counter(
        f"{w.namespace}/{w.name}" for w in state.writes if w.verb == "bind" and w.status < 300
    )
    return [f"pod {k} bound {n} times" for k, n in sorted(binds.items()) if n > 1]


def pending_pods_have_a_reason(state: FinalState) -> list[str]:
    """A pod Troupe did not bind carries PodScheduled=False with a message."""
    out = []
    for p in state.of("pods"):
        spec = p.get("spec") or {}
        if _node_of(p) or spec.get("schedulerName") != "troupe-scheduler":
            continue
        conds = [
            c
            for c in (p.get("status") or {}).get("conditions") or []
            if c.get("type") == "PodScheduled"
        ]
        if not (conds and conds[0].get("status") == "False" and conds[0].get("message")):
            out.append(f"pod {_key(p)} is pending without a reason ({conds or 'no condition'})")
    return out


# PreEnqueue's reason for a gang that is short of pods (Coscheduling's text).
_FEWER_PODS: Final = re.compile(
    r'^PodGroup "(?:scheduling\.k8s\.io/)?([^"/]+/[^"]+)" has fewer pods than '
    r"(?:minMember|minCount) (\d+)$"
)


def pending_reasons_are_current(state: FinalState) -> list[str]:
    """A pending pod's reason is not one the API contradicts at the end: a pod
    that says its gang has fewer pods than its quorum belongs to a gang that
    has fewer (an older report's message overwriting a newer one says so)."""
    members: Counter[str] = Counter()
    for p in state.of("pods"):
        ns = (p.get("metadata") or {}).get("namespace") or "default"
        crd = ((p.get("metadata") or {}).get("labels") or {}).get(GROUP_LABEL)
        native = ((p.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
        for g in {crd, native} - {None}:
            members[f"{ns}/{g}"] += 1
    out = []
    for p in state.of("pods"):
        if _node_of(p):
            continue
        for c in (p.get("status") or {}).get("conditions") or []:
            m = (
                _FEWER_PODS.match(str(c.get("message") or ""))
                if c.get("type") == "PodScheduled"
                else None
            )
            if m and members[m.group(1)] >= int(m.group(2)):
                out.append(
                    f"pod {_key(p)} says {c['message']!r} but its group has "
                    f"{members[m.group(1)]} pods"
                )
    return out


def same_placement_class_as_simulate(state: FinalState) -> list[str]:
    """As many pods of each class bound (so each gang admitted or not alike, the
    same pods pending where each is its own class) as `troupe simulate` gives."""
    if state.simulated is None:
        return []
    live = bound_placement(state)
    return [
        f"class {k}: {live.get(k, 0)} bound live, {state.simulated.get(k, 0)} simulated"
        for k in sorted(set(live) | set(state.simulated))
        if live.get(k, 0) != state.simulated.get(k, 0)
    ]


def expected_placement(state: FinalState) -> list[str]:
    """The counts the scenario states outright (live)."""
    live = bound_placement(state)
    return [
        f"class {k}: {live.get(k, 0)} bound, expected {n}"
        for k, n in sorted(state.scenario.expect.items())
        if live.get(k, 0) != n
    ]


INVARIANTS: Final[dict[str, Callable[[FinalState], list[str]]]] = {
    "devices-not-given-twice": devices_not_given_twice,
    "bound-pods-hold-their-claims": bound_pods_hold_their_claims,
    "binds-wait-for-binding-conditions": binds_wait_for_binding_conditions,
    "nodes-not-overcommitted": nodes_not_overcommitted,
    "gangs-all-or-nothing": gangs_all_or_nothing,
    "composites-all-or-nothing": composites_all_or_nothing,
    "quotas-not-exceeded": quotas_not_exceeded,
    "no-pod-bound-twice": no_pod_bound_twice,
    "pending-pods-have-a-reason": pending_pods_have_a_reason,
    "pending-reasons-are-current": pending_reasons_are_current,
    "same-placement-class-as-simulate": same_placement_class_as_simulate,
    "expected-placement": expected_placement,
}


def check(state: FinalState) -> dict[str, list[str]]:
    """Every invariant's violations, by name (only those violated)."""
    out = {}
    for name, fn in INVARIANTS.items():
        got = fn(state)
        if got:
            out[name] = got
    return out
