"""Build the typed views of `troupe.api.types` from Kubernetes objects (dicts).

Every `parse_*` function returns the view or an `InvalidObject` whose message
starts with the offending field's path (``spec.containers[0].resources.requests.cpu:
quantities must match ...``); no exception escapes, whatever the input. Inside,
readers raise `ParseError` and `_guarded` turns it into the value at the edge.

What is computed here, and after what:

* Pod requests — component-helpers resource.PodRequests, as kube-scheduler's
  NodeInfo uses it: the sum of the regular containers; init containers in
  order, a restartable one (``restartPolicy: Always``, a sidecar) adding to the
  sum and to the running sidecar total, any other needing its own request plus
  the sidecars started before it; the result is the max of the two; pod-level
  requests (``spec.resources``: cpu, memory, hugepages-*; PodLevelResources, on
  by default) replace that for the resources they set; plus ``spec.overhead``.
  Zero amounts are left out. Requests missing where a limit
  is set default to the limit, as the API server's defaulting does (a
  hand-written YAML file has not been through it).
* Non-zero cpu/memory (scoring) — the same with NonMissingContainerRequests:
  each container that does not state a cpu (memory) request counts 100m
  (200Mi). A request explicitly set to 0 stays 0, as in kube-scheduler. With
  pod-level requests the defaults apply only to a resource stated nowhere.
* Priority — spec.priority, else the named PriorityClass's value, else the
  global-default class's (the lowest, if several), else 0. An unknown class
  name gives 0: admission would have refused the pod; we schedule it anyway.
* Host ports — kube-scheduler's GetHostPorts: sidecar init containers, then
  containers; protocol defaults to TCP, host IP "0.0.0.0" is stored as "".
* Images — ImageLocality's list: every init container, then every container,
  each normalized (":latest" added to an untagged name, `normalized_image_name`,
  which the node's image names go through too); `num_containers` counts them,
  with an image or without.

Views hold plain dicts (labels, annotations, requests, ...) built here and
referenced by nothing else; they are read-only by convention, not wrapped in
MappingProxyType, because wrapping costs time on the hot path of parsing every
pod of a large cluster. `raw` is the object as given.

`PodParser` remembers the pods it parsed: an update that changes only what a
binding or the kubelet writes (spec.nodeName, status, resourceVersion,
managedFields...) reuses the view instead of parsing it again (see its
docstring for what counts as unchanged).
"""

from __future__ import annotations

import operator
import re
from calendar import timegm
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Final, TypeVar

from troupe.api.quantity import parse_quantity, to_scaled
from troupe.api.readers import (
    get_bool,
    get_int,
    get_map,
    get_objs,
    get_str,
    get_str_list,
    get_str_map,
    invalid,
    required,
    show,
    unsupported,
)
from troupe.api.selectors import (
    label_selector_from_map,
    parse_label_selector,
    parse_node_selector,
    parse_node_selector_term,
    parse_preferred_terms,
)
from troupe.api.taints import parse_taint, parse_toleration
from troupe.api.types import (
    COMPOSITE_VERSION,
    CPU,
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    DISRUPTION_ALL,
    DISRUPTION_SINGLE,
    DISRUPTION_TARGET,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    MEMORY,
    MILLI_RESOURCES,
    NATIVE_POD_GROUP_API,
    NATIVE_POD_GROUP_VERSIONS,
    PREEMPT_LOWER_PRIORITY,
    PREEMPT_NEVER,
    WORKLOAD_KINDS,
    CompositePodGroup,
    ContainerImage,
    HostPort,
    InvalidObject,
    LabelSelector,
    Node,
    NodeName,
    ParseError,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodDisruptionBudget,
    PodGroup,
    PodResourceClaim,
    PriorityClass,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
    Workload,
    describe_int,
)

__all__ = [
    "MILLI_RESOURCES",
    "POD_GROUP_API_GROUPS",
    "ParsedObject",
    "PodParser",
    "normalized_image_name",
    "parse_label_selector",
    "parse_node",
    "parse_node_selector",
    "parse_node_selector_term",
    "parse_object",
    "parse_pod",
    "parse_pod_group",
    "parse_preferred_terms",
    "parse_priority_class",
    "parse_timestamp",
    "parse_workload",
    "pod_requests",
    "resource_list",
]

T = TypeVar("T")
ParsedObject = Pod | Node | PodGroup | PriorityClass | Workload

POD_GROUP_API_GROUPS: Final = ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io")
DEFAULT_SCHEDULER: Final = "default-scheduler"
PROTOCOLS: Final = ("SCTP", "TCP", "UDP")
# Amounts beyond int64 would overflow the snapshot's numpy columns.
MAX_AMOUNT: Final = 2**63 - 1


# ---- timestamps --------------------------------------------------------------------------

_RFC3339: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)

# metav1.Time as the API server writes it (RFC 3339 in UTC, whole seconds).
_API_SERVER_FORM: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def parse_timestamp(v: object, field: str) -> float:
    """An RFC 3339 time (metav1.Time) as seconds since the epoch; 0.0 when absent.

    YAML loaders may already have made it a `datetime` (naive means UTC).
    """
    if v is None or v == "":
        return 0.0
    if isinstance(v, datetime):
        return (v if v.tzinfo else v.replace(tzinfo=UTC)).timestamp()
    if isinstance(v, str) and len(v) == 20 and _API_SERVER_FORM.fullmatch(v):
        # What the API server writes: datetime's own parser, 5x faster than
        # the groups below; an impossible date falls through to them for the
        # error's text.
        try:
            return datetime.fromisoformat(v).timestamp()
        except ValueError:
            pass
    m = _RFC3339.fullmatch(v) if isinstance(v, str) else None
    if m is None:
        raise invalid(field, v, "must be an RFC 3339 date-time (2006-01-02T15:04:05Z)")
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    try:
        datetime(year, month, day, hour, minute, second)  # range checks
    except ValueError as e:
        raise invalid(field, v, f"must be an RFC 3339 date-time: {e}") from None
    ts = float(timegm((year, month, day, hour, minute, second, 0, 0, 0)))
    if m.group(7):
        ts += float(m.group(7))
    if m.group(9):
        offset = int(m.group(10)) * 3600 + int(m.group(11)) * 60
        ts -= offset if m.group(9) == "+" else -offset
    return ts


# ---- resources ---------------------------------------------------------------------------


