"""NodeResourcesFit Filter and TestFitScore: cases ported from kube-scheduler's
pkg/scheduler/framework/plugins/noderesources/fit_test.go (the stored version
with pod-level resources, DRA extended resources and the Unresolvable code,
kubernetes/kubernetes at v1.35-era master): TestEnoughRequests,
TestNotEnoughRequests, TestStorageRequests, TestRestartableInitContainers and
TestFitScore.

Facts carried over: the node of the Filter tables is
makeAllocatableResources(10, 20, 32, 5, 20, 5) (10m cpu, 20 bytes of memory, 32
pods, 5 example.com/aaa, 20 ephemeral-storage, 5 hugepages-2Mi), with one
existing pod holding the case's `nodeInfo` requests; TestNotEnoughRequests
uses a 1-pod node. Each case checks the code and reasons of both the column
form and the per-node form, as Filter's Status: a request above the node's
allocatable is UnschedulableAndUnresolvable, above its free amount only
Unschedulable, "Too many pods" always Unschedulable.

Differences in form, not in fact: upstream's pods with no containers are pods
with one container that requests nothing here (a Pod needs a container; Filter
only counts requests). Reasons of several scalar resources come in name order
(upstream iterates a map).

Skipped (Troupe has no DRA): "extended resource backed by DRA", "extended
resource backed by DRA, nil draManager", "extended resource was backed by
Device Plugin (Allocatable: 0)" and "... global cache", and TestFitScore's two
"with Extended resources" cases (ResourceSlices). The DRA cases whose outcome
does not depend on DRA are ported. TestPreFilterDisabled is ported as Troupe's
behaviour (a missing PreFilter state raises; the runtime turns it into ERROR).
TestRestartableInitContainers' "sidecar containers is disabled" cases: Troupe
has no SidecarContainers gate (GA upstream), so a pod with a restartable init
container is always allowed; that case asserts Troupe's answer. The "if
PreScore is not called" TestFitScore cases assert Troupe's behaviour: Score
reads PreScore's state and fails loudly without it (docs/design.md, "CycleState"; the runtime
always runs PreScore first).

Queueing hints: Test_isSchedulableAfterPodChange and
Test_isSchedulableAfterNodeChange are ported. Fix: the node hint returned Skip
for an object that is not a Node (and judged a non-Node old object by the new
node); upstream's error path queues ("backoff-wrong-new-object",
"backoff-wrong-old-object"). Deliberate differences, asserted:
"skip-queue-on-unscheduled-pod-deleted" queues in Troupe (only assigned-pod
deletions reach the hint, and the scheduler reports a forgotten assumed pod,
which has no spec.nodeName, as one); "skip-queue-on-disable-inplace-pod-
vertical-scaling" queues (Troupe has no such gate; the scale-down frees cpu).
Skipped: TestEventsToRegister (its expected sets depend on upstream feature
gates; Troupe registers assigned-pod Delete|scale-down and node
Add|UpdateNodeAllocatable), Test_isSchedulableAfterDeviceClassChange (DRA) and
the benchmarks.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import NodeBuilder, PodBuilder, make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_score
from tests.unit.plugins.upstream_fit_helpers import filter_statuses
from troupe.framework.cycle_state import CycleState, StateKeyError
from troupe.framework.events import QueueingHint
from troupe.framework.status import Code
from troupe.plugins.node_resources_fit import NodeResourcesFit

U = Code.UNSCHEDULABLE
UU = Code.UNSCHEDULABLE_AND_UNRESOLVABLE

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
K8S_IO_A = "kubernetes.io/something"
K8S_IO_B = "subdomain.kubernetes.io/something"
HUGE_A = "hugepages-2Mi"
DRA_EXT = "extended.resource.dra.io/something"

CPU = "Insufficient cpu"
MEM = "Insufficient memory"
PODS = "Too many pods"


def ins(resource: str) -> str:
    return f"Insufficient {resource}"


def _requests(r: dict[str, int | str]) -> dict[str, str]:
    return {k: (f"{v}m" if k == "cpu" and isinstance(v, int) else str(v)) for k, v in r.items()}


def rp(*containers: dict[str, int | str]) -> PodBuilder:
    """newResourcePod: one container per request list (cpu given in millicores)."""
    pb = make_pod("p")
    if not containers:
        return pb
    spec = pb._spec
    spec["containers"] = [
        {"name": f"c{i}", "image": "x", "resources": {"requests": _requests(r)}}
        for i, r in enumerate(containers)
    ]
    return pb


def init(pb: PodBuilder, *containers: dict[str, int | str]) -> PodBuilder:
    """newResourceInitPod: init containers with these requests."""
    pb._spec["initContainers"] = [
        {"name": f"i{i}", "image": "x", "resources": {"requests": _requests(r)}}
        for i, r in enumerate(containers)
    ]
    return pb


def on_node(cpu: str = "", memory: int = 0, **scalars: int) -> PodBuilder:
    """The existing pod of the case's nodeInfo (scalars named as in R)."""
    reqs = R(**scalars)
    if cpu:
        reqs["cpu"] = cpu
    if memory:
        reqs["memory"] = memory
    return rp(reqs).node("n1")


