"""Build the typed views of `scheduler.api.types` from Kubernetes dicts.

Every `parse_*` function returns the view or an `InvalidObject` naming the
offending field; nothing raises out of here. Pod requests are computed as
kube-scheduler computes them (component-helpers resource.PodRequests): the sum
of regular containers, the max with each init container plus the restartable
(sidecar) init containers started before it, sidecars added to the total,
then the pod overhead. The non-zero variant (used by scoring) applies
kube-scheduler's defaults (100m cpu, 200Mi memory) per container.
"""

from __future__ import annotations

from calendar import timegm
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, TypeVar

from scheduler.api.quantity import parse_quantity, to_scaled
from scheduler.api.types import (
    CPU,
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    ISOLATED_CPU_RESOURCE,
    MEMORY,
    WORKLOAD_KINDS,
    ContainerImage,
    HostPort,
    InvalidObject,
    LabelSelector,
    Node,
    NodeName,
    NodeSelector,
    NodeSelectorTerm,
    ParseError,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodGroup,
    PreferredSchedulingTerm,
    PriorityClass,
    Requirement,
    SelectorOp,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOp,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
    Workload,
)

MILLI_RESOURCES: Final = frozenset({CPU, ISOLATED_CPU_RESOURCE})
EMPTY: Final[Mapping[str, Any]] = {}
T = TypeVar("T")


# ---- small readers ---------------------------------------------------------------


def _map(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    v = obj.get(key)
    if v is None:
        return EMPTY
    if not isinstance(v, Mapping):
        raise ParseError(f"{path}{key}", "must be an object")
    return v


def _list(obj: Mapping[str, Any], key: str, path: str) -> list[Any]:
    v = obj.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise ParseError(f"{path}{key}", "must be a list")
    return v


def _str(obj: Mapping[str, Any], key: str, path: str, default: str = "") -> str:
    v = obj.get(key)
    if v is None:
        return default
    if not isinstance(v, str):
        raise ParseError(f"{path}{key}", "must be a string")
    return v


def _int(obj: Mapping[str, Any], key: str, path: str, default: int | None = None) -> int | None:
    v = obj.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, str) and v.lstrip("-").isdigit():
            return int(v)
        raise ParseError(f"{path}{key}", "must be an integer")
    return v


def _str_map(obj: Mapping[str, Any], key: str, path: str) -> dict[str, str]:
    m = _map(obj, key, path)
    out: dict[str, str] = {}
    for k, v in m.items():
        if not isinstance(v, str):
            if isinstance(v, bool | int | float):
                v = str(v).lower() if isinstance(v, bool) else str(v)
            else:
                raise ParseError(f"{path}{key}.{k}", "must be a string")
        out[str(k)] = v
    return out


def _objs(obj: Mapping[str, Any], key: str, path: str) -> list[tuple[str, Mapping[str, Any]]]:
    out = []
    for i, item in enumerate(_list(obj, key, path)):
        p = f"{path}{key}[{i}]"
        if not isinstance(item, Mapping):
            raise ParseError(p, "must be an object")
        out.append((p + ".", item))
    return out


def parse_timestamp(v: object, field: str) -> float:
    if v is None or v == "":
        return 0.0
    if isinstance(v, datetime):
        return v.timestamp() if v.tzinfo else float(timegm(v.timetuple()))
    if not isinstance(v, str):
        raise ParseError(field, "must be an RFC 3339 timestamp")
    s = v.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise ParseError(field, f"must be an RFC 3339 timestamp, got {v!r}") from None
    return dt.timestamp() if dt.tzinfo else float(timegm(dt.timetuple())) + dt.microsecond / 1e6


def resource_list(
    obj: Mapping[str, Any], key: str, path: str, milli: frozenset[str] = MILLI_RESOURCES
) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, raw in _map(obj, key, path).items():
        q = parse_quantity(raw, f"{path}{key}.{name}")
        if q < 0:
            raise ParseError(f"{path}{key}.{name}", "must be greater than or equal to 0")
        out[str(name)] = to_scaled(str(name), q, milli)
    return out


# ---- selectors ---------------------------------------------------------------------