def resource_list(
    obj: Mapping[str, Any], key: str, prefix: str, milli: frozenset[str] = MILLI_RESOURCES
) -> dict[str, int]:
    """A v1.ResourceList in scaled units (zeros kept: "stated as 0" is not "absent")."""
    out: dict[str, int] = {}
    for name, raw in get_map(obj, key, prefix).items():
        if isinstance(raw, str) and isinstance(name, str):
            amount = _scaled_text(name, raw, milli)
            if amount is not None:
                out[name] = amount
                continue
        path = f"{prefix}{key}.{name}"
        q = parse_quantity(raw, path)
        if q < 0:
            raise invalid(path, raw, "must be greater than or equal to 0")
        amount = to_scaled(str(name), q, milli)
        if amount > MAX_AMOUNT:
            raise invalid(path, raw, f"must be at most {MAX_AMOUNT} in scaled units")
        out[str(name)] = amount
    return out


@lru_cache(maxsize=4096)
def _scaled_text(name: str, raw: str, milli: frozenset[str]) -> int | None:
    """`resource_list`'s amount for a valid quantity string, remembered (pods
    repeat the same few requests); None for anything `resource_list` refuses,
    which it then parses again to say why."""
    try:
        q = parse_quantity(raw)
    except ParseError:
        return None
    if q < 0:
        return None
    amount = to_scaled(name, q, milli)
    return amount if amount <= MAX_AMOUNT else None


def _add(into: dict[str, int], res: Mapping[str, int]) -> None:
    for k, v in res.items():
        into[k] = into.get(k, 0) + v


def _max(into: dict[str, int], res: Mapping[str, int]) -> None:
    for k, v in res.items():
        if k not in into or v > into[k]:
            into[k] = v


def _container_requests(c: Mapping[str, Any], prefix: str, milli: frozenset[str]) -> dict[str, int]:
    res = get_map(c, "resources", prefix)
    if not res:
        return {}
    p = f"{prefix}resources."
    req = resource_list(res, "requests", p, milli)
    if res.get("limits"):
        for name, v in resource_list(res, "limits", p, milli).items():
            req.setdefault(name, v)  # API defaulting: a request defaults to its limit
    return req


def _combine(
    regular: list[dict[str, int]],
    init: list[tuple[dict[str, int], bool]],
    pod_level: Mapping[str, int],
    overhead: Mapping[str, int],
) -> dict[str, int]:
    """resource.PodRequests over per-container requests; `init` pairs are
    (requests, is_sidecar) in spec order. Resources stated (even as 0) keep
    their key, as in a v1.ResourceList."""
    total: dict[str, int] = {}
    for r in regular:
        _add(total, r)
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for r, is_sidecar in init:
        if is_sidecar:
            _add(total, r)
            _add(sidecars, r)
            _max(init_max, sidecars)
        else:
            running = dict(r)
            _add(running, sidecars)
            _max(init_max, running)
    _max(total, init_max)
    total.update(pod_level)  # pod-level requests replace the containers' sum
    _add(total, overhead)
    return total


def _nonzero(req: Mapping[str, int], defaults: Mapping[str, int]) -> dict[str, int]:
    """NonMissingContainerRequests: `defaults` for a cpu / memory request not stated."""
    out = dict(req)
    for k, v in defaults.items():
        out.setdefault(k, v)
    return out


def _is_pod_level(name: str) -> bool:
    """component-helpers IsSupportedPodLevelResource: cpu, memory, hugepages-*."""
    return name in (CPU, MEMORY) or name.startswith("hugepages-")


def _pod_level_requests(
    spec: Mapping[str, Any],
    stated: set[str],
    milli: frozenset[str],
) -> dict[str, int]:
    """spec.resources requests of the supported resources. A pod-level limit without
    a request defaults the request as the API server does (defaultPodRequests): to
    the limit when no container states a request for it (otherwise the containers'
    sum, which is what is used anyway)."""
    res = get_map(spec, "resources", "spec.")
    if not res:
        return {}
    p = "spec.resources."
    req = {k: v for k, v in resource_list(res, "requests", p, milli).items() if _is_pod_level(k)}
    if res.get("limits"):
        for name, v in resource_list(res, "limits", p, milli).items():
            if _is_pod_level(name) and name not in req and name not in stated:
                req[name] = v
    return req


_CONTAINER_RESTART_POLICIES: Final = ("Always", "OnFailure", "Never")


def _is_sidecar(c: Mapping[str, Any], prefix: str) -> bool:
    """An init container with restartPolicy Always; Never and OnFailure override
    the pod's policy for a regular init container (ContainerRestartRules)."""
    policy = get_str(c, "restartPolicy", prefix)
    if policy and policy not in _CONTAINER_RESTART_POLICIES:
        raise unsupported(f"{prefix}restartPolicy", policy, list(_CONTAINER_RESTART_POLICIES))
    return policy == "Always"


def _combined_requests(
    spec: Mapping[str, Any],
    regular: list[dict[str, int]],
    inits: list[tuple[str, Mapping[str, Any], bool]],
    milli: frozenset[str],
) -> tuple[dict[str, int], int, int]:
    """`_requests` of a pod with init containers, overhead or pod-level
    resources: (requests, non-zero cpu, non-zero memory)."""
    init = [(_container_requests(c, p, milli), sc) for p, c, sc in inits]
    overhead = resource_list(spec, "overhead", "spec.", milli)
    stated = {k for r in (*regular, *(r for r, _ in init)) for k in r}
    pod_level = _pod_level_requests(spec, stated, milli)
    total = _combine(regular, init, pod_level, overhead)
    # as kube-scheduler's NodeInfo calculateResource (getNonMissingContainerRequests):
    # without pod-level requests every container missing a cpu / memory request
    # counts the default; with them, the default applies only to a resource that
    # neither the pod nor any container states.
    defaults = {CPU: DEFAULT_MILLI_CPU_REQUEST, MEMORY: DEFAULT_MEMORY_REQUEST}
    if pod_level:
        effective = stated | set(pod_level)
        defaults = {k: v for k, v in defaults.items() if k not in effective}
    nonzero = _combine(
        [_nonzero(r, defaults) for r in regular],
        [(_nonzero(r, defaults), sc) for r, sc in init],
        pod_level,
        overhead,
    )
    return total, nonzero.get(CPU, 0), nonzero.get(MEMORY, 0)