def R(cpu: int = 0, mem: int = 0, **scalars: int) -> dict[str, int | str]:
    """framework.Resource{MilliCPU, Memory, ScalarResources}; zero amounts left out
    except scalars (a stated 0 is a case of its own)."""
    out: dict[str, int | str] = {}
    if cpu:
        out["cpu"] = cpu
    if mem:
        out["memory"] = mem
    names = {
        "A": EXT_A,
        "B": EXT_B,
        "K": K8S_IO_A,
        "KB": K8S_IO_B,
        "H": HUGE_A,
        "D": DRA_EXT,
        "E": "ephemeral-storage",
    }
    for k, v in scalars.items():
        out[names.get(k, k)] = v
    return out


def enough_node() -> NodeBuilder:
    """makeAllocatableResources(10, 20, 32, 5, 20, 5)."""
    return (
        make_node("n1")
        .capacity(cpu="10m", memory="20", pods=32, ephemeral_storage="20")
        .ext(EXT_A, 5)
        .ext(HUGE_A, 5)
    )


def check(
    pod: PodBuilder,
    node: NodeBuilder,
    existing: list[PodBuilder],
    want: dict[str, tuple[Code, tuple[str, ...]]],
    args: dict[str, Any] | None = None,
) -> None:
    table = table_of([node.build()], [p.build() for p in existing])
    plugin = NodeResourcesFit.new(args or {}, make_handle())
    p = pod.build()
    assert filter_statuses(plugin, p, table) == want
    assert filter_statuses(plugin, p, table, per_node=True) == want


def no(code: Code, *reasons: str) -> dict[str, tuple[Code, tuple[str, ...]]]:
    return {"n1": (code, reasons)}


FITS: dict[str, tuple[Code, tuple[str, ...]]] = {}

# ---- TestEnoughRequests ------------------------------------------------------------

ENOUGH = [
    pytest.param(
        rp(),
        [on_node(cpu="10m", memory=20)],
        FITS,
        None,
        id="upstream: no resources requested always fits",
    ),
    pytest.param(
        rp(R(1, 1)),
        [on_node(cpu="10m", memory=20)],
        no(U, CPU, MEM),
        None,
        id="upstream: too many resources fails",
    ),
    pytest.param(
        init(rp(R(1, 1)), R(3, 1)),
        [on_node(cpu="8m", memory=19)],
        no(U, CPU),
        None,
        id="upstream: too many resources fails due to init container cpu",
    ),
    pytest.param(
        init(rp(R(1, 1)), R(3, 1), R(2, 1)),
        [on_node(cpu="8m", memory=19)],
        no(U, CPU),
        None,
        id="upstream: too many resources fails due to highest init container cpu",
    ),
    pytest.param(
        init(rp(R(1, 1)), R(1, 3)),
        [on_node(cpu="9m", memory=19)],
        no(U, MEM),
        None,
        id="upstream: too many resources fails due to init container memory",
    ),
    pytest.param(
        init(rp(R(1, 1)), R(1, 3), R(1, 2)),
        [on_node(cpu="9m", memory=19)],
        no(U, MEM),
        None,
        id="upstream: too many resources fails due to highest init container memory",
    ),
    pytest.param(
        init(rp(R(1, 1)), R(1, 1)),
        [on_node(cpu="9m", memory=19)],
        FITS,
        None,
        id="upstream: init container fits because it's the max, not sum, of containers and "
        "init containers",
    ),
    pytest.param(
        init(rp(R(1, 1)), R(1, 1), R(1, 1)),
        [on_node(cpu="9m", memory=19)],
        FITS,
        None,
        id="upstream: multiple init containers fit because it's the max, not sum, of "
        "containers and init containers",
    ),
    pytest.param(
        rp(R(1, 1)),
        [on_node(cpu="5m", memory=5)],
        FITS,
        None,
        id="upstream: both resources fit",
    ),
    pytest.param(
        rp(R(2, 1)),
        [on_node(cpu="9m", memory=5)],
        no(U, CPU),
        None,
        id="upstream: one resource memory fits",
    ),
    pytest.param(
        rp(R(1, 2)),
        [on_node(cpu="5m", memory=19)],
        no(U, MEM),
        None,
        id="upstream: one resource cpu fits",
    ),
    pytest.param(
        rp(R(5, 1)),
        [on_node(cpu="5m", memory=19)],
        FITS,
        None,
        id="upstream: equal edge case",
    ),
    pytest.param(
        init(rp(R(4, 1)), R(5, 1)),
        [on_node(cpu="5m", memory=19)],
        FITS,
        None,
        id="upstream: equal edge case for init container",
    ),
    pytest.param(
        rp(R(A=1)),
        [on_node()],
        FITS,
        None,
        id="upstream: extended resource fits",
    ),
    pytest.param(
        init(rp(), R(A=1)),
        [on_node()],
        FITS,
        None,
        id="upstream: extended resource fits for init container",
    ),
    pytest.param(
        rp(R(1, 1, A=10)),
        [on_node()],
        no(UU, ins(EXT_A)),
        None,
        id="upstream: extended resource capacity enforced",
    ),
    pytest.param(
        init(rp(), R(1, 1, A=10)),
        [on_node()],
        no(UU, ins(EXT_A)),
        None,
        id="upstream: extended resource capacity enforced for init container",
    ),
    pytest.param(
        rp(R(1, 1, A=1)),
        [on_node(A=5)],
        no(U, ins(EXT_A)),
        None,
        id="upstream: extended resource allocatable enforced",
    ),
    pytest.param(
        init(rp(), R(1, 1, A=1)),
        [on_node(A=5)],
        no(U, ins(EXT_A)),
        None,
        id="upstream: extended resource allocatable enforced for init container",
    ),
    pytest.param(
        rp(R(1, 1, A=3), R(1, 1, A=3)),
        [on_node(A=2)],
        no(UU, ins(EXT_A)),
        None,
        id="upstream: extended resource allocatable enforced for multiple containers",
    ),
    pytest.param(
        init(rp(), R(1, 1, A=3), R(1, 1, A=3)),
        [on_node(A=2)],
        FITS,
        None,
        id="upstream: extended resource allocatable admits multiple init containers",
    ),
    pytest.param(
        init(rp(), R(1, 1, A=6), R(1, 1, A=3)),
        [on_node(A=2)],
        no(UU, ins(EXT_A)),
        None,
        id="upstream: extended resource allocatable enforced for multiple init containers",
    ),
    pytest.param(
        rp(R(1, 1, B=1)),
        [on_node()],
        no(UU, ins(EXT_B)),
        None,
        id="upstream: extended resource allocatable enforced for unknown resource",
    ),
    pytest.param(
        init(rp(), R(1, 1, B=1)),
        [on_node()],
        no(UU, ins(EXT_B)),
        None,
        id="upstream: extended resource allocatable enforced for unknown resource for init "
        "container",
    ),
    pytest.param(
        rp(R(1, 1, K=10)),
        [on_node()],
        no(UU, ins(K8S_IO_A)),
        None,
        id="upstream: kubernetes.io resource capacity enforced",
    ),
    pytest.param(
        init(rp(), R(1, 1, KB=10)),
        [on_node()],
        no(UU, ins(K8S_IO_B)),
        None,
        id="upstream: kubernetes.io resource capacity enforced for init container",
    ),
    pytest.param(
        rp(R(1, 1, H=10)),
        [on_node()],
        no(UU, ins(HUGE_A)),
        None,
        id="upstream: hugepages resource capacity enforced",
    ),
    pytest.param(
        init(rp(), R(1, 1, H=10)),
        [on_node()],
        no(UU, ins(HUGE_A)),
        None,
        id="upstream: hugepages resource capacity enforced for init container",
    ),
    pytest.param(
        rp(R(1, 1, H=3), R(1, 1, H=3)),
        [on_node(H=2)],
        no(UU, ins(HUGE_A)),
        None,
        id="upstream: hugepages resource allocatable enforced for multiple containers",
    ),
    pytest.param(
        rp(R(1, 1, B=1)),
        [on_node()],
        FITS,
        {"ignoredResources": [EXT_B]},
        id="upstream: skip checking ignored extended resource",
    ),
    pytest.param(
        rp(R(1, 1)).overhead(cpu="3m", memory="13"),
        [on_node(cpu="5m", memory=5)],
        FITS,
        None,
        id="upstream: resources + pod overhead fits",
    ),
    pytest.param(
        rp(R(1, 1)).overhead(cpu="1m", memory="15"),
        [on_node(cpu="5m", memory=5)],
        no(U, MEM),
        None,
        id="upstream: requests + overhead does not fit for memory",
    ),
    pytest.param(
        rp(R(1, 1, B=1, K=1)),
        [on_node()],
        no(UU, ins(K8S_IO_A)),
        {"ignoredResourceGroups": ["example.com"]},
        id="upstream: skip checking ignored extended resource via resource groups",
    ),
    pytest.param(
        rp(R(1, 1, A=0)),
        [on_node(A=6)],
        FITS,
        None,
        id="upstream: skip checking extended resource request with quantity zero via "
        "resource groups",
    ),
    pytest.param(
        rp(R(A=1)),
        [on_node(cpu="20m", memory=30, A=1)],
        FITS,
        None,
        id="upstream: skip checking resource request with quantity zero",
    ),
    pytest.param(
        rp(R(1, 1)).pod_resources({"cpu": "1m", "memory": "2"}),
        [on_node(cpu="5m", memory=5)],
        FITS,
        None,
        id="upstream: both pod-level and container-level resources fit",
    ),
    pytest.param(
        rp(R(1, 1)).pod_resources({"cpu": "7m", "memory": "2"}),
        [on_node(cpu="5m", memory=5)],
        no(U, CPU),
        None,
        id="upstream: pod-level cpu resource not fit",
    ),
    pytest.param(
        rp(R(1, 1)).pod_resources({"cpu": "3m", "memory": "2"}),
        [on_node(cpu="5m", memory=19)],
        no(U, MEM),
        None,
        id="upstream: pod-level memory resource not fit",
    ),
    pytest.param(
        rp().pod_resources({"cpu": "3m", "memory": "2", HUGE_A: "5"}),
        [],
        FITS,
        None,
        id="upstream: pod-level hugepages resource fit",
    ),
    pytest.param(
        rp(R(1, 1, H=3)).pod_resources({"cpu": "3m", "memory": "2", HUGE_A: "5"}),
        [],
        FITS,
        None,
        id="upstream: both pod-level and container-level hugepages resource fit",
    ),
    pytest.param(
        rp().pod_resources({"cpu": "3m", "memory": "2", HUGE_A: "10"}),
        [],
        no(UU, ins(HUGE_A)),
        None,
        id="upstream: pod-level hugepages resource not fit",
    ),
    pytest.param(
        init(rp(R(1, 1)).pod_resources({"cpu": "3m", "memory": "2"}), R(1, 1)),
        [on_node(cpu="5m", memory=19)],
        no(U, MEM),
        None,
        id="upstream: one pod-level cpu resource fits and all init and non-init containers "
        "resources fit",
    ),
    # The node has example.com/aaa from a device plugin; without DRA the same answer.
    pytest.param(
        rp(R(A=1)),
        [on_node()],
        FITS,
        None,
        id="upstream: extended resource backed by device plugin",
    ),
    pytest.param(
        rp(R(1, 1, D=1)),
        [on_node()],
        no(UU, ins(DRA_EXT)),
        None,
        id="upstream: extended resource backed by DRA not enabled",
    ),
    # No DeviceClass names example.com/bbb, so DRA would not take it over either.
    pytest.param(
        rp(R(1, 1, B=1)),
        [on_node()],
        no(UU, ins(EXT_B)),
        None,
        id="upstream: extended resource NOT backed by DRA",
    ),
]


@pytest.mark.parametrize(("pod", "existing", "want", "args"), ENOUGH)
def test_enough_requests(
    pod: PodBuilder,
    existing: list[PodBuilder],
    want: dict[str, tuple[Code, tuple[str, ...]]],
    args: dict[str, Any] | None,
) -> None:
    check(pod, enough_node(), existing, want, args)


def test_pre_filter_disabled() -> None:
    """upstream: TestPreFilterDisabled (ErrNotFound status). Troupe: reading the
    missing PreFilter state raises; the runtime turns that into ERROR."""
    table = table_of([make_node("n1").build()])
    plugin = NodeResourcesFit.new({}, make_handle())
    with pytest.raises(StateKeyError):
        plugin.filter(CycleState(), make_pod("p").build(), table, table.valid_rows())


# ---- TestNotEnoughRequests ---------------------------------------------------------


def one_pod_node() -> NodeBuilder:
    """makeAllocatableResources(10, 20, 1, 0, 0, 0)."""
    return make_node("n1").capacity(cpu="10m", memory="20", pods=1, ephemeral_storage="0")


@pytest.mark.parametrize(
    ("pod", "existing"),
    [
        pytest.param(
            rp(),
            [on_node(cpu="10m", memory=20)],
            id="upstream: even without specified resources, predicate fails when there's no "
            "space for additional pod",
        ),
        pytest.param(
            rp(R(1, 1)),
            [on_node(cpu="5m", memory=5)],
            id="upstream: even if both resources fit, predicate fails when there's no space "
            "for additional pod",
        ),
        pytest.param(
            rp(R(5, 1)),
            [on_node(cpu="5m", memory=19)],
            id="upstream: even for equal edge case, predicate fails when there's no space for "
            "additional pod",
        ),
        pytest.param(
            init(rp(R(5, 1)), R(5, 1)),
            [on_node(cpu="5m", memory=19)],
            id="upstream: even for equal edge case, predicate fails when there's no space for "
            "additional pod due to init container",
        ),
    ],
)
def test_not_enough_requests(pod: PodBuilder, existing: list[PodBuilder]) -> None:
    check(pod, one_pod_node(), existing, no(U, PODS))


# ---- TestStorageRequests -----------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "existing", "want"),
    [
        pytest.param(
            rp(R(1, 1)),
            [on_node(cpu="2m", memory=10)],
            FITS,
            id="upstream: empty storage requested, and pod fits",
        ),
        pytest.param(
            rp({"ephemeral-storage": 25}),
            [on_node(cpu="2m", memory=2)],
            no(UU, ins("ephemeral-storage")),
            id="upstream: storage ephemeral local storage request exceeds allocatable",
        ),
        pytest.param(
            rp({"ephemeral-storage": 5}),
            [on_node(cpu="2m", memory=2, E=10)],
            FITS,
            id="upstream: ephemeral local storage is sufficient",
        ),
        pytest.param(
            rp({"ephemeral-storage": 10}),
            [on_node(cpu="2m", memory=2)],
            FITS,
            id="upstream: pod fits",
        ),
    ],
)
def test_storage_requests(
    pod: PodBuilder, existing: list[PodBuilder], want: dict[str, tuple[Code, tuple[str, ...]]]
) -> None:
    check(pod, enough_node(), existing, want)


# ---- TestRestartableInitContainers -------------------------------------------------


def with_sidecar(request: str | None, sidecar_request: str | None) -> PodBuilder:
    """newPodWithRestartableInitContainers: cpu requests in millicores."""
    pb = make_pod("p")
    if request is not None:
        pb.req(cpu=request)
    if sidecar_request is not None:
        return pb.init_container(sidecar=True, cpu=sidecar_request)
    return pb.init_container(sidecar=True)


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        pytest.param(
            make_pod("p"),
            FITS,
            id="upstream: allow pod without restartable init containers if sidecar containers "
            "is disabled",
        ),
        # Troupe has no SidecarContainers gate (GA upstream): always allowed.
        pytest.param(
            with_sidecar(None, None),
            FITS,
            id="upstream: not allow pod with restartable init containers if sidecar "
            "containers is disabled",
        ),
        pytest.param(
            make_pod("p"),
            FITS,
            id="upstream: allow pod without restartable init containers if sidecar containers "
            "is enabled",
        ),
        pytest.param(
            with_sidecar(None, None),
            FITS,
            id="upstream: allow pod with restartable init containers if sidecar containers is "
            "enabled",
        ),
        pytest.param(
            with_sidecar("1m", "1m"),
            FITS,
            id="upstream: allow pod if the total requested resources do not exceed the node's "
            "allocatable resources",
        ),
        pytest.param(
            with_sidecar("1m", "2m"),
            no(UU, CPU),
            id="upstream: not allow pod if the total requested resources do exceed the node's "
            "allocatable resources",
        ),
    ],
)
def test_restartable_init_containers(
    pod: PodBuilder, want: dict[str, tuple[Code, tuple[str, ...]]]
) -> None:
    """makeAllocatableResources(2, 0, 1, 0, 0, 0), no pods on it."""
    node = make_node("n1").capacity(cpu="2m", memory="0", pods=1, ephemeral_storage="0")
    check(pod, node, [], want)


# ---- TestFitScore ------------------------------------------------------------------

DEFAULT_RESOURCES = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]


def strategy(kind: str, shape: list[tuple[int, int]] | None = None) -> dict[str, Any]:
    ss: dict[str, Any] = {"type": kind, "resources": DEFAULT_RESOURCES}
    if shape is not None:
        ss["requestedToCapacityRatio"] = {
            "shape": [{"utilization": u, "score": s} for u, s in shape]
        }
    return {"scoringStrategy": ss}


def score_nodes(cpu2: str = "6000") -> list[NodeBuilder]:
    return [
        make_node("node1").capacity(cpu="4000", memory="10000", pods=110),
        make_node("node2").capacity(cpu=cpu2, memory="10000", pods=110),
    ]


def scored(name: str, node: str, cpu: str, memory: str) -> PodBuilder:
    return make_pod(name).req(cpu=cpu, memory=memory).node(node)


EXISTING = [scored("e1", "node1", "2000", "4000"), scored("e2", "node2", "1000", "2000")]
RTCR_DOWN = strategy("RequestedToCapacityRatio", [(0, 10), (100, 0)])
RTCR_UP = strategy("RequestedToCapacityRatio", [(0, 0), (100, 10)])
MOST = strategy("MostAllocated")
LEAST = strategy("LeastAllocated")
SIDECAR_EXISTING = [
    make_pod("e1")
    .req(cpu="1000", memory="2000")
    .init_container(sidecar=True, cpu="1000", memory="2000")
    .node("node1"),
    scored("e2", "node2", "1000", "2000"),
]

FIT_SCORE = [
    pytest.param(
        make_pod("p").req(cpu="3000", memory="5000"),
        score_nodes(),
        EXISTING,
        RTCR_DOWN,
        {"node1": 10, "node2": 32},
        id="upstream: test case for ScoringStrategy RequestedToCapacityRatio case1",
    ),
    pytest.param(
        make_pod("p").req(cpu="3000", memory="5000"),
        score_nodes(),
        EXISTING,
        RTCR_UP,
        {"node1": 95, "node2": 68},
        id="upstream: test case for ScoringStrategy RequestedToCapacityRatio case2",
    ),
    pytest.param(
        make_pod("p").req(cpu="1000", memory="2000"),
        score_nodes(),
        EXISTING,
        MOST,
        {"node1": 67, "node2": 36},
        id="upstream: test case for ScoringStrategy MostAllocated",
    ),
    pytest.param(
        make_pod("p").req(cpu="1000", memory="2000"),
        score_nodes(),
        EXISTING,
        LEAST,
        {"node1": 32, "node2": 63},
        id="upstream: test case for ScoringStrategy LeastAllocated",
    ),
    pytest.param(
        make_pod("p").req(cpu="1000", memory="2000"),
        score_nodes("4000"),
        SIDECAR_EXISTING,
        MOST,
        {"node1": 67, "node2": 45},
        id="upstream: test case for ScoringStrategy MostAllocated with sidecar container",
    ),
    pytest.param(
        make_pod("p").req(cpu="1000", memory="2000"),
        score_nodes("4000"),
        SIDECAR_EXISTING,
        LEAST,
        {"node1": 32, "node2": 55},
        id="upstream: test case for ScoringStrategy LeastAllocated with sidecar container",
    ),
]


@pytest.mark.parametrize(("pod", "nodes", "existing", "args", "want"), FIT_SCORE)
def test_fit_score(
    pod: PodBuilder,
    nodes: list[NodeBuilder],
    existing: list[PodBuilder],
    args: dict[str, Any],
    want: dict[str, int],
) -> None:
    table = table_of([n.build() for n in nodes], [p.build() for p in existing])
    plugin = NodeResourcesFit.new(args, make_handle())
    assert run_score(plugin, pod.build(), table) == want
    assert run_score(plugin, pod.build(), table, per_node=True) == want


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(
            RTCR_DOWN,
            id="upstream: test case for ScoringStrategy RequestedToCapacityRatio case1 if "
            "PreScore is not called",
        ),
        pytest.param(
            MOST,
            id="upstream: test case for ScoringStrategy MostAllocated if PreScore is not called",
        ),
        pytest.param(
            LEAST,
            id="upstream: test case for ScoringStrategy LeastAllocated if PreScore is not called",
        ),
    ],
)
def test_fit_score_without_pre_score(args: dict[str, Any]) -> None:
    """Upstream recomputes the pod's requests in Score; Troupe's runtime always runs
    PreScore first and Score fails loudly on the missing state (docs/design.md, "CycleState")."""
    table = table_of([n.build() for n in score_nodes()], [p.build() for p in EXISTING])
    plugin = NodeResourcesFit.new(args, make_handle())
    pod = make_pod("p").req(cpu="1000", memory="2000").build()
    with pytest.raises(StateKeyError):
        plugin.score(CycleState(), pod, table, table.valid_rows())
    with pytest.raises(StateKeyError):
        plugin.score_node(CycleState(), pod, table, 0)


# ---- Test_isSchedulableAfterPodChange ----------------------------------------------


def cpu_pod(name: str, cpu: str, node: str | None = None) -> PodBuilder:
    pb = make_pod(name).req(cpu=cpu)
    return pb.node(node) if node else pb


def level_pod(name: str, node: str | None = None, **requests: str) -> PodBuilder:
    pb = make_pod(name).pod_resources(dict(requests))
    return pb.node(node) if node else pb


@pytest.mark.parametrize(
    ("pod", "old", "new", "want"),
    [
        pytest.param(
            make_pod("p"),
            "not-a-pod",
            None,
            QueueingHint.QUEUE,
            id="upstream: backoff-wrong-old-object",
        ),
        pytest.param(
            make_pod("p"),
            None,
            "not-a-pod",
            QueueingHint.QUEUE,
            id="upstream: backoff-wrong-new-object",
        ),
        pytest.param(
            cpu_pod("pod1", "1"),
            cpu_pod("pod2", "1", "fake"),
            None,
            QueueingHint.QUEUE,
            id="upstream: queue-on-other-pod-deleted",
        ),
        # Troupe: only assigned-pod deletions reach this hint, and a forgotten assumed
        # pod is reported as one without spec.nodeName, so every deletion queues.
        pytest.param(
            make_pod("p"),
            make_pod("d"),
            None,
            QueueingHint.QUEUE,
            id="upstream: skip-queue-on-unscheduled-pod-deleted",
        ),
        # Troupe has no InPlacePodVerticalScaling gate (on upstream by default): a
        # scale-down that frees cpu queues.
        pytest.param(
            cpu_pod("pod1", "1"),
            cpu_pod("pod2", "2", "fake"),
            cpu_pod("pod2", "1", "fake"),
            QueueingHint.QUEUE,
            id="upstream: skip-queue-on-disable-inplace-pod-vertical-scaling",
        ),
        pytest.param(
            cpu_pod("pod1", "1"),
            cpu_pod("pod2", "2"),
            cpu_pod("pod2", "1"),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-other-unscheduled-pod",
        ),
        pytest.param(
            cpu_pod("pod1", "1"),
            make_pod("pod2").req(memory="2").node("fake"),
            make_pod("pod2").req(memory="1").node("fake"),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-other-pod-unrelated-resource-scaled-down",
        ),
        pytest.param(
            level_pod("pod1", cpu="1"),
            level_pod("pod2", "fake", memory="2"),
            level_pod("pod2", "fake", memory="1"),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-other-pod-unrelated-pod-level-resource-scaled-down",
        ),
        pytest.param(
            cpu_pod("pod1", "1"),
            cpu_pod("pod2", "2", "fake"),
            cpu_pod("pod2", "1", "fake"),
            QueueingHint.QUEUE,
            id="upstream: queue-on-other-pod-some-resource-scale-down",
        ),
        pytest.param(
            level_pod("pod1", cpu="1"),
            level_pod("pod2", "fake", cpu="2"),
            level_pod("pod2", "fake", cpu="1"),
            QueueingHint.QUEUE,
            id="upstream: queue-on-other-pod-some-pod-level-resource-scale-down",
        ),
        pytest.param(
            cpu_pod("pod1", "1"),
            cpu_pod("pod1", "2"),
            cpu_pod("pod1", "1"),
            QueueingHint.QUEUE,
            id="upstream: queue-on-target-pod-some-resource-scale-down",
        ),
        pytest.param(
            level_pod("pod1", cpu="1"),
            level_pod("pod1", cpu="2"),
            level_pod("pod1", cpu="1"),
            QueueingHint.QUEUE,
            id="upstream: queue-on-target-pod-some-pod-level-resource-scale-down",
        ),
    ],
)
def test_is_schedulable_after_pod_change(
    pod: PodBuilder, old: Any, new: Any, want: QueueingHint
) -> None:
    plugin = NodeResourcesFit.new({}, make_handle())
    old_obj = old.build() if isinstance(old, PodBuilder) else old
    new_obj = new.build() if isinstance(new, PodBuilder) else new
    assert plugin.is_schedulable_after_pod_event(pod.build(), old_obj, new_obj) is want


# ---- Test_isSchedulableAfterNodeChange ---------------------------------------------


def cap(**resources: str) -> NodeBuilder:
    """st.MakeNode().Capacity(...): 32 pods plus the given resources."""
    n = make_node("node").capacity(pods=32)
    for k, v in resources.items():
        n.ext({"A": EXT_A, "B": EXT_B}.get(k, k), v)
    return n


def mem_a_pod() -> PodBuilder:
    """newResourcePod(framework.Resource{Memory: 2, ScalarResources: {aaa: 1}})."""
    return rp({"memory": 2, EXT_A: 1})


@pytest.mark.parametrize(
    ("pod", "old", "new", "want"),
    [
        pytest.param(
            rp(), None, "not-a-node", QueueingHint.QUEUE, id="upstream: backoff-wrong-new-object"
        ),
        pytest.param(
            rp(),
            "not-a-node",
            make_node("node").capacity(),
            QueueingHint.QUEUE,
            id="upstream: backoff-wrong-old-object",
        ),
        pytest.param(
            rp({"memory": 2}),
            None,
            cap(memory="1"),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-node-add-without-sufficient-resources",
        ),
        pytest.param(
            rp({EXT_A: 1}),
            None,
            cap(B="1"),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-node-add-without-required-resource-type",
        ),
        pytest.param(
            mem_a_pod(),
            None,
            cap(memory="4", A="2"),
            QueueingHint.QUEUE,
            id="upstream: queue-on-node-add-with-sufficient-resources",
        ),
        pytest.param(
            mem_a_pod(),
            cap(memory="2", A="2"),
            cap(memory="2", A="1", B="2"),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-node-unrelated-changes",
        ),
        pytest.param(
            mem_a_pod(),
            cap(memory="2", A="1"),
            cap(memory="2", A="2"),
            QueueingHint.QUEUE,
            id="upstream: queue-on-pod-requested-resources-increase",
        ),
        pytest.param(
            mem_a_pod(),
            cap(memory="4", A="2"),
            cap(memory="1", A="2"),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-node-changes-from-suitable-to-unsuitable",
        ),
        pytest.param(
            mem_a_pod(),
            cap(memory="1", A="2"),
            cap(memory="4", A="2"),
            QueueingHint.QUEUE,
            id="upstream: queue-on-node-changes-from-unsuitable-to-suitable",
        ),
    ],
)
def test_is_schedulable_after_node_change(
    pod: PodBuilder, old: Any, new: Any, want: QueueingHint
) -> None:
    plugin = NodeResourcesFit.new({}, make_handle())
    old_obj = old.build() if isinstance(old, NodeBuilder) else old
    new_obj = new.build() if isinstance(new, NodeBuilder) else new
    assert plugin.is_schedulable_after_node_change(pod.build(), old_obj, new_obj) is want
