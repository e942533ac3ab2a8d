"""DefaultBinder: binds through the ClusterClient (pods/binding)
(defaultbinder/default_binder.go). A 409 means someone else bound the pod."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Self

__all__ = ["BIND_CONFLICT", "DefaultBinder"]

from troupe.api.types import NodeName, Pod
from troupe.core.cluster import BIND_CONFLICT, BindConflict, NotFound
from troupe.framework.cycle_state import CycleState
from troupe.framework.handle import Handle
from troupe.framework.interface import BindPlugin
from troupe.framework.status import SUCCESS, Code, Status


class DefaultBinder(BindPlugin):
    NAME: Final = "DefaultBinder"

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        return cls(handle)

    async def bind(self, state: CycleState, pod: Pod, node: NodeName) -> Status:
        try:
            await self.handle.client.bind(pod.key, pod.uid, node)
        except BindConflict as e:
            return Status(Code.ERROR, (f"{BIND_CONFLICT}: {e}",), self.NAME, e)
        except NotFound as e:
            return Status(Code.ERROR, (f"pod {pod.key} not found",), self.NAME, e)
        except Exception as e:
            # an API failure, not a bug: kube-scheduler's DefaultBinder returns it as
            # an error status, and the pod is retried with backoff
            return Status(Code.ERROR, (f"binding {pod.key} to {node}: {e}",), self.NAME, e)
        return SUCCESS