def _requests(
    spec: Mapping[str, Any],
    containers: list[tuple[str, Mapping[str, Any]]],
    inits: list[tuple[str, Mapping[str, Any], bool]],
    milli: frozenset[str],
) -> tuple[dict[str, int], int, int]:
    """(requests without zeros, non-zero cpu, non-zero memory)."""
    regular = [_container_requests(c, p, milli) for p, c in containers]
    if not inits and spec.get("overhead") is None and spec.get("resources") is None:
        # Most pods: the containers' sum, each missing cpu / memory counting the default.
        total: dict[str, int] = {}
        nz_cpu = nz_memory = 0
        for r in regular:
            _add(total, r)
            nz_cpu += r.get(CPU, DEFAULT_MILLI_CPU_REQUEST)
            nz_memory += r.get(MEMORY, DEFAULT_MEMORY_REQUEST)
    else:
        total, nz_cpu, nz_memory = _combined_requests(spec, regular, inits, milli)
    # Each amount fits int64; the pod's total (what the cache charges) must too,
    # or kube's int64 accounting would overflow: such a pod is invalid, checked
    # before anything is charged. The milli resources (cpu and the isolated
    # one) together, since an isolated pod's cpu is charged to the other.
    milli_sum = 0
    for name, amount in total.items():
        if amount > MAX_AMOUNT:
            raise _too_large(name, amount)
        if name in milli:
            milli_sum += amount
    if milli_sum > MAX_AMOUNT:
        raise _too_large("+".join(sorted(k for k in total if k in milli)), milli_sum)
    for name, amount in ((CPU, nz_cpu), (MEMORY, nz_memory)):
        if amount > MAX_AMOUNT:
            raise _too_large(name, amount)
    if 0 in total.values():
        total = {k: v for k, v in total.items() if v}
    return total, nz_cpu, nz_memory


def _too_large(name: str, amount: int) -> ParseError:
    return ParseError(
        f"spec.containers[*].resources.requests.{name}",
        f"Invalid value: the pod's total request of {name} ({amount} in scaled units) "
        f"must be at most {MAX_AMOUNT}",
    )


def pod_requests(
    spec: Mapping[str, Any], milli: frozenset[str] = MILLI_RESOURCES
) -> dict[str, int]:
    """The effective requests of a pod spec (see the module docstring). Raises ParseError."""
    containers = get_objs(spec, "containers", "spec.")
    inits = [(p, c, _is_sidecar(c, p)) for p, c in get_objs(spec, "initContainers", "spec.")]
    return _requests(spec, containers, inits, milli)[0]


# ---- pods --------------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def normalized_image_name(name: str) -> str:
    """ImageLocality's normalizedImageName: ":latest" when there is no tag (no ':'
    after the last '/'; a digest, "@sha256:...", has one). The pod's images and
    the node's are both read through it, so that they meet in one index."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


def _host_ports(containers: list[tuple[str, Mapping[str, Any]]]) -> tuple[HostPort, ...]:
    out: list[HostPort] = []
    for prefix, c in containers:
        for p, port in get_objs(c, "ports", prefix):
            if port.get("hostPort") is None:  # most ports
                continue
            hp = get_int(port, "hostPort", p) or 0
            if hp <= 0:
                continue
            if hp > 65535:
                raise invalid(f"{p}hostPort", hp, "must be between 1 and 65535, inclusive")
            proto = get_str(port, "protocol", p) or "TCP"
            if proto not in PROTOCOLS:
                raise unsupported(f"{p}protocol", proto, PROTOCOLS)
            ip = get_str(port, "hostIP", p)
            out.append(HostPort("" if ip == "0.0.0.0" else ip, proto, hp))
    return tuple(out)


# The API server's types: spec.priority is an int32, the grace period an int64 of
# seconds (and, validated, never negative). A value beyond them cannot come from a
# cluster; from a dump it is refused here, naming the field, instead of failing
# later (a victim that could never be deleted, sums past int64).


def _check_ranges(spec: Mapping[str, Any]) -> None:
    p = get_int(spec, "priority", "spec.")
    if p is not None and not INT32_MIN <= p <= INT32_MAX:
        raise invalid("spec.priority", describe_int(p), "must be a 32-bit integer")
    grace = get_int(spec, "terminationGracePeriodSeconds", "spec.")
    if grace is not None and grace < 0:
        raise invalid(
            "spec.terminationGracePeriodSeconds", grace, "must be greater than or equal to 0"
        )
    if grace is not None and grace > INT64_MAX:
        raise invalid(
            "spec.terminationGracePeriodSeconds", describe_int(grace), "must be a 64-bit integer"
        )


def _priority(spec: Mapping[str, Any], classes: Mapping[str, PriorityClass]) -> int:
    p = get_int(spec, "priority", "spec.")
    if p is not None:
        return p
    name = get_str(spec, "priorityClassName", "spec.")
    if name:
        pc = classes.get(name)
        return pc.value if pc is not None else 0
    defaults = [pc.value for pc in classes.values() if pc.global_default]
    return min(defaults) if defaults else 0


def _weight(item: Mapping[str, Any], prefix: str) -> int:
    w = get_int(item, "weight", prefix)
    if w is None:
        raise required(f"{prefix}weight")
    if not 1 <= w <= 100:
        raise invalid(f"{prefix}weight", w, "must be in the range 1-100")
    return w


def _pod_affinity_term(item: Mapping[str, Any], prefix: str) -> PodAffinityTerm:
    tk = get_str(item, "topologyKey", prefix)
    if not tk:
        raise required(f"{prefix}topologyKey", "can not be empty")
    return PodAffinityTerm(
        label_selector=parse_label_selector(item.get("labelSelector"), f"{prefix}labelSelector."),
        topology_key=tk,
        namespaces=get_str_list(item, "namespaces", prefix),
        namespace_selector=parse_label_selector(
            item.get("namespaceSelector"), f"{prefix}namespaceSelector."
        ),
        match_label_keys=get_str_list(item, "matchLabelKeys", prefix),
        mismatch_label_keys=get_str_list(item, "mismatchLabelKeys", prefix),
    )


def _pod_affinity(affinity: Mapping[str, Any], key: str) -> PodAffinity | None:
    if affinity.get(key) is None:
        return None
    a = get_map(affinity, key, "spec.affinity.")
    p = f"spec.affinity.{key}."
    required_terms = tuple(
        _pod_affinity_term(x, q)
        for q, x in get_objs(a, "requiredDuringSchedulingIgnoredDuringExecution", p)
    )
    preferred = tuple(
        WeightedPodAffinityTerm(
            _weight(x, q),
            _pod_affinity_term(get_map(x, "podAffinityTerm", q), f"{q}podAffinityTerm."),
        )
        for q, x in get_objs(a, "preferredDuringSchedulingIgnoredDuringExecution", p)
    )
    return PodAffinity(required_terms, preferred)


def _spread(item: Mapping[str, Any], prefix: str) -> TopologySpreadConstraint:
    max_skew = get_int(item, "maxSkew", prefix)
    if max_skew is None or max_skew < 1:
        raise invalid(f"{prefix}maxSkew", max_skew, "must be greater than zero")
    tk = get_str(item, "topologyKey", prefix)
    if not tk:
        raise required(f"{prefix}topologyKey", "can not be empty")
    wu = get_str(item, "whenUnsatisfiable", prefix)
    if wu not in ("DoNotSchedule", "ScheduleAnyway"):
        raise unsupported(f"{prefix}whenUnsatisfiable", wu, ["DoNotSchedule", "ScheduleAnyway"])
    min_domains = get_int(item, "minDomains", prefix)
    if min_domains is not None:
        if min_domains < 1:
            raise invalid(f"{prefix}minDomains", min_domains, "must be greater than zero")
        if wu != "DoNotSchedule":
            raise invalid(
                f"{prefix}minDomains",
                min_domains,
                "can only use minDomains if whenUnsatisfiable=DoNotSchedule",
            )
    policies = []
    for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
        v = get_str(item, name, prefix) or default
        if v not in ("Honor", "Ignore"):
            raise unsupported(f"{prefix}{name}", v, ["Honor", "Ignore"])
        policies.append(v)
    return TopologySpreadConstraint(
        max_skew=max_skew,
        topology_key=tk,
        when_unsatisfiable=wu,
        label_selector=parse_label_selector(item.get("labelSelector"), f"{prefix}labelSelector."),
        min_domains=min_domains,
        node_affinity_policy=policies[0],
        node_taints_policy=policies[1],
        match_label_keys=get_str_list(item, "matchLabelKeys", prefix),
    )


def _gate(item: Mapping[str, Any], prefix: str) -> str:
    name = get_str(item, "name", prefix)
    if not name:
        raise required(f"{prefix}name")
    return name


def _resource_claims(spec: Mapping[str, Any]) -> tuple[PodResourceClaim, ...]:
    """spec.resourceClaims as the API server validates them: a unique DNS label
    each, with exactly one of resourceClaimName and resourceClaimTemplateName."""
    out: list[PodResourceClaim] = []
    seen: set[str] = set()
    for p, c in get_objs(spec, "resourceClaims", "spec."):
        name = get_str(c, "name", p)
        if not name:
            raise required(f"{p}name")
        if name in seen:
            raise ParseError(f"{p}name", f"Duplicate value: {show(name)}")
        seen.add(name)
        claim = get_str(c, "resourceClaimName", p)
        template = get_str(c, "resourceClaimTemplateName", p)
        if bool(claim) == bool(template):
            raise invalid(
                p.rstrip("."),
                dict(c),
                "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
            )
        out.append(PodResourceClaim(name, claim, template))
    return tuple(out)


def _claim_statuses(status: Mapping[str, Any]) -> dict[str, str]:
    """status.resourceClaimStatuses: the claim the resourceclaim controller
    created for each of the pod's template claims ("" when it needs none)."""
    return {
        get_str(s, "name", p): get_str(s, "resourceClaimName", p)
        for p, s in get_objs(status, "resourceClaimStatuses", "status.")
    }


