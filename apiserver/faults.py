"""Timing faults of the embedded API server: latency on writes, watch events held
back and released in bursts, and a 409 Conflict now and then, all seeded.

A test sets `ApiServer.faults = Faults(...)` (or changes its fields while the
server runs); nothing in Troupe knows of it. The server calls `around` for
every resource request and `hold_watch` before it sends a watch stream's next
events. Why these three: the simulator and the live path share the pipeline
but not the timing, and a scheduler that is right only when its own writes come
back at once (or in the order it made them) is wrong on a real cluster.

- Write latency (`latency[(verb, plural)]`, "*" for any): seconds plus a
  uniform jitter. A share `before_commit` of it passes before the write reaches
  the store, the rest before the answer leaves: so the write's watch event
  reaches the watchers before its writer hears the answer, as it does on a
  loaded kube-apiserver. Verbs as the audit log names them, `bind` for
  pods/binding.
- Watch holding (`watch_hold[plural]`, "*" for any): once a watch stream has
  an event to send it waits that long (plus jitter), then sends everything
  queued by then in one burst.
- Conflicts (`conflict_rate`), only where kube-apiserver can answer 409: an
  update or patch that carries a resourceVersion (the object changed in
  between: answered 409, nothing written), and the binding of a pod
  (`bind_conflict_rate`): the bind is made and the answer is the 409 a retry of
  it gets, "already assigned", as when the first answer was lost. Leases are
  left out unless `conflict_plurals` names them.

What was injected is counted in `injected` ("latency", "conflict", "bind-conflict").
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp.web as web

from apiserver.resources import Resource
from apiserver.store import conflict

WRITE_VERBS: Final = frozenset({"create", "update", "patch", "delete", "deletecollection", "bind"})
ANY: Final = "*"


@dataclass(frozen=True, slots=True)
class Latency:
    """`seconds` plus a uniform jitter in [0, `jitter`]."""

    seconds: float = 0.0
    jitter: float = 0.0


@dataclass
class Faults:
    """Seeded timing faults (see the module's docstring)."""

    seed: int = 0
    latency: dict[tuple[str, str], Latency] = field(default_factory=dict)
    before_commit: float = 0.5
    watch_hold: dict[str, Latency] = field(default_factory=dict)
    conflict_rate: float = 0.0
    bind_conflict_rate: float = 0.0
    # Plurals whose writes may get a conflict (None: every one but leases).
    conflict_plurals: frozenset[str] | None = None
    injected: collections.Counter[str] = field(default_factory=collections.Counter)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        # Binds draw from their own stream: which binds are answered 409 then
        # depends on the seed and the bind's rank only, not on how the other
        # requests interleaved with them in real time.
        self._bind_rng = random.Random(f"bind-conflicts-{self.seed}")

    def _draw(self, lat: Latency | None) -> float:
        if lat is None:
            return 0.0
        return lat.seconds + (self._rng.uniform(0.0, lat.jitter) if lat.jitter > 0 else 0.0)

    def write_latency(self, verb: str, plural: str) -> float:
        for key in ((verb, plural), (verb, ANY), (ANY, plural), (ANY, ANY)):
            lat = self.latency.get(key)
            if lat is not None:
                return self._draw(lat)
        return 0.0

    def watch_delay(self, plural: str) -> float:
        return self._draw(self.watch_hold.get(plural) or self.watch_hold.get(ANY))

    def _conflicts(self, plural: str) -> bool:
        if self.conflict_plurals is None:
            return plural != "leases"
        return plural in self.conflict_plurals

    async def hold_watch(self, plural: str) -> None:
        """Called by a watch stream that has events to send: wait before sending
        them (what queues meanwhile goes out in the same burst)."""
        delay = self.watch_delay(plural)
        if delay > 0:
            await asyncio.sleep(delay)

    async def around(
        self,
        request: web.Request,
        counted: tuple[str, str, str],
        resolve: Callable[[str], Resource],
        serve: Callable[[], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """Serve one resource request (`counted` is its (verb, plural,
        subresource)) with the faults that apply to it."""
        verb, plural, sub = counted
        if verb == "create" and plural == "pods" and sub == "binding":
            verb = "bind"
        if verb not in WRITE_VERBS:
            return await serve()
        delay = self.write_latency(verb, plural)
        if delay > 0:
            self.injected["latency"] += 1
            await asyncio.sleep(delay * self.before_commit)
        try:
            if (
                verb in ("update", "patch")
                and self.conflict_rate > 0
                and self._conflicts(plural)
                and _carries_resource_version(await _json_body(request))
                and self._rng.random() < self.conflict_rate
            ):
                self.injected["conflict"] += 1
                name = _name_of(request.path, sub)
                why = (
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again"
                )
                raise conflict(_qualified(resolve, plural), name, why, plural)
            resp = await serve()
            if (
                verb == "bind"
                and resp.status < 300
                and self.bind_conflict_rate > 0
                and self._conflicts(plural)
                and self._bind_rng.random() < self.bind_conflict_rate
            ):
                self.injected["bind-conflict"] += 1
                name = _name_of(request.path, sub)
                node = _target_of(await _json_body(request))
                why = f'pod {name} is already assigned to node "{node}"'
                err = conflict("pods/binding", name, why, "pods/binding")
                resp = web.Response(
                    body=json.dumps(err.status()).encode(),
                    status=409,
                    content_type="application/json",
                )
            return resp
        finally:
            if delay > 0:
                await asyncio.sleep(delay * (1.0 - self.before_commit))


async def _json_body(request: web.Request) -> Any:
    if "json" not in request.headers.get("Content-Type", "") and request.method != "PATCH":
        return None
    try:
        return json.loads(await request.read() or b"null")
    except ValueError:
        return None


def _carries_resource_version(body: Any) -> bool:
    """A resourceVersion precondition: in the object's metadata, or a JSON patch's
    `test` of /metadata/resourceVersion."""
    if isinstance(body, Mapping):
        meta = body.get("metadata")
        return isinstance(meta, Mapping) and bool(meta.get("resourceVersion"))
    if isinstance(body, list):
        return any(
            isinstance(op, Mapping)
            and op.get("op") == "test"
            and op.get("path") == "/metadata/resourceVersion"
            for op in body
        )
    return False


def _qualified(resolve: Callable[[str], Resource], plural: str) -> str:
    try:
        return resolve(plural).qualified
    except KeyError:
        return plural


def _name_of(path: str, subresource: str) -> str:
    parts = [p for p in path.split("/") if p]
    if subresource and parts and parts[-1] == subresource:
        parts = parts[:-1]
    return parts[-1] if parts else ""


def _target_of(body: Any) -> str:
    target = body.get("target") if isinstance(body, Mapping) else None
    return str(target.get("name", "")) if isinstance(target, Mapping) else ""


__all__ = ["ANY", "Faults", "Latency"]
