"""NodeAffinity: cases ported from kube-scheduler's
pkg/scheduler/framework/plugins/nodeaffinity/node_affinity_test.go
(TestNodeAffinity, TestNodeAffinityPriority, Test_isSchedulableAfterNodeChange;
the stored version that uses pkg/scheduler/backend/cache, v1.31+ layout).
addedAffinity is a Troupe plugin argument too, so those cases are ported.

Each TestNodeAffinity case runs PreFilter (status and PreFilterResult) and, as
Troupe's runtime does, Filter only when PreFilter did not return Skip.

Plugin fixes these cases brought:
- "Pod with two conflicting mach field requirements": PreFilter's reason is
  upstream's errReasonConflict ("pod affinity terms conflict"), not ErrReasonPod.
- "Pod with an invalid value in Affinity term won't be scheduled onto the
  node": a NotIn value that is not a label value makes the term match no node
  (the API server accepts it; kube-scheduler's labels.NewRequirement refuses it);
  Troupe matched it (troupe/api/selectors.py).
- Test_isSchedulableAfterNodeChange: Troupe registered node events without a
  hint; it now has upstream's.

Deliberate differences, asserted as Troupe's behaviour:
- "Matches node selector/affinity correctly even if PreFilter is not called":
  Filter reads PreFilter's state and fails loudly without it (docs/design.md, "CycleState").
- "all nodes are same priority as NodeAffinity is nil" (Score without
  PreScore): PreScore returns Skip for such a pod and the runtime never calls
  Score; the case asserts the Skip.
- "PreScore returns error when an incoming Pod has a broken affinity" (key
  "invalid key"): the API server refuses such a pod (ValidateLabelName);
  Troupe's reader does not check the key and the term matches no node, so the
  pod is scored 0 everywhere instead of failing PreScore.
- Upstream's "backoff-wrong-*-object" hint cases return Queue with an error;
  Troupe's hints have no error channel and return QUEUE.

Upstream nodes carry only the case's labels; our builder also adds
kubernetes.io/hostname, which no case here selects on. Upstream's unnamed node
is "node" here.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import NodeBuilder, PodBuilder, make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_score
from tests.unit.plugins.upstream_helpers import expr
from troupe.framework.cycle_state import CycleState, StateKeyError
from troupe.framework.events import QueueingHint
from troupe.framework.status import Code
from troupe.plugins.node_affinity import (
    ERR_REASON_CONFLICT,
    ERR_REASON_ENFORCED,
    ERR_REASON_POD,
    NodeAffinity,
)

UU = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
SKIP = "skip"


def In(key: str, *values: str) -> dict[str, Any]:
    return expr(key, "In", list(values))


def NotIn(key: str, *values: str) -> dict[str, Any]:
    return expr(key, "NotIn", list(values))


def Exists(key: str) -> dict[str, Any]:
    return expr(key, "Exists")


def name_in(*names: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": "In", "values": list(names)}


def term(*exprs: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"matchExpressions": list(exprs)}
    if fields is not None:
        t["matchFields"] = fields
    if not exprs and fields is not None:
        del t["matchExpressions"]
    return t


def required(*terms: dict[str, Any], selector: dict[str, str] | None = None) -> PodBuilder:
    pb = make_pod("p")
    if selector:
        pb.node_selector(**selector)
    return pb.required_affinity(*terms)


def selector(**labels: str) -> PodBuilder:
    return make_pod("p").node_selector(**labels)


def added_required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


# (pod, node name, node labels, args, want PreFilter: SKIP | (code, reason) | None,
#  want PreFilterResult names | None, want Filter (code, reason) | None)
FILTER = [
    pytest.param(
        selector(foo="bar"),
        "node",
        {},
        None,
        None,
        None,
        (UU, ERR_REASON_POD),
        id="upstream: missing labels",
    ),
    pytest.param(
        selector(foo="bar"),
        "node",
        {"foo": "bar"},
        None,
        None,
        None,
        None,
        id="upstream: same labels",
    ),
    pytest.param(
        selector(foo="bar"),
        "node",
        {"foo": "bar", "baz": "blah"},
        None,
        None,
        None,
        None,
        id="upstream: node labels are superset",
    ),
    pytest.param(
        selector(foo="bar", baz="blah"),
        "node",
        {"foo": "bar"},
        None,
        None,
        None,
        (UU, ERR_REASON_POD),
        id="upstream: node labels are subset",
    ),
    pytest.param(
        required(term(In("foo", "bar", "value2"))),
        "node",
        {"foo": "bar"},
        None,
        None,
        None,
        None,
        id="upstream: Pod with matchExpressions using In operator that matches the existing node",
    ),
    pytest.param(
        required(term(expr("kernel-version", "Gt", ["0204"]))),
        "node",
        {"kernel-version": "0206"},
        None,
        None,
        None,
        None,
        id="upstream: Pod with matchExpressions using Gt operator that matches the existing node",
    ),
    pytest.param(
        required(term(NotIn("mem-type", "DDR", "DDR2"))),
        "node",
        {"mem-type": "DDR3"},
        None,
        None,
        None,
        None,
        id="upstream: Pod with matchExpressions using NotIn operator that matches the existing "
        "node",
    ),
    pytest.param(
        required(term(Exists("GPU"))),
        "node",
        {"GPU": "NVIDIA-GRID-K1"},
        None,
        None,
        None,
        None,
        id="upstream: Pod with matchExpressions using Exists operator that matches the "
        "existing node",
    ),
    pytest.param(
        required(term(In("foo", "value1", "value2"))),
        "node",
        {"foo": "bar"},
        None,
        None,
        None,
        (UU, ERR_REASON_POD),
        id="upstream: Pod with affinity that don't match node's labels won't schedule onto the "
        "node",
    ),
    pytest.param(
        required(term()),
        "node",
        {"foo": "bar"},
        None,
        None,
        None,
        (UU, ERR_REASON_POD),
        id="upstream: Pod with empty MatchExpressions is not a valid value will match no "
        "objects and won't schedule onto the node",
    ),
    pytest.param(
        make_pod("p"),
        "node",
        {"foo": "bar"},
        None,
        SKIP,
        None,
        None,
        id="upstream: Pod with no Affinity will schedule onto a node",
    ),
    pytest.param(
        make_pod("p").spec(affinity={"nodeAffinity": {}}),
        "node",
        {"foo": "bar"},
        None,
        SKIP,
        None,
        None,
        id="upstream: Pod with Affinity but nil NodeSelector will schedule onto a node",
    ),
    pytest.param(
        required(term(Exists("GPU"), NotIn("GPU", "AMD", "INTER"))),
        "node",
        {"GPU": "NVIDIA-GRID-K1"},
        None,
        None,
        None,
        None,
        id="upstream: Pod with multiple matchExpressions ANDed that matches the existing node",
    ),
    pytest.param(
        required(term(Exists("GPU"), In("GPU", "AMD", "INTER"))),
        "node",
        {"GPU": "NVIDIA-GRID-K1"},
        None,
        None,
        None,
        (UU, ERR_REASON_POD),
        id="upstream: Pod with multiple matchExpressions ANDed that doesn't match the existing "
        "node",
    ),
    pytest.param(
        required(term(In("foo", "bar", "value2")), term(In("diffkey", "wrong", "value2"))),
        "node",
        {"foo": "bar"},
        None,
        None,
        None,
        None,
        id="upstream: Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's "
        "labels and will schedule onto the node",
    ),
    pytest.param(
        required(term(Exists("foo")), selector={"foo": "bar"}),
        "node",
        {"foo": "bar"},
        None,
        None,
        None,
        None,
        id="upstream: Pod with an Affinity and a PodSpec.NodeSelector(the old thing that we "
        "are deprecating) both are satisfied, will schedule onto the node",
    ),
    pytest.param(
        required(term(Exists("foo")), selector={"foo": "bar"}),
        "node",
        {"foo": "barrrrrr"},
        None,
        None,
        None,
        (UU, ERR_REASON_POD),
        id="upstream: Pod with an Affinity matches node's labels but the PodSpec.NodeSelector"
        "(the old thing that we are deprecating) is not satisfied, won't schedule onto the "
        "node",
    ),
    pytest.param(
        required(term(NotIn("foo", "invalid value: ___@#$%^"))),
        "node",
        {"foo": "bar"},
        None,
        None,
        None,
        (UU, ERR_REASON_POD),
        id="upstream: Pod with an invalid value in Affinity term won't be scheduled onto the node",
    ),
    pytest.param(
        required(term(fields=[name_in("node1")])),
        "node1",
        {},
        None,
        None,
        frozenset({"node1"}),
        None,
        id="upstream: Pod with matchFields using In operator that matches the existing node",
    ),
    pytest.param(
        required(term(fields=[name_in("node1")])),
        "node2",
        {},
        None,
        None,
        frozenset({"node1"}),
        (UU, ERR_REASON_POD),
        id="upstream: Pod with matchFields using In operator that does not match the existing node",
    ),
    pytest.param(
        required(term(fields=[name_in("node1"), name_in("node2")]), term(In("foo", "bar"))),
        "node2",
        {"foo": "bar"},
        None,
        None,
        None,
        None,
        id="upstream: Pod with two terms: matchFields does not match, but matchExpressions matches",
    ),
    pytest.param(
        required(term(In("foo", "bar"), fields=[name_in("node1")])),
        "node2",
        {"foo": "bar"},
        None,
        None,
        frozenset({"node1"}),
        (UU, ERR_REASON_POD),
        id="upstream: Pod with one term: matchFields does not match, but matchExpressions matches",
    ),
    pytest.param(
        required(term(In("foo", "bar"), fields=[name_in("node1")])),
        "node1",
        {"foo": "bar"},
        None,
        None,
        frozenset({"node1"}),
        None,
        id="upstream: Pod with one term: both matchFields and matchExpressions match",
    ),
    pytest.param(
        required(term(fields=[name_in("node1")]), term(In("foo", "not-match-to-bar"))),
        "node2",
        {"foo": "bar"},
        None,
        None,
        None,
        (UU, ERR_REASON_POD),
        id="upstream: Pod with two terms: both matchFields and matchExpressions do not match",
    ),
    pytest.param(
        required(term(fields=[name_in("node1")]), term(fields=[name_in("node2")])),
        "node2",
        {},
        None,
        None,
        frozenset({"node1", "node2"}),
        None,
        id="upstream: Pod with two terms of node.Name affinity",
    ),
    pytest.param(
        required(term(fields=[name_in("node1"), name_in("node2")])),
        "node2",
        {"foo": "bar"},
        None,
        (UU, ERR_REASON_CONFLICT),
        None,
        (UU, ERR_REASON_POD),
        id="upstream: Pod with two conflicting mach field requirements",
    ),
    pytest.param(
        required(term(In("zone", "foo"))),
        "node2",
        {"zone": "foo"},
        added_required(term(fields=[name_in("node2")])),
        None,
        None,
        None,
        id="upstream: Matches added affinity and Pod's node affinity",
    ),
    pytest.param(
        required(term(In("zone", "bar"))),
        "node2",
        {"zone": "foo"},
        added_required(term(fields=[name_in("node2")])),
        None,
        None,
        (UU, ERR_REASON_POD),
        id="upstream: Matches added affinity but not Pod's node affinity",
    ),
    pytest.param(
        make_pod("p"),
        "node2",
        {"zone": "foo"},
        added_required(term(In("zone", "bar"))),
        None,
        None,
        (UU, ERR_REASON_ENFORCED),
        id="upstream: Doesn't match added affinity",
    ),
]


@pytest.mark.parametrize(
    ("pod", "node_name", "labels", "args", "want_pre", "want_names", "want"), FILTER
)
def test_node_affinity(
    pod: PodBuilder,
    node_name: str,
    labels: dict[str, str],
    args: dict[str, Any] | None,
    want_pre: Any,
    want_names: frozenset[str] | None,
    want: tuple[Code, str] | None,
) -> None:
    n = make_node(node_name)
    for k, v in labels.items():
        n.label(k, v)
    table = table_of([n.build()])
    plugin = NodeAffinity.new(args or {}, make_handle())
    p = pod.build()
    state = CycleState()
    result, st = plugin.pre_filter(state, p, table)
    if want_pre == SKIP:
        assert st.is_skip
        return
    if want_pre is None:
        assert st.is_success, st
    else:
        assert (st.code, st.reasons) == (want_pre[0], (want_pre[1],))
    assert (result.node_names if result is not None else None) == want_names
    res = plugin.filter(state, p, table, table.valid_rows())
    rejected = [j for j in range(len(res.reasons)) if res.rejected[0, j]]
    got = None if not rejected else (res.code_of(rejected[0]), res.reasons[rejected[0]])
    assert len(rejected) <= 1
    assert got == want


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(
            selector(foo="bar"),
            id="upstream: Matches node selector correctly even if PreFilter is not called",
        ),
        pytest.param(
            required(term(Exists("GPU"), NotIn("GPU", "AMD", "INTER"))),
            id="upstream: Matches node affinity correctly even if PreFilter is not called",
        ),
    ],
)
def test_filter_without_pre_filter(pod: PodBuilder) -> None:
    """Troupe: Filter without PreFilter's state raises (the runtime always runs
    PreFilter, and skips Filter when PreFilter returns Skip)."""
    table = table_of([make_node("node").label("foo", "bar").label("GPU", "x").build()])
    plugin = NodeAffinity.new({}, make_handle())
    with pytest.raises(StateKeyError):
        plugin.filter(CycleState(), pod.build(), table, table.valid_rows())


# ---- TestNodeAffinityPriority ------------------------------------------------------

LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}


def preferred(pb: PodBuilder, *weighted: tuple[int, dict[str, Any]]) -> PodBuilder:
    for w, t in weighted:
        pb.preferred_affinity(w, t)
    return pb


AFFINITY1 = ((2, term(In("foo", "bar"))),)
AFFINITY2 = (
    (2, term(In("foo", "bar"))),
    (4, term(In("key", "value"))),
    (5, term(In("foo", "bar"), In("key", "value"), In("az", "az1"))),
)


def labelled(*nodes: tuple[str, dict[str, str]]) -> list[NodeBuilder]:
    out = []
    for name, labels in nodes:
        n = make_node(name)
        for k, v in labels.items():
            n.label(k, v)
        out.append(n)
    return out


def added_preferred(*weighted: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    return {
        "addedAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "preference": t} for w, t in weighted
            ]
        }
    }


@pytest.mark.parametrize(
    ("pod", "nodes", "args", "want"),
    [
        # upstream scores 0 everywhere without PreScore; Troupe's PreScore skips
        pytest.param(
            make_pod("p"),
            labelled(("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL3)),
            None,
            None,
            id="upstream: all nodes are same priority as NodeAffinity is nil",
        ),
        pytest.param(
            make_pod("p"),
            labelled(("node1", LABEL1)),
            None,
            None,
            id="upstream: Skip is returned in PreScore when NodeAffinity is nil",
        ),
        # Troupe: the (API-invalid) key matches no node; scored, not an error
        pytest.param(
            preferred(make_pod("p"), (2, term(In("invalid key", "bar")))),
            labelled(("node1", LABEL1)),
            None,
            {"node1": 0},
            id="upstream: PreScore returns error when an incoming Pod has a broken affinity",
        ),
        pytest.param(
            preferred(make_pod("p"), *AFFINITY1),
            labelled(("node1", LABEL4), ("node2", LABEL2), ("node3", LABEL3)),
            None,
            {"node1": 0, "node2": 0, "node3": 0},
            id="upstream: no node matches preferred scheduling requirements in NodeAffinity of "
            "pod so all nodes' priority is zero",
        ),
        pytest.param(
            preferred(make_pod("p"), *AFFINITY1),
            labelled(("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL3)),
            None,
            {"node1": 100, "node2": 0, "node3": 0},
            id="upstream: only node1 matches the preferred scheduling requirements of pod",
        ),
        pytest.param(
            preferred(make_pod("p"), *AFFINITY2),
            labelled(("node1", LABEL1), ("node5", LABEL5), ("node2", LABEL2)),
            None,
            {"node1": 18, "node5": 100, "node2": 36},
            id="upstream: all nodes matches the preferred scheduling requirements of pod but "
            "with different priorities ",
        ),
        pytest.param(
            make_pod("p"),
            labelled(("node1", LABEL1), ("node2", LABEL2)),
            added_preferred(*AFFINITY1),
            {"node1": 100, "node2": 0},
            id="upstream: added affinity",
        ),
        pytest.param(
            preferred(make_pod("p"), *AFFINITY1),
            labelled(("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL5)),
            added_preferred((3, term(In("key", "value")))),
            {"node1": 40, "node2": 60, "node3": 100},
            id="upstream: added affinity and pod has default affinity",
        ),
        pytest.param(
            preferred(make_pod("p"), *AFFINITY2),
            labelled(("node1", LABEL1), ("node5", LABEL5), ("node2", LABEL2)),
            None,
            {"node1": 18, "node5": 100, "node2": 36},
            id="upstream: calculate the priorities correctly even if PreScore is not called",
        ),
    ],
)
def test_node_affinity_priority(
    pod: PodBuilder,
    nodes: list[NodeBuilder],
    args: dict[str, Any] | None,
    want: dict[str, int] | None,
) -> None:
    table = table_of([n.build() for n in nodes])
    plugin = NodeAffinity.new(args or {}, make_handle())
    assert run_score(plugin, pod.build(), table) == want


# ---- Test_isSchedulableAfterNodeChange ---------------------------------------------


def affinity_pod() -> PodBuilder:
    """st.MakePod().NodeAffinityIn("foo", ["bar"], NodeSelectorTypeMatchExpressions)."""
    return required(term(In("foo", "bar")))


def bare(**labels: str) -> NodeBuilder:
    n = make_node("node")
    for k, v in labels.items():
        n.label(k, v)
    return n


ENFORCED = added_required(term(In("foo", "bar")))


@pytest.mark.parametrize(
    ("args", "old", "new", "want"),
    [
        pytest.param(
            None, None, "not-a-node", QueueingHint.QUEUE, id="upstream: backoff-wrong-new-object"
        ),
        pytest.param(
            None, "not-a-node", bare(), QueueingHint.QUEUE, id="upstream: backoff-wrong-old-object"
        ),
        pytest.param(None, None, bare(), QueueingHint.SKIP, id="upstream: skip-queue-on-add"),
        pytest.param(None, None, bare(foo="bar"), QueueingHint.QUEUE, id="upstream: queue-on-add"),
        pytest.param(
            None,
            bare(),
            make_node("node").capacity(),
            QueueingHint.SKIP,
            id="upstream: skip-unrelated-changes",
        ),
        pytest.param(
            None,
            bare(),
            bare(k="v"),
            QueueingHint.SKIP,
            id="upstream: skip-unrelated-changes-on-labels",
        ),
        pytest.param(
            None,
            bare(foo="bar"),
            bare(k="v"),
            QueueingHint.SKIP,
            id="upstream: skip-labels-changes-on-node-from-suitable-to-unsuitable",
        ),
        pytest.param(
            None,
            bare(),
            bare(foo="bar"),
            QueueingHint.QUEUE,
            id="upstream: queue-on-labels-change-makes-pod-schedulable",
        ),
        pytest.param(
            ENFORCED,
            None,
            bare(),
            QueueingHint.SKIP,
            id="upstream: skip-queue-on-add-scheduler-enforced-node-affinity",
        ),
        pytest.param(
            ENFORCED,
            None,
            bare(foo="bar"),
            QueueingHint.QUEUE,
            id="upstream: queue-on-add-scheduler-enforced-node-affinity",
        ),
    ],
)
def test_is_schedulable_after_node_change(
    args: dict[str, Any] | None, old: Any, new: Any, want: QueueingHint
) -> None:
    plugin = NodeAffinity.new(args or {}, make_handle())
    (registration,) = plugin.events_to_register()
    assert registration.hint is not None
    old_obj = old.build() if isinstance(old, NodeBuilder) else old
    new_obj = new.build() if isinstance(new, NodeBuilder) else new
    assert registration.hint(affinity_pod().build(), old_obj, new_obj) is want