def _parse_pod(
    obj: Mapping[str, Any], classes: Mapping[str, PriorityClass], milli: frozenset[str]
) -> Pod:
    md, ns, name = _meta(obj, namespaced=True)
    if obj.get("spec") is None:
        raise required("spec")
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    containers = get_objs(spec, "containers", "spec.")
    if not containers:
        raise required("spec.containers", "must have at least one container")
    _check_ranges(spec)
    inits = [(p, c, _is_sidecar(c, p)) for p, c in get_objs(spec, "initContainers", "spec.")]
    requests, nonzero_cpu, nonzero_memory = _requests(spec, containers, inits, milli)
    sidecars = [(p, c) for p, c, sc in inits if sc]
    # init containers first, as kubelet runs them
    every = [(p, c) for p, c, _ in inits] + containers if inits else containers
    images = tuple(normalized_image_name(img) for p, c in every if (img := get_str(c, "image", p)))
    affinity = get_map(spec, "affinity", "spec.")
    node_affinity = get_map(affinity, "nodeAffinity", "spec.affinity.")
    nap = "spec.affinity.nodeAffinity."
    return Pod(
        namespace=ns,
        name=name,
        uid=get_str(md, "uid", "metadata."),
        labels=get_str_map(md, "labels", "metadata."),
        annotations=get_str_map(md, "annotations", "metadata."),
        scheduler_name=get_str(spec, "schedulerName", "spec.") or DEFAULT_SCHEDULER,
        node_name=get_str(spec, "nodeName", "spec."),
        phase=get_str(status, "phase", "status.") or "Pending",
        deleting=md.get("deletionTimestamp") is not None,
        creation_timestamp=parse_timestamp(
            md.get("creationTimestamp"), "metadata.creationTimestamp"
        ),
        priority=_priority(spec, classes),
        priority_class_name=get_str(spec, "priorityClassName", "spec."),
        requests=requests,
        nonzero_cpu=nonzero_cpu,
        nonzero_memory=nonzero_memory,
        host_ports=_host_ports(sidecars + containers),
        images=images,
        num_containers=len(inits) + len(containers),
        node_selector=get_str_map(spec, "nodeSelector", "spec."),
        required_node_affinity=parse_node_selector(
            node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
            f"{nap}requiredDuringSchedulingIgnoredDuringExecution.",
        ),
        preferred_node_affinity=parse_preferred_terms(
            node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"),
            f"{nap}preferredDuringSchedulingIgnoredDuringExecution",
        ),
        tolerations=tuple(
            parse_toleration(t, p) for p, t in get_objs(spec, "tolerations", "spec.")
        ),
        pod_affinity=_pod_affinity(affinity, "podAffinity"),
        pod_anti_affinity=_pod_affinity(affinity, "podAntiAffinity"),
        topology_spread_constraints=tuple(
            _spread(c, p) for p, c in get_objs(spec, "topologySpreadConstraints", "spec.")
        ),
        scheduling_gates=tuple(_gate(g, p) for p, g in get_objs(spec, "schedulingGates", "spec.")),
        scheduling_group=get_str(
            get_map(spec, "schedulingGroup", "spec."), "podGroupName", "spec.schedulingGroup."
        ),
        owner_references=tuple(
            (get_str(o, "kind", p), get_str(o, "name", p))
            for p, o in get_objs(md, "ownerReferences", "metadata.")
        ),
        disruption_reason=_disruption_reason(status),
        raw=obj,
        preemption_policy=_preemption_policy(spec, classes),
        resource_claims=_resource_claims(spec),
        claim_statuses=_claim_statuses(status),
        host_network=get_bool(spec, "hostNetwork", "spec."),
        host_users=None if spec.get("hostUsers") is None else get_bool(spec, "hostUsers", "spec."),
        restart_rule_actions=frozenset(
            get_str(r, "action", rp)
            for p, c in every
            if "restartPolicyRules" in c
            for rp, r in get_objs(c, "restartPolicyRules", p)
        ),
        bind_mount_options=any(
            get_str_list(m, "bindMountOptions", mp)
            for p, c in every + get_objs(spec, "ephemeralContainers", "spec.")
            for mp, m in get_objs(c, "volumeMounts", p)
            if "bindMountOptions" in m
        ),
    )


