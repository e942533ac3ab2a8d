"""Status and Code: how a plugin tells the runtime what happened.

Each Code says what the queue does with a pod that got it (as kube-scheduler's
framework/interface.go).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Code(enum.IntEnum):
    SUCCESS = 0
    """The point passed; the cycle goes on."""
    ERROR = 1
    """An internal error (a bug or a failed API call): the pod goes to backoffQ."""
    UNSCHEDULABLE = 2
    """Does not fit now; may fit after a cluster event (unschedulable pool)."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    """Does not fit and preemption cannot help; the pod waits for an event."""
    WAIT = 4
    """Permit only: the pod waits in the waiting-pods map."""
    SKIP = 5
    """PreFilter/PreScore: skip this plugin's Filter/Score. Bind: try the next binder."""
    PENDING = 6
    """The pod waits for something outside the scheduler (e.g. its gang to fill up):
    it stays in the unschedulable pool until an event the plugin registered for."""


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    # The exception behind an ERROR (kube-scheduler's AsStatus(err)): callers tell
    # failures apart by it (a bind conflict), never by the message text.
    cause: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def is_skip(self) -> bool:
        return self.code is Code.SKIP

    @property
    def is_wait(self) -> bool:
        return self.code is Code.WAIT

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        return (
            self if self.plugin == plugin else Status(self.code, self.reasons, plugin, self.cause)
        )


SUCCESS = Status()
SKIP = Status(Code.SKIP)


def unschedulable(*reasons: str, plugin: str = "") -> Status:
    return Status(Code.UNSCHEDULABLE, reasons, plugin)


def unresolvable(*reasons: str, plugin: str = "") -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin)


def error(*reasons: str, plugin: str = "") -> Status:
    return Status(Code.ERROR, reasons, plugin)


def wait(plugin: str = "") -> Status:
    return Status(Code.WAIT, (), plugin)
