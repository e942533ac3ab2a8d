"""InterPodAffinity, filter and score (kube-scheduler's interpodaffinity rules)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_filter, run_score
from troupe.config import default_config
from troupe.framework.interface import PluginArgsError
from troupe.plugins.inter_pod_affinity import (
    ERR_REASON_AFFINITY,
    ERR_REASON_ANTI_AFFINITY,
    ERR_REASON_EXISTING_ANTI_AFFINITY,
    InterPodAffinity,
)
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import simulate

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
NODES = [make_node("n1").zone("z1"), make_node("n2").zone("z1"), make_node("n3").zone("z2")]


def term(app: str, key: str = ZONE, **extra: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    t.update(extra)
    return t


def affinity(
    required: list[Any] | None = None,
    anti: list[Any] | None = None,
    preferred: list[Any] | None = None,
    preferred_anti: list[Any] | None = None,
) -> dict[str, Any]:
    a: dict[str, Any] = {}
    if required or preferred:
        a["podAffinity"] = {}
        if required:
            a["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = required
        if preferred:
            a["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": w, "podAffinityTerm": t} for w, t in preferred
            ]
    if anti or preferred_anti:
        a["podAntiAffinity"] = {}
        if anti:
            a["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = anti
        if preferred_anti:
            a["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": w, "podAffinityTerm": t} for w, t in preferred_anti
            ]
    return a


def plugin(**args: Any) -> InterPodAffinity:
    return InterPodAffinity.new(args, make_handle())


def filt(
    pod: Any,
    existing: list[Any],
    nodes: list[Any] = NODES,
    namespaces: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    table = table_of([n.build() for n in nodes], [p.build() for p in existing])
    table.namespace_labels.update(namespaces or {})
    return run_filter(plugin(), pod.build(), table)


AFF = (ERR_REASON_AFFINITY,)
ANTI = (ERR_REASON_ANTI_AFFINITY,)
EXISTING = (ERR_REASON_EXISTING_ANTI_AFFINITY,)


@pytest.mark.parametrize(
    ("pod", "existing", "want"),
    [
        pytest.param(
            make_pod("p").spec(affinity=affinity([term("db")])),
            [make_pod("db").label("app", "db").node("n1")],
            {"n3": AFF},
            id="affinity-same-zone",
        ),
        pytest.param(
            make_pod("p").label("app", "db").spec(affinity=affinity([term("db")])),
            [],
            {},
            id="first-pod-of-a-group-matches-itself",
        ),
        pytest.param(
            make_pod("p").spec(affinity=affinity([term("db")])),
            [],
            {"n1": AFF, "n2": AFF, "n3": AFF},
            id="no-match-and-not-self",
        ),
        pytest.param(
            make_pod("p").label("app", "web").spec(affinity=affinity(anti=[term("web", HOST)])),
            [make_pod("w").label("app", "web").node("n1")],
            {"n1": ANTI},
            id="anti-affinity-by-host",
        ),
        pytest.param(
            make_pod("p").label("app", "web"),
            [make_pod("guard").spec(affinity=affinity(anti=[term("web")])).node("n1")],
            {"n1": EXISTING, "n2": EXISTING},
            id="existing-pods-anti-affinity",
        ),
        pytest.param(
            make_pod("p").spec(affinity=affinity([term("db", namespaces=["other"])])),
            [
                make_pod("db").label("app", "db").node("n1"),
                make_pod("db2", "other").label("app", "db").node("n3"),
            ],
            {"n1": AFF, "n2": AFF},
            id="namespaces",
        ),
        pytest.param(
            make_pod("p").spec(affinity=affinity([term("db", namespaceSelector={})])),
            [make_pod("db2", "other").label("app", "db").node("n3")],
            {"n1": AFF, "n2": AFF},
            id="empty-namespace-selector-is-all",
        ),
        pytest.param(
            make_pod("p")
            .label("v", "2")
            .spec(affinity=affinity(anti=[term("web", HOST, matchLabelKeys=["v"])]))
            .label("app", "web"),
            [
                make_pod("a").label("app", "web").label("v", "1").node("n1"),
                make_pod("b").label("app", "web").label("v", "2").node("n2"),
            ],
            {"n2": ANTI},
            id="match-label-keys",
        ),
    ],
)
def test_filter(pod: Any, existing: list[Any], want: dict[str, Any]) -> None:
    assert filt(pod, existing) == want


def test_namespace_selector_with_labels() -> None:
    pod = make_pod("p").spec(
        affinity=affinity([term("db", namespaceSelector={"matchLabels": {"team": "data"}})])
    )
    existing = [
        make_pod("db", "analytics").label("app", "db").node("n3"),
        make_pod("db", "default").label("app", "db").node("n1"),
    ]
    got = filt(pod, existing, namespaces={"analytics": {"team": "data"}, "default": {}})
    assert got == {"n1": AFF, "n2": AFF}


def test_node_without_the_topology_key_fails_affinity() -> None:
    nodes = [*NODES, make_node("bare")]
    pod = make_pod("p").label("app", "db").spec(affinity=affinity([term("db")]))
    assert filt(pod, [], nodes) == {"bare": AFF}


def score(pod: Any, existing: list[Any], **args: Any) -> dict[str, int] | None:
    table = table_of([n.build() for n in NODES], [p.build() for p in existing])
    return run_score(InterPodAffinity.new(args, make_handle()), pod.build(), table)


def test_preferred_affinity_and_anti_affinity() -> None:
    db = [make_pod("db").label("app", "db").node("n1")]
    got = score(make_pod("p").spec(affinity=affinity(preferred=[(10, term("db"))])), db)
    assert got == {"n1": 100, "n2": 100, "n3": 0}
    got = score(make_pod("p").spec(affinity=affinity(preferred_anti=[(10, term("db"))])), db)
    assert got == {"n1": 0, "n2": 0, "n3": 100}


def test_existing_pods_terms_are_symmetric() -> None:
    friendly = make_pod("f").spec(affinity=affinity(preferred=[(5, term("web", HOST))])).node("n3")
    assert score(make_pod("p").label("app", "web"), [friendly]) == {"n1": 0, "n2": 0, "n3": 100}
    hard = make_pod("h").spec(affinity=affinity([term("web")])).node("n1")
    assert score(make_pod("p").label("app", "web"), [hard]) == {"n1": 100, "n2": 100, "n3": 0}
    assert score(make_pod("p").label("app", "web"), [hard], hardPodAffinityWeight=0) is None
    assert (
        score(
            make_pod("p").label("app", "web"), [friendly], ignorePreferredTermsOfExistingPods=True
        )
        is None
    )


def test_skipped_when_nothing_to_do() -> None:
    table = table_of([n.build() for n in NODES])
    p = plugin()
    assert run_filter(p, make_pod("p").build(), table) == {}
    assert run_score(p, make_pod("p").build(), table) is None


def test_args() -> None:
    with pytest.raises(PluginArgsError) as e:
        plugin(hardPodAffinityWeight=101)
    assert e.value.field_path == "hardPodAffinityWeight"


def test_anti_affinity_end_to_end_one_per_node() -> None:
    objs = [n.obj() for n in NODES]
    for i in range(4):
        objs.append(
            make_pod(f"w{i}")
            .label("app", "web")
            .spec(affinity=affinity(anti=[term("web", HOST)]))
            .obj()
        )
    pods = simulate(objs, default_config(IN_TREE)).to_json_obj()["pods"]
    nodes = [v["node"] for v in pods.values() if v["node"]]
    assert sorted(nodes) == ["n1", "n2", "n3"]
    pending = [v for v in pods.values() if not v["node"]]
    assert pending == [
        {
            "node": None,
            "reason": "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
            " preemption: 0/3 nodes are available: 3 No preemption victims found for incoming"
            " pod..",
            "preemptedBy": None,
        }
    ]


def test_affinity_end_to_end_follows_the_first_pod() -> None:
    objs = [n.obj() for n in NODES]
    for i in range(4):
        objs.append(
            make_pod(f"c{i}").label("app", "cache").spec(affinity=affinity([term("cache")])).obj()
        )
    pods = simulate(objs, default_config(IN_TREE)).to_json_obj()["pods"]
    zones = {"n1": "z1", "n2": "z1", "n3": "z2"}
    assert len({zones[v["node"]] for v in pods.values()}) == 1


def test_queueing_hints_move_only_on_helpful_pod_events() -> None:
    from troupe.framework.events import QueueingHint

    (pods_reg, _) = plugin().events_to_register()
    assert pods_reg.hint is not None
    waiting = make_pod("p").spec(affinity=affinity([term("db")])).build()
    db = make_pod("db").label("app", "db").node("n1").build()
    other = make_pod("x").label("app", "x").node("n1").build()
    assert pods_reg.hint(waiting, None, db) is QueueingHint.QUEUE
    assert pods_reg.hint(waiting, None, other) is QueueingHint.SKIP
    guard = make_pod("g").spec(affinity=affinity(anti=[term("web")])).node("n1").build()
    plain = make_pod("q").label("app", "web").build()
    assert pods_reg.hint(plain, guard, None) is QueueingHint.QUEUE  # a blocker left


# ---- topology keys that no node carries (these raised IndexError) --------------------


@pytest.mark.parametrize(
    ("pod", "existing", "want"),
    [
        pytest.param(
            make_pod("p").label("app", "db").spec(affinity=affinity([term("db", "rack")])),
            [make_pod("db").label("app", "db").node("n1")],
            {"n1": AFF, "n2": AFF, "n3": AFF},
            id="affinity-key-on-no-node",
        ),
        pytest.param(
            make_pod("p").spec(affinity=affinity([term("db"), term("db", "rack")])),
            [make_pod("db").label("app", "db").node("n1")],
            {"n1": AFF, "n2": AFF, "n3": AFF},
            id="one-term-key-present-the-other-absent",
        ),
        pytest.param(
            make_pod("p").spec(affinity=affinity(anti=[term("db", "rack")])),
            [make_pod("db").label("app", "db").node("n1")],
            {},
            id="anti-affinity-key-on-no-node",
        ),
        pytest.param(
            make_pod("p").label("app", "web"),
            [make_pod("g").spec(affinity=affinity(anti=[term("web", "rack")])).node("n1")],
            {},
            id="existing-anti-affinity-key-on-no-node",
        ),
        pytest.param(
            make_pod("p").spec(affinity=affinity([term("db")], anti=[term("db", HOST)])),
            [make_pod("db").label("app", "db").node("n1")],
            {"n1": ANTI, "n3": AFF},
            id="affinity-and-anti-affinity-against-one-existing-pod",
        ),
    ],
)
def test_filter_with_absent_topology_keys(pod: Any, existing: list[Any], want: Any) -> None:
    assert filt(pod, existing) == want


def test_score_with_absent_topology_keys() -> None:
    db = [make_pod("db").label("app", "db").node("n1")]
    got = score(make_pod("p").spec(affinity=affinity(preferred=[(10, term("db", "rack"))])), db)
    assert got == {"n1": 0, "n2": 0, "n3": 0}
    friendly = make_pod("f").spec(affinity=affinity(preferred=[(5, term("web", "rack"))]))
    got = score(make_pod("p").label("app", "web"), [friendly.node("n3")])
    assert got == {"n1": 0, "n2": 0, "n3": 0}


# ---- required affinity: an existing pod counts only if it matches every term ----------


def two_terms() -> dict[str, Any]:
    both = {"labelSelector": {"matchLabels": {"tier": "x"}}, "topologyKey": ZONE}
    return affinity([term("db"), both])


@pytest.mark.parametrize(
    ("pod", "existing", "want"),
    [
        pytest.param(
            make_pod("p").label("app", "db").label("tier", "x").spec(affinity=two_terms()),
            [
                make_pod("a").label("app", "db").node("n1"),
                make_pod("b").label("tier", "x").node("n3"),
            ],
            {},
            id="no-pod-matches-all-terms-and-the-pod-matches-itself",
        ),
        pytest.param(
            make_pod("p").spec(affinity=two_terms()),
            [
                make_pod("a").label("app", "db").node("n1"),
                make_pod("b").label("tier", "x").node("n3"),
            ],
            {"n1": AFF, "n2": AFF, "n3": AFF},
            id="no-pod-matches-all-terms-and-the-pod-does-not-match-itself",
        ),
        pytest.param(
            make_pod("p").label("app", "db").label("tier", "x").spec(affinity=two_terms()),
            [
                make_pod("a").label("app", "db").node("n3"),
                make_pod("ab").label("app", "db").label("tier", "x").node("n1"),
            ],
            {"n3": AFF},
            id="only-the-pod-matching-all-terms-counts",
        ),
    ],
)
def test_required_affinity_counts_pods_matching_all_terms(
    pod: Any, existing: list[Any], want: Any
) -> None:
    assert filt(pod, existing) == want