def _disruption_reason(status: Mapping[str, Any]) -> str:
    """The reason of the first DisruptionTarget condition if it is True, else ""."""
    for p, c in get_objs(status, "conditions", "status."):
        if get_str(c, "type", p) == DISRUPTION_TARGET:
            return get_str(c, "reason", p) if get_str(c, "status", p) == "True" else ""
    return ""


def _preemption_policy(spec: Mapping[str, Any], classes: Mapping[str, PriorityClass]) -> str:
    policy = get_str(spec, "preemptionPolicy", "spec.")
    if policy:
        return policy
    pc = classes.get(get_str(spec, "priorityClassName", "spec."))
    return pc.preemption_policy if pc is not None else PREEMPT_LOWER_PRIORITY


# ---- nodes, groups, classes, workloads ---------------------------------------------------


def _parse_node(obj: Mapping[str, Any], milli: frozenset[str]) -> Node:
    md, _, name = _meta(obj, namespaced=False)
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    alloc_key = "allocatable" if status.get("allocatable") is not None else "capacity"
    images = []
    for p, img in get_objs(status, "images", "status."):
        size = get_int(img, "sizeBytes", p) or 0
        if size < 0:
            raise invalid(f"{p}sizeBytes", size, "must be greater than or equal to 0")
        names = tuple(map(normalized_image_name, filter(None, get_str_list(img, "names", p))))
        images.append(ContainerImage(names, size))
    return Node(
        name=NodeName(name),
        uid=get_str(md, "uid", "metadata."),
        labels=get_str_map(md, "labels", "metadata."),
        allocatable=resource_list(status, alloc_key, "status.", milli),
        taints=tuple(parse_taint(t, p) for p, t in get_objs(spec, "taints", "spec.")),
        unschedulable=get_bool(spec, "unschedulable", "spec."),
        images=tuple(images),
        raw=obj,
        declared_features=get_str_list(status, "declaredFeatures", "status."),
    )


# ---- native PodGroups' preemption fields ---------------------------------------------


# The one native version of Kubernetes 1.36 (k8s.io/api scheduling/v1alpha2,
# removed in 1.37). 1.37's v1beta1 and v1alpha3 PodGroups share one shape;
# v1alpha2's differs from it: its disruptionMode is a string, not an object; it
# has no preemptionPolicy; its template is under podGroupTemplateRef.workload,
# not workloadRef.
NATIVE_V1ALPHA2: Final = "v1alpha2"


def _disruption_mode(spec: Mapping[str, Any], version: str) -> str:
    """v1alpha2: the string "Pod" (default) or "PodGroup"; v1beta1 and v1alpha3:
    an object with exactly one of `single: {}` (default) and `all: {}`."""
    if version == NATIVE_V1ALPHA2:
        v = get_str(spec, "disruptionMode", "spec.")
        if v not in ("", "Pod", "PodGroup"):
            raise unsupported("spec.disruptionMode", v, ["Pod", "PodGroup"])
        return DISRUPTION_ALL if v == "PodGroup" else DISRUPTION_SINGLE
    if spec.get("disruptionMode") is None:
        return DISRUPTION_SINGLE
    dm = get_map(spec, "disruptionMode", "spec.")
    single, whole = dm.get("single"), dm.get("all")
    if (single is None) == (whole is None):
        raise ParseError("spec.disruptionMode", "exactly one of single or all must be set")
    get_map(dm, "all" if whole is not None else "single", "spec.disruptionMode.")
    return DISRUPTION_ALL if whole is not None else DISRUPTION_SINGLE


def _group_priority(spec: Mapping[str, Any]) -> tuple[int | None, str]:
    prio = get_int(spec, "priority", "spec.")
    if prio is not None and not INT32_MIN <= prio <= INT32_MAX:
        raise invalid("spec.priority", describe_int(prio), "must be a 32-bit integer")
    return prio, get_str(spec, "priorityClassName", "spec.")


def _group_preemption_policy(spec: Mapping[str, Any], version: str) -> str:
    """v1beta1's and v1alpha3's spec.preemptionPolicy ("" when unset); v1alpha2
    has none (the API server drops it, so do we)."""
    if version == NATIVE_V1ALPHA2:
        return ""
    v = get_str(spec, "preemptionPolicy", "spec.")
    if v not in ("", PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER):
        raise unsupported("spec.preemptionPolicy", v, [PREEMPT_NEVER, PREEMPT_LOWER_PRIORITY])
    return v