_LABEL_OPS = {
    op.value: op
    for op in (SelectorOp.IN, SelectorOp.NOT_IN, SelectorOp.EXISTS, SelectorOp.DOES_NOT_EXIST)
}
_NODE_OPS = {op.value: op for op in SelectorOp}


def _requirement(
    item: Mapping[str, Any], path: str, ops: Mapping[str, SelectorOp], fields: bool = False
) -> Requirement:
    key = _str(item, "key", path)
    if not key:
        raise ParseError(f"{path}key", "must be specified")
    if fields and key != "metadata.name":
        raise ParseError(f"{path}key", f'not a supported field selector key: "{key}"')
    op_s = _str(item, "operator", path)
    op = ops.get(op_s)
    if op is None or (fields and op not in (SelectorOp.IN, SelectorOp.NOT_IN)):
        raise ParseError(f"{path}operator", f'"{op_s}" is not a valid selector operator')
    values = tuple(str(x) for x in _list(item, "values", path))
    if op in (SelectorOp.IN, SelectorOp.NOT_IN) and not values:
        raise ParseError(f"{path}values", "must be specified when `operator` is 'In' or 'NotIn'")
    if op in (SelectorOp.EXISTS, SelectorOp.DOES_NOT_EXIST) and values:
        raise ParseError(
            f"{path}values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
        )
    if op in (SelectorOp.GT, SelectorOp.LT):
        if len(values) != 1:
            raise ParseError(
                f"{path}values", "must be specified single value when `operator` is 'Lt' or 'Gt'"
            )
        try:
            int(values[0])
        except ValueError:
            raise ParseError(f"{path}values[0]", "must be an integer") from None
    return Requirement(key, op, values)


def parse_label_selector(obj: object, path: str) -> LabelSelector | None:
    """metav1.LabelSelector; None when absent."""
    if obj is None:
        return None
    if not isinstance(obj, Mapping):
        raise ParseError(path.rstrip("."), "must be an object")
    reqs = [
        Requirement(k, SelectorOp.IN, (v,)) for k, v in _str_map(obj, "matchLabels", path).items()
    ]
    for p, item in _objs(obj, "matchExpressions", path):
        reqs.append(_requirement(item, p, _LABEL_OPS))
    return LabelSelector(tuple(reqs))


def _node_selector_term(item: Mapping[str, Any], path: str) -> NodeSelectorTerm:
    exprs = tuple(_requirement(x, p, _NODE_OPS) for p, x in _objs(item, "matchExpressions", path))
    fields = tuple(
        _requirement(x, p, _NODE_OPS, fields=True) for p, x in _objs(item, "matchFields", path)
    )
    return NodeSelectorTerm(exprs, fields)


def parse_node_selector(obj: object, path: str) -> NodeSelector | None:
    if obj is None:
        return None
    if not isinstance(obj, Mapping):
        raise ParseError(path.rstrip("."), "must be an object")
    return NodeSelector(
        tuple(_node_selector_term(x, p) for p, x in _objs(obj, "nodeSelectorTerms", path))
    )


def parse_preferred_terms(
    items: list[tuple[str, Mapping[str, Any]]],
) -> tuple[PreferredSchedulingTerm, ...]:
    out = []
    for p, item in items:
        w = _int(item, "weight", p, 0) or 0
        if not 1 <= w <= 100:
            raise ParseError(f"{p}weight", "must be in the range 1-100")
        out.append(
            PreferredSchedulingTerm(
                w, _node_selector_term(_map(item, "preference", p), f"{p}preference.")
            )
        )
    return tuple(out)


def _pod_affinity_term(item: Mapping[str, Any], path: str) -> PodAffinityTerm:
    tk = _str(item, "topologyKey", path)
    if not tk:
        raise ParseError(f"{path}topologyKey", "can not be empty")
    return PodAffinityTerm(
        label_selector=parse_label_selector(item.get("labelSelector"), f"{path}labelSelector."),
        topology_key=tk,
        namespaces=tuple(str(x) for x in _list(item, "namespaces", path)),
        namespace_selector=parse_label_selector(
            item.get("namespaceSelector"), f"{path}namespaceSelector."
        ),
        match_label_keys=tuple(str(x) for x in _list(item, "matchLabelKeys", path)),
        mismatch_label_keys=tuple(str(x) for x in _list(item, "mismatchLabelKeys", path)),
    )


