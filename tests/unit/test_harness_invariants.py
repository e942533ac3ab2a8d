"""The live harness's invariants (tests/harness/invariants.py) find what they
are for on hand-made final states, and stay quiet where it holds."""

from __future__ import annotations

from typing import Any

from apiserver import ApiServer, WriteRecord
from tests.builders import make_node, make_pod
from tests.harness import invariants as inv
from tests.harness.live import plurals
from tests.harness.scenarios import (
    GPU,
    GPU_QUOTA,
    Scenario,
    allocated,
    composite_rush,
    elastic_quota,
    fresh_claim,
    gpu_node,
    native_group,
    pod,
    pod_group,
)
from tests.unit.dra_helpers import device, device_class, request, slice_

EMPTY = Scenario("hand-made", (), ())


def state(*objects: dict[str, Any], writes: list[WriteRecord] | None = None, **kw: Any) -> Any:
    by: dict[str, list[dict[str, Any]]] = {}
    plural = {
        "Pod": "pods",
        "Node": "nodes",
        "ResourceClaim": "resourceclaims",
        "ResourceSlice": "resourceslices",
        "PodGroup": "podgroups",
        "DeviceClass": "deviceclasses",
        "ElasticQuota": "elasticquotas",
    }
    native = {"PodGroup": inv.NATIVE_PODGROUPS, "CompositePodGroup": inv.COMPOSITE_PODGROUPS}
    for o in objects:
        kind = o["kind"]
        if str(o.get("apiVersion", "")).startswith("scheduling.k8s.io/"):
            by.setdefault(native[kind], []).append(o)
        else:
            by.setdefault(plural[kind], []).append(o)
    return inv.FinalState(kw.pop("scenario", EMPTY), by, writes or [], **kw)


def bind(name: str, t: float = 0.0, status: int = 201) -> WriteRecord:
    path = f"/api/v1/namespaces/default/pods/{name}/binding"
    return WriteRecord("bind", path, "pods", "binding", "default", name, "", "", status, t)


def running(name: str, node: str, cpu: str = "1") -> dict[str, Any]:
    return make_pod(name).req(cpu=cpu).node(node).obj()


def test_a_gpu_in_four_claims_is_found() -> None:
    objs = gpu_node("g0", 1)
    claims = [allocated(fresh_claim(f"c{i}", request()), "g0", "gpu-0", f"p{i}") for i in range(4)]
    got = inv.devices_not_given_twice(state(*objs, *claims))
    assert got == [
        "device gpu.example.com/g0/gpu-0 allocated to 4 claims: default/c0, "
        "default/c1, default/c2, default/c3"
    ]
    assert inv.devices_not_given_twice(state(*objs, claims[0])) == []


def test_a_shared_device_may_serve_claims_up_to_its_capacity() -> None:
    nic = device("nic-0")
    nic["allowMultipleAllocations"] = True
    nic["capacity"] = {"bandwidth": {"value": "10G"}}
    sl = slice_("s", nic, node="n0", pool="n0", driver="nic.example.com")

    def share(i: int) -> dict[str, Any]:
        c = fresh_claim(f"net-{i}", request("nic", cls="nic.example.com"))
        c["metadata"]["namespace"] = "default"
        r = {"request": "nic", "driver": "nic.example.com", "pool": "n0", "device": "nic-0"}
        c["status"] = {
            "allocation": {"devices": {"results": [r | {"consumedCapacity": {"bandwidth": "3G"}}]}}
        }
        return c

    assert inv.devices_not_given_twice(state(sl, *(share(i) for i in range(3)))) == []
    (got,) = inv.devices_not_given_twice(state(sl, *(share(i) for i in range(4))))
    assert "bandwidth 12000000000 consumed > capacity 10G" in got


def test_a_bound_pod_whose_claim_is_not_allocated_is_found() -> None:
    p = make_pod("p").node("g0").spec(resourceClaims=[{"name": "c", "resourceClaimName": "c"}])
    got = inv.bound_pods_hold_their_claims(state(p.obj(), fresh_claim("c", request())))
    assert got == [
        "pod default/p bound on g0: its claim c is not allocated",
        "pod default/p bound on g0: claim c not reserved for it",
    ]