def _template_ref(spec: Mapping[str, Any], version: str) -> tuple[str, str] | None:
    """The Workload template a native group came from: v1beta1's and v1alpha3's
    spec.workloadRef {workloadName, templateName}, v1alpha2's
    spec.podGroupTemplateRef.workload {workloadName, podGroupTemplateName}."""
    if version == NATIVE_V1ALPHA2:
        ref = get_map(
            get_map(spec, "podGroupTemplateRef", "spec."), "workload", "spec.podGroupTemplateRef."
        )
        rp, template = "spec.podGroupTemplateRef.workload.", "podGroupTemplateName"
    else:
        ref, rp, template = (
            get_map(spec, "workloadRef", "spec."),
            "spec.workloadRef.",
            "templateName",
        )
    return (get_str(ref, "workloadName", rp), get_str(ref, template, rp)) if ref else None


def _gang_policy(spec: Mapping[str, Any], count: str) -> int | None:
    """spec.schedulingPolicy of a native group or composite: exactly one of
    `basic: {}` (None) and `gang` (its `count` field, required, >= 1)."""
    policy = get_map(spec, "schedulingPolicy", "spec.")
    sp = "spec.schedulingPolicy."
    basic, gang = policy.get("basic"), policy.get("gang")
    if (basic is None) == (gang is None):
        raise ParseError(sp[:-1], "exactly one of basic or gang must be set")
    if gang is None:
        get_map(policy, "basic", sp)  # must be an object
        return None
    n = get_int(get_map(policy, "gang", sp), count, f"{sp}gang.")
    if n is None:
        raise required(f"{sp}gang.{count}")
    if n < 1:
        raise invalid(f"{sp}gang.{count}", n, "must be greater than or equal to 1")
    return n


def _parse_native_pod_group(obj: Mapping[str, Any], api: str) -> PodGroup:
    """Kubernetes' PodGroup (scheduling.k8s.io v1beta1, v1alpha3 or v1alpha2):
    exactly one of spec.schedulingPolicy.basic and .gang; gang.minCount >= 1
    (required). Fields a version lacks are not read from it."""
    version = api.partition("/")[2]
    if version not in NATIVE_POD_GROUP_VERSIONS:
        raise unsupported(
            "apiVersion", api, [f"{NATIVE_POD_GROUP_API}/{v}" for v in NATIVE_POD_GROUP_VERSIONS]
        )
    md, ns, name = _meta(obj, namespaced=True)
    spec = get_map(obj, "spec", "")
    gang_count = _gang_policy(spec, "minCount")
    min_count = gang_count or 1
    template_ref = _template_ref(spec, version)
    generation = get_int(md, "generation", "metadata.") or 0
    priority, priority_class_name = _group_priority(spec)
    return PodGroup(
        namespace=ns,
        name=name,
        uid=get_str(md, "uid", "metadata."),
        creation_timestamp=parse_timestamp(
            md.get("creationTimestamp"), "metadata.creationTimestamp"
        ),
        min_member=min_count,
        min_resources={},
        schedule_timeout_seconds=None,
        status=dict(get_map(obj, "status", "")),
        raw=obj,
        api_version=api,
        gang=gang_count is not None,
        generation=generation,
        template_ref=template_ref,
        priority=priority,
        priority_class_name=priority_class_name,
        disruption_mode=_disruption_mode(spec, version),
        preemption_policy=_group_preemption_policy(spec, version),
        resource_claims=_resource_claims(spec),
        claim_statuses=_claim_statuses(get_map(obj, "status", "")),
        parent=get_str(spec, "parentCompositePodGroupName", "spec.")
        if version == COMPOSITE_VERSION
        else "",
    )


def _parse_composite_pod_group(obj: Mapping[str, Any]) -> CompositePodGroup:
    """scheduling.k8s.io/v1alpha3 CompositePodGroup: spec.workloadRef (required),
    exactly one of spec.schedulingPolicy.basic and .gang (gang.minGroupCount
    >= 1, required), at most one spec.schedulingConstraints.topology entry,
    disruptionMode as a PodGroup's, priority and preemptionPolicy."""
    api = obj.get("apiVersion")
    want = f"{NATIVE_POD_GROUP_API}/{COMPOSITE_VERSION}"
    if api != want:
        raise unsupported("apiVersion", api, [want])
    md, ns, name = _meta(obj, namespaced=True)
    spec = get_map(obj, "spec", "")
    ref = get_map(spec, "workloadRef", "spec.")
    if not ref:
        raise required("spec.workloadRef")
    group_count = _gang_policy(spec, "minGroupCount")
    sc = get_map(spec, "schedulingConstraints", "spec.")
    topology = get_objs(sc, "topology", "spec.schedulingConstraints.")
    if len(topology) > 1:
        raise ParseError(
            "spec.schedulingConstraints.topology", "Too many: must have at most 1 item"
        )
    key = ""
    if topology:
        where, item = topology[0]
        key = get_str(item, "key", where)
        if not key:
            raise required(f"{where}key")
    priority, priority_class_name = _group_priority(spec)
    return CompositePodGroup(
        namespace=ns,
        name=name,
        uid=get_str(md, "uid", "metadata."),
        creation_timestamp=parse_timestamp(
            md.get("creationTimestamp"), "metadata.creationTimestamp"
        ),
        parent=get_str(spec, "parentCompositePodGroupName", "spec."),
        workload=get_str(ref, "workloadName", "spec.workloadRef."),
        template=get_str(ref, "templateName", "spec.workloadRef."),
        gang=group_count is not None,
        min_group_count=group_count or 1,
        topology_key=key,
        disruption_mode=_disruption_mode(spec, COMPOSITE_VERSION),
        priority=priority,
        priority_class_name=priority_class_name,
        preemption_policy=_group_preemption_policy(spec, COMPOSITE_VERSION),
        status=dict(get_map(obj, "status", "")),
        raw=obj,
        generation=get_int(md, "generation", "metadata.") or 0,
    )