def _pod_affinity(obj: Mapping[str, Any], key: str, path: str) -> PodAffinity | None:
    a = obj.get(key)
    if a is None:
        return None
    if not isinstance(a, Mapping):
        raise ParseError(f"{path}{key}", "must be an object")
    p = f"{path}{key}."
    req = tuple(
        _pod_affinity_term(x, q)
        for q, x in _objs(a, "requiredDuringSchedulingIgnoredDuringExecution", p)
    )
    pref = []
    for q, x in _objs(a, "preferredDuringSchedulingIgnoredDuringExecution", p):
        w = _int(x, "weight", q, 0) or 0
        if not 1 <= w <= 100:
            raise ParseError(f"{q}weight", "must be in the range 1-100")
        pref.append(
            WeightedPodAffinityTerm(
                w, _pod_affinity_term(_map(x, "podAffinityTerm", q), f"{q}podAffinityTerm.")
            )
        )
    return PodAffinity(req, tuple(pref))


def _spread(item: Mapping[str, Any], path: str) -> TopologySpreadConstraint:
    max_skew = _int(item, "maxSkew", path)
    if max_skew is None or max_skew < 1:
        raise ParseError(f"{path}maxSkew", "must be greater than zero")
    tk = _str(item, "topologyKey", path)
    if not tk:
        raise ParseError(f"{path}topologyKey", "can not be empty")
    wu = _str(item, "whenUnsatisfiable", path)
    if wu not in ("DoNotSchedule", "ScheduleAnyway"):
        raise ParseError(f"{path}whenUnsatisfiable", f'unsupported value: "{wu}"')
    min_domains = _int(item, "minDomains", path)
    if min_domains is not None and min_domains < 1:
        raise ParseError(f"{path}minDomains", "must be greater than zero")
    nap = _str(item, "nodeAffinityPolicy", path, "Honor")
    ntp = _str(item, "nodeTaintsPolicy", path, "Ignore")
    for name, v in (("nodeAffinityPolicy", nap), ("nodeTaintsPolicy", ntp)):
        if v not in ("Honor", "Ignore"):
            raise ParseError(f"{path}{name}", f'unsupported value: "{v}"')
    return TopologySpreadConstraint(
        max_skew=max_skew,
        topology_key=tk,
        when_unsatisfiable=wu,
        label_selector=parse_label_selector(item.get("labelSelector"), f"{path}labelSelector."),
        min_domains=min_domains,
        node_affinity_policy=nap,
        node_taints_policy=ntp,
        match_label_keys=tuple(str(x) for x in _list(item, "matchLabelKeys", path)),
    )


def _taint(item: Mapping[str, Any], path: str) -> Taint:
    key = _str(item, "key", path)
    if not key:
        raise ParseError(f"{path}key", "must be specified")
    eff = _str(item, "effect", path)
    try:
        effect = TaintEffect(eff)
    except ValueError:
        raise ParseError(
            f"{path}effect",
            f'unsupported value: "{eff}": supported values: '
            '"NoExecute", "NoSchedule", "PreferNoSchedule"',
        ) from None
    return Taint(key, _str(item, "value", path), effect)


def _toleration(item: Mapping[str, Any], path: str) -> Toleration:
    op_s = _str(item, "operator", path, "Equal") or "Equal"
    try:
        op = TolerationOp(op_s)
    except ValueError:
        raise ParseError(f"{path}operator", f'unsupported value: "{op_s}"') from None
    eff_s = _str(item, "effect", path)
    try:
        eff = TaintEffect(eff_s) if eff_s else None
    except ValueError:
        raise ParseError(f"{path}effect", f'unsupported value: "{eff_s}"') from None
    return Toleration(
        _str(item, "key", path),
        op,
        _str(item, "value", path),
        eff,
        _int(item, "tolerationSeconds", path),
    )