def test_a_pod_bound_before_its_devices_are_ready_is_found() -> None:
    c = allocated(fresh_claim("c", request()), "f0", "gpu-0", "p")
    c["status"]["allocation"]["devices"]["results"][0]["bindingConditions"] = ["attached"]
    p = make_pod("p").node("f0").spec(resourceClaims=[{"name": "c", "resourceClaimName": "c"}])
    objs = (p.obj(), c)
    (never,) = inv.binds_wait_for_binding_conditions(state(*objs, writes=[bind("p", 10.0)]))
    assert "never readied" in never
    early = state(*objs, writes=[bind("p", 10.0)], ready_at={"default/c": 12.0})
    assert inv.binds_wait_for_binding_conditions(early) == [
        "pod default/p bound 2.00s before the driver readied claim default/c"
    ]
    late = state(*objs, writes=[bind("p", 13.0)], ready_at={"default/c": 12.0})
    assert inv.binds_wait_for_binding_conditions(late) == []


def test_over_commit_counts_cpu_pods_and_isolated_cores_apart() -> None:
    node = make_node("n").capacity(cpu=4, memory="8Gi", pods=2).ext("troupe.dev/isolated-cpu", 2)
    ok = [running("a", "n", "3"), make_pod("iso").req(cpu="2").isolated().node("n").obj()]
    assert inv.nodes_not_overcommitted(state(node.obj(), *ok)) == []
    over = [*ok, running("b", "n", "1")]
    assert inv.nodes_not_overcommitted(state(node.obj(), *over)) == [
        "node n over-committed: pods 3 > 2"
    ]
    iso = [make_pod(f"i{i}").req(cpu="2").isolated().node("n").obj() for i in range(2)]
    assert inv.nodes_not_overcommitted(state(node.obj(), *iso)) == [
        "node n over-committed: troupe.dev/isolated-cpu 4 > 2"
    ]


def test_a_gang_below_quorum_a_double_bind_and_a_silent_pending_pod_are_found() -> None:
    members = [make_pod(f"m{i}").group("g") for i in range(3)]
    objs = [
        pod_group("g", 3),
        members[0].node("n").obj(),
        members[1].node("n").obj(),
        members[2].obj(),
    ]
    assert inv.gangs_all_or_nothing(state(*objs)) == [
        "gang default/g: 2 bound, fewer than minMember 3"
    ]
    assert inv.no_pod_bound_twice(state(writes=[bind("p"), bind("p", status=409), bind("p")])) == [
        "pod default/p bound 2 times"
    ]
    (silent,) = inv.pending_pods_have_a_reason(state(members[2].obj()))
    assert silent.startswith("pod default/m2 is pending without a reason")
    told = members[2].obj()
    told["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no"}
    ]
    assert inv.pending_pods_have_a_reason(state(told)) == []


def test_placement_class_is_compared_with_the_simulator_and_the_expectation() -> None:
    pods = tuple(make_pod(f"p{i}").label("harness.troupe.dev/class", "gpu").obj() for i in range(3))
    sc = Scenario("s", (), pods, expect={"gpu": 2})
    live = [pods[0] | {"spec": {**pods[0]["spec"], "nodeName": "n"}}, pods[1], pods[2]]
    st = state(*live, scenario=sc, simulated={"gpu": 2})
    assert inv.same_placement_class_as_simulate(st) == ["class gpu: 1 bound live, 2 simulated"]
    assert inv.expected_placement(st) == ["class gpu: 1 bound, expected 2"]
    assert set(inv.check(st)) >= {"same-placement-class-as-simulate", "expected-placement"}


def test_a_team_over_its_quota_counts_pods_and_claimed_devices_once() -> None:
    quota = elastic_quota("default", {"cpu": 1}, {"cpu": 2, GPU_QUOTA: 1})
    shared = allocated(fresh_claim("c0", request()), "g0", "gpu-0", "p0")
    pods = [
        make_pod(f"p{i}")
        .req(cpu="1")
        .node("g0")
        .spec(resourceClaims=[{"name": "gpu", "resourceClaimName": "c0"}])
        .obj()
        for i in range(2)
    ]
    objs = (quota, device_class(GPU), *gpu_node("g0", 2), shared, *pods)
    assert inv.quotas_not_exceeded(state(*objs)) == []  # two pods, one shared claim: 1 GPU
    second = allocated(fresh_claim("c1", request()), "g0", "gpu-1", "p2")
    third = (
        make_pod("p2")
        .req(cpu="1")
        .node("g0")
        .spec(resourceClaims=[{"name": "gpu", "resourceClaimName": "c1"}])
        .obj()
    )
    assert inv.quotas_not_exceeded(state(*objs, second, third)) == [
        "quota default over max: cpu 3 > 2",
        f"quota default over max: {GPU_QUOTA} 2 > 1",
    ]


