"""List, then watch, with client-go's reflector semantics, one kind at a time.

A `Reflector` lists its kind (in pages), hands the whole list to `Known.replace`
and then watches from the list's resourceVersion with bookmarks. What reaches
the sink (the operator's intake, then the scheduler's handlers) is, per object,
in resourceVersion order and never older than what was delivered before:

- `replace` (client-go's DeltaFIFO Replace) delivers every listed object and a
  delete for every object delivered before that the list no longer has: an
  object deleted while the watch was down leaves the cache after the re-list.
- A list served from a stale cache never brings back an object the watch has
  deleted, nor takes one back to an older version: objects and deletions are
  remembered with their resourceVersion (deletions as tombstones until a list
  at least as new has been seen), and an older version is dropped. An object
  known at a newer version than the list's is not deleted by that list.
  Tombstones are bounded (`MAX_TOMBSTONES`, the oldest go first; see `Known`).
- A watch that ends is resumed from the last resourceVersion seen (a bookmark's
  included); 410 Gone (as the HTTP status or an ERROR event) means a re-list.
  Other failures back off and resume, then re-list if resuming fails again.

resourceVersions are compared as integers when both are (etcd's and the
embedded API server's are); an unreadable one is taken as newer, as client-go
does not compare them at all.

The first `replace` makes the reflector synced (`on_synced`); a kind the
cluster does not serve (404) counts as synced and empty, is said once, and is
looked at again now and then. The HTTP is the reflectors' lane
(`KubeClient.watches`): the same stack as every other request, its errors
typed as theirs (404 `NotFound`: the kind is not served; 410 `Gone`), each
line of a watch decoded by `troupe.api.jsonio`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from urllib.parse import quote

from troupe.api import jsonio
from troupe.api.kinds import WATCHED, object_kind
from troupe.core.cluster import NotFound
from troupe.kube.errors import Gone

log = logging.getLogger(__name__)

PAGE_SIZE: Final = 500
NOT_SERVED_RETRY_SECONDS: Final = 60.0
# The most recent deletions remembered per kind (see `Known`).
MAX_TOMBSTONES: Final = 1024

Sink = Callable[[str, dict[str, Any], bool], None]


class WatchHttp(Protocol):
    async def get_json(self, path: str) -> Mapping[str, Any]: ...

    def watch_lines(self, path: str, timeout: float) -> AsyncIterator[bytes]: ...


def _rv(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata")
    rv = md.get("resourceVersion") if isinstance(md, Mapping) else None
    return rv if isinstance(rv, str) else ""


def _key(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata")
    if not isinstance(md, Mapping):
        return ""
    return f"{md.get('namespace') or ''}/{md.get('name') or ''}"


def older(a: str, b: str) -> bool:
    """Whether resourceVersion `a` is older than `b` (integers compared; an
    unreadable or missing one is never older)."""
    try:
        return int(a) < int(b)
    except ValueError:
        return False


@dataclass(slots=True)
class Known:
    """What one reflector has delivered: each object's last resourceVersion and
    body, and recent deletions (tombstones).

    A tombstone only refuses a stale list (or event) that would bring back an
    object the watch deleted. A list at least as new answers it and drops it;
    without a re-list (the usual case: a watch that never gets 410) they would
    pile up, one per deletion, so only the `max_tombstones` most recent are kept,
    the oldest out (they are in the order the deletions arrived, which is
    resourceVersion order). A stale list older than a forgotten deletion brings
    the object back until the watch that follows it, started from that list's
    resourceVersion, delivers the deletion again: client-go, which keeps no
    tombstones, does that for every deletion."""

    objects: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    tombstones: dict[str, str] = field(default_factory=dict)
    max_tombstones: int = MAX_TOMBSTONES

    def _bury(self, key: str, rv: str) -> None:
        """Remember a deletion as the newest tombstone; forget the oldest beyond the bound."""
        self.tombstones.pop(key, None)
        self.tombstones[key] = rv
        while len(self.tombstones) > self.max_tombstones:
            del self.tombstones[next(iter(self.tombstones))]

    def upsert(self, obj: dict[str, Any]) -> bool:
        """Whether to deliver an add/update: newer than what is known."""
        key, rv = _key(obj), _rv(obj)
        have = self.objects.get(key)
        if have is not None and (older(rv, have[0]) or (rv and rv == have[0])):
            return False  # older, or the same version again (a re-list)
        dead = self.tombstones.get(key)
        if dead is not None:
            if older(rv, dead) or rv == dead:
                return False
            del self.tombstones[key]
        self.objects[key] = (rv, obj)
        return True

    def delete(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The object to deliver as deleted (the newest known body), or None."""
        key, rv = _key(obj), _rv(obj)
        have = self.objects.get(key)
        if have is not None and older(rv, have[0]):
            return None  # a delete of a version before one we have seen: stale
        self.objects.pop(key, None)
        self._bury(key, rv)
        return obj

    def replace(
        self, items: list[dict[str, Any]], list_rv: str
    ) -> list[tuple[dict[str, Any], bool]]:
        """client-go's Replace: (object, deleted) to deliver for a full list at
        `list_rv`."""
        out: list[tuple[dict[str, Any], bool]] = []
        listed = set()
        for obj in items:
            listed.add(_key(obj))
            if self.upsert(obj):
                out.append((obj, False))
        for key in [k for k in self.objects if k not in listed]:
            rv, obj = self.objects[key]
            if list_rv and rv and older(list_rv, rv):
                continue  # seen after this list was taken: the list cannot know it
            del self.objects[key]
            self._bury(key, list_rv or rv)
            out.append((obj, True))
        # Tombstones older than this list are answered by the list itself.
        if list_rv:
            self.tombstones = {
                k: v for k, v in self.tombstones.items() if not (v and older(v, list_rv))
            }
        return out


