"""Dynamic Resource Allocation through the whole pipeline (`troupe simulate`'s
Simulation: the real scheduler, the in-memory cluster, the resourceclaim
controller played): what kube-scheduler's DynamicResources and the structured
allocator do, pod by pod."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from tests.builders import make_node
from tests.unit.dra_helpers import (
    DRIVER,
    claim,
    device,
    device_class,
    gang,
    gpus,
    node,
    placed,
    pod,
    request,
    run,
    slice_,
    template,
)
from troupe.config import default_config
from troupe.dra.types import FINALIZER
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import Simulation


def test_each_pod_gets_its_own_device_and_the_claim_records_it() -> None:
    sim, result = run(
        [
            node("n0"),
            node("n1"),
            device_class(),
            gpus("n0", 2),
            template("gpu", request()),
            *(pod(f"p{i}", template="gpu") for i in range(3)),
        ]
    )
    got = placed(result)
    assert got["p0"] == ("n0", {"gpu": [f"{DRIVER}/n0/gpu-0"]})
    assert got["p1"] == ("n0", {"gpu": [f"{DRIVER}/n0/gpu-1"]})
    assert got["p2"][0] is None
    reason = result.to_json_obj()["pods"]["default/p2"]["reason"]
    assert reason.startswith("0/2 nodes are available: 2 cannot allocate all claims.")
    # The claim the controller made for p0: allocated on n0, reserved for p0.
    (c,) = [c for k, c in sim.cluster.resource_claims.items() if k.startswith("default/p0-gpu-")]
    assert FINALIZER in c["metadata"]["finalizers"]
    alloc = c["status"]["allocation"]
    assert alloc["devices"]["results"] == [
        {"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "gpu-0"}
    ]
    assert alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "In", "values": ["n0"]}
    ]
    assert c["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p0", "uid": "uid-default-p0"}
    ]
    owner = c["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Pod", "uid-default-p0", True)


def test_a_pod_without_its_template_claim_waits_for_the_controller() -> None:
    _, result = run([node("n0"), device_class(), gpus("n0", 1), pod("p", template="missing")])
    assert result.to_json_obj()["pods"]["default/p"]["reason"] == (
        'pod "default/p": ResourceClaim not created yet'
    )


def test_a_named_claim_that_does_not_exist_is_reported_by_name() -> None:
    _, result = run([node("n0"), device_class(), gpus("n0", 1), pod("p", claim="nope")])
    assert result.to_json_obj()["pods"]["default/p"]["reason"] == (
        'resourceclaim.resource.k8s.io "nope" not found'
    )


def test_a_shared_claim_is_allocated_once_and_reserved_for_every_pod() -> None:
    sim, result = run(
        [
            node("n0"),
            node("n1"),
            device_class(),
            gpus("n1", 1),
            claim("shared", request()),
            pod("a", claim="shared"),
            pod("b", claim="shared"),
        ]
    )
    got = placed(result)
    assert got["a"] == ("n1", {"gpu": [f"{DRIVER}/n1/gpu-0"]})
    assert got["b"] == ("n1", {"gpu": [f"{DRIVER}/n1/gpu-0"]})
    c = sim.cluster.resource_claims["default/shared"]
    assert [r["name"] for r in c["status"]["reservedFor"]] == ["a", "b"]
    assert len(c["status"]["allocation"]["devices"]["results"]) == 1


def test_selectors_of_the_class_and_the_request_are_cel_with_quantities() -> None:
    big = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) > 0'
    _, result = run(
        [
            node("n0"),
            node("n1"),
            device_class(),
            slice_("s0", device("small", memory="40Gi"), node="n0"),
            slice_("s1", device("large", memory="80Gi"), node="n1"),
            template("big", request("gpu", None, big)),
            pod("p", template="big"),
        ]
    )
    assert placed(result)["p"] == ("n1", {"gpu": [f"{DRIVER}/n1/large"]})


def test_match_attribute_keeps_the_devices_of_a_request_on_one_value() -> None:
    # Two GPUs of model a and one of model b; two pods each want 2 of one model:
    # the first takes the two a's; the second cannot pair the lone b.
    _, result = run(
        [
            node("n0"),
            device_class(),
            slice_(
                "s",
                device("a1", model="a"),
                device("b1", model="b"),
                device("a2", model="a"),
                node="n0",
            ),
            template(
                "pair",
                request("gpu", 2),
                constraints=[{"requests": ["gpu"], "matchAttribute": f"{DRIVER}/model"}],
            ),
            pod("p", template="pair"),
            pod("q", template="pair"),
        ]
    )
    got = placed(result)
    assert got["p"] == ("n0", {"gpu": [f"{DRIVER}/n0/a1", f"{DRIVER}/n0/a2"]})
    assert got["q"][0] is None


def test_all_mode_takes_every_matching_device_and_needs_them_free() -> None:
    _, result = run(
        [
            node("n0"),
            device_class(),
            gpus("n0", 3),
            template(
                "all",
                {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "allocationMode": "All"}},
            ),
            template("one", request()),
            pod("whole", template="all"),
            pod("late", template="one"),
        ]
    )
    got = placed(result)
    assert got["whole"] == ("n0", {"gpu": [f"{DRIVER}/n0/gpu-{i}" for i in range(3)]})
    assert got["late"][0] is None


def test_first_available_takes_the_first_alternative_that_fits() -> None:
    req = {
        "name": "gpu",
        "firstAvailable": [
            {
                "name": "big",
                "deviceClassName": DRIVER,
                "selectors": [
                    {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "h100"'}}
                ],
            },
            {"name": "small", "deviceClassName": DRIVER, "count": 2},
        ],
    }
    sim, result = run(
        [
            node("n0"),
            device_class(),
            gpus("n0", 2, model="a100"),
            template("t", req),
            pod("p", template="t"),
        ]
    )
    assert placed(result)["p"] == ("n0", {"gpu": [f"{DRIVER}/n0/gpu-0", f"{DRIVER}/n0/gpu-1"]})
    (c,) = sim.cluster.resource_claims.values()
    assert {r["request"] for r in c["status"]["allocation"]["devices"]["results"]} == {"gpu/small"}


def _big_or_small() -> list[dict[str, Any]]:
    """n0 has two A100s (only the second choice fits), n1 one H100 (the
    first): DynamicResources scores n1 8 and n0 7."""
    req = {
        "name": "gpu",
        "firstAvailable": [
            {
                "name": "big",
                "deviceClassName": DRIVER,
                "selectors": [
                    {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "h100"'}}
                ],
            },
            {"name": "small", "deviceClassName": DRIVER, "count": 2},
        ],
    }
    return [
        node("n0"),
        node("n1"),
        device_class(),
        gpus("n0", 2, model="a100"),
        slice_("n1-gpus", device("gpu-0", model="h100"), node="n1"),
        template("t", req),
        pod("p", template="t"),
    ]


def test_a_node_with_an_earlier_first_available_choice_scores_higher() -> None:
    # As kube-scheduler's DynamicResources Score (DRAPrioritizedList, GA in 1.36).
    _, result = run(_big_or_small())
    assert placed(result)["p"] == ("n1", {"gpu": [f"{DRIVER}/n1/gpu-0"]})


def test_explain_shows_the_dynamic_resources_score() -> None:
    sim = Simulation(_big_or_small(), default_config(IN_TREE), explain=["default/p"])
    ex = asyncio.run(sim.run()).to_json_obj()["explain"]["default/p"]
    assert ex["chosen"] == "n1"
    by_node = {s["node"]: s["plugins"]["DynamicResources"] for s in ex["scores"]}
    assert by_node == {
        "n1": {"raw": 8, "normalized": 100, "weight": 2, "weighted": 200},
        "n0": {"raw": 7, "normalized": 87, "weight": 2, "weighted": 174},
    }


def test_admin_access_takes_a_device_in_use_without_using_it_up() -> None:
    _, result = run(
        [
            node("n0"),
            device_class(),
            gpus("n0", 1),
            template("t", request()),
            template("admin", request("gpu", None, admin=True)),
            pod("user", template="t"),
            pod("monitor", template="admin"),
            pod("second", template="t"),
        ]
    )
    got = placed(result)
    assert got["user"][0] == "n0"
    assert got["monitor"] == ("n0", {"gpu": [f"{DRIVER}/n0/gpu-0"]})
    assert got["second"][0] is None


def test_a_tainted_device_needs_a_toleration() -> None:
    taint = [{"key": "broken", "value": "yes", "effect": "NoSchedule"}]
    tol = [{"key": "broken", "operator": "Exists", "effect": "NoSchedule"}]
    _, result = run(
        [
            node("n0"),
            device_class(),
            slice_("s", device("gpu-0", taints=taint), node="n0"),
            template("t", request()),
            template("tolerant", request("gpu", None, tolerations=tol)),
            pod("plain", template="t"),
            pod("tolerant", template="tolerant"),
        ]
    )
    got = placed(result)
    assert got["plain"][0] is None
    assert got["tolerant"] == ("n0", {"gpu": [f"{DRIVER}/n0/gpu-0"]})


def test_network_attached_devices_reach_the_nodes_their_slice_selects() -> None:
    sel = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
        ]
    }
    sim, result = run(
        [
            node("n0", rack="r0"),
            node("n1", rack="r1"),
            device_class(),
            slice_("fabric", device("nic-0"), pool="fabric", node_selector=sel),
            template("t", request()),
            pod("p", template="t"),
        ]
    )
    assert placed(result)["p"] == ("n1", {"gpu": [f"{DRIVER}/fabric/nic-0"]})
    (c,) = sim.cluster.resource_claims.values()
    assert c["status"]["allocation"]["nodeSelector"] == sel


def test_only_the_newest_generation_of_a_pool_is_used() -> None:
    _, result = run(
        [
            node("n0"),
            device_class(),
            slice_("old", device("gone"), node="n0", pool="p", generation=1),
            slice_("new", device("fresh"), node="n0", pool="p", generation=2),
            template("t", request()),
            pod("a", template="t"),
            pod("b", template="t"),
        ]
    )
    got = placed(result)
    assert got["a"] == ("n0", {"gpu": [f"{DRIVER}/p/fresh"]})
    assert got["b"][0] is None


def test_a_selector_that_does_not_compile_gives_the_cel_error() -> None:
    _, result = run(
        [
            node("n0"),
            device_class(),
            gpus("n0", 1),
            template("t", request("gpu", None, "device.driver ==")),
            pod("p", template="t"),
        ]
    )
    reason = result.to_json_obj()["pods"]["default/p"]["reason"]
    assert "selector #0: CEL compile error: ERROR: <input>:1:17: Syntax error" in reason


def test_a_missing_device_class_is_named() -> None:
    _, result = run(
        [
            node("n0"),
            gpus("n0", 1),
            template("t", request("gpu", None, cls="nope")),
            pod("p", template="t"),
        ]
    )
    assert (
        "request gpu: device class nope does not exist"
        in result.to_json_obj()["pods"]["default/p"]["reason"]
    )


def test_devices_in_flight_are_never_given_twice_within_a_gang() -> None:
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"minMember": 3},
    }
    _, result = run(
        [
            node("n0"),
            node("n1"),
            device_class(),
            gpus("n0", 2),
            gpus("n1", 1),
            group,
            template("t", request()),
            *(pod(f"m{i}", template="t", group="g") for i in range(3)),
        ]
    )
    got = placed(result)
    devices = [d for n, ds in got.values() for d in ds.get("gpu", [])]
    assert sorted(n for n, _ in got.values() if n) == ["n0", "n0", "n1"]
    assert len(devices) == len(set(devices)) == 3


def test_a_gangs_members_are_searched_against_the_devices_earlier_members_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four members, two GPUs on each of two nodes, n0 far roomier (every
    member scores it best): each member's GPU is held while the next is
    searched, so the gang spreads over both nodes (the snapshot charges cpu,
    not devices: without the trial charge all four counted n0's two free GPUs
    and the gang failed at Reserve)."""
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"minMember": 4},
    }

    def objects() -> list[dict[str, Any]]:
        return [
            make_node("n0").capacity(cpu=256, memory="1Ti", pods=110).obj(),
            make_node("n1").capacity(cpu=8, memory="32Gi", pods=110).obj(),
            device_class(),
            gpus("n0", 2),
            gpus("n1", 2),
            group,
            template("t", request()),
            *(pod(f"m{i}", template="t", group="g") for i in range(4)),
        ]

    got = placed(run(objects())[1])
    devices = sorted(d for _, ds in got.values() for d in ds["gpu"])
    assert devices == sorted(f"{DRIVER}/n{n}/gpu-{i}" for n in (0, 1) for i in (0, 1))
    assert sorted(n for n, _ in got.values()) == ["n0", "n0", "n1", "n1"]

    from troupe.framework.runtime import Profile

    monkeypatch.setattr(Profile, "run_trial_charge", lambda self, state, pod, node: [])
    got = placed(run(objects())[1])
    assert all(n is None for n, _ in got.values())  # what the charge prevents


