"""Events as client-go's recorder writes them: correlated, aggregated, rate-limited.

kube-scheduler records `Scheduled` and `FailedScheduling` through client-go's
event machinery, which never writes one Event object per occurrence of the same
thing. This module is that machinery (client-go tools/record/events_cache.go,
`EventCorrelator`), free of any client so that it runs on a virtual clock:

* **Spam filter** — per involved object (source + object), a token bucket of
  burst 25 refilled at one token per 5 minutes; an occurrence without a token is
  dropped (client-go's `EventSourceObjectSpamFilter`).
* **Aggregation** — occurrences that differ only in their message are grouped by
  (source, object, type, reason); once 10 distinct messages were seen within
  10 minutes, further ones are written as one Event whose message is prefixed
  `(combined from similar events): ` (client-go's `EventAggregator`).
* **Deduplication** — an occurrence identical to one already written (same
  source, object, type, reason and message; LRU of 4096 keys) is not created
  again: the existing Event is patched with `count + 1` and a new
  `lastTimestamp` (client-go's `eventLogger`), which `kubectl describe` shows as
  `(x3 over 10m)`.

`EventRecorder.record` returns what to write: a `Create` of a whole Event body,
a `Patch` of an existing Event, or None when the occurrence is dropped. The
caller (troupe.kube) performs the write; when a create fails, `forget` drops the
key so that the next occurrence creates again.
"""

from __future__ import annotations

import datetime
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

# client-go tools/record/events_cache.go
MAX_LRU_CACHE_ENTRIES: Final = 4096
DEFAULT_AGGREGATE_MAX_EVENTS: Final = 10
DEFAULT_AGGREGATE_INTERVAL_SECONDS: Final = 600.0
DEFAULT_SPAM_BURST: Final = 25
DEFAULT_SPAM_QPS: Final = 1.0 / 300.0
COMBINED_PREFIX: Final = "(combined from similar events): "


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The involved object of an Event (core/v1 ObjectReference)."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = "v1"
    resource_version: str = ""

    def as_dict(self) -> dict[str, str]:
        out = {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "apiVersion": self.api_version,
        }
        if self.uid:
            out["uid"] = self.uid
        if self.resource_version:
            out["resourceVersion"] = self.resource_version
        return out


@dataclass(frozen=True, slots=True)
class Create:
    """Create this Event (a whole core/v1 Event body)."""

    namespace: str
    body: Mapping[str, Any]
    key: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Patch:
    """Patch the existing Event `name` (a strategic-merge patch body)."""

    namespace: str
    name: str
    body: Mapping[str, Any]
    key: tuple[str, ...]


@dataclass(slots=True)
class _Seen:
    name: str
    count: int
    first_timestamp: str


@dataclass(slots=True)
class _Similar:
    messages: set[str]
    last: float


@dataclass(slots=True)
class _Bucket:
    tokens: float
    last: float


def rfc3339(t: float) -> str:
    """`t` to the second, as Event timestamps are written (the last second's
    text is kept: a burst of Events formats it once)."""
    second = int(t // 1)
    if second != _last_stamp[0]:
        stamp = datetime.datetime.fromtimestamp(second, datetime.UTC)
        _last_stamp[:] = [second, stamp.strftime("%Y-%m-%dT%H:%M:%SZ")]
    return str(_last_stamp[1])


_last_stamp: list[Any] = [None, ""]


class EventRecorder:
    """client-go's EventCorrelator for one source (`component`, `instance`)."""

    def __init__(
        self,
        component: str,
        instance: str,
        *,
        now: Callable[[], float],
        wall: Callable[[], float] | None = None,
        burst: int = DEFAULT_SPAM_BURST,
        qps: float = DEFAULT_SPAM_QPS,
        aggregate_max: int = DEFAULT_AGGREGATE_MAX_EVENTS,
        aggregate_interval: float = DEFAULT_AGGREGATE_INTERVAL_SECONDS,
        name_suffix: Callable[[], str] | None = None,
    ) -> None:
        self.component = component
        self.instance = instance
        self.now = now
        self.wall = wall or now
        self.burst = burst
        self.qps = qps
        self.aggregate_max = aggregate_max
        self.aggregate_interval = aggregate_interval
        self._suffix = name_suffix
        self._seq = 0
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._similar: OrderedDict[tuple[str, ...], _Similar] = OrderedDict()
        self._buckets: OrderedDict[tuple[str, ...], _Bucket] = OrderedDict()
        self.dropped = 0

    def _allow(self, obj_key: tuple[str, ...], t: float) -> bool:
        b = self._buckets.get(obj_key)
        if b is None:
            b = self._buckets[obj_key] = _Bucket(float(self.burst), t)
            if len(self._buckets) > MAX_LRU_CACHE_ENTRIES:
                _trim(self._buckets)
        else:
            self._buckets.move_to_end(obj_key)
        b.tokens = min(float(self.burst), b.tokens + (t - b.last) * self.qps)
        b.last = t
        if b.tokens < 1.0:
            return False
        b.tokens -= 1.0
        return True

    def _aggregate(self, key: tuple[str, ...], message: str, t: float) -> str:
        sim = self._similar.get(key)
        if sim is None or t - sim.last > self.aggregate_interval:
            sim = self._similar[key] = _Similar(set(), t)
            if len(self._similar) > MAX_LRU_CACHE_ENTRIES:
                _trim(self._similar)
        else:
            self._similar.move_to_end(key)
        sim.messages.add(message)
        sim.last = t
        if len(sim.messages) >= self.aggregate_max:
            return COMBINED_PREFIX + message
        return message

    def _name(self, obj: ObjectRef, wall: float) -> str:
        if self._suffix is not None:
            return f"{obj.name}.{self._suffix()}"
        self._seq += 1
        return f"{obj.name}.{int(wall * 1e9) + self._seq:x}"

    def record(
        self,
        obj: ObjectRef,
        event_type: str,
        reason: str,
        message: str,
        action: str = "",
    ) -> Create | Patch | None:
        """What to write for one occurrence, or None if the spam filter drops it."""
        # The keys of client-go's spam filter (the object), aggregator (+ type,
        # reason) and dedup (source + those + message), built once.
        obj_key = (obj.kind, obj.namespace, obj.name, obj.uid, obj.api_version)
        t = self.now()
        if not self._allow(obj_key, t):
            self.dropped += 1
            return None
        similar_key = (*obj_key, event_type, reason)
        message = self._aggregate(similar_key, message, t)
        key = (self.component, *similar_key, message)
        wall = self.wall()
        stamp = rfc3339(wall)
        seen = self._seen.get(key)
        if seen is not None:
            self._seen.move_to_end(key)
            seen.count += 1
            return Patch(
                obj.namespace,
                seen.name,
                {"count": seen.count, "lastTimestamp": stamp, "message": message},
                key,
            )
        name = self._name(obj, wall)
        self._seen[key] = _Seen(name, 1, stamp)
        if len(self._seen) > MAX_LRU_CACHE_ENTRIES:
            _trim(self._seen)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": obj.namespace},
            "involvedObject": obj.as_dict(),
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        if action:
            body["action"] = action
        return Create(obj.namespace, body, key)

    def forget(self, key: tuple[str, ...]) -> None:
        """The write for `key` failed: the next occurrence creates a new Event."""
        self._seen.pop(key, None)


def _trim(d: OrderedDict[Any, Any]) -> None:
    while len(d) > MAX_LRU_CACHE_ENTRIES:
        d.popitem(last=False)
