"""ElasticQuota (scheduling.x-k8s.io/v1alpha1), scheduler-plugins' quota of a
namespace: `spec.min` (guaranteed), `spec.max` (the most it may use, borrowing
what other quotas leave unused) and `status.used` (what its pods use, written
back by the CapacityScheduling plugin as scheduler-plugins' ElasticQuota
controller writes it).

Amounts are in scaled units as every resource here (`troupe.api.types`):
milli-units for cpu, whole units for the rest, rounded up as Kubernetes
rounds (troupe.api.quantity). An absent or empty `min`/`max` is None: the
plugin applies scheduler-plugins' bounds (no min: 0; no max: unlimited), and
only a non-empty `max` limits what it leaves out (cpu, memory and
ephemeral-storage to 0, as upstream).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from troupe.api.parse import _guarded, _meta, parse_timestamp, resource_list
from troupe.api.readers import get_map, get_str
from troupe.api.types import MILLI_RESOURCES, InvalidObject, Resources

ELASTIC_QUOTA_GROUP: Final = "scheduling.x-k8s.io"
ELASTIC_QUOTA_VERSION: Final = "v1alpha1"
ELASTIC_QUOTA_API: Final = f"{ELASTIC_QUOTA_GROUP}/{ELASTIC_QUOTA_VERSION}"


@dataclass(frozen=True, slots=True)
class ElasticQuota:
    namespace: str
    name: str
    uid: str
    creation_timestamp: float
    min: Resources | None  # spec.min; None when absent or empty
    max: Resources | None  # spec.max; None when absent or empty
    used: Resources  # status.used as last written
    raw: Mapping[str, object] = field(repr=False, compare=False, hash=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def same_spec(self, other: ElasticQuota) -> bool:
        """Whether only the status (or metadata) differs: min and max are the same."""
        return self.min == other.min and self.max == other.max


def _parse(obj: Mapping[str, Any], milli: frozenset[str]) -> ElasticQuota:
    md, ns, name = _meta(obj, namespaced=True)
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    lo = resource_list(spec, "min", "spec.", milli)
    hi = resource_list(spec, "max", "spec.", milli)
    return ElasticQuota(
        namespace=ns,
        name=name,
        uid=get_str(md, "uid", "metadata."),
        creation_timestamp=parse_timestamp(
            md.get("creationTimestamp"), "metadata.creationTimestamp"
        ),
        min=lo or None,
        max=hi or None,
        used=resource_list(status, "used", "status.", milli),
        raw=obj,
    )


def parse_elastic_quota(
    obj: Mapping[str, Any], milli_resources: frozenset[str] = MILLI_RESOURCES
) -> ElasticQuota | InvalidObject:
    """An ElasticQuota, or an InvalidObject naming the field that is wrong (a
    quantity that is not one, a negative amount)."""
    return _guarded("ElasticQuota", obj, True, lambda o: _parse(o, milli_resources))
