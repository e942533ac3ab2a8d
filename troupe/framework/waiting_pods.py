"""The waiting-pods map: pods that passed Permit with WAIT and await a verdict.

Each waiting pod records which Permit plugins still have to allow it and a
deadline per plugin. `allow(plugin)` removes one; when none is left the pod is
approved. `reject(plugin, message)` or a deadline ends the wait with
UNSCHEDULABLE. The binding cycle awaits `WaitingPod.wait()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from troupe.api.types import GroupKey, NodeName, Pod, PodKey
from troupe.core.clock import Clock, TimerHandle
from troupe.framework.status import SUCCESS, Code, Status


class WaitingPod:
    def __init__(self, pod: Pod, node: NodeName, timeouts: dict[str, float], clock: Clock) -> None:
        self.pod = pod
        self.node = node
        self.pending: set[str] = set(timeouts)
        self.started = clock.now()
        self._verdict: Status | None = None
        self._future: asyncio.Future[Status] | None = None
        self._timers: list[TimerHandle] = []
        for plugin, seconds in timeouts.items():
            self._timers.append(
                clock.call_at(
                    clock.now() + seconds,
                    self._timeout_callback(plugin, seconds),
                )
            )

    def _timeout_callback(self, plugin: str, seconds: float) -> Callable[[], None]:
        def fire() -> None:
            self.reject(
                plugin, f"rejected due to timeout after waiting {seconds:g}s at plugin {plugin}"
            )

        return fire

    @property
    def done(self) -> bool:
        return self._verdict is not None

    @property
    def rejected(self) -> bool:
        """Rejected (or timed out), though its binding cycle may not have run yet to
        forget the reservation: it no longer counts as placed."""
        return self._verdict is not None and not self._verdict.is_success

    def allow(self, plugin: str) -> None:
        if self._verdict is not None:
            return
        self.pending.discard(plugin)
        if not self.pending:
            self._finish(SUCCESS)

    def reject(self, plugin: str, message: str) -> None:
        if self._verdict is None:
            self._finish(Status(Code.UNSCHEDULABLE, (message,), plugin))

    def _finish(self, verdict: Status) -> None:
        self._verdict = verdict
        for t in self._timers:
            t.cancel()
        if self._future is not None and not self._future.done():
            self._future.set_result(verdict)

    async def wait(self) -> Status:
        if self._verdict is not None:
            return self._verdict
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
        return await self._future


class WaitingPods:
    """By pod, and by group: Permit plugins that gate a group (Coscheduling)
    look up its waiting members without scanning every waiting pod."""

    def __init__(self) -> None:
        self._pods: dict[PodKey, WaitingPod] = {}
        self._by_group: dict[GroupKey, dict[PodKey, WaitingPod]] = {}

    def add(self, wp: WaitingPod) -> None:
        self.remove(wp.pod.key)
        self._pods[wp.pod.key] = wp
        group = wp.pod.group_key
        if group is not None:
            self._by_group.setdefault(group, {})[wp.pod.key] = wp

    def remove(self, key: PodKey) -> None:
        wp = self._pods.pop(key, None)
        if wp is None:
            return
        group = wp.pod.group_key
        if group is None:
            return
        members = self._by_group.get(group)
        if members is not None:
            members.pop(key, None)
            if not members:
                del self._by_group[group]

    def get(self, key: PodKey) -> WaitingPod | None:
        return self._pods.get(key)

    def in_group(self, group: GroupKey) -> list[WaitingPod]:
        """The group's waiting members, in the order they started waiting."""
        return list(self._by_group.get(group, {}).values())

    def __iter__(self) -> Iterator[WaitingPod]:
        return iter(list(self._pods.values()))

    def __len__(self) -> int:
        return len(self._pods)
