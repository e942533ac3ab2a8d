"""Kubernetes' own gang API (scheduling.k8s.io PodGroups, pods' spec.schedulingGroup):
read, keyed apart from troupe-plugins' groups, scheduled with the same gang
semantics, and given the status kube-scheduler writes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from troupe.api.parse import parse_pod, parse_pod_group
from troupe.api.types import GroupKey, InvalidObject, PodGroup, PodKey, split_group_key
from troupe.config import default_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler
from troupe.framework.status import Code
from troupe.plugins.coscheduling.status import compute_native_status
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import load_objects, simulate

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gang"
TRAIN = GroupKey("scheduling.k8s.io/default/train")


def native(
    name: str = "train",
    policy: dict[str, Any] | None = None,
    version: str = "v1beta1",
    generation: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "generation": generation},
        "spec": {"schedulingPolicy": policy if policy is not None else {"gang": {"minCount": 3}}}
        | spec,
    }


# ---- reading ------------------------------------------------------------------------------


def test_a_native_gang_reads_as_a_group_of_min_count() -> None:
    ref = {"workloadName": "job", "templateName": "workers"}
    pg = parse_pod_group(native(workloadRef=ref, generation=4))
    assert isinstance(pg, PodGroup)
    assert (pg.key, pg.min_member, pg.gang, pg.native) == (TRAIN, 3, True, True)
    assert (pg.generation, pg.template_ref) == (4, ("job", "workers"))
    assert pg.min_resources == {} and pg.schedule_timeout_seconds is None


# Each version's own fields (k8s.io/api scheduling/v1beta1 and v1alpha3 types.go,
# Kubernetes 1.37: workloadRef {workloadName, templateName}, disruptionMode an
# object, preemptionPolicy; v1alpha2, 1.36: podGroupTemplateRef.workload
# {workloadName, podGroupTemplateName}, disruptionMode a string, no
# preemptionPolicy). A field of another version is not read, as the API server
# would have dropped it.
@pytest.mark.parametrize(
    ("version", "spec", "want"),
    [
        (
            "v1beta1",
            {
                "workloadRef": {"workloadName": "job", "templateName": "workers"},
                "disruptionMode": {"all": {}},
                "preemptionPolicy": "Never",
            },
            (("job", "workers"), "All", "Never"),
        ),
        (
            "v1alpha3",
            {
                "workloadRef": {"workloadName": "job", "templateName": "workers"},
                "disruptionMode": {"all": {}},
                "preemptionPolicy": "Never",
            },
            (("job", "workers"), "All", "Never"),
        ),
        (
            "v1alpha2",
            {
                "podGroupTemplateRef": {
                    "workload": {"workloadName": "job", "podGroupTemplateName": "workers"}
                },
                "disruptionMode": "PodGroup",
                "preemptionPolicy": "Never",
            },
            (("job", "workers"), "All", ""),
        ),
        (
            "v1alpha3",
            {"podGroupTemplateRef": {"workload": {"workloadName": "job"}}},
            (None, "Single", ""),
        ),
        (
            "v1alpha2",
            {"workloadRef": {"workloadName": "job", "templateName": "workers"}},
            (None, "Single", ""),
        ),
    ],
)
def test_each_version_is_read_with_its_own_fields(
    version: str, spec: dict[str, Any], want: tuple[Any, str, str]
) -> None:
    pg = parse_pod_group(native(version=version, **spec))
    assert isinstance(pg, PodGroup), pg
    assert pg.api_version == f"scheduling.k8s.io/{version}"
    assert (pg.template_ref, pg.disruption_mode, pg.preemption_policy) == want


def test_a_v1alpha3_group_is_scheduled_as_a_v1beta1_one() -> None:
    pg = parse_pod_group(native(version="v1alpha3", policy={"gang": {"minCount": 2}}))
    assert isinstance(pg, PodGroup)
    assert (pg.key, pg.min_member, pg.gang, pg.native) == (TRAIN, 2, True, True)


def test_a_basic_group_is_no_gang() -> None:
    pg = parse_pod_group(native(policy={"basic": {}}, version="v1alpha2"))
    assert isinstance(pg, PodGroup)
    assert (pg.min_member, pg.gang, pg.api_version) == (1, False, "scheduling.k8s.io/v1alpha2")


@pytest.mark.parametrize(
    ("policy", "version", "problem"),
    [
        ({}, "v1beta1", "spec.schedulingPolicy: exactly one of basic or gang must be set"),
        (
            {"basic": {}, "gang": {"minCount": 2}},
            "v1beta1",
            "spec.schedulingPolicy: exactly one of basic or gang must be set",
        ),
        ({"gang": {}}, "v1beta1", "spec.schedulingPolicy.gang.minCount: Required value"),
        (
            {"gang": {"minCount": 0}},
            "v1alpha2",
            "spec.schedulingPolicy.gang.minCount: Invalid value: 0: must be greater than or "
            "equal to 1",
        ),
        ({"gang": {"minCount": 2}}, "v1", 'apiVersion: Unsupported value: "scheduling.k8s.io/v1"'),
    ],
)
def test_a_malformed_native_group_names_the_field(
    policy: dict[str, Any], version: str, problem: str
) -> None:
    bad = parse_pod_group(native(policy=policy, version=version))
    assert isinstance(bad, InvalidObject)
    assert bad.message.startswith(problem)


def test_group_keys_of_the_two_apis_never_collide() -> None:
    crd = parse_pod_group(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"minMember": 3},
        }
    )
    nat = parse_pod_group(native())
    assert isinstance(crd, PodGroup) and isinstance(nat, PodGroup)
    assert crd.key == "default/train" != nat.key
    assert split_group_key(crd.key) == (False, "default", "train")
    assert split_group_key(nat.key) == (True, "default", "train")
    by_label = make_pod("a").group("train").build()
    by_spec = make_pod("b").scheduling_group("train").build()
    assert (by_label.group_key, by_spec.group_key) == (crd.key, nat.key)


def test_a_pod_naming_both_apis_belongs_to_neither_and_says_so() -> None:
    pod = parse_pod(
        make_pod("p").scheduling_group("a").label("pod-group.scheduling.sigs.k8s.io", "b").obj()
    )
    assert not isinstance(pod, InvalidObject)
    assert pod.group_key is None
    assert pod.group_conflict == (
        'pod names two PodGroups: "scheduling.k8s.io/default/a" by '
        'spec.schedulingGroup.podGroupName and "default/b" by label '
        "pod-group.scheduling.sigs.k8s.io; a pod may join only one"
    )


# ---- status, as kube-scheduler's updatePodGroupCondition ------------------------------------


def _group(conditions: list[dict[str, Any]] | None = None, version: str = "v1beta1") -> PodGroup:
    obj = native(version=version)
    if conditions is not None:
        obj["status"] = {"conditions": conditions}
    pg = parse_pod_group(obj)
    assert isinstance(pg, PodGroup)
    return pg


def test_status_true_once_min_count_is_placed() -> None:
    st = compute_native_status(_group(), 3, None, 60.0)
    assert st == {
        "conditions": [
            {
                "type": "PodGroupInitiallyScheduled",
                "status": "True",
                "observedGeneration": 1,
                "lastTransitionTime": "1970-01-01T00:01:00Z",
                "reason": "Scheduled",
                "message": "",
            }
        ]
    }


def test_status_false_with_the_reason_and_kept_transition_time() -> None:
    old = {
        "type": "PodGroupScheduled",
        "status": "False",
        "lastTransitionTime": "2024-01-01T00:00:00Z",
        "reason": "Unschedulable",
        "message": "before",
    }
    other = {"type": "DisruptionTarget", "status": "False", "reason": "x", "message": ""}
    pg = _group([other, old], version="v1alpha2")
    st = compute_native_status(pg, 1, ("now", Code.UNSCHEDULABLE), 99.0)
    assert st is not None
    assert st["conditions"][0] == other
    cond = st["conditions"][1]
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", "now")
    assert cond["lastTransitionTime"] == "2024-01-01T00:00:00Z"  # the status did not flip
    err = compute_native_status(pg, 1, ("boom", Code.ERROR), 99.0)
    assert err is not None and err["conditions"][1]["reason"] == "SchedulerError"


def test_status_never_goes_back_from_true_and_untried_groups_say_nothing() -> None:
    done = {"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled"}
    assert compute_native_status(_group([done]), 0, ("lost", Code.UNSCHEDULABLE), 1.0) is None
    assert compute_native_status(_group(), 0, None, 1.0) is None


# ---- the simulator: fixtures ----------------------------------------------------------------


def run(name: str) -> dict[str, Any]:
    objects = load_objects([str(FIXTURES / name)])
    return simulate(objects, default_config(IN_TREE)).to_json_obj()


def condition(out: dict[str, Any], key: str) -> dict[str, Any]:
    (cond,) = out["podGroups"][key]["conditions"]
    return cond  # type: ignore[no-any-return]


def test_sim_native_gang_that_fits_binds_and_is_scheduled() -> None:
    out = run("native-fits.yaml")
    assert all(v["node"] for v in out["pods"].values())
    assert len({v["node"] for v in out["pods"].values()}) == 3
    cond = condition(out, TRAIN)
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "PodGroupInitiallyScheduled",
        "True",
        "Scheduled",
    )


def test_sim_native_gang_that_does_not_fit_binds_nothing_and_says_why() -> None:
    out = run("native-too-big.yaml")
    why = 'PodGroup "scheduling.k8s.io/default/train": 3 of minCount 4 pods fit; 0/3 nodes'
    for v in out["pods"].values():
        assert v["node"] is None and v["reason"].startswith(why)
    assert all(u["cpu"]["requested"] == 0 for u in out["nodes"].values())
    cond = condition(out, TRAIN)
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "PodGroupScheduled",
        "False",
        "Unschedulable",
    )
    assert cond["message"].startswith(why)


def test_sim_native_gang_short_of_min_count_waits_untried() -> None:
    out = run("native-short.yaml")
    for v in out["pods"].values():
        assert v["node"] is None
        assert v["reason"] == (
            'PodGroup "scheduling.k8s.io/default/train" has fewer pods than minCount 4'
        )
    assert out["podGroups"][TRAIN]["conditions"] == []


def test_sim_basic_group_schedules_pod_by_pod() -> None:
    out = run("native-basic.yaml")
    placed = [k for k, v in out["pods"].items() if v["node"]]
    assert len(placed) == 2
    (left,) = [v for v in out["pods"].values() if not v["node"]]
    assert left["reason"] == (
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: "
        "2 No preemption victims found for incoming pod.."
    )
    assert condition(out, "scheduling.k8s.io/default/web")["status"] == "True"


def test_sim_same_name_in_both_apis_are_two_groups() -> None:
    out = run("native-and-crd-same-name.yaml")
    pods = out["pods"]
    assert pods["default/native-0"]["node"] and pods["default/native-1"]["node"]
    for k in ("default/crd-0", "default/crd-1"):
        assert pods[k]["node"] is None
        assert pods[k]["reason"] == 'PodGroup "default/train" has fewer pods than minMember 3'
    both = pods["default/both"]
    assert both["node"] is None
    assert '"scheduling.k8s.io/default/train"' in both["reason"]
    assert '"default/train"' in both["reason"]
    assert out["podGroups"][TRAIN]["scheduled"] == 2
    assert out["podGroups"]["default/train"]["scheduled"] == 0


# ---- the scheduler: groups that arrive late or change ---------------------------------------


def scheduler(cpu: int = 2) -> tuple[Scheduler, InMemoryCluster, VirtualClock]:
    cluster = InMemoryCluster()
    clock = VirtualClock()
    s = Scheduler(default_config(IN_TREE), cluster, clock, registry=IN_TREE)
    cluster.on_pod_bound = lambda key, node: s.on_pod(cluster.pods[key])
    s.on_node(make_node("n0").capacity(cpu=cpu, memory="8Gi", pods=110).build().raw)  # type: ignore[arg-type]
    return s, cluster, clock


def add(s: Scheduler, cluster: InMemoryCluster, name: str) -> PodKey:
    obj = make_pod(name).scheduling_group("train").req(cpu="1").obj()
    key = PodKey(f"default/{name}")
    cluster.pods[key] = obj
    s.on_pod(obj)
    return key


def put_group(s: Scheduler, cluster: InMemoryCluster, obj: dict[str, Any]) -> None:
    old = cluster.pod_groups.get(TRAIN)
    if old is not None and "status" in old:
        obj = obj | {"status": old["status"]}
    cluster.pod_groups[TRAIN] = obj
    s.on_pod_group(obj)


async def drain(s: Scheduler, clock: VirtualClock, seconds: float = 2.0) -> None:
    while s.schedule_one():
        pass
    await s.settle()
    clock.advance_by(seconds)  # coalesced status writes go out
    await s.settle()
    while s.schedule_one():
        pass
    await s.settle()


def test_group_created_after_its_pods_releases_them() -> None:
    s, cluster, clock = scheduler()

    async def go() -> None:
        keys = [add(s, cluster, f"train-{i}") for i in range(2)]
        await drain(s, clock)
        assert all(not cluster.pods[k]["spec"].get("nodeName") for k in keys)
        assert s.last_failure[keys[0]] == ('PodGroup "scheduling.k8s.io/default/train" not found')
        put_group(s, cluster, native(policy={"gang": {"minCount": 2}}))
        await drain(s, clock)
        assert all(cluster.pods[k]["spec"].get("nodeName") == "n0" for k in keys)
        (cond,) = cluster.pod_groups[TRAIN]["status"]["conditions"]
        assert (cond["status"], cond["reason"], cond["observedGeneration"]) == (
            "True",
            "Scheduled",
            1,
        )

    asyncio.run(go())


def test_min_count_raised_while_pods_wait() -> None:
    s, cluster, clock = scheduler(cpu=2)

    async def go() -> None:
        put_group(s, cluster, native(policy={"gang": {"minCount": 3}}))
        keys = [add(s, cluster, f"train-{i}") for i in range(3)]
        await drain(s, clock)
        # Two of three fit: nobody binds, the group says why.
        assert all(not cluster.pods[k]["spec"].get("nodeName") for k in keys)
        (cond,) = cluster.pod_groups[TRAIN]["status"]["conditions"]
        assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
        assert "2 of minCount 3 pods fit" in cond["message"]
        # minCount raised to 4: back to waiting for a fourth pod.
        put_group(s, cluster, native(policy={"gang": {"minCount": 4}}, generation=2))
        await drain(s, clock)
        assert s.last_failure[keys[0]] == (
            'PodGroup "scheduling.k8s.io/default/train" has fewer pods than minCount 4'
        )
        # A fourth pod and room for all: the gang binds whole.
        s.on_node(make_node("n1").capacity(cpu=2, memory="8Gi", pods=110).build().raw)  # type: ignore[arg-type]
        keys.append(add(s, cluster, "train-3"))
        await drain(s, clock)
        assert all(cluster.pods[k]["spec"].get("nodeName") for k in keys)
        (cond,) = cluster.pod_groups[TRAIN]["status"]["conditions"]
        assert (cond["status"], cond["reason"], cond["observedGeneration"]) == (
            "True",
            "Scheduled",
            2,
        )

    asyncio.run(go())


def test_status_writes_are_coalesced_for_a_native_gang() -> None:
    s, cluster, clock = scheduler(cpu=64)

    async def go() -> None:
        put_group(s, cluster, native(policy={"gang": {"minCount": 40}}))
        for i in range(40):
            add(s, cluster, f"train-{i}")
        await drain(s, clock)
        assert sum(1 for o in cluster.pods.values() if o["spec"].get("nodeName")) == 40
        assert cluster.status_patches == 1

    asyncio.run(go())
