"""The leader-election Lease over the API (coordination.k8s.io/v1): its record,
its conflict, and the client that reads and writes it on a lane of its own
(troupe.operator.leader elects with it)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from troupe.api import jsonio
from troupe.core.cluster import Conflict, NotFound
from troupe.kube.transport import STRATEGIC_MERGE_PATCH, Lane


class LeaseConflict(Conflict):
    """The Lease changed since it was read (HTTP 409), or already exists on create."""


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str
    lease_duration_seconds: float
    acquire_time: float
    renew_time: float
    transitions: int = 0
    version: str = ""  # resourceVersion, for conditional updates


def _parse_time(v: Any) -> float:
    if not v:
        return 0.0
    return datetime.datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()


def _format_time(t: float) -> str:
    """RFC 3339 with microseconds, as metav1.MicroTime."""
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeLease:
    """LeaseClient on a coordination.k8s.io/v1 Lease."""

    def __init__(self, lane: Lane, namespace: str, name: str) -> None:
        self.lane = lane
        self.namespace = namespace
        self.name = name
        self._collection = (
            f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
        )
        self._path = f"{self._collection}/{quote(name, safe='')}"

    def _record(self, data: bytes) -> LeaseRecord:
        obj = jsonio.loads(data or b"{}")
        obj = obj if isinstance(obj, dict) else {}
        spec = obj.get("spec") or {}
        md = obj.get("metadata") or {}
        return LeaseRecord(
            holder=spec.get("holderIdentity") or "",
            lease_duration_seconds=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=_parse_time(spec.get("acquireTime")),
            renew_time=_parse_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            version=str(md.get("resourceVersion") or ""),
        )

    def _body(self, r: LeaseRecord) -> Mapping[str, Any]:
        md: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if r.version:
            md["resourceVersion"] = r.version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": md,
            "spec": {
                "holderIdentity": r.holder,
                "leaseDurationSeconds": int(r.lease_duration_seconds),
                "acquireTime": _format_time(r.acquire_time),
                "renewTime": _format_time(r.renew_time),
                "leaseTransitions": r.transitions,
            },
        }

    async def get(self) -> LeaseRecord | None:
        try:
            data = await self.lane.send("get lease", "GET", self._path)
        except NotFound:
            return None
        return self._record(data)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        data = await self.lane.send(
            "create lease",
            "POST",
            self._collection,
            self._body(record),
            key=f"lease {self.namespace}/{self.name} exists",
            conflict=LeaseConflict,
        )
        return self._record(data)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        """A strategic merge patch carrying metadata.resourceVersion: the API
        server applies it only if the Lease has not changed since it was read
        (else 409)."""
        data = await self.lane.send(
            "update lease",
            "PATCH",
            self._path,
            self._body(record),
            content_type=STRATEGIC_MERGE_PATCH,
            key=f"lease {self.namespace}/{self.name} changed",
            conflict=LeaseConflict,
        )
        return self._record(data)