def _parse_pod_group(obj: Mapping[str, Any], milli: frozenset[str]) -> PodGroup:
    api = obj.get("apiVersion")
    if isinstance(api, str) and api.split("/")[0] == NATIVE_POD_GROUP_API:
        return _parse_native_pod_group(obj, api)
    if api is not None and (
        not isinstance(api, str) or api.split("/")[0] not in POD_GROUP_API_GROUPS
    ):
        raise unsupported(
            "apiVersion",
            api,
            [f"{g}/v1alpha1" for g in POD_GROUP_API_GROUPS]
            + [f"{NATIVE_POD_GROUP_API}/{v}" for v in NATIVE_POD_GROUP_VERSIONS],
        )
    md, ns, name = _meta(obj, namespaced=True)
    spec = get_map(obj, "spec", "")
    # scheduler-plugins leaves minMember without a default: a missing one reads
    # as 0 there, and Coscheduling then admits every pod on its own, which is
    # what a minMember of 1 does. Explicit values below 1 are refused (our CRD's
    # minimum).
    mm = get_int(spec, "minMember", "spec.")
    if mm is None:
        mm = 1
    elif mm < 1:
        raise invalid("spec.minMember", mm, "must be greater than or equal to 1")
    # scheduler-plugins' CRD has no minimum here: 0 is accepted (Coscheduling then
    # uses its permitWaitingTimeSeconds); a negative wait is refused.
    timeout = get_int(spec, "scheduleTimeoutSeconds", "spec.")
    if timeout is not None and timeout < 0:
        raise invalid("spec.scheduleTimeoutSeconds", timeout, "must be greater than or equal to 0")
    status = get_map(obj, "status", "")
    return PodGroup(
        namespace=ns,
        name=name,
        uid=get_str(md, "uid", "metadata."),
        creation_timestamp=parse_timestamp(
            md.get("creationTimestamp"), "metadata.creationTimestamp"
        ),
        min_member=mm,
        min_resources=resource_list(spec, "minResources", "spec.", milli),
        schedule_timeout_seconds=timeout,
        status=dict(status),
        raw=obj,
    )


def _parse_priority_class(obj: Mapping[str, Any]) -> PriorityClass:
    _, _, name = _meta(obj, namespaced=False)
    v = get_int(obj, "value", "")
    if v is None:
        raise required("value")
    return PriorityClass(
        name,
        v,
        get_bool(obj, "globalDefault", ""),
        get_str(obj, "preemptionPolicy", "") or PREEMPT_LOWER_PRIORITY,
    )


def _parse_workload(obj: Mapping[str, Any]) -> Workload:
    kind = obj.get("kind")
    if kind not in WORKLOAD_KINDS:
        raise unsupported("kind", kind, WORKLOAD_KINDS)
    _, ns, name = _meta(obj, namespaced=True)
    spec = get_map(obj, "spec", "")
    selector: LabelSelector | None
    if kind in ("Service", "ReplicationController"):
        labels = get_str_map(spec, "selector", "spec.")
        selector = label_selector_from_map(labels) if labels else None
    else:
        selector = parse_label_selector(spec.get("selector"), "spec.selector.")
    return Workload(str(kind), ns, name, selector)


def _parse_pdb(obj: Mapping[str, Any]) -> PodDisruptionBudget:
    _, ns, name = _meta(obj, namespaced=True)
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    return PodDisruptionBudget(
        ns,
        name,
        parse_label_selector(spec.get("selector"), "spec.selector."),
        get_int(status, "disruptionsAllowed", "status.") or 0,
        frozenset(get_map(status, "disruptedPods", "status.")),
    )


# ---- the edge: metadata, guards, entry points ----------------------------------------------


def _meta(obj: Mapping[str, Any], namespaced: bool) -> tuple[Mapping[str, Any], str, str]:
    md = get_map(obj, "metadata", "")
    name = get_str(md, "name", "metadata.")
    if not name:
        raise required("metadata.name", "name or generateName is required")
    if not namespaced:
        return md, "", name
    return md, get_str(md, "namespace", "metadata.") or "default", name


def _names(obj: object, namespaced: bool) -> tuple[str, str]:
    """Best-effort namespace and name of an object that may be broken anywhere."""
    md = obj.get("metadata") if isinstance(obj, Mapping) else None
    ns = md.get("namespace") if isinstance(md, Mapping) else None
    name = md.get("name") if isinstance(md, Mapping) else None
    ns = ns if isinstance(ns, str) and ns else ("default" if namespaced else "")
    return ns, (name if isinstance(name, str) and name else "<unnamed>")


def _guarded(
    kind: str, obj: object, namespaced: bool, parse: Callable[[Mapping[str, Any]], T]
) -> T | InvalidObject:
    """Run a parser; any problem becomes an InvalidObject naming the field."""
    try:
        if not isinstance(obj, Mapping):
            raise ParseError("object", f"Invalid value: {show(obj)}: must be an object")
        return parse(obj)
    except ParseError as e:
        message = str(e)
    except Exception as e:  # a shape no reader foresaw: still a value, never a crash
        message = f"object: could not be read: {type(e).__name__}: {e}"
    ns, name = _names(obj, namespaced)
    return InvalidObject(kind, ns, name, message)


def parse_pod(
    obj: Mapping[str, Any],
    priority_classes: Mapping[str, PriorityClass] | None = None,
    milli_resources: frozenset[str] = MILLI_RESOURCES,
) -> Pod | InvalidObject:
    classes = priority_classes or {}
    return _guarded("Pod", obj, True, lambda o: _parse_pod(o, classes, milli_resources))


# What of a pod's metadata its view depends on (_meta and _parse_pod read these).
POD_META_KEYS: Final = (
    "name",
    "namespace",
    "uid",
    "labels",
    "annotations",
    "deletionTimestamp",
    "creationTimestamp",
    "ownerReferences",
)


@dataclass(slots=True)
class _Seen:
    pod: Pod
    spec: dict[str, Any]  # shallow copy, without nodeName
    meta: tuple[Any, ...]  # POD_META_KEYS' values, shallow copies
    milli: frozenset[str]


