"""InterPodAffinity Filter: cases ported from kube-scheduler's
interpodaffinity/filtering_test.go (TestRequiredAffinitySingleNode,
TestRequiredAffinityMultipleNodes). Upstream's default namespace "" is our
"default"; upstream nodes carry only the labels the case gives (our builder adds
kubernetes.io/hostname, which no case here uses as a topology key)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_filter
from tests.unit.plugins.upstream_helpers import affinity, anti, expr, labels, pod_term
from troupe.framework.cycle_state import CycleState
from troupe.plugins.inter_pod_affinity import (
    ERR_REASON_AFFINITY,
    ERR_REASON_ANTI_AFFINITY,
    ERR_REASON_EXISTING_ANTI_AFFINITY,
    InterPodAffinity,
)

AFF = (ERR_REASON_AFFINITY,)
ANTI = (ERR_REASON_ANTI_AFFINITY,)
EXISTING = (ERR_REASON_EXISTING_ANTI_AFFINITY,)
SKIP = "skip"  # PreFilter returns Skip


def In(key: str, *values: str) -> dict[str, Any]:
    return expr(key, "In", list(values))


def NotIn(key: str, *values: str) -> dict[str, Any]:
    return expr(key, "NotIn", list(values))


def Exists(key: str) -> dict[str, Any]:
    return expr(key, "Exists")


def pod(namespace: str = "default", name: str = "p", **kv: str) -> Any:
    return labels(make_pod(name, namespace), **kv)


def node(name: str, **kv: str) -> Any:
    n = make_node(name)
    for k, v in kv.items():
        n.label(k, v)
    return n


def check(
    incoming: Any,
    existing: list[Any],
    nodes: list[Any],
    want: dict[str, Any] | str,
    namespaces: dict[str, dict[str, str]] | None = None,
) -> None:
    table = table_of([n.build() for n in nodes], [p.build() for p in existing])
    table.namespace_labels.update(namespaces or {})
    plugin = InterPodAffinity.new({}, make_handle())
    p = incoming.build()
    _, st = plugin.pre_filter(CycleState(), p, table)
    if want == SKIP:
        assert st.is_skip
        return
    assert st.is_success, st
    assert run_filter(plugin, p, table) == want


# ---- TestRequiredAffinitySingleNode ------------------------------------------------------

NODE1 = [node("node1", region="r1", zone="z11")]
SEC = {"service": "securityscan"}


def existing_sec(**extra: str) -> Any:
    return pod(name="e", **SEC).node("node1")


SINGLE = [
    pytest.param(
        pod(),
        [],
        SKIP,
        id="upstream: A pod that has no required pod affinity scheduling rules can schedule "
        "onto a node with no existing pods",
    ),
    pytest.param(
        affinity(pod(security="S1"), pod_term("region", In("service", "securityscan", "value2"))),
        [existing_sec()],
        {},
        id="upstream: satisfies with requiredDuringSchedulingIgnoredDuringExecution in "
        "PodAffinity using In operator that matches the existing pod",
    ),
    pytest.param(
        affinity(
            pod(security="S1"), pod_term("region", NotIn("service", "securityscan3", "value3"))
        ),
        [existing_sec()],
        {},
        id="upstream: satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in "
        "PodAffinity using not in operator in labelSelector that matches the existing pod",
    ),
    # upstream's term has no topologyKey (the API would refuse it); "region" keeps the fact
    # under test: the namespace differs
    pytest.param(
        affinity(
            pod(security="S1"),
            pod_term(
                "region", In("service", "securityscan", "value2"), namespaces=["DiffNameSpace"]
            ),
        ),
        [pod("ns", "e", **SEC).node("node1")],
        {"node1": AFF},
        id="upstream: Does not satisfy the PodAffinity with labelSelector because of diff "
        "Namespace",
    ),
    pytest.param(
        affinity(pod(**SEC), pod_term("region", In("service", "antivirusscan", "value2"))),
        [existing_sec()],
        {"node1": AFF},
        id="upstream: Doesn't satisfy the PodAffinity because of unmatching labelSelector with "
        "the existing pod",
    ),
    pytest.param(
        affinity(
            affinity(
                pod(security="S1"),
                pod_term("region", Exists("service"), expr("wrongkey", "DoesNotExist")),
            ),
            pod_term("region", In("service", "securityscan"), NotIn("service", "WrongValue")),
        ),
        [existing_sec()],
        {},
        id="upstream: satisfies the PodAffinity with different label Operators in multiple "
        "RequiredDuringSchedulingIgnoredDuringExecution ",
    ),
    pytest.param(
        affinity(
            affinity(
                pod(security="S1"),
                pod_term("region", Exists("service"), expr("wrongkey", "DoesNotExist")),
            ),
            pod_term("region", In("service", "securityscan2"), NotIn("service", "WrongValue")),
        ),
        [existing_sec()],
        {"node1": AFF},
        id="upstream: The labelSelector requirements(items of matchExpressions) are ANDed, the "
        "pod cannot schedule onto the node because one of the matchExpression item don't match.",
    ),
    pytest.param(
        anti(
            affinity(
                pod(security="S1"), pod_term("region", In("service", "securityscan", "value2"))
            ),
            pod_term("node", In("service", "antivirusscan", "value2")),
        ),
        [existing_sec()],
        {},
        id="upstream: satisfies the PodAffinity and PodAntiAffinity with the existing pod",
    ),
    pytest.param(
        anti(
            affinity(
                pod(security="S1"), pod_term("region", In("service", "securityscan", "value2"))
            ),
            pod_term("node", In("service", "antivirusscan", "value2")),
        ),
        [anti(existing_sec(), pod_term("node", In("service", "antivirusscan", "value2")))],
        {},
        id="upstream: satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry "
        "with the existing pod",
    ),
    pytest.param(
        anti(
            affinity(
                pod(security="S1"), pod_term("region", In("service", "securityscan", "value2"))
            ),
            pod_term("zone", In("service", "securityscan", "value2")),
        ),
        [existing_sec()],
        {"node1": ANTI},
        id="upstream: satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the "
        "existing pod",
    ),
    pytest.param(
        anti(
            affinity(pod(**SEC), pod_term("region", In("service", "securityscan", "value2"))),
            pod_term("node", In("service", "antivirusscan", "value2")),
        ),
        [anti(existing_sec(), pod_term("zone", In("service", "securityscan", "value2")))],
        {"node1": EXISTING},
        id="upstream: satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy "
        "PodAntiAffinity symmetry with the existing pod",
    ),
    # upstream's existing pod is on node2, which is not in the snapshot: it counts nowhere
    pytest.param(
        affinity(pod(**SEC), pod_term("region", NotIn("service", "securityscan", "value2"))),
        [],
        {"node1": AFF},
        id="upstream: pod matches its own Label in PodAffinity and that matches the existing pod "
        "Labels",
    ),
    pytest.param(
        pod(**SEC),
        [anti(existing_sec(), pod_term("zone", In("service", "securityscan", "value2")))],
        {"node1": EXISTING},
        id="upstream: verify that PodAntiAffinity from existing pod is respected when pod has no "
        "AntiAffinity constraints. doesn't satisfy PodAntiAffinity symmetry with the existing pod",
    ),
    pytest.param(
        pod(**SEC),
        [anti(existing_sec(), pod_term("zone", NotIn("service", "securityscan", "value2")))],
        SKIP,
        id="upstream: verify that PodAntiAffinity from existing pod is respected when pod has no "
        "AntiAffinity constraints. satisfy PodAntiAffinity symmetry with the existing pod",
    ),
    pytest.param(
        anti(
            anti(pod(**SEC), pod_term("region", Exists("service"))),
            pod_term("region", Exists("security")),
        ),
        [anti(pod(name="e", security="S1").node("node1"), pod_term("zone", Exists("security")))],
        {"node1": ANTI},
        id="upstream: satisfies the PodAntiAffinity with existing pod but doesn't satisfy "
        "PodAntiAffinity symmetry with incoming pod",
    ),
    pytest.param(
        anti(
            anti(pod(**SEC), pod_term("zone", Exists("service"))),
            pod_term("zone", Exists("security")),
        ),
        [anti(pod(name="e", security="S1").node("node1"), pod_term("zone", Exists("security")))],
        {"node1": ANTI},
        id="upstream: PodAntiAffinity symmetry check a1: incoming pod and existing pod partially "
        "match each other on AffinityTerms",
    ),
    pytest.param(
        anti(pod(security="S1"), pod_term("zone", Exists("security"))),
        [
            anti(
                anti(existing_sec(), pod_term("zone", Exists("service"))),
                pod_term("zone", Exists("security")),
            )
        ],
        {"node1": EXISTING},
        id="upstream: PodAntiAffinity symmetry check a2: incoming pod and existing pod partially "
        "match each other on AffinityTerms",
    ),
    pytest.param(
        anti(
            anti(pod(abc="", xyz=""), pod_term("zone", Exists("abc"))),
            pod_term("zone", Exists("def")),
        ),
        [
            anti(
                anti(
                    pod(name="e", **{"def": ""}, xyz="").node("node1"),
                    pod_term("zone", Exists("abc")),
                ),
                pod_term("zone", Exists("def")),
            )
        ],
        {"node1": ANTI},
        id="upstream: PodAntiAffinity symmetry check b1: incoming pod and existing pod partially "
        "match each other on AffinityTerms",
    ),
    pytest.param(
        anti(
            anti(pod(**{"def": ""}, xyz=""), pod_term("zone", Exists("abc"))),
            pod_term("zone", Exists("def")),
        ),
        [
            anti(
                anti(pod(name="e", abc="", xyz="").node("node1"), pod_term("zone", Exists("abc"))),
                pod_term("zone", Exists("def")),
            )
        ],
        {"node1": ANTI},
        id="upstream: PodAntiAffinity symmetry check b2: incoming pod and existing pod partially "
        "match each other on AffinityTerms",
    ),
]

TEAMS = {
    "subteam1.team1": {"team": "team1"},
    "subteam2.team1": {"team": "team1"},
    "subteam1.team2": {"team": "team2"},
    "default": {},
}


def ns_term(topology_key: str, ns_selector: dict[str, Any]) -> dict[str, Any]:
    t = pod_term(topology_key, In("service", "securityscan", "value2"))
    t["namespaceSelector"] = ns_selector
    return t


TEAM1 = {"matchExpressions": [In("team", "team1")]}

SINGLE += [
    pytest.param(
        affinity(pod(security="S1"), ns_term("region", TEAM1)),
        [pod("subteam1.team1", "e", **SEC).node("node1")],
        {},
        id="upstream: affinity with NamespaceSelector",
    ),
    pytest.param(
        affinity(pod(security="S1"), ns_term("region", TEAM1)),
        [pod("subteam1.team2", "e", **SEC).node("node1")],
        {"node1": AFF},
        id="upstream: affinity with non-matching NamespaceSelector",
    ),
    pytest.param(
        anti(pod("subteam1.team1", security="S1"), ns_term("zone", TEAM1)),
        [pod("subteam2.team1", "e", **SEC).node("node1")],
        {"node1": ANTI},
        id="upstream: anti-affinity with matching NamespaceSelector",
    ),
    pytest.param(
        anti(pod("subteam1.team1", security="S1"), ns_term("zone", {})),
        [pod("subteam2.team1", "e", **SEC).node("node1")],
        {"node1": ANTI},
        id="upstream: anti-affinity with matching all NamespaceSelector",
    ),
    pytest.param(
        anti(pod("subteam1.team1", security="S1"), ns_term("zone", TEAM1)),
        [pod("subteam1.team2", "e", **SEC).node("node1")],
        {},
        id="upstream: anti-affinity with non-matching NamespaceSelector",
    ),
]


@pytest.mark.parametrize(("incoming", "existing", "want"), SINGLE)
def test_required_affinity_single_node(incoming: Any, existing: list[Any], want: Any) -> None:
    check(incoming, existing, NODE1, want, TEAMS)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(
            "region",
            id="upstream: PodAffinity fails PreFilter with an invalid affinity label syntax",
        ),
        pytest.param(
            "node",
            id="upstream: PodAntiAffinity fails PreFilter with an invalid antiaffinity label "
            "syntax",
        ),
    ],
)
def test_invalid_label_values_match_nothing(value: str) -> None:
    """Deliberate difference: upstream's PreFilter fails (UnschedulableAndUnresolvable, a
    label-syntax message); Troupe does not validate selector values, so a value no label
    can hold matches no pod and the node fails as UnschedulableAndUnresolvable with the
    ordinary affinity reason. The pod is not scheduled in either."""
    bad = affinity(
        affinity(pod(**SEC), pod_term("region", In("service", "{{.bad-value.}}"))),
        pod_term(value, In("service", "antivirusscan", "value2")),
    )
    check(bad, [], NODE1, {"node1": AFF})


# ---- TestRequiredAffinityMultipleNodes ---------------------------------------------------

CHINA = {"region": "China"}
CHINA_AZ1 = {"region": "China", "az": "az1"}
INDIA = {"region": "India"}

MULTI = [
    pytest.param(
        affinity(pod(), pod_term("region", In("foo", "bar"))),
        [pod(name="p1", foo="bar").node("node1")],
        [node("node1", **CHINA), node("node2", **CHINA_AZ1), node("node3", **INDIA)],
        {"node3": AFF},
        id="upstream: A pod can be scheduled onto all the nodes that have the same topology key "
        "& label value with one of them has an existing pod that matches the affinity rules",
    ),
    pytest.param(
        affinity(
            affinity(pod(foo="bar", service="securityscan"), pod_term("zone", In("foo", "bar"))),
            pod_term("zone", In("service", "securityscan")),
        ),
        [pod(name="p1", foo="bar").node("nodeA")],
        [node("nodeA", zone="az1", hostname="h1"), node("nodeB", zone="az2", hostname="h2")],
        {},
        id="upstream: The affinity rule is to schedule all of the pods of this collection to the "
        "same zone. The first pod of the collection should not be blocked from being scheduled "
        "onto any node, even there's no existing pod that matches the rule anywhere.",
    ),
    pytest.param(
        affinity(
            affinity(pod(foo="bar", service="securityscan"), pod_term("zone", In("foo", "bar"))),
            pod_term("zone", In("service", "securityscan")),
        ),
        [pod(name="p1", foo="bar").node("nodeA")],
        [
            node("nodeA", zoneLabel="az1", hostname="h1"),
            node("nodeB", zoneLabel="az2", hostname="h2"),
        ],
        {"nodeA": AFF, "nodeB": AFF},
        id="upstream: The first pod of the collection can only be scheduled on nodes labelled "
        "with the requested topology keys",
    ),
    pytest.param(
        anti(pod(), pod_term("region", In("foo", "abc"))),
        [pod(name="e", foo="abc").node("nodeA")],
        [
            node("nodeA", region="r1", hostname="nodeA"),
            node("nodeB", region="r1", hostname="nodeB"),
        ],
        {"nodeA": ANTI, "nodeB": ANTI},
        id="upstream: NodeA and nodeB have same topologyKey and label value. NodeA has an "
        "existing pod that matches the inter pod affinity rule. The pod can not be scheduled "
        "onto nodeA and nodeB.",
    ),
    pytest.param(
        anti(
            anti(pod(), pod_term("region", In("foo", "abc"))),
            pod_term("zone", In("service", "securityscan")),
        ),
        [pod(name="e", foo="abc", service="securityscan").node("nodeA")],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
        ],
        {"nodeA": ANTI, "nodeB": ANTI},
        id="upstream: This test ensures that anti-affinity matches a pod when any term of the "
        "anti-affinity rule matches a pod.",
    ),
    pytest.param(
        anti(pod(), pod_term("region", In("foo", "abc"))),
        [pod(name="e", foo="abc").node("nodeA")],
        [node("nodeA", **CHINA), node("nodeB", **CHINA_AZ1), node("nodeC", **INDIA)],
        {"nodeA": ANTI, "nodeB": ANTI},
        id="upstream: NodeA and nodeB have same topologyKey and label value. NodeA has an "
        "existing pod that matches the inter pod affinity rule. The pod can not be scheduled "
        "onto nodeA and nodeB but can be scheduled onto nodeC",
    ),
    pytest.param(
        anti(pod("ns1", foo="123"), pod_term("region", In("foo", "bar"))),
        [
            pod("ns1", "e1", foo="bar").node("nodeA"),
            anti(pod("ns2", "e2").node("nodeC"), pod_term("region", In("foo", "123"))),
        ],
        [node("nodeA", **CHINA), node("nodeB", **CHINA_AZ1), node("nodeC", **INDIA)],
        {"nodeA": ANTI, "nodeB": ANTI},
        id="upstream: NodeA and nodeB have same topologyKey and label value. NodeA has an "
        "existing pod that matches the inter pod affinity rule. The pod can not be scheduled "
        "onto nodeA, nodeB, but can be scheduled onto nodeC (NodeC has an existing pod that "
        "match the inter pod affinity rule but in different namespace)",
    ),
    pytest.param(
        pod(foo=""),
        [anti(pod(name="e").node("nodeA"), pod_term("invalid-node-label", Exists("foo")))],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z1", hostname="nodeB"),
        ],
        SKIP,
        id="upstream: Test existing pod's anti-affinity: if an existing pod has a term with "
        "invalid topologyKey, labelSelector of the term is firstly checked, and then "
        "topologyKey of the term is also checked",
    ),
    pytest.param(
        anti(pod(), pod_term("invalid-node-label", Exists("foo"))),
        [pod(name="e", foo="").node("nodeA")],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z1", hostname="nodeB"),
        ],
        {},
        id="upstream: Test incoming pod's anti-affinity: even if labelSelector matches, we still "
        "check if topologyKey matches",
    ),
]


@pytest.mark.parametrize(("incoming", "existing", "nodes", "want"), MULTI)
def test_required_affinity_multiple_nodes(
    incoming: Any, existing: list[Any], nodes: list[Any], want: Any
) -> None:
    check(incoming, existing, nodes, want)