def native_pods(group: str, bound: int, total: int = 2) -> list[dict[str, Any]]:
    """`total` members of native PodGroup `group`, the first `bound` on node n."""
    out = []
    for i in range(total):
        b = pod(f"{group}-{i}").scheduling_group(group)
        out.append((b.node("n") if i < bound else b).obj())
    return out


def composite_rush_state(bound: dict[str, int]) -> Any:
    """composite-rush's groups, `bound[child]` of each child's two pods bound."""
    groups = [o for o in composite_rush().setup if o["kind"] != "Node"]
    kids = ("a", "b", "c", "d", "h1", "h2")
    return state(*groups, *(p for k in kids for p in native_pods(k, bound.get(k, 0))))


def test_a_gang_of_groups_bound_short_of_its_minGroupCount_is_found() -> None:
    ok = {"a": 2, "b": 2, "h1": 2}
    assert inv.composites_all_or_nothing(composite_rush_state(ok)) == []
    assert inv.gangs_all_or_nothing(composite_rush_state(ok)) == []
    # big's child c bound whole while d never fits: big is 1 of 2 groups
    assert inv.composites_all_or_nothing(composite_rush_state({**ok, "c": 2})) == [
        "composite default/big: 2 pods bound, 1 of minGroupCount 2 children satisfied"
    ]
    # one of a's two pods: a short of its minCount, so job is 1 of 2 groups
    st = composite_rush_state({**ok, "a": 1})
    assert inv.gangs_all_or_nothing(st) == ["gang default/a: 1 bound, fewer than minCount 2"]
    assert inv.composites_all_or_nothing(st) == [
        "composite default/job: 3 pods bound, 1 of minGroupCount 2 children satisfied"
    ]
    assert {"gangs-all-or-nothing", "composites-all-or-nothing"} <= set(inv.check(st))
    # half needs one group of two: h1 whole is enough, nothing bound is too
    assert inv.composites_all_or_nothing(composite_rush_state({"a": 2, "b": 2})) == []


def test_a_nested_composite_counts_for_its_parent_by_its_own_minGroupCount() -> None:
    # root (1 of) -> mid (2 of) -> x, y; and root -> z
    objs = [
        native_group("root", 1, "", "w", composite=True),
        native_group("mid", 2, "root", "w", composite=True),
        native_group("x", 2, "mid", "w"),
        native_group("y", 2, "mid", "w"),
        native_group("z", 2, "root", "w"),
    ]
    x_only = state(*objs, *native_pods("x", 2), *native_pods("y", 0), *native_pods("z", 0))
    assert inv.composites_all_or_nothing(x_only) == [
        "composite default/mid: 2 pods bound, 1 of minGroupCount 2 children satisfied",
        "composite default/root: 2 pods bound, 0 of minGroupCount 1 children satisfied",
    ]
    # z whole satisfies root; mid's own rule still holds x alone to account
    x_and_z = state(*objs, *native_pods("x", 2), *native_pods("y", 0), *native_pods("z", 2))
    assert inv.composites_all_or_nothing(x_and_z) == [
        "composite default/mid: 2 pods bound, 1 of minGroupCount 2 children satisfied"
    ]
    whole = state(*objs, *native_pods("x", 2), *native_pods("y", 2), *native_pods("z", 0))
    assert inv.composites_all_or_nothing(whole) == []


def test_the_live_run_reads_each_kind_of_podgroup_by_its_own_resource() -> None:
    """Served together, `podgroups` alone names either API group: the final
    state reads scheduler-plugins' and Kubernetes' PodGroups each by full name."""
    store = ApiServer(podgroups=True, native_podgroups="v1alpha3").store
    got = {key: store.resolve(res).group for key, res in plurals(composite_rush()).items()}
    assert got["podgroups"] == "scheduling.x-k8s.io"
    assert got[inv.NATIVE_PODGROUPS] == got[inv.COMPOSITE_PODGROUPS] == "scheduling.k8s.io"
    assert inv.COMPOSITE_PODGROUPS not in plurals(Scenario("crd-only", (), ()))
