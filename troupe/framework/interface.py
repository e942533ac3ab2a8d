"""One Protocol per extension point: what a plugin implements.

A plugin class subclasses each Protocol it implements (so `isinstance` tells the
runtime which points it serves, and enabling it at another point fails at
start-up), declares `NAME: Final`, and has a `new(args, handle)` classmethod
that validates its typed arguments (`PluginArgsError` naming the field).

Filter and Score are columnar (docs/design.md, "Plugins see columns"): they
receive the node table and the candidate rows and answer for all rows at once.
A plugin that cannot be vectorised implements `NodeFilterPlugin` /
`NodeScorePlugin` instead, one node at a time, and the runtime adapts it.

Only the binding-cycle points that may wait (`pre_bind`, `bind`, `post_bind`)
are `async`; everything in the scheduling cycle is a plain function.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

import numpy as np
import numpy.typing as npt

from troupe.api.types import GroupKey, NodeName, Pod, PodGroup, PodKey
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    ClusterEventWithHint,
)
from troupe.framework.filtering import FilterResult, FilterRunner
from troupe.framework.fit import NodeSubset
from troupe.framework.group_tree import GroupTree
from troupe.framework.status import Status

if TYPE_CHECKING:
    from troupe.core.snapshot import NodeTable
    from troupe.core.topology import PlacementWeights
    from troupe.framework.handle import Handle

BoolArray = npt.NDArray[np.bool_]
Int64Array = npt.NDArray[np.int64]
IntpArray = npt.NDArray[np.intp]

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0


class PluginArgsError(ValueError):
    """Bad plugin arguments; `field` is the path inside the plugin's args."""

    def __init__(self, field_path: str, problem: str) -> None:
        super().__init__(f"{field_path}: {problem}")
        self.field_path = field_path
        self.problem = problem


# ---- records passed to plugins -----------------------------------------------


@dataclass(slots=True)
class QueuedPodInfo:
    """A pod in the scheduling queue, with its attempt history."""

    pod: Pod
    timestamp: float  # when it last entered the activeQ (kube-scheduler's Timestamp)
    initial_attempt_timestamp: float | None = None
    attempts: int = 0
    seq: int = 0  # arrival order, a tie-break and the FIFO fallback's order
    unschedulable_plugins: frozenset[str] = frozenset()
    pending_plugins: frozenset[str] = frozenset()
    gated: bool = False
    gating_plugin: str = ""
    message: str = ""  # the last reason it did not schedule

    @property
    def key(self) -> str:
        return self.pod.key


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """Nodes a PreFilter plugin already knows are the only candidates."""

    node_names: frozenset[str] | None = None  # None: all nodes


@dataclass(frozen=True, slots=True)
class NodeToStatus:
    """Why each rejected node was rejected (for PostFilter and diagnostics)."""

    statuses: Mapping[str, Status]  # node name -> Status with its reasons
    num_all_nodes: int
    # The status of the nodes not in `statuses`: None is UnschedulableAndUnresolvable
    # (excluded by a PreFilterResult); a PreFilter rejection gives its own.
    absent: Status | None = None


# ---- extension points -------------------------------------------------------


@runtime_checkable
class Plugin(Protocol):
    @property
    def NAME(self) -> str: ...

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Plugin: ...


@runtime_checkable
class PreEnqueuePlugin(Plugin, Protocol):
    def pre_enqueue(self, pod: Pod) -> Status: ...


@runtime_checkable
class QueueSortPlugin(Plugin, Protocol):
    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool: ...

    def sort_key(self, p: QueuedPodInfo) -> Any:
        """A key consistent with `less` (a < b iff less(a, b)); the queue sorts by it."""
        ...


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable
    ) -> tuple[PreFilterResult | None, Status]: ...


def pre_filter_is_node_local(plugin: object) -> bool:
    """Whether a PreFilter plugin declares (`PRE_FILTER_NODE_LOCAL = True`) that the
    state it writes depends on the pod and on the node being filtered only, never
    on the pods of other nodes: adding or removing pods on a node then needs no
    PreFilter run again (what upstream's AddPod/RemovePod extensions are for)."""
    return bool(getattr(plugin, "PRE_FILTER_NODE_LOCAL", False))


def pre_enqueue_is_reported(plugin: object) -> bool:
    """Whether the scheduler says on the pod why a PreEnqueue plugin keeps it
    out of the activeQ (PodScheduled False, a FailedScheduling event). A plugin
    whose reason the pod's own spec shows declares `PRE_ENQUEUE_REPORTED =
    False` (SchedulingGates: the pod lists its schedulingGates)."""
    return bool(getattr(plugin, "PRE_ENQUEUE_REPORTED", True))


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> FilterResult: ...


