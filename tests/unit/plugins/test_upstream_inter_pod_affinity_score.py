"""InterPodAffinity PreScore + Score + NormalizeScore: cases ported from
kube-scheduler's interpodaffinity/scoring_test.go (kubernetes/kubernetes, stored
version at commit 030880a5dc5449403c6d1f0aa146a7dc21d6c6dc): TestPreferredAffinity
(with hardPodAffinityWeight 1, as upstream runs it) and
TestPreferredAffinityWithHardPodAffinitySymmetricWeight.

Upstream's default namespace "" is our "default"; the four namespaces of the
upstream fixture (subteam1.team1 ... subteam2.team2, labelled team=team1/team2)
are the node table's namespace labels. Upstream nodes carry only the labels the
case gives; our builder adds kubernetes.io/hostname, which no term here uses.

Skipped (and why):
- TestPreferredAffinity "invalid Affinity fails PreScore", "invalid AntiAffinity
  fails PreScore": an invalid label value in a selector is refused when Troupe
  parses the pod (the pod is reported invalid and never reaches a plugin), so
  PreScore cannot see it; the parser's tests cover the refusal.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import NodeBuilder, PodBuilder, make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle
from tests.unit.plugins.upstream_helpers import expr, pod_term, pref_affinity, pref_anti
from troupe.api.types import IsolatedCPU
from troupe.core.snapshot import pod_charge
from troupe.framework.cycle_state import CycleState
from troupe.plugins.inter_pod_affinity import InterPodAffinity

NAMESPACES = {
    "subteam1.team1": {"team": "team1"},
    "subteam2.team1": {"team": "team1"},
    "subteam1.team2": {"team": "team2"},
    "subteam2.team2": {"team": "team2"},
}
SKIP = "skip"
CHINA = {"region": "China"}
INDIA = {"region": "India"}
AZ1 = {"az": "az1"}
AZ2 = {"az": "az2"}
CHINA_AZ1 = {"region": "China", "az": "az1"}
S1 = {"security": "S1"}
S2 = {"security": "S2"}


def In(key: str, *values: str) -> dict[str, Any]:
    return expr(key, "In", list(values))


def node(name: str, labels: dict[str, str]) -> NodeBuilder:
    nb = make_node(name)
    for k, v in labels.items():
        nb.label(k, v)
    return nb


_count = iter(range(10_000))


def pod(
    labels: dict[str, str] | None = None,
    on: str | None = None,
    ns: str = "default",
    affinity: Any = None,
) -> PodBuilder:
    pb = make_pod(f"p{next(_count)}", ns)
    for k, v in (labels or {}).items():
        pb.label(k, v)
    if on is not None:
        pb.node(on)
    if affinity is not None:
        affinity(pb)
    return pb


# the affinities of upstream's fixture, as functions that add them to a pod
def stay_with_s1_in_region(pb: PodBuilder) -> PodBuilder:
    return pref_affinity(pb, 5, pod_term("region", In("security", "S1")))


def stay_with_s2_in_region(pb: PodBuilder) -> PodBuilder:
    return pref_affinity(pb, 6, pod_term("region", In("security", "S2")))


def affinity3(pb: PodBuilder) -> PodBuilder:
    pref_affinity(
        pb, 8, pod_term("region", expr("security", "NotIn", ["S1"]), In("security", "S2"))
    )
    return pref_affinity(
        pb, 2, pod_term("region", expr("security", "Exists"), expr("wrongkey", "DoesNotExist"))
    )


def hard_affinity(pb: PodBuilder) -> PodBuilder:
    a = pb._spec.setdefault("affinity", {}).setdefault("podAffinity", {})
    a["requiredDuringSchedulingIgnoredDuringExecution"] = [
        pod_term("region", In("security", "S1", "value2")),
        pod_term("region", expr("security", "Exists"), expr("wrongkey", "DoesNotExist")),
    ]
    return pb


def away_from_s1_in_az(pb: PodBuilder) -> PodBuilder:
    return pref_anti(pb, 5, pod_term("az", In("security", "S1")))


def away_from_s2_in_az(pb: PodBuilder) -> PodBuilder:
    return pref_anti(pb, 5, pod_term("az", In("security", "S2")))


def stay_with_s1_in_region_away_from_s2_in_az(pb: PodBuilder) -> PodBuilder:
    pref_affinity(pb, 8, pod_term("region", In("security", "S1")))
    return pref_anti(pb, 5, pod_term("az", In("security", "S2")))


def _ns_selector_term() -> dict[str, Any]:
    t = pod_term("region", In("security", "S1"), namespaces=["subteam2.team2"])
    t["namespaceSelector"] = {"matchExpressions": [In("team", "team1")]}
    return t


def affinity_namespace_selector(pb: PodBuilder) -> PodBuilder:
    return pref_affinity(pb, 5, _ns_selector_term())


def anti_affinity_namespace_selector(pb: PodBuilder) -> PodBuilder:
    return pref_anti(pb, 5, _ns_selector_term())


def scores(
    incoming: PodBuilder,
    existing: list[PodBuilder],
    nodes: list[NodeBuilder],
    args: dict[str, Any],
) -> dict[str, int] | str:
    table = table_of([n.build() for n in nodes], [])
    table.namespace_labels.update(NAMESPACES)
    # charge after the namespace labels are known: term counters resolve selectors
    for pb in existing:
        p = pb.build()
        table.charge(table.row_of[p.node_name], p, pod_charge(p, IsolatedCPU()), +1)
    plugin = InterPodAffinity.new(args, make_handle())
    p = incoming.build()
    rows = table.valid_rows()
    state = CycleState()
    st = plugin.pre_score(state, p, table, rows)
    if st.is_skip:
        return SKIP
    assert st.is_success, st
    s = plugin.normalize_score(state, p, plugin.score(state, p, table, rows))
    return {table.names[r]: int(v) for r, v in zip(rows.tolist(), s.tolist(), strict=True)}


N3 = [node("node1", CHINA), node("node2", INDIA), node("node3", AZ1)]

PREFERRED = [
    pytest.param(
        pod(S1),
        [],
        N3,
        False,
        SKIP,
        id="upstream: all nodes are same priority as Affinity is nil",
    ),
    pytest.param(
        pod(S1, affinity=stay_with_s1_in_region),
        [pod(S1, "node1"), pod(S2, "node2"), pod(S1, "node3")],
        N3,
        False,
        {"node1": 100, "node2": 0, "node3": 0},
        id="upstream: Affinity: pod that matches topology key & pods in nodes will get high "
        "score comparing to otherswhich doesn't match either pods in nodes or in topology key",
    ),
    pytest.param(
        pod(affinity=stay_with_s1_in_region),
        [pod(S1, "node1")],
        [node("node1", CHINA), node("node2", CHINA_AZ1), node("node3", INDIA)],
        False,
        {"node1": 100, "node2": 100, "node3": 0},
        id="upstream: All the nodes that have the same topology key & label value with one of "
        "them has an existing pod that match the affinity rules, have the same score",
    ),
    pytest.param(
        pod(S1, affinity=stay_with_s2_in_region),
        [
            pod(S2, "node1"),
            pod(S2, "node1"),
            pod(S2, "node2"),
            pod(S2, "node3"),
            pod(S2, "node4"),
            pod(S2, "node5"),
        ],
        [
            node("node1", CHINA),
            node("node2", INDIA),
            node("node3", CHINA),
            node("node4", CHINA),
            node("node5", INDIA),
        ],
        False,
        {"node1": 100, "node2": 0, "node3": 100, "node4": 100, "node5": 0},
        id="upstream: Affinity: nodes in one region has more matching pods comparing to other "
        "region, so the region which has more matches will get high score",
    ),
    pytest.param(
        pod(S1, affinity=affinity3),
        [pod(S1, "node1"), pod(S2, "node2"), pod(S1, "node3")],
        N3,
        False,
        {"node1": 20, "node2": 100, "node3": 0},
        id="upstream: Affinity: different Label operators and values for pod affinity "
        "scheduling preference, including some match failures ",
    ),
    pytest.param(
        pod(S2),
        [
            pod(S1, "node1", affinity=stay_with_s1_in_region),
            pod(S2, "node2", affinity=stay_with_s2_in_region),
        ],
        N3,
        False,
        {"node1": 0, "node2": 100, "node3": 0},
        id="upstream: Affinity symmetry: considered only the "
        "preferredDuringSchedulingIgnoredDuringExecution in pod affinity symmetry",
    ),
    pytest.param(
        pod(S1, ns="subteam1.team1"),
        [
            pod(S1, "node1", affinity=affinity_namespace_selector),
            pod(S2, "node2", affinity=stay_with_s2_in_region),
        ],
        N3,
        False,
        {"node1": 100, "node2": 0, "node3": 0},
        id="upstream: Affinity symmetry with namespace selector",
    ),
    pytest.param(
        pod(S1, ns="subteam1.team1"),
        [
            pod(S1, "node1", affinity=anti_affinity_namespace_selector),
            pod(S2, "node2", affinity=stay_with_s2_in_region),
        ],
        N3,
        False,
        {"node1": 0, "node2": 100, "node3": 100},
        id="upstream: AntiAffinity symmetry with namespace selector",
    ),
    pytest.param(
        pod(S1),
        [pod(S1, "node1", affinity=hard_affinity), pod(S2, "node2", affinity=hard_affinity)],
        N3,
        False,
        {"node1": 100, "node2": 100, "node3": 0},
        id="upstream: Affinity symmetry: considered RequiredDuringSchedulingIgnoredDuringExecution "
        "in pod affinity symmetry",
    ),
    pytest.param(
        pod(S1, affinity=away_from_s1_in_az),
        [pod(S1, "node1"), pod(S2, "node2")],
        [node("node1", AZ1), node("node2", CHINA)],
        False,
        {"node1": 0, "node2": 100},
        id="upstream: Anti Affinity: pod that does not match existing pods in node will get "
        "high score ",
    ),
    pytest.param(
        pod(S1, affinity=away_from_s1_in_az),
        [pod(S1, "node1"), pod(S1, "node2")],
        [node("node1", AZ1), node("node2", CHINA)],
        False,
        {"node1": 0, "node2": 100},
        id="upstream: Anti Affinity: pod that does not match topology key & match the pods in "
        "nodes will get higher score comparing to others ",
    ),
    pytest.param(
        pod(S1, affinity=away_from_s1_in_az),
        [pod(S1, "node1"), pod(S1, "node1"), pod(S2, "node2")],
        [node("node1", AZ1), node("node2", INDIA)],
        False,
        {"node1": 0, "node2": 100},
        id="upstream: Anti Affinity: one node has more matching pods comparing to other node, "
        "so the node which has more unmatches will get high score",
    ),
    pytest.param(
        pod(S2),
        [
            pod(S1, "node1", affinity=away_from_s2_in_az),
            pod(S2, "node2", affinity=away_from_s1_in_az),
        ],
        [node("node1", AZ1), node("node2", AZ2)],
        False,
        {"node1": 0, "node2": 100},
        id="upstream: Anti Affinity symmetry: the existing pods in node which has anti affinity "
        "match will get high score",
    ),
    pytest.param(
        pod(S1, affinity=stay_with_s1_in_region_away_from_s2_in_az),
        [pod(S1, "node1"), pod(S1, "node2")],
        [node("node1", CHINA), node("node2", AZ1)],
        False,
        {"node1": 100, "node2": 0},
        id="upstream: Affinity and Anti Affinity: considered only "
        "preferredDuringSchedulingIgnoredDuringExecution in both pod affinity & anti affinity",
    ),
    pytest.param(
        pod(S1, affinity=stay_with_s1_in_region_away_from_s2_in_az),
        [
            pod(S1, "node1"),
            pod(S1, "node1"),
            pod(S1, "node2"),
            pod(S1, "node3"),
            pod(S1, "node3"),
            pod(S1, "node4"),
            pod(S1, "node5"),
        ],
        [
            node("node1", CHINA_AZ1),
            node("node2", INDIA),
            node("node3", CHINA),
            node("node4", CHINA),
            node("node5", INDIA),
        ],
        False,
        {"node1": 100, "node2": 0, "node3": 100, "node4": 100, "node5": 0},
        id="upstream: Affinity and Anti Affinity: considering both affinity and anti-affinity, "
        "the pod to schedule and existing pods have the same labels",
    ),
    pytest.param(
        pod(S1, affinity=stay_with_s1_in_region_away_from_s2_in_az),
        [
            pod(S1, "node1"),
            pod(S2, "node2"),
            pod(on="node3", affinity=stay_with_s1_in_region_away_from_s2_in_az),
            pod(on="node4", affinity=away_from_s1_in_az),
        ],
        [node("node1", CHINA), node("node2", AZ1), node("node3", INDIA), node("node4", AZ2)],
        False,
        {"node1": 100, "node2": 0, "node3": 100, "node4": 0},
        id="upstream: Affinity and Anti Affinity and symmetry: considered only "
        "preferredDuringSchedulingIgnoredDuringExecution in both pod affinity & anti affinity "
        "& symmetry",
    ),
    pytest.param(
        pod(S1),
        [pod(S1, "node1"), pod(on="node2", affinity=stay_with_s1_in_region_away_from_s2_in_az)],
        [node("node1", CHINA), node("node2", CHINA)],
        False,
        {"node1": 0, "node2": 0},
        id="upstream: Avoid panic when partial nodes in a topology don't have pods with affinity",
    ),
    pytest.param(
        pod(S1, ns="subteam1.team1", affinity=affinity_namespace_selector),
        [
            pod(S1, "node1", "subteam1.team1"),
            pod(S1, "node1", "subteam1.team1"),
            pod(S1, "node1", "subteam1.team2"),
            pod(S1, "node2", "subteam2.team1"),
        ],
        [node("node1", CHINA), node("node2", INDIA)],
        False,
        {"node1": 100, "node2": 0},
        id="upstream: Affinity with pods matching NamespaceSelector",
    ),
    pytest.param(
        pod(S1, ns="subteam1.team1", affinity=affinity_namespace_selector),
        [
            pod(S1, "node1", "subteam1.team1"),
            pod(S1, "node1", "subteam1.team1"),
            pod(S1, "node1", "subteam2.team2"),
            pod(S1, "node2", "subteam2.team1"),
        ],
        [node("node1", CHINA), node("node2", INDIA)],
        False,
        {"node1": 100, "node2": 0},
        id="upstream: Affinity with pods matching both NamespaceSelector and Namespaces fields",
    ),
    # upstream reuses the two names above for the anti-affinity variants
    pytest.param(
        pod(S1, ns="subteam1.team1", affinity=anti_affinity_namespace_selector),
        [
            pod(S1, "node1", "subteam1.team1"),
            pod(S1, "node1", "subteam1.team1"),
            pod(S1, "node1", "subteam1.team2"),
            pod(S1, "node2", "subteam2.team1"),
        ],
        [node("node1", CHINA), node("node2", INDIA)],
        False,
        {"node1": 0, "node2": 100},
        id="upstream: Affinity with pods matching NamespaceSelector (anti-affinity)",
    ),
    pytest.param(
        pod(S1, ns="subteam1.team1", affinity=anti_affinity_namespace_selector),
        [
            pod(S1, "node1", "subteam1.team1"),
            pod(S1, "node1", "subteam1.team1"),
            pod(S1, "node1", "subteam2.team2"),
            pod(S1, "node2", "subteam2.team1"),
        ],
        [node("node1", CHINA), node("node2", INDIA)],
        False,
        {"node1": 0, "node2": 100},
        id="upstream: Affinity with pods matching both NamespaceSelector and Namespaces fields "
        "(anti-affinity)",
    ),
    pytest.param(
        pod(S2),
        [
            pod(S1, "node1", affinity=stay_with_s1_in_region_away_from_s2_in_az),
            pod(S2, "node2", affinity=stay_with_s2_in_region),
        ],
        [node("node1", CHINA), node("node2", INDIA)],
        True,
        SKIP,
        id="upstream: Ignore preferred terms of existing pods",
    ),
    pytest.param(
        pod(S2),
        [
            pod(S1, "node1", affinity=stay_with_s1_in_region_away_from_s2_in_az),
            pod(S2, "node2", affinity=stay_with_s2_in_region),
        ],
        [node("node1", CHINA), node("node2", INDIA)],
        False,
        {"node1": 0, "node2": 100},
        id="upstream: Do not ignore preferred terms of existing pods",
    ),
    pytest.param(
        pod(S2),
        [],
        [],
        False,
        SKIP,
        id="upstream: No nodes to score",
    ),
]


@pytest.mark.parametrize(("incoming", "existing", "nodes", "ignore", "want"), PREFERRED)
def test_preferred_affinity(
    incoming: PodBuilder,
    existing: list[PodBuilder],
    nodes: list[NodeBuilder],
    ignore: bool,
    want: dict[str, int] | str,
) -> None:
    args = {"hardPodAffinityWeight": 1, "ignorePreferredTermsOfExistingPods": ignore}
    assert scores(incoming, existing, nodes, args) == want


# ---- TestPreferredAffinityWithHardPodAffinitySymmetricWeight -----------------------------


def hard_pod_affinity(pb: PodBuilder) -> PodBuilder:
    t = pod_term("region", In("service", "S1"), namespaces=["default", "subteam2.team2"])
    t["namespaceSelector"] = {"matchExpressions": [In("team", "team1")]}
    a = pb._spec.setdefault("affinity", {}).setdefault("podAffinity", {})
    a["requiredDuringSchedulingIgnoredDuringExecution"] = [t]
    return pb


SVC = {"service": "S1"}
HARD_EXISTING = [
    pod(on="node1", affinity=hard_pod_affinity),
    pod(on="node2", affinity=hard_pod_affinity),
]

HARD = [
    pytest.param(
        pod(SVC),
        1,
        {"node1": 100, "node2": 100, "node3": 0},
        id="upstream: with default weight",
    ),
    pytest.param(pod(SVC), 0, SKIP, id="upstream: with zero weight"),
    pytest.param(pod(SVC, ns="subteam1.team2"), 1, SKIP, id="upstream: with no matching namespace"),
    pytest.param(
        pod(SVC, ns="subteam1.team1"),
        1,
        {"node1": 100, "node2": 100, "node3": 0},
        id="upstream: with matching NamespaceSelector",
    ),
    pytest.param(
        pod(SVC, ns="subteam2.team2"),
        1,
        {"node1": 100, "node2": 100, "node3": 0},
        id="upstream: with matching Namespaces",
    ),
]


@pytest.mark.parametrize(("incoming", "weight", "want"), HARD)
def test_preferred_affinity_with_hard_pod_affinity_symmetric_weight(
    incoming: PodBuilder, weight: int, want: dict[str, int] | str
) -> None:
    assert scores(incoming, HARD_EXISTING, N3, {"hardPodAffinityWeight": weight}) == want
