"""The leader-election Lease over the API (coordination.k8s.io/v1)."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s

from troupe.kube.transport import Lane
from troupe.operator.leader import LeaseConflict, LeaseRecord


class KubeLease:
    """LeaseClient on a coordination.k8s.io/v1 Lease."""

    def __init__(self, api: k8s.ApiClient, lane: Lane, namespace: str, name: str) -> None:
        self.api = api
        self.coordination = k8s.CoordinationV1Api(api)
        self.lane = lane
        self.namespace = namespace
        self.name = name

    @staticmethod
    def _parse_time(v: Any) -> float:
        if v is None:
            return 0.0
        if isinstance(v, datetime.datetime):
            return v.timestamp()
        return datetime.datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp()

    def _record(self, obj: Mapping[str, Any]) -> LeaseRecord:
        spec = obj.get("spec") or {}
        return LeaseRecord(
            holder=spec.get("holderIdentity") or "",
            lease_duration_seconds=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=self._parse_time(spec.get("acquireTime")),
            renew_time=self._parse_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
        )

    def _body(self, r: LeaseRecord) -> dict[str, Any]:
        def ts(t: float) -> str:
            return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ"
            )

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
                "acquireTime": ts(r.acquire_time),
                "renewTime": ts(r.renew_time),
                "leaseTransitions": r.transitions,
            },
        }

    async def _call(self, what: str, fn: Callable[[tuple[float, float]], Any]) -> Mapping[str, Any]:
        obj: Mapping[str, Any] = await self.lane.call(
            what,
            lambda t: self.api.sanitize_for_serialization(fn(t)),  # type: ignore[no-untyped-call]
        )
        return obj

    async def get(self) -> LeaseRecord | None:
        api = self.coordination
        try:
            obj = await self._call(
                "get lease",
                lambda t: api.read_namespaced_lease(self.name, self.namespace, _request_timeout=t),
            )
        except k8s.ApiException as e:
            if e.status == 404:
                return None
            raise
        return self._record(obj)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        api = self.coordination
        body: Any = self._body(record)
        try:
            obj = await self._call(
                "create lease",
                lambda t: api.create_namespaced_lease(self.namespace, body, _request_timeout=t),
            )
        except k8s.ApiException as e:
            if e.status == 409:
                raise LeaseConflict("lease exists") from e
            raise
        return self._record(obj)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        """A merge patch carrying metadata.resourceVersion: the API server applies it
        only if the Lease has not changed since it was read (else 409)."""
        api = self.coordination
        body: Any = self._body(record)
        try:
            obj = await self._call(
                "update lease",
                lambda t: api.patch_namespaced_lease(
                    self.name, self.namespace, body, _request_timeout=t
                ),
            )
        except k8s.ApiException as e:
            if e.status == 409:
                raise LeaseConflict("lease changed") from e
            raise
        return self._record(obj)