def collection_path(kind: str) -> str:
    group, version, plural = WATCHED[kind]
    return f"/api/{version}/{plural}" if not group else f"/apis/{group}/{version}/{plural}"


class Reflector:
    """List and watch one watched kind into `sink`, until cancelled."""

    def __init__(
        self,
        kind: str,
        http: WatchHttp,
        sink: Sink,
        *,
        on_synced: Callable[[], None] = lambda: None,
        watch_timeout: float = 300.0,
        backoff: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0),
        page_size: int = PAGE_SIZE,
        not_served_retry: float = NOT_SERVED_RETRY_SECONDS,
    ) -> None:
        self.kind = kind
        self.http = http
        self.sink = sink
        self.on_synced = on_synced
        self.watch_timeout = watch_timeout
        self.backoff = backoff
        self.page_size = page_size
        self.not_served_retry = not_served_retry
        self.path = collection_path(kind)
        group, version, _ = WATCHED[kind]
        self.api_version = f"{group}/{version}" if group else version
        self.known = Known()
        self.synced = False
        self.relists = 0
        self._not_served_said = False

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                rv = await self.list_once()
                failures = 0
                await self.watch(rv)
                self.relists += 1  # 410: the watch cannot resume
            except asyncio.CancelledError:
                raise
            except NotFound:
                await asyncio.sleep(self.not_served_retry)
            except Exception as e:
                delay = self.backoff[min(failures, len(self.backoff) - 1)]
                failures += 1
                log.warning("list of %s failed (%s): again in %.0fs", self.path, e, delay)
                await asyncio.sleep(delay)

    async def list_once(self) -> str:
        """List every object (in pages), deliver the Replace, return the list's
        resourceVersion."""
        items: list[dict[str, Any]] = []
        token = ""
        list_rv = ""
        while True:
            q = f"?limit={self.page_size}" + (f"&continue={quote(token, safe='')}" if token else "")
            try:
                page = await self.http.get_json(self.path + q)
            except NotFound:
                self._deliver(self.known.replace([], ""))
                self._synced()
                if not self._not_served_said:
                    log.warning(
                        "%s is not served by this cluster: not watching it; looking again "
                        "every %.0fs",
                        self.path,
                        self.not_served_retry,
                    )
                    self._not_served_said = True
                raise
            except Gone:
                if not token:
                    raise
                # The continue token expired: the whole list again, in one piece.
                page = await self.http.get_json(self.path)
                items = []
                token = ""
            for item in page.get("items") or []:
                if isinstance(item, dict):
                    item.setdefault("kind", object_kind(self.kind))
                    item.setdefault("apiVersion", self.api_version)
                    items.append(item)
            md = page.get("metadata") or {}
            list_rv = str(md.get("resourceVersion") or list_rv)
            token = str(md.get("continue") or "")
            if not token:
                break
        if self._not_served_said:
            log.info("%s is served now: watching it", self.path)
            self._not_served_said = False
        self._deliver(self.known.replace(items, list_rv))
        self._synced()
        return list_rv

    async def watch(self, rv: str) -> None:
        """Watch from `rv` until 410 Gone (then return: re-list), resuming from
        the last resourceVersion seen when a stream ends or breaks."""
        failures = 0
        while True:
            q = f"?watch=1&allowWatchBookmarks=true&timeoutSeconds={int(self.watch_timeout)}" + (
                f"&resourceVersion={quote(rv, safe='')}" if rv else ""
            )
            try:
                async for line in self.http.watch_lines(self.path + q, self.watch_timeout):
                    rv = self._event(line, rv)
                    failures = 0
            except (Gone, NotFound):
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                delay = self.backoff[min(failures, len(self.backoff) - 1)]
                failures += 1
                if failures > len(self.backoff):
                    log.warning("watch of %s keeps failing (%s): re-listing", self.path, e)
                    return
                log.info("watch of %s broke (%s): resuming in %.0fs", self.path, e, delay)
                await asyncio.sleep(delay)

    def _event(self, line: bytes, rv: str) -> str:
        line = line.strip()
        if not line:
            return rv
        try:
            event = jsonio.loads(line)
        except jsonio.JSONError:
            log.warning("unreadable watch event of %s skipped", self.path)
            return rv
        if not isinstance(event, dict):
            return rv
        typ, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            log.warning("malformed %s event skipped", self.kind)
            return rv
        if typ == "ERROR":
            if obj.get("code") == 410:
                raise Gone(str(obj.get("message") or "410 Gone"))
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        new_rv = _rv(obj) or rv
        if typ == "BOOKMARK":
            return new_rv
        obj.setdefault("kind", object_kind(self.kind))
        if typ == "DELETED":
            gone = self.known.delete(obj)
            if gone is not None:
                self.sink(self.kind, gone, True)
        elif self.known.upsert(obj):
            self.sink(self.kind, obj, False)
        return new_rv

    def _deliver(self, events: list[tuple[dict[str, Any], bool]]) -> None:
        for obj, deleted in events:
            self.sink(self.kind, obj, deleted)

    def _synced(self) -> None:
        if not self.synced:
            self.synced = True
            self.on_synced()