def test_a_claim_two_members_share_is_allocated_once_for_both() -> None:
    sim, result = run(
        [
            node("n0"),
            node("n1"),
            device_class(),
            gpus("n1", 1),
            gang("g", 2),
            claim("shared", request()),
            pod("a", claim="shared", group="g"),
            pod("b", claim="shared", group="g"),
        ]
    )
    got = placed(result)
    assert got["a"] == got["b"] == ("n1", {"gpu": [f"{DRIVER}/n1/gpu-0"]})
    c = sim.cluster.resource_claims["default/shared"]
    assert sorted(r["name"] for r in c["status"]["reservedFor"]) == ["a", "b"]


def test_upstream_138765_a_members_choice_leaves_a_later_member_its_only_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kubernetes/kubernetes#138765: a gang fails although a valid split exists,
    because each member's devices are picked on their own. Here the first
    member takes any GPU and the second only the large one; picked alone the
    first would take the large one (first in the slice) and shut the second
    out; picked together, the first gets the small one."""
    large = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("64Gi")) >= 0'

    def objects() -> list[dict[str, Any]]:
        return [
            node("n0"),
            device_class(),
            slice_("s", device("large", memory="80Gi"), device("small", memory="40Gi"), node="n0"),
            gang("g", 2),
            template("any", request()),
            template("large", request("gpu", None, large)),
            pod("first", template="any", group="g"),
            pod("second", template="large", group="g"),
        ]

    got = placed(run(objects())[1])
    assert got["first"] == ("n0", {"gpu": [f"{DRIVER}/n0/small"]})
    assert got["second"] == ("n0", {"gpu": [f"{DRIVER}/n0/large"]})

    from troupe.plugins.dynamic_resources import DynamicResources

    monkeypatch.setattr(DynamicResources, "charge", lambda self, state, pod, node: None)
    got = placed(run(objects())[1])
    assert got["first"][0] is None and got["second"][0] is None  # each picked alone


def test_preemption_counts_the_devices_its_victims_would_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The node's only GPU is held by a low-priority pod's claim: preemption
    sees that evicting the pod frees the GPU (its claim is the pod's alone),
    evicts it, and the preemptor gets the GPU once the controller has
    released the victim's claim."""
    held = claim("held", request())
    held["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "gpu-0"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0"]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "victim", "uid": "uid-default-victim"}],
    }
    victim = pod("victim", claim="held")
    victim["spec"]["nodeName"] = "n0"
    victim["spec"]["priority"] = 0
    victim["status"]["phase"] = "Running"
    preemptor = pod("preemptor", template="t")
    preemptor["spec"]["priority"] = 100

    def objects() -> list[dict[str, Any]]:
        made = [node("n0"), device_class(), gpus("n0", 1), held, template("t", request())]
        return copy.deepcopy([*made, victim, preemptor])

    sim, result = run(objects())
    out = result.to_json_obj()["pods"]
    assert out["default/victim"]["preemptedBy"] == "default/preemptor"
    assert out["default/preemptor"]["node"] == "n0"
    assert out["default/preemptor"]["devices"] == {"gpu": [f"{DRIVER}/n0/gpu-0"]}
    assert "reservedFor" not in sim.cluster.resource_claims["default/held"]["status"]

    from troupe.plugins.dynamic_resources import DynamicResources

    monkeypatch.setattr(DynamicResources, "_released", lambda self, *a: set())
    out = run(objects())[1].to_json_obj()["pods"]
    assert out["default/victim"]["preemptedBy"] is None  # devices not counted: no victim
    assert out["default/preemptor"]["node"] is None