def _normalize_image(name: str) -> str:
    """As kube-scheduler ImageLocality's normalizedImageName: add :latest when untagged."""
    if name.rfind(":") <= name.rfind("/") and "@" not in name:
        return name + ":latest"
    return name


# ---- requests --------------------------------------------------------------------


def _add(into: dict[str, int], res: Mapping[str, int]) -> None:
    for k, v in res.items():
        into[k] = into.get(k, 0) + v


def _max(into: dict[str, int], res: Mapping[str, int]) -> None:
    for k, v in res.items():
        if v > into.get(k, 0):
            into[k] = v


def _container_requests(c: Mapping[str, Any], path: str, milli: frozenset[str]) -> dict[str, int]:
    res = _map(c, "resources", path)
    p = f"{path}resources."
    req = resource_list(res, "requests", p, milli)
    for name, v in resource_list(res, "limits", p, milli).items():
        req.setdefault(name, v)  # API defaulting: requests default to limits
    return req


def _nonzero(req: Mapping[str, int]) -> dict[str, int]:
    return {
        CPU: req.get(CPU) or DEFAULT_MILLI_CPU_REQUEST,
        MEMORY: req.get(MEMORY) or DEFAULT_MEMORY_REQUEST,
    }


def pod_requests(
    spec: Mapping[str, Any],
    milli: frozenset[str] = MILLI_RESOURCES,
    transform: Callable[[dict[str, int]], dict[str, int]] | None = None,
) -> dict[str, int]:
    """resource.PodRequests; `transform` maps each container's requests (non-zero)."""
    f = transform or (lambda r: r)
    total: dict[str, int] = {}
    for p, c in _objs(spec, "containers", "spec."):
        _add(total, f(_container_requests(c, p, milli)))
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for p, c in _objs(spec, "initContainers", "spec."):
        req = f(_container_requests(c, p, milli))
        if c.get("restartPolicy") == "Always":
            _add(sidecars, req)
            _max(init_max, sidecars)
        else:
            tmp = dict(req)
            _add(tmp, sidecars)
            _max(init_max, tmp)
    _add(total, sidecars)
    _max(total, init_max)
    _add(total, resource_list(spec, "overhead", "spec.", milli))
    return {k: v for k, v in total.items() if v}


# ---- objects ----------------------------------------------------------------------


def _meta(obj: Mapping[str, Any], namespaced: bool) -> tuple[Mapping[str, Any], str, str]:
    md = obj.get("metadata")
    if not isinstance(md, Mapping):
        raise ParseError("metadata", "must be an object")
    name = md.get("name")
    if not isinstance(name, str) or not name:
        raise ParseError("metadata.name", "must be specified")
    ns = ""
    if namespaced:
        ns = md.get("namespace") or "default"
        if not isinstance(ns, str):
            raise ParseError("metadata.namespace", "must be a string")
    return md, ns, name


def _names(obj: Mapping[str, Any]) -> tuple[str, str]:
    md = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(md, Mapping):
        return "", ""
    ns = md.get("namespace") or ""
    name = md.get("name") or ""
    return (ns if isinstance(ns, str) else ""), (name if isinstance(name, str) else "")


def _invalid(kind: str, obj: Mapping[str, Any], e: ParseError, namespaced: bool) -> InvalidObject:
    ns, name = _names(obj)
    if namespaced and not ns:
        ns = "default"
    return InvalidObject(kind, ns, name or "<unnamed>", str(e))


def _guarded(
    kind: str, obj: Mapping[str, Any], namespaced: bool, parse: Callable[[], T]
) -> T | InvalidObject:
    """Run a parser; any problem becomes an InvalidObject naming the field."""
    try:
        return parse()
    except ParseError as e:
        return _invalid(kind, obj, e, namespaced)
    except (TypeError, ValueError, AttributeError) as e:
        return _invalid(kind, obj, ParseError("spec", f"malformed: {e}"), namespaced)


def parse_pod(
    obj: Mapping[str, Any],
    priority_classes: Mapping[str, PriorityClass] | None = None,
    milli_resources: frozenset[str] = MILLI_RESOURCES,
) -> Pod | InvalidObject:
    return _guarded(
        "Pod", obj, True, lambda: _parse_pod(obj, priority_classes or {}, milli_resources)
    )