def _meta_view(md: Mapping[str, Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    for k in POD_META_KEYS:
        v = md.get(k)
        c = v.__class__
        if c is str or v is None:  # most of them: kept as they are, no ABC check
            out.append(v)
        elif c is dict or isinstance(v, Mapping):
            out.append(dict(v))
        else:
            out.append(list(v) if isinstance(v, list) else v)
    return tuple(out)


# A pod view's fields in order, read at once (PodParser._reuse).
_POD_SLOTS: Final = Pod.__slots__
_pod_values: Final = operator.attrgetter(*_POD_SLOTS)
_set: Final = object.__setattr__


class PodParser:
    """`parse_pod` for a stream of pod events: a pod seen before (same namespace,
    name and uid) whose spec apart from nodeName and whose metadata fields in
    `POD_META_KEYS` are unchanged keeps its view, with the fields that depend on
    the rest re-read: node_name (spec.nodeName), phase (status.phase, so
    `terminal` too), disruption_reason (status.conditions), priority and
    preemption_policy (they may come from a PriorityClass that changed since),
    and raw. That is the update after a bind, a kubelet's status report, our
    own condition coming back. Anything else parses again.

    The comparison is against shallow copies taken when the pod was parsed: an
    object is not changed in place below spec's and those metadata fields' top
    level after it is handed in (the in-memory cluster sets spec.nodeName and
    status in place, which is seen). Entries go with `forget` (a deleted pod)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}
        self.parsed = 0  # full parses
        self.reused = 0

    def __len__(self) -> int:
        return len(self._seen)

    def parse(
        self,
        obj: Mapping[str, Any],
        priority_classes: Mapping[str, PriorityClass] | None = None,
        milli_resources: frozenset[str] = MILLI_RESOURCES,
    ) -> Pod | InvalidObject:
        classes = priority_classes or {}
        md = obj.get("metadata") if isinstance(obj, Mapping) else None
        spec = obj.get("spec") if isinstance(obj, Mapping) else None
        if not isinstance(md, Mapping) or not isinstance(spec, Mapping):
            return parse_pod(obj, classes, milli_resources)
        key = f"{md.get('namespace') or 'default'}/{md.get('name')}"
        rest = dict(spec)
        node = rest.pop("nodeName", None)
        meta = _meta_view(md)
        seen = self._seen.get(key)
        if (
            seen is not None
            and seen.spec == rest
            and seen.meta == meta
            and seen.milli == milli_resources
        ):
            pod = self._reuse(seen.pod, obj, spec, node, classes)
            if pod is not None:
                self.reused += 1
                seen.pod = pod
                return pod
        self.parsed += 1
        parsed = parse_pod(obj, classes, milli_resources)
        if isinstance(parsed, Pod):
            self._seen[key] = _Seen(parsed, rest, meta, milli_resources)
        else:
            self._seen.pop(key, None)
        return parsed

    @staticmethod
    def _reuse(
        old: Pod,
        obj: Mapping[str, Any],
        spec: Mapping[str, Any],
        node: object,
        classes: Mapping[str, PriorityClass],
    ) -> Pod | None:
        """The old view with what may differ re-read; None when that does not
        read (a full parse then says why)."""
        status = obj.get("status")
        if status is None:
            status = {}
        if not isinstance(status, Mapping) or not (node is None or isinstance(node, str)):
            return None
        phase = status.get("phase")
        if not (phase is None or isinstance(phase, str)):
            return None
        try:
            priority = _priority(spec, classes)
            policy = _preemption_policy(spec, classes)
            claims = _claim_statuses(status) if old.resource_claims else old.claim_statuses
            disruption = _disruption_reason(status)
        except ParseError:
            return None
        # `replace` without its __init__ and __post_init__ (a third of the
        # cost of a pod's update event): the fields that make the key and the
        # group's key are the old view's.
        pod: Pod = object.__new__(Pod)
        for name, value in zip(_POD_SLOTS, _pod_values(old), strict=True):
            _set(pod, name, value)
        _set(pod, "node_name", node or "")
        _set(pod, "phase", phase or "Pending")
        _set(pod, "priority", priority)
        _set(pod, "preemption_policy", policy)
        _set(pod, "disruption_reason", disruption)
        _set(pod, "raw", obj)
        _set(pod, "claim_statuses", claims)
        return pod

    def forget(self, obj: Mapping[str, Any]) -> None:
        """Drop what is remembered of this pod (it was deleted)."""
        md = obj.get("metadata") if isinstance(obj, Mapping) else None
        if isinstance(md, Mapping):
            self._seen.pop(f"{md.get('namespace') or 'default'}/{md.get('name')}", None)


def parse_node(
    obj: Mapping[str, Any], milli_resources: frozenset[str] = MILLI_RESOURCES
) -> Node | InvalidObject:
    return _guarded("Node", obj, False, lambda o: _parse_node(o, milli_resources))


def parse_pod_group(
    obj: Mapping[str, Any], milli_resources: frozenset[str] = MILLI_RESOURCES
) -> PodGroup | InvalidObject:
    """A scheduler-plugins PodGroup, scheduling.x-k8s.io or the older
    scheduling.sigs.k8s.io group (an object without apiVersion is accepted), or
    Kubernetes' own, scheduling.k8s.io v1beta1, v1alpha3 or v1alpha2 (by its
    apiVersion)."""
    return _guarded("PodGroup", obj, True, lambda o: _parse_pod_group(o, milli_resources))


def parse_composite_pod_group(obj: Mapping[str, Any]) -> CompositePodGroup | InvalidObject:
    """Kubernetes' CompositePodGroup, scheduling.k8s.io/v1alpha3."""
    return _guarded("CompositePodGroup", obj, True, _parse_composite_pod_group)


def parse_priority_class(obj: Mapping[str, Any]) -> PriorityClass | InvalidObject:
    return _guarded("PriorityClass", obj, False, _parse_priority_class)


def parse_pdb(obj: Mapping[str, Any]) -> PodDisruptionBudget | InvalidObject:
    """A policy/v1 PodDisruptionBudget (preemption reads it, best effort)."""
    return _guarded("PodDisruptionBudget", obj, True, _parse_pdb)


def parse_workload(obj: Mapping[str, Any]) -> Workload | InvalidObject:
    """A Service, ReplicaSet, StatefulSet or ReplicationController's pod selector."""
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    return _guarded(str(kind or "Workload"), obj, True, _parse_workload)


def parse_object(
    obj: Mapping[str, Any],
    priority_classes: Mapping[str, PriorityClass] | None = None,
    milli_resources: frozenset[str] = MILLI_RESOURCES,
) -> ParsedObject | InvalidObject:
    """Parse by ``kind``: Pod, Node, PodGroup, PriorityClass or a workload kind."""
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    if kind == "Pod":
        return parse_pod(obj, priority_classes, milli_resources)
    if kind == "Node":
        return parse_node(obj, milli_resources)
    if kind == "PodGroup":
        return parse_pod_group(obj, milli_resources)
    if kind == "PriorityClass":
        return parse_priority_class(obj)
    if kind in WORKLOAD_KINDS:
        return parse_workload(obj)
    known = ["Node", "Pod", "PodGroup", "PriorityClass", *WORKLOAD_KINDS]
    ns, name = _names(obj, False)
    message = str(unsupported("kind", kind, known)) if kind else str(required("kind"))
    return InvalidObject(str(kind or "<unknown>"), ns, name, message)