def test_a_podgroups_own_claim_is_made_once_for_the_group_and_shared_by_its_pods() -> None:
    """scheduling.k8s.io PodGroup spec.resourceClaims: the claim from the
    template is made for the group (owned by it), allocated once, reserved for
    the group rather than each pod, and both members use its device."""
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "default", "uid": "uid-group-train"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "resourceClaims": [{"name": "fabric", "resourceClaimTemplateName": "t"}],
        },
    }
    members = []
    for name in ("w0", "w1"):
        p = pod(name)
        p["spec"]["schedulingGroup"] = {"podGroupName": "train"}
        p["spec"]["resourceClaims"] = [{"name": "fabric", "resourceClaimTemplateName": "t"}]
        members.append(p)
    made = [node("n0"), node("n1"), device_class(), gpus("n1", 1), group, template("t", request())]
    sim, result = run([*made, *members])
    got = placed(result)
    assert got["w0"] == got["w1"] == ("n1", {"fabric": [f"{DRIVER}/n1/gpu-0"]})
    (c,) = sim.cluster.resource_claims.values()
    assert c["metadata"]["name"].startswith("train-fabric-")
    assert c["metadata"]["ownerReferences"][0]["kind"] == "PodGroup"
    assert c["status"]["reservedFor"] == [
        {
            "resource": "podgroups",
            "name": "train",
            "uid": "uid-group-train",
            "apiGroup": "scheduling.k8s.io",
        }
    ]


