"""Server-side Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`),
which `kubectl get` asks for: kube's columns for pods and nodes, a CRD's
additionalPrinterColumns, and Name/Age for everything else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from apiserver.resources import Resource

Row = list[Any]


def human_age(timestamp: str | None) -> str:
    """kube's duration.HumanDuration of the time since `timestamp`."""
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(timestamp)
    except ValueError:
        return "<invalid>"
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    secs = max(0, int((datetime.now(UTC) - then).total_seconds()))
    if secs < 120:
        return f"{secs}s"
    mins = secs // 60
    if mins < 10:
        return f"{mins}m{secs % 60}s" if secs % 60 else f"{mins}m"
    if mins < 180:
        return f"{mins}m"
    hours = mins // 60
    if hours < 8:
        return f"{hours}h{mins % 60}m" if mins % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def _pod_row(pod: Mapping[str, Any]) -> Row:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    reason = status.get("reason") or status.get("phase") or ""
    for c in statuses:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            reason = waiting["reason"]
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    gates = spec.get("readinessGates") or []
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        str(restarts),
        human_age(pod["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"0/{len(gates)}" if gates else "<none>",
    ]


def _node_row(node: Mapping[str, Any]) -> Row:
    spec, status = node.get("spec") or {}, node.get("status") or {}
    ready = next(
        (c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"),
        None,
    )
    state = {"True": "Ready", "False": "NotReady"}.get(ready or "", "Unknown")
    if spec.get("unschedulable"):
        state += ",SchedulingDisabled"
    prefix = "node-role.kubernetes.io/"
    roles = sorted(
        k[len(prefix) :] for k in node["metadata"].get("labels") or {} if k.startswith(prefix)
    )
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        node["metadata"]["name"],
        state,
        ",".join(roles) or "<none>",
        human_age(node["metadata"].get("creationTimestamp")),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP") or "<none>",
        addresses.get("ExternalIP") or "<none>",
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _event_row(ev: Mapping[str, Any]) -> Row:
    """kube's event columns (pkg/printers/internalversion printEvent)."""
    meta = ev["metadata"]
    obj = ev.get("involvedObject") or {}
    source = ev.get("source") or {}
    last = ev.get("lastTimestamp") or ev.get("eventTime") or meta.get("creationTimestamp")
    first = ev.get("firstTimestamp") or ev.get("eventTime") or meta.get("creationTimestamp")
    count = ev.get("count") or 1
    last_seen = human_age(last)
    if count > 1:
        last_seen = f"{last_seen} (x{count} over {human_age(first)})"
    component = source.get("component") or ev.get("reportingComponent") or ""
    return [
        last_seen,
        ev.get("type", ""),
        ev.get("reason", ""),
        f"{str(obj.get('kind', '')).lower()}/{obj.get('name', '')}",
        ev.get("message", ""),
        obj.get("fieldPath", ""),
        ", ".join(x for x in (component, source.get("host", "")) if x),
        human_age(first),
        str(count),
        meta["name"],
    ]


def _pdb_row(pdb: Mapping[str, Any]) -> Row:
    """kube's PodDisruptionBudget columns (printPodDisruptionBudget): a bound not
    set reads N/A."""
    spec = pdb.get("spec") or {}
    status = pdb.get("status") or {}
    return [
        pdb["metadata"]["name"],
        str(spec["minAvailable"]) if spec.get("minAvailable") is not None else "N/A",
        str(spec["maxUnavailable"]) if spec.get("maxUnavailable") is not None else "N/A",
        int(status.get("disruptionsAllowed") or 0),
        human_age(pdb["metadata"].get("creationTimestamp")),
    ]


def _column(name: str, type_: str = "string", priority: int = 0, fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": type_, "format": fmt, "description": "", "priority": priority}


POD_COLUMNS = [
    _column("Name", fmt="name"),
    _column("Ready"),
    _column("Status"),
    _column("Restarts"),
    _column("Age"),
    _column("IP", priority=1),
    _column("Node", priority=1),
    _column("Nominated Node", priority=1),
    _column("Readiness Gates", priority=1),
]
EVENT_COLUMNS = [
    _column("Last Seen"),
    _column("Type"),
    _column("Reason"),
    _column("Object"),
    _column("Message"),
    _column("Subobject", priority=1),
    _column("Source", priority=1),
    _column("First Seen", priority=1),
    _column("Count", priority=1),
    _column("Name", priority=1),
]
PDB_COLUMNS = [
    _column("Name", fmt="name"),
    _column("Min Available"),
    _column("Max Unavailable"),
    _column("Allowed Disruptions", "integer"),
    _column("Age"),
]
NODE_COLUMNS = [
    _column("Name", fmt="name"),
    _column("Status"),
    _column("Roles"),
    _column("Age"),
    _column("Version"),
    _column("Internal-IP", priority=1),
    _column("External-IP", priority=1),
    _column("OS-Image", priority=1),
    _column("Kernel-Version", priority=1),
    _column("Container-Runtime", priority=1),
]


def _json_path(obj: Any, path: str) -> Any:
    for part in path.strip().lstrip(".").split("."):
        if not part:
            continue
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


def _custom(res: Resource) -> tuple[list[dict[str, Any]], Callable[[Mapping[str, Any]], Row]]:
    columns = [_column("Name", fmt="name")]
    columns += [_column(n, "string" if t == "date" else t, p) for n, t, _, p in res.printer_columns]

    def row(obj: Mapping[str, Any]) -> Row:
        cells: Row = [obj["metadata"]["name"]]
        for _, type_, path, _ in res.printer_columns:
            value = _json_path(obj, path)
            if type_ == "date":
                value = human_age(value) if value else "<unknown>"
            cells.append(value)
        return cells

    return columns, row


def table(
    res: Resource, items: Sequence[Mapping[str, Any]], rv: int, cont: str | None
) -> dict[str, Any]:
    row: Callable[[Mapping[str, Any]], Row]
    if res.group == "" and res.kind == "Pod":
        columns, row = POD_COLUMNS, _pod_row
    elif res.group == "" and res.kind == "Node":
        columns, row = NODE_COLUMNS, _node_row
    elif res.group == "" and res.kind == "Event":
        columns, row = EVENT_COLUMNS, _event_row
    elif res.group == "policy" and res.kind == "PodDisruptionBudget":
        columns, row = PDB_COLUMNS, _pdb_row
    elif res.printer_columns:
        columns, row = _custom(res)
    else:
        columns, row = [_column("Name", fmt="name"), _column("Age")], _name_age_row

    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if cont:
        meta["continue"] = cont
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns,
        "rows": [{"cells": row(obj), "object": _partial(obj)} for obj in items],
    }


def _name_age_row(obj: Mapping[str, Any]) -> Row:
    return [obj["metadata"]["name"], human_age(obj["metadata"].get("creationTimestamp"))]


def _partial(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }
