"""PodTopologySpread PreScore + Score + NormalizeScore: cases ported from
kube-scheduler's podtopologyspread/scoring_test.go (kubernetes/kubernetes, stored
version at commit 008b3652959ca58af8be3fb5b6ecfe9ae7638282): TestPreScoreSkip,
TestPodTopologySpreadScore, and TestPreScoreStateEmptyNodes mapped to scores.

Upstream's `nodes` are the candidates (scored) and `failedNodes` are in the
snapshot but not scored; here both are rows of the table and only the candidate
rows go to pre_score/score. A Service or ReplicaSet selecting the pod is the
lister's default selector. Upstream nodes carry only the labels the case gives;
our builder adds kubernetes.io/hostname, which the one case that needs a node
without it removes. NodeInclusionPolicy and matchLabelKeys are always on in Troupe.

TestPreScoreStateEmptyNodes asserts the PreScore state (pod counts per domain,
normalising weights, ignored nodes); with no pods every candidate scores 100
except the ignored nodes (0) and, under system defaults, the nodes that lack a
default key (worked out in the case's comment), which is what the mapped cases
assert.

Deliberate difference: "minDomains has no effect when ScheduleAnyway" (upstream
calls it artificial: the API server refuses such a pod) is a pod Troupe's parser
reports invalid, as the API would; the case asserts that.

Skipped (and why):
- TestPodTopologySpreadScore "matchLabelKeys ignored when feature gate disabled":
  Troupe has no switch to turn matchLabelKeys off.
- TestPreScoreStateEmptyNodes "NodeAffinityPolicy honored/ignored with
  labelSelectors/nodeAffinity", "NodeTaintsPolicy honored/ignored": with no pods
  and every node in both zones the state differs only in the recorded policy,
  and every score is 100 either way; the policies' effect on scores is covered by
  the TestPodTopologySpreadScore cases of the same names.
- BenchmarkTestPodTopologySpreadScore: a benchmark (bench covers ours).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import NodeBuilder, PodBuilder, make_node, table_of
from tests.unit.plugins.conftest import FakeLister, make_handle
from tests.unit.plugins.test_upstream_pod_topology_spread_filter import (
    BAR,
    FOO,
    SA,
    affinity_in,
    node,
    on,
    pod,
    spread,
    terminating,
)
from troupe.api.parse import parse_label_selector, parse_pod
from troupe.api.types import InvalidObject
from troupe.framework.cycle_state import CycleState
from troupe.plugins.pod_topology_spread import PodTopologySpread

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
SYSTEM: dict[str, Any] = {"defaultingType": "System"}
LIST: dict[str, Any] = {"defaultingType": "List"}


def scores(
    incoming: PodBuilder,
    nodes: list[NodeBuilder],
    failed: list[NodeBuilder],
    existing: list[PodBuilder],
    args: dict[str, Any],
    default_selector: dict[str, Any] | None = None,
) -> dict[str, int] | None:
    """Normalized scores of the candidate `nodes`; None if PreScore skips."""
    table = table_of([n.build() for n in [*nodes, *failed]], [p.build() for p in existing])
    handle = make_handle()
    if default_selector is not None:
        assert isinstance(handle.lister, FakeLister)
        handle.lister.selector = parse_label_selector(default_selector, "s.")
    plugin = PodTopologySpread.new(args, handle)
    p = incoming.build()
    rows = table.valid_rows()[: len(nodes)]
    state = CycleState()
    st = plugin.pre_score(state, p, table, rows)
    if st.is_skip:
        return None
    assert st.is_success, st
    s = plugin.normalize_score(state, p, plugin.score(state, p, table, rows))
    return {table.names[r]: int(v) for r, v in zip(rows.tolist(), s.tolist(), strict=True)}


def hn(name: str, **labels: str) -> NodeBuilder:
    """A node labelled kubernetes.io/hostname=<name> (our builder's default) and `labels`."""
    return node(name, **labels)


def no_hostname(nb: NodeBuilder) -> NodeBuilder:
    del nb._o["metadata"]["labels"][HOST]
    return nb


def foo_pods(**per_node: int) -> list[PodBuilder]:
    """`a=2, b=1` -> p-a1, p-a2 on node-a and p-b1 on node-b, all labelled foo=""."""
    return [
        on(f"node-{n}", f"p-{n}{i}", foo="")
        for n, count in per_node.items()
        for i in range(1, count + 1)
    ]


def host_spread(pb: PodBuilder, max_skew: int = 1, sel: dict[str, Any] | None = FOO) -> PodBuilder:
    return spread(pb, max_skew, HOST, SA, sel)


ABCD = [hn("node-a"), hn("node-b"), hn("node-c"), hn("node-d")]


def zh(name: str, zone: str) -> NodeBuilder:
    return hn(name, zone=zone)


def nn(name: str, tainted: bool = False, **labels: str) -> NodeBuilder:
    """A node labelled node=<name>, the topology key of the policy cases."""
    return node(name, tainted, node=name, **labels)


POLICY_NODES = [nn("node-a", foo=""), nn("node-b", foo=""), nn("node-c")]
TAINT_NODES = [nn("node-a"), nn("node-b"), nn("node-c", tainted=True)]
POLICY_PODS = foo_pods(a=2, b=1, c=1)
MLK_NODES = [
    zh("node-a", "zone1"),
    zh("node-b", "zone1"),
    zh("node-c", "zone2"),
    zh("node-d", "zone2"),
]

SCORE = [
    pytest.param(
        host_spread(pod(foo="")),
        [hn("node-a"), hn("node-b")],
        [],
        [],
        {"node-a": 100, "node-b": 100},
        id="upstream: one constraint on node, no existing pods",
    ),
    pytest.param(
        host_spread(pod(foo="")),
        [hn("node-a")],
        [hn("node-b")],
        foo_pods(a=2, b=1),
        {"node-a": 100},
        id="upstream: one constraint on node, only one node is candidate",
    ),
    pytest.param(
        host_spread(pod(foo="")),
        [hn("node-a"), hn("node-b")],
        [],
        foo_pods(a=1, b=1),
        {"node-a": 100, "node-b": 100},
        id="upstream: one constraint on node, all nodes have the same number of matching pods",
    ),
    pytest.param(
        host_spread(pod(foo="")),
        ABCD,
        [],
        foo_pods(a=2, b=1, d=3),
        {"node-a": 20, "node-b": 60, "node-c": 100, "node-d": 0},
        id="upstream: one constraint on node, all 4 nodes are candidates",
    ),
    pytest.param(
        host_spread(pod(foo=""), sel=None),
        ABCD,
        [],
        foo_pods(a=2, b=1, d=3),
        {"node-a": 100, "node-b": 100, "node-c": 100, "node-d": 100},
        id="upstream: one constraint on node, null selector",
    ),
    pytest.param(
        host_spread(pod(foo=""), 2),
        ABCD,
        [],
        foo_pods(a=2, b=1, d=3),
        {"node-a": 33, "node-b": 66, "node-c": 100, "node-d": 16},
        id="upstream: one constraint on node, all 4 nodes are candidates, maxSkew=2",
    ),
    pytest.param(
        host_spread(pod(foo=""), 3),
        ABCD,
        [],
        foo_pods(a=4, b=3, c=2, d=1),
        {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100},
        id="upstream: one constraint on node, all 4 nodes are candidates, maxSkew=3",
    ),
    pytest.param(
        host_spread(pod(foo="")),
        [hn("node-a"), hn("node-b"), hn("node-x")],
        [hn("node-y")],
        foo_pods(a=4, b=2, x=1, y=3),
        {"node-a": 33, "node-b": 83, "node-x": 100},
        id="upstream: one constraint on node, 3 out of 4 nodes are candidates",
    ),
    pytest.param(
        host_spread(pod(foo="")),
        [hn("node-a"), no_hostname(make_node("node-b").label("n", "node-b")), hn("node-x")],
        [hn("node-y")],
        foo_pods(a=4, b=2, x=1, y=3),
        {"node-a": 16, "node-b": 0, "node-x": 100},
        id="upstream: one constraint on node, 3 out of 4 nodes are candidates, one node doesn't "
        "match topology key",
    ),
    pytest.param(
        spread(pod(foo=""), 1, "zone", SA, FOO),
        [zh("node-a", "zone1"), zh("node-b", "zone1"), zh("node-x", "zone2")],
        [zh("node-y", "zone2")],
        foo_pods(a=4, b=2, x=1, y=3),
        {"node-a": 75, "node-b": 75, "node-x": 100},
        id="upstream: one constraint on zone, 3 out of 4 nodes are candidates",
    ),
    pytest.param(
        host_spread(spread(pod(foo=""), 1, "zone", SA, FOO)),
        [zh("node-a", "zone1"), zh("node-x", "zone2")],
        [zh("node-b", "zone1"), zh("node-y", "zone2")],
        foo_pods(a=2, b=1, x=2, y=4),
        {"node-a": 100, "node-x": 63},
        id="upstream: two Constraints on zone and node, 2 out of 4 nodes are candidates",
    ),
    pytest.param(
        spread(spread(pod(foo="", bar=""), 1, "zone", SA, FOO), 1, "zone", SA, BAR),
        [zh("node-a", "zone1"), zh("node-x", "zone2")],
        [zh("node-b", "zone1"), zh("node-y", "zone2")],
        [
            on("node-a", "p-a1", foo="", bar=""),
            on("node-a", "p-a2", foo=""),
            on("node-b", "p-b1", foo="", bar=""),
            on("node-y", "p-y1", foo=""),
            on("node-y", "p-y2", foo="", bar=""),
            on("node-y", "p-y3", foo=""),
        ],
        {"node-a": 85, "node-x": 100},
        id="upstream: two Constraints on zone, 2 out of 4 nodes are candidates",
    ),
    pytest.param(
        host_spread(spread(pod(foo="", bar=""), 1, "zone", SA, FOO), sel=BAR),
        [
            zh("node-a", "zone1"),
            zh("node-b", "zone1"),
            zh("node-x", "zone2"),
            zh("node-y", "zone2"),
        ],
        [],
        [
            on("node-a", "p-a1", foo=""),
            on("node-b", "p-b1", foo="", bar=""),
            on("node-y", "p-y1", foo=""),
            on("node-y", "p-y2", bar=""),
        ],
        {"node-a": 60, "node-b": 20, "node-x": 100, "node-y": 60},
        id="upstream: two Constraints on zone and node, with different labelSelectors",
    ),
    pytest.param(
        host_spread(spread(pod(foo="", bar=""), 1, "zone", SA, FOO), sel=BAR),
        [
            zh("node-a", "zone1"),
            zh("node-b", "zone1"),
            zh("node-x", "zone2"),
            zh("node-y", "zone2"),
        ],
        [],
        [
            on("node-b", "p-b1", bar=""),
            on("node-x", "p-x1", foo=""),
            on("node-y", "p-y1", foo="", bar=""),
        ],
        {"node-a": 100, "node-b": 60, "node-x": 40, "node-y": 0},
        id="upstream: two Constraints on zone and node, with different labelSelectors, some "
        "nodes have 0 pods",
    ),
    pytest.param(
        host_spread(spread(pod(foo="", bar=""), 1, "zone", SA, FOO), sel=BAR),
        [zh("node-a", "zone1"), zh("node-b", "zone1"), zh("node-x", "zone2")],
        [zh("node-y", "zone2")],
        [
            on("node-a", "p-a1", foo=""),
            on("node-b", "p-b1", foo="", bar=""),
            on("node-y", "p-y1", foo=""),
            on("node-y", "p-y2", bar=""),
        ],
        {"node-a": 50, "node-b": 25, "node-x": 100},
        id="upstream: two Constraints on zone and node, with different labelSelectors, 3 out "
        "of 4 nodes are candidates",
    ),
    pytest.param(
        host_spread(pod(foo="")),
        [hn("node-a"), hn("node-b")],
        [],
        [
            on("node-a", "p-a1", "ns1", foo=""),
            on("node-a", "p-a2", foo=""),
            on("node-b", "p-b1", foo=""),
            on("node-b", "p-b2", foo=""),
        ],
        {"node-a": 100, "node-b": 33},
        id="upstream: existing pods in a different namespace do not count",
    ),
    pytest.param(
        host_spread(pod(foo="")),
        [hn("node-a"), hn("node-b")],
        [],
        [terminating(on("node-a", "p-a", foo="")), on("node-b", "p-b", foo="")],
        {"node-a": 100, "node-b": 0},
        id="upstream: terminating Pods should be excluded",
    ),
    pytest.param(
        spread(pod(foo="").node_selector(foo=""), 1, "node", SA, FOO),
        POLICY_NODES,
        [],
        POLICY_PODS,
        {"node-a": 0, "node-b": 33, "node-c": 100},
        id="upstream: NodeAffinityPolicy honoed with labelSelectors",
    ),
    pytest.param(
        spread(pod(foo="").node_selector(foo=""), 1, "node", SA, FOO, affinity_policy="Ignore"),
        POLICY_NODES,
        [],
        POLICY_PODS,
        {"node-a": 66, "node-b": 100, "node-c": 100},
        id="upstream: NodeAffinityPolicy ignored with labelSelectors",
    ),
    pytest.param(
        spread(affinity_in(pod(foo=""), "foo", ""), 1, "node", SA, FOO),
        POLICY_NODES,
        [],
        POLICY_PODS,
        {"node-a": 0, "node-b": 33, "node-c": 100},
        id="upstream: NodeAffinityPolicy honoed with nodeAffinity",
    ),
    pytest.param(
        spread(affinity_in(pod(foo=""), "foo", ""), 1, "node", SA, FOO, affinity_policy="Ignore"),
        POLICY_NODES,
        [],
        POLICY_PODS,
        {"node-a": 66, "node-b": 100, "node-c": 100},
        id="upstream: NodeAffinityPolicy ignored with nodeAffinity",
    ),
    pytest.param(
        spread(pod(foo=""), 1, "node", SA, FOO, taints_policy="Honor"),
        TAINT_NODES,
        [],
        POLICY_PODS,
        {"node-a": 0, "node-b": 33, "node-c": 100},
        id="upstream: NodeTaintsPolicy honored",
    ),
    pytest.param(
        spread(pod(foo=""), 1, "node", SA, FOO),
        TAINT_NODES,
        [],
        POLICY_PODS,
        {"node-a": 66, "node-b": 100, "node-c": 100},
        id="upstream: NodeTaintsPolicy ignored",
    ),
    pytest.param(
        spread(
            spread(pod(foo="", bar=""), 1, "zone", SA, {}, match_label_keys=["foo"]),
            1,
            HOST,
            SA,
            {},
            match_label_keys=["bar"],
        ),
        MLK_NODES,
        [],
        [
            on("node-a", "p-a1", foo=""),
            on("node-b", "p-b1", foo="", bar=""),
            on("node-c", "p-y1", foo=""),
            on("node-c", "p-y2", bar=""),
        ],
        {"node-a": 60, "node-b": 20, "node-c": 60, "node-d": 100},
        id="upstream: matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
    ),
    pytest.param(
        spread(
            spread(pod(foo="", bar="", baz=""), 1, "zone", SA, FOO),
            1,
            HOST,
            SA,
            BAR,
            match_label_keys=["baz"],
        ),
        MLK_NODES,
        [],
        [
            on("node-a", "p-a1", foo=""),
            on("node-b", "p-b1", foo="", bar="", baz=""),
            on("node-c", "p-c1", foo=""),
            on("node-c", "p-c2", bar=""),
            on("node-c", "p-d3", bar="", baz=""),
        ],
        {"node-a": 60, "node-b": 20, "node-c": 60, "node-d": 100},
        id="upstream: matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
    ),
]


@pytest.mark.parametrize(("incoming", "nodes", "failed", "existing", "want"), SCORE)
def test_pod_topology_spread_score(
    incoming: PodBuilder,
    nodes: list[NodeBuilder],
    failed: list[NodeBuilder],
    existing: list[PodBuilder],
    want: dict[str, int],
) -> None:
    # upstream runs this table with SystemDefaulting
    assert scores(incoming, nodes, failed, existing, SYSTEM) == want


def test_system_defaulting_nodes_without_zone_pods_match_service() -> None:
    """upstream TestPodTopologySpreadScore "system defaulting, nodes don't have zone, pods
    match service": a Service selects foo="" and the pod has no constraints; the system
    defaults (hostname maxSkew 3, zone maxSkew 5) score like one hostname constraint."""
    got = scores(
        pod(foo=""), ABCD, [], foo_pods(a=4, b=3, c=2, d=1), SYSTEM, {"matchLabels": {"foo": ""}}
    )
    assert got == {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100}


def test_min_domains_has_no_effect_when_schedule_anyway() -> None:
    """upstream TestPodTopologySpreadScore "minDomains has no effect when ScheduleAnyway".
    Troupe differs on purpose: upstream calls the case artificial ("API Server would fail
    a pod's creation when non-default minDomains is specified along with
    SchedulingAnyway"), and Troupe's parser applies that API validation, so such a pod
    is reported invalid instead of being scored."""
    pb = spread(pod(foo=""), 2, "node", SA, FOO, min_domains=10)
    got = parse_pod(pb.obj())
    assert isinstance(got, InvalidObject)
    assert "minDomains" in got.message
    assert "whenUnsatisfiable=DoNotSchedule" in got.message


# ---- TestPreScoreSkip --------------------------------------------------------------------


def test_pre_score_skip_without_soft_constraints() -> None:
    """upstream TestPreScoreSkip "the pod doesn't have soft topology spread Constraints"."""
    assert scores(pod(), [hn("node-a"), hn("node-b")], [], [], LIST) is None


def test_pre_score_skip_default_constraints_and_a_replicaset_that_doesnt_match() -> None:
    """upstream TestPreScoreSkip "default constraints and a replicaset that doesn't match":
    no owner selects the pod, so the defaults have no selector and PreScore skips."""
    args = {
        "defaultingType": "List",
        "defaultConstraints": [{"maxSkew": 2, "topologyKey": "planet", "whenUnsatisfiable": SA}],
    }
    assert scores(pod(foo="bar", baz="sup"), [node("node-a", planet="mars")], [], [], args) is None


# ---- TestPreScoreStateEmptyNodes (mapped to scores) ------------------------------------------

ABX = [zh("node-a", "zone1"), zh("node-b", "zone1"), zh("node-x", "zone2")]
EMPTY = [
    pytest.param(
        host_spread(spread(pod(foo=""), 1, "zone", SA, FOO)),
        ABX,
        LIST,
        None,
        {"node-a": 100, "node-b": 100, "node-x": 100},
        id="upstream: normal case",
    ),
    pytest.param(
        spread(pod(foo=""), 1, "zone", SA, None),
        ABX,
        LIST,
        None,
        {"node-a": 100, "node-b": 100, "node-x": 100},
        id="upstream: null selector",
    ),
    # IgnoredNodes = {node-x}: it lacks a key of the pod's own constraints
    pytest.param(
        host_spread(spread(pod(foo=""), 1, "zone", SA, FOO), sel=BAR),
        [zh("node-a", "zone1"), zh("node-b", "zone1"), hn("node-x")],
        LIST,
        None,
        {"node-a": 100, "node-b": 100, "node-x": 0},
        id="upstream: node-x doesn't have label zone",
    ),
    # system defaults: nodes without a zone are not ignored, they form the "" zone
    # (upstream's state: hostname weight log(4+2), zone weight log(2+2) with "mars" and
    # ""). Upstream's Score adds a constraint's term only on nodes that have its key, so
    # node-a/b score 2 (hostname) + 4 (zone, maxSkew-1) and node-c/d score 2: normalised
    # 33, 33, 100, 100.
    pytest.param(
        pod(foo="tar", baz="sup"),
        [
            hn("node-a").zone("mars"),
            hn("node-b").zone("mars"),
            hn("node-c"),
            hn("node-d"),
        ],
        SYSTEM,
        FOO,
        {"node-a": 33, "node-b": 33, "node-c": 100, "node-d": 100},
        id="upstream: system default constraints and a replicaset",
    ),
    pytest.param(
        pod(foo="tar", baz="sup"),
        [hn("node-a", rack="rack1", planet="mars")],
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": SA},
                {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"},
                {"maxSkew": 2, "topologyKey": "planet", "whenUnsatisfiable": SA},
            ],
        },
        FOO,
        {"node-a": 100},
        id="upstream: default constraints and a replicaset",
    ),
    pytest.param(
        spread(
            spread(pod(foo="bar", baz="sup"), 1, "zone", "DoNotSchedule", BAR),
            2,
            "planet",
            SA,
            {"matchLabels": {"baz": "sup"}},
        ),
        [node("node-a", planet="mars", galaxy="andromeda")],
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 2, "topologyKey": "galaxy", "whenUnsatisfiable": SA}
            ],
        },
        FOO,
        {"node-a": 100},
        id="upstream: default constraints and a replicaset, but pod has constraints",
    ),
]


@pytest.mark.parametrize(("incoming", "nodes", "args", "selector", "want"), EMPTY)
def test_pre_score_state_empty_nodes(
    incoming: PodBuilder,
    nodes: list[NodeBuilder],
    args: dict[str, Any],
    selector: dict[str, Any] | None,
    want: dict[str, int],
) -> None:
    assert scores(incoming, nodes, [], [], args, selector) == want