def test_extended_requests_are_named_as_kube_scheduler_names_them() -> None:
    """container-<i>-request-<j>: i counts init containers first, j is the
    resource's place among all the container's requests, sorted; the implicit
    deviceclass.resource.kubernetes.io/<class> names every class."""
    from troupe.api.parse import parse_pod
    from troupe.dra.extended import extended_requests
    from troupe.dra.store import DeviceStore
    from troupe.dra.types import parse_dra_object

    store = DeviceStore()
    cls = device_class()
    cls["spec"]["extendedResourceName"] = "example.com/gpu"
    store.set(parse_dra_object("DeviceClass", cls))  # type: ignore[arg-type]
    p = pod("p")
    p["spec"].pop("resourceClaims")
    p["spec"]["initContainers"] = [
        {"name": "init", "image": "x", "resources": {"limits": {"example.com/gpu": "1"}}}
    ]
    p["spec"]["containers"][0]["resources"]["requests"].update(
        {"example.com/gpu": "2", f"deviceclass.resource.kubernetes.io/{DRIVER}": "1"}
    )
    got = extended_requests(store, parse_pod(p, {}))  # type: ignore[arg-type]
    assert [(r.container, r.resource, r.request, r.count) for r in got] == [
        ("init", "example.com/gpu", "container-0-request-0", 1),
        ("c", f"deviceclass.resource.kubernetes.io/{DRIVER}", "container-1-request-1", 1),
        ("c", "example.com/gpu", "container-1-request-2", 2),
    ]