def _priority(spec: Mapping[str, Any], classes: Mapping[str, PriorityClass]) -> int:
    p = _int(spec, "priority", "spec.")
    if p is not None:
        return p
    name = _str(spec, "priorityClassName", "spec.")
    if name and name in classes:
        return classes[name].value
    for pc in classes.values():
        if pc.global_default:
            return pc.value
    return 0


def _parse_pod(
    obj: Mapping[str, Any], classes: Mapping[str, PriorityClass], milli: frozenset[str]
) -> Pod:
    md, ns, name = _meta(obj, True)
    spec = _map(obj, "spec", "")
    status = _map(obj, "status", "")
    requests = pod_requests(spec, milli)
    nonzero = pod_requests(spec, milli, _nonzero)
    ports: list[HostPort] = []
    images: list[str] = []
    containers = _objs(spec, "containers", "spec.")
    if not containers:
        raise ParseError("spec.containers", "must have at least one container")
    sidecars = [
        (p, c)
        for p, c in _objs(spec, "initContainers", "spec.")
        if c.get("restartPolicy") == "Always"
    ]
    for p, c in containers + sidecars:
        img = _str(c, "image", p)
        if img:
            images.append(_normalize_image(img))
        for q, port in _objs(c, "ports", p):
            hp = _int(port, "hostPort", q, 0) or 0
            if hp <= 0:
                continue
            if hp > 65535:
                raise ParseError(f"{q}hostPort", "must be between 1 and 65535, inclusive")
            ip = _str(port, "hostIP", q)
            ports.append(
                HostPort(
                    "" if ip == "0.0.0.0" else ip, _str(port, "protocol", q, "TCP") or "TCP", hp
                )
            )
    affinity = _map(spec, "affinity", "spec.")
    na = _map(affinity, "nodeAffinity", "spec.affinity.")
    nap = "spec.affinity.nodeAffinity."
    required = parse_node_selector(
        na.get("requiredDuringSchedulingIgnoredDuringExecution"),
        f"{nap}requiredDuringSchedulingIgnoredDuringExecution.",
    )
    preferred = parse_preferred_terms(
        _objs(na, "preferredDuringSchedulingIgnoredDuringExecution", nap)
    )
    owners = tuple(
        (_str(o, "kind", p), _str(o, "name", p))
        for p, o in _objs(md, "ownerReferences", "metadata.")
    )
    return Pod(
        namespace=ns,
        name=name,
        uid=_str(md, "uid", "metadata."),
        labels=_str_map(md, "labels", "metadata."),
        annotations=_str_map(md, "annotations", "metadata."),
        scheduler_name=_str(spec, "schedulerName", "spec.", "default-scheduler")
        or "default-scheduler",
        node_name=_str(spec, "nodeName", "spec."),
        phase=_str(status, "phase", "status.", "Pending") or "Pending",
        deleting=md.get("deletionTimestamp") is not None,
        creation_timestamp=parse_timestamp(
            md.get("creationTimestamp"), "metadata.creationTimestamp"
        ),
        priority=_priority(spec, classes),
        priority_class_name=_str(spec, "priorityClassName", "spec."),
        requests=requests,
        nonzero_cpu=nonzero.get(CPU, 0),
        nonzero_memory=nonzero.get(MEMORY, 0),
        host_ports=tuple(ports),
        images=tuple(images),
        node_selector=_str_map(spec, "nodeSelector", "spec."),
        required_node_affinity=required,
        preferred_node_affinity=preferred,
        tolerations=tuple(_toleration(t, p) for p, t in _objs(spec, "tolerations", "spec.")),
        pod_affinity=_pod_affinity(affinity, "podAffinity", "spec.affinity."),
        pod_anti_affinity=_pod_affinity(affinity, "podAntiAffinity", "spec.affinity."),
        topology_spread_constraints=tuple(
            _spread(c, p) for p, c in _objs(spec, "topologySpreadConstraints", "spec.")
        ),
        scheduling_gates=tuple(
            _str(g, "name", p) for p, g in _objs(spec, "schedulingGates", "spec.")
        ),
        owner_references=owners,
        raw=obj,
    )