@runtime_checkable
class NodeFilterPlugin(Plugin, Protocol):
    """The per-node form of Filter; the runtime adapts it to columns."""

    def filter_node(self, state: CycleState, pod: Pod, nodes: NodeTable, row: int) -> Status: ...


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    def post_filter(
        self, state: CycleState, pod: Pod, filtered: NodeToStatus
    ) -> tuple[str | None, Status]:
        """Returns (nominated node name or None, status)."""
        ...


class PreemptionCandidate(Protocol):
    """A node and the pods to evict there (most important first)."""

    @property
    def node(self) -> NodeName: ...

    @property
    def victims(self) -> Sequence[Pod]: ...


class GroupPreemptionPlugin(Plugin, Protocol):
    """Troupe's extension of PostFilter for gangs. A gang that cannot be placed
    preempts as one unit: the group cycle asks member by member for the victims
    that make room for that member on the cycle's snapshot (`member_candidate`),
    takes them off the snapshot before the next member is asked, and only when
    minMember fit together has each member's victims evicted (`prepare_member`).
    `priority` is the gang's (no victim may reach it); `taken`: the victims
    already chosen for earlier members; `within`: the only candidate nodes (the
    gang's topology domain), None for all.

    A PostFilter plugin serves gangs by subclassing it (the runtime looks at the
    class hierarchy, never at which methods exist); a preemption plugin forwards
    both to its troupe.framework.preemption Evaluator, which runs them with the
    plugin's own victim selection (DefaultPreemption does)."""

    def member_candidate(
        self,
        state: CycleState,
        pod: Pod,
        runner: FilterRunner,
        priority: int,
        taken: Collection[PodKey],
        within: NodeSubset | None = None,
    ) -> PreemptionCandidate | None: ...

    def prepare_member(self, pod: Pod, candidate: PreemptionCandidate, gang: str) -> None: ...


class GroupSchedulingPlugin(Plugin, Protocol):
    """Troupe's extension of Permit for gangs: the group cycle. A popped pod
    whose gang is not admitted yet (`group_to_schedule`) does not go through
    the pod cycle alone: the core searches every queued member of its group on
    the cycle's snapshot, each placement charged before the next member is
    searched, and assumes, reserves and permits them only when at least
    `min_count` of the group are then placed (`placed_members` counts those
    that were already). Nothing is held otherwise, and every member fails with
    the gang's message, naming the plugin as the rejector (its
    `events_to_register` bring the members back).

    The core names no plugin: it asks the profile's Permit plugin that
    subclasses this one (the runtime looks at the class hierarchy, as for every
    point); a profile without one schedules each pod alone. Coscheduling
    implements it with its PodGroupManager."""

    def group_to_schedule(self, pod: Pod) -> PodGroup | None:
        """The group whose group cycle `pod` starts: its PodGroup if that is a
        gang with fewer than `min_count` members placed, else None."""
        ...

    def tree_to_schedule(self, pod: Pod) -> GroupTree | None:
        """The tree of groups whose group cycle `pod` starts instead (a gang of
        groups, CompositePodGroup): the topmost gang composite above the pod's
        PodGroup while it is not satisfied; None otherwise."""
        ...

    def enclosing_trees(self, pod: Pod) -> Sequence[GroupTree]:
        """The groups of groups above the pod's PodGroup that keep their
        subtree in one topology domain, each as its tree (the pod, scheduled
        alone, goes where its subtree runs)."""
        ...

    def min_count(self, pg: PodGroup) -> int:
        """How many members must be placed together for the gang to be admitted."""
        ...

    def min_count_name(self, pg: PodGroup) -> str:
        """What the group's API calls `min_count`, for messages (minMember, minCount)."""
        ...

    def placed_members(self, group: GroupKey) -> int:
        """How many of the group's members hold a place (bound, or assumed and
        not rejected at Permit)."""
        ...

    def domains_per_cycle(self) -> int:
        """For a gang with a topology request: the domains of a level placed in
        per group cycle (the next cycle goes on with those not tried)."""
        ...

    def placement_weights(self) -> PlacementWeights:
        """The weights of the scores that rank a level's domains."""
        ...

    def group_phase(self, api_version: str, status: Mapping[str, Any]) -> str:
        """The state in one word of a PodGroup of `api_version` whose status is
        `status` (displays and the troupe_podgroups gauge)."""
        ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(
        self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray
    ) -> Status: ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, state: CycleState, pod: Pod, nodes: NodeTable, rows: IntpArray) -> Int64Array:
        """Raw scores for `rows`. Without `normalize_score`, in [0, 100]."""
        ...