def test_an_extended_resource_a_device_class_backs_is_allocated_through_dra() -> None:
    """DeviceClass extendedResourceName: a pod asking `example.com/gpu: 2` on a
    node that does not list the resource gets two of the class's devices, in
    a claim the scheduler makes (owned by the pod, annotated) and names in
    the pod's status.extendedResourceClaimStatus; a node that lists the
    resource (a device plugin) is judged by its allocatable as before."""
    cls = device_class()
    cls["spec"]["extendedResourceName"] = "example.com/gpu"
    plugin_node = make_node("dp").capacity(cpu=16, memory="64Gi", pods=110).obj()
    plugin_node["status"]["allocatable"]["example.com/gpu"] = "1"
    asker = pod("trainer")
    asker["spec"].pop("resourceClaims")
    asker["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "2"
    sim, result = run([plugin_node, node("n0"), cls, gpus("n0", 3), asker])
    out = result.to_json_obj()["pods"]["default/trainer"]
    assert out["node"] == "n0"
    assert out["devices"] == {"example.com/gpu": [f"{DRIVER}/n0/gpu-0", f"{DRIVER}/n0/gpu-1"]}
    (c,) = sim.cluster.resource_claims.values()
    assert c["metadata"]["name"].startswith("trainer-extended-resources-")
    assert c["metadata"]["annotations"] == {
        "resource.kubernetes.io/extended-resource-claim": "true"
    }
    assert c["status"]["reservedFor"] == [
        {"resource": "pods", "name": "trainer", "uid": "uid-default-trainer"}
    ]
    mapping = sim.cluster.pods["default/trainer"]["status"]["extendedResourceClaimStatus"]
    assert mapping == {
        "resourceClaimName": c["metadata"]["name"],
        "requestMappings": [
            {
                "containerName": "c",
                "resourceName": "example.com/gpu",
                "requestName": "container-0-request-1",
            }
        ],
    }


def test_without_a_class_for_it_an_extended_resource_is_judged_by_allocatable() -> None:
    asker = pod("trainer")
    asker["spec"].pop("resourceClaims")
    asker["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "2"
    _, result = run([node("n0"), device_class(), gpus("n0", 3), asker])
    reason = result.to_json_obj()["pods"]["default/trainer"]["reason"]
    assert reason.startswith("0/1 nodes are available: 1 Insufficient example.com/gpu.")


@pytest.mark.parametrize("where", ["claim", "class"])
def test_upstream_claim_and_class_parameters_cel_runtime_error(where: str) -> None:
    """upstream: claim-parameters-CEL-runtime-error, class-parameters-CEL-runtime-error
    (kube-scheduler's DynamicResources tests): the selector's error, named as
    kube names it, is the node's reason."""
    bad = 'device.attributes["gpu.example.com"].nope == 1'
    cls = device_class(DRIVER, bad) if where == "class" else device_class()
    req = request() if where == "class" else request("gpu", None, bad)
    _, result = run([node("n0"), cls, gpus("n0", 1), claim("c", req), pod("p", claim="c")])
    reason = result.to_json_obj()["pods"]["default/p"]["reason"]
    who = f"class {DRIVER}" if where == "class" else "claim default/c"
    assert f"{who}: selector #0: CEL runtime error: no such key: nope" in reason


def test_a_pod_waiting_for_a_dra_backed_extended_resource_is_woken_when_devices_free() -> None:
    """The only GPU is held by another pod's claim; when that claim gives it up
    (the controller deallocates it), the pod asking `example.com/gpu: 1` the old
    way is queued again, as a pod with a claim would be; a pod using no
    device is not."""
    from tests.unit.plugins.conftest import make_handle
    from troupe.api.parse import parse_pod
    from troupe.dra.types import parse_dra_object
    from troupe.framework.events import EventResource, QueueingHint
    from troupe.plugins.dynamic_resources import DynamicResources

    cls = device_class()
    cls["spec"]["extendedResourceName"] = "example.com/gpu"
    handle = make_handle()
    handle.devices.set(parse_dra_object("DeviceClass", cls))  # type: ignore[arg-type]
    plugin = DynamicResources(handle)
    asker = pod("legacy")
    asker["spec"].pop("resourceClaims")
    asker["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "1"
    plain = pod("plain")
    plain["spec"].pop("resourceClaims")
    held = claim("held", request())
    held["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "n0", "device": "gpu-0"}]
            }
        }
    }
    old, new = (
        parse_dra_object("ResourceClaim", held),
        parse_dra_object("ResourceClaim", claim("held", request())),
    )
    (hint,) = [
        e.hint
        for e in plugin.events_to_register()
        if e.event.resource == EventResource.RESOURCE_CLAIM and e.hint is not None
    ]
    assert hint(parse_pod(asker, {}), old, new) == QueueingHint.QUEUE  # type: ignore[arg-type]
    assert hint(parse_pod(plain, {}), old, new) == QueueingHint.SKIP  # type: ignore[arg-type]


def test_the_implicit_class_resource_name_is_allocated_through_dra() -> None:
    """deviceclass.resource.kubernetes.io/<class>: every class backs it, with
    no extendedResourceName (kube's implicit-extended-resource-name)."""
    asker = pod("p")
    asker["spec"].pop("resourceClaims")
    asker["spec"]["containers"][0]["resources"]["requests"][
        f"deviceclass.resource.kubernetes.io/{DRIVER}"
    ] = "1"
    _, result = run([node("n0"), device_class(), gpus("n0", 2), asker])
    out = result.to_json_obj()["pods"]["default/p"]
    assert out["node"] == "n0"
    assert out["devices"] == {
        f"deviceclass.resource.kubernetes.io/{DRIVER}": [f"{DRIVER}/n0/gpu-0"]
    }


def test_nothing_is_taken_from_a_pool_being_published() -> None:
    """A pool whose newest generation has fewer (or more) slices than its
    resourceSliceCount is a driver in the middle of publishing it: kube's
    allocator takes nothing from it until it is whole."""
    half = slice_("n0-a", device("gpu-0"), node="n0", pool="n0", count=2)
    objs = [node("n0"), device_class(), half, template("t", request()), pod("p", template="t")]
    assert placed(run(copy.deepcopy(objs))[1])["p"][0] is None
    other = slice_("n0-b", device("gpu-1"), node="n0", pool="n0", count=2)
    assert placed(run([*copy.deepcopy(objs), other])[1])["p"][0] == "n0"
    third = slice_("n0-c", device("gpu-2"), node="n0", pool="n0", count=2)
    assert placed(run([*copy.deepcopy(objs), other, third])[1])["p"][0] is None


def test_a_claim_an_earlier_attempt_made_for_extended_resources_is_deleted_first() -> None:
    """upstream: extended-resource-name-with-resources-has-claim and
    -delete-claim: a scheduler that stopped between making the claim for a
    pod's extended resources and binding the pod left it allocated; the next
    attempt rejects the nodes, PostFilter deletes it (its finalizer first),
    and the attempt after that makes a claim anew."""
    cls = device_class()
    cls["spec"]["extendedResourceName"] = "example.com/gpu"
    asker = pod("trainer")
    asker["spec"].pop("resourceClaims")
    asker["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "1"
    asker["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "trainer-extended-resources-old",
        "requestMappings": [
            {
                "containerName": "c",
                "resourceName": "example.com/gpu",
                "requestName": "container-0-request-1",
            }
        ],
    }
    old = claim("trainer-extended-resources-old", request("container-0-request-1", 1))
    old["metadata"]["finalizers"] = [FINALIZER]
    old["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "container-0-request-1",
                        "driver": DRIVER,
                        "pool": "n0",
                        "device": "gpu-0",
                    }
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "uid-default-trainer"}],
    }
    sim, result = run([node("n0"), cls, gpus("n0", 1), old, asker])
    out = result.to_json_obj()["pods"]["default/trainer"]
    assert out["node"] == "n0" and out["devices"] == {"example.com/gpu": [f"{DRIVER}/n0/gpu-0"]}
    assert "default/trainer-extended-resources-old" not in sim.cluster.resource_claims
    (first, *_) = [e for e in sim.cluster.events if e.reason == "FailedScheduling"]
    assert "cannot schedule extended resource claim" in first.message