def _parse_node(obj: Mapping[str, Any], milli_resources: frozenset[str]) -> Node:
    md, _, name = _meta(obj, False)
    spec = _map(obj, "spec", "")
    status = _map(obj, "status", "")
    alloc_key = "allocatable" if status.get("allocatable") is not None else "capacity"
    images = []
    for p, img in _objs(status, "images", "status."):
        names = tuple(_normalize_image(str(n)) for n in _list(img, "names", p))
        images.append(ContainerImage(names, _int(img, "sizeBytes", p, 0) or 0))
    unsched = spec.get("unschedulable", False)
    if not isinstance(unsched, bool):
        raise ParseError("spec.unschedulable", "must be a boolean")
    return Node(
        name=NodeName(name),
        uid=_str(md, "uid", "metadata."),
        labels=_str_map(md, "labels", "metadata."),
        allocatable=resource_list(status, alloc_key, "status.", milli_resources),
        taints=tuple(_taint(t, p) for p, t in _objs(spec, "taints", "spec.")),
        unschedulable=unsched,
        images=tuple(images),
        raw=obj,
    )


def parse_node(
    obj: Mapping[str, Any], milli_resources: frozenset[str] = MILLI_RESOURCES
) -> Node | InvalidObject:
    return _guarded("Node", obj, False, lambda: _parse_node(obj, milli_resources))


def _parse_pod_group(obj: Mapping[str, Any]) -> PodGroup:
    md, ns, name = _meta(obj, True)
    spec = _map(obj, "spec", "")
    mm = _int(spec, "minMember", "spec.", 1)
    if mm is None or mm < 1:
        raise ParseError("spec.minMember", "must be greater than or equal to 1")
    timeout = _int(spec, "scheduleTimeoutSeconds", "spec.")
    if timeout is not None and timeout < 1:
        raise ParseError("spec.scheduleTimeoutSeconds", "must be greater than or equal to 1")
    status = obj.get("status")
    return PodGroup(
        namespace=ns,
        name=name,
        uid=_str(md, "uid", "metadata."),
        creation_timestamp=parse_timestamp(
            md.get("creationTimestamp"), "metadata.creationTimestamp"
        ),
        min_member=mm,
        min_resources=resource_list(spec, "minResources", "spec."),
        schedule_timeout_seconds=timeout,
        status=dict(status) if isinstance(status, Mapping) else {},
        raw=obj,
    )


def parse_pod_group(obj: Mapping[str, Any]) -> PodGroup | InvalidObject:
    return _guarded("PodGroup", obj, True, lambda: _parse_pod_group(obj))


def _parse_priority_class(obj: Mapping[str, Any]) -> PriorityClass:
    _, _, name = _meta(obj, False)
    v = _int(obj, "value", "")
    if v is None:
        raise ParseError("value", "must be specified")
    gd = obj.get("globalDefault", False)
    return PriorityClass(name, v, bool(gd))


def parse_priority_class(obj: Mapping[str, Any]) -> PriorityClass | InvalidObject:
    return _guarded("PriorityClass", obj, False, lambda: _parse_priority_class(obj))


def _parse_workload(obj: Mapping[str, Any]) -> Workload:
    kind = obj.get("kind")
    if kind not in WORKLOAD_KINDS:
        raise ParseError("kind", f"expected one of {', '.join(WORKLOAD_KINDS)}, got {kind!r}")
    _, ns, name = _meta(obj, True)
    spec = _map(obj, "spec", "")
    selector: LabelSelector | None
    if kind in ("Service", "ReplicationController"):
        labels = _str_map(spec, "selector", "spec.")
        selector = (
            LabelSelector(
                tuple(Requirement(k, SelectorOp.IN, (v,)) for k, v in sorted(labels.items()))
            )
            if labels
            else None
        )
    else:
        selector = parse_label_selector(spec.get("selector"), "spec.selector.")
    return Workload(str(kind), ns, name, selector)


def parse_workload(obj: Mapping[str, Any]) -> Workload | InvalidObject:
    kind = str(obj.get("kind") or "Workload")
    return _guarded(kind, obj, True, lambda: _parse_workload(obj))