@runtime_checkable
class NodeScorePlugin(Plugin, Protocol):
    """The per-node form of Score; the runtime adapts it to columns."""

    def score_node(self, state: CycleState, pod: Pod, nodes: NodeTable, row: int) -> int: ...


@runtime_checkable
class ScoreExtensions(Protocol):
    def normalize_score(self, state: CycleState, pod: Pod, scores: Int64Array) -> Int64Array:
        """Map raw scores to [0, 100] (may work in place and return the array)."""
        ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, pod: Pod, node: NodeName) -> Status: ...

    def unreserve(self, state: CycleState, pod: Pod, node: NodeName) -> None: ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, state: CycleState, pod: Pod, node: NodeName) -> tuple[Status, float]:
        """(status, timeout seconds for WAIT)."""
        ...


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    async def pre_bind(self, state: CycleState, pod: Pod, node: NodeName) -> Status: ...


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    async def bind(self, state: CycleState, pod: Pod, node: NodeName) -> Status: ...


@runtime_checkable
class PostBindPlugin(Plugin, Protocol):
    async def post_bind(self, state: CycleState, pod: Pod, node: NodeName) -> None: ...


@runtime_checkable
class TrialChargePlugin(Protocol):
    """A PreFilter or Filter plugin whose resources the snapshot does not hold
    (devices at Filter, a namespace's quota at PreFilter): while a group cycle
    tries its members one after another (its trial, and its preemption plan),
    each member's placement is charged through `charge` before the next member
    is searched, as the snapshot charges its cpu and memory, so that the next
    member's PreFilter and Filter see it; the returned function undoes it when
    the trial ends, whether the gang is admitted or not (None: nothing was
    charged). Not an extension point of the configuration: a plugin enabled at
    preFilter or filter takes part, once."""

    def charge(self, state: CycleState, pod: Pod, node: NodeName) -> Callable[[], None] | None: ...

    def release(
        self, state: CycleState, pod: Pod, victims: Sequence[Pod]
    ) -> Callable[[], None] | None:
        """The victims a gang's preemption plan takes off the snapshot for `pod`
        stop counting until the plan ends, as the snapshot uncharges them; the
        returned function undoes it (None: nothing to release, the default)."""
        return None


@runtime_checkable
class EnqueueExtensions(Protocol):
    def events_to_register(self) -> Sequence[ClusterEventWithHint]: ...


# Extension point names as in KubeSchedulerConfiguration, with their Protocols.
# A plugin serves a point if it is an instance of any of the listed Protocols.
EXTENSION_POINTS: Mapping[str, tuple[type, ...]] = {
    "preEnqueue": (PreEnqueuePlugin,),
    "queueSort": (QueueSortPlugin,),
    "preFilter": (PreFilterPlugin,),
    "filter": (FilterPlugin, NodeFilterPlugin),
    "postFilter": (PostFilterPlugin,),
    "preScore": (PreScorePlugin,),
    "score": (ScorePlugin, NodeScorePlugin),
    "reserve": (ReservePlugin,),
    "permit": (PermitPlugin,),
    "preBind": (PreBindPlugin,),
    "bind": (BindPlugin,),
    "postBind": (PostBindPlugin,),
}


class NoArgs:
    """Base for plugins that take no arguments: `new` refuses any, naming it."""

    @classmethod
    def new(cls, args: Mapping[str, Any], handle: Handle) -> Self:
        for k in args:
            raise PluginArgsError(str(k), "unknown field: the plugin takes no arguments")
        return cls()


def implements(plugin: object, point: str) -> bool:
    """Whether a plugin class (or instance) declares the extension point.

    Plugins say what they are by subclassing the Protocols (docs/design.md, "Plugins"), so this
    looks at the class hierarchy, not at which methods happen to exist.
    """
    cls = plugin if isinstance(plugin, type) else type(plugin)
    return any(proto in cls.__mro__ for proto in EXTENSION_POINTS[point])


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """A plugin enabled in a profile: its name, weight (score only) and raw args."""

    name: str
    weight: int = 1
    args: Mapping[str, Any] = field(default_factory=dict)
    # Where `args` came from in the configuration file, to name bad fields.
    args_path: str = ""
