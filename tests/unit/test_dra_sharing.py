"""Devices that are not simply taken whole, through the whole pipeline
(`troupe simulate`'s Simulation): partitionable devices (a pool's shared
counters), consumable capacity (devices claims share, each taking part of a
capacity), `distinctAttribute`, per-device node selection and `bindsToNode`,
as kube's allocator handles them; preemption frees what its victims' shares
and counters hold."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

from tests.unit.dra_helpers import (
    DRIVER,
    claim,
    device,
    device_class,
    node,
    placed,
    pod,
    request,
    run,
    slice_,
    template,
)
from troupe.api.quantity import parse_quantity


def counters_slice(name: str, pool: str, node_name: str, **sets: dict[str, str]) -> dict[str, Any]:
    """A slice of `pool` that only publishes its shared counters."""
    s = slice_(name, node=node_name, pool=pool, count=2)
    del s["spec"]["devices"]
    s["spec"]["sharedCounters"] = [
        {"name": k, "counters": {c: {"value": v} for c, v in counters.items()}}
        for k, counters in sets.items()
    ]
    return s


def partition(name: str, counter_set: str, memory: str, **attrs: Any) -> dict[str, Any]:
    d = device(name, **attrs)
    d["consumesCounters"] = [{"counterSet": counter_set, "counters": {"memory": {"value": memory}}}]
    return d


def partitioned_gpu(node_name: str) -> list[dict[str, Any]]:
    """One 40Gi GPU per node, published as the whole GPU or two 20Gi halves."""
    pool = f"{node_name}-gpu"
    return [
        counters_slice(f"{pool}-counters", pool, node_name, **{"gpu-0": {"memory": "40Gi"}}),
        slice_(
            f"{pool}-devices",
            partition("gpu-0", "gpu-0", "40Gi", size="whole"),
            partition("gpu-0-half-0", "gpu-0", "20Gi", size="half"),
            partition("gpu-0-half-1", "gpu-0", "20Gi", size="half"),
            node=node_name,
            pool=pool,
            count=2,
        ),
    ]


def sized(size: str) -> dict[str, Any]:
    return request("gpu", None, f'device.attributes["{DRIVER}"].size == "{size}"')


def test_partitions_of_one_gpu_use_up_its_shared_counters() -> None:
    """Two halves fit in the GPU's 40Gi; the whole GPU then does not, and a
    third half does not either."""
    got = placed(
        run(
            [
                node("n0"),
                device_class(),
                *partitioned_gpu("n0"),
                template("half", sized("half")),
                template("whole", sized("whole")),
                pod("a", template="half"),
                pod("b", template="half"),
                pod("c", template="whole"),
            ]
        )[1]
    )
    assert got["a"] == ("n0", {"gpu": [f"{DRIVER}/n0-gpu/gpu-0-half-0"]})
    assert got["b"] == ("n0", {"gpu": [f"{DRIVER}/n0-gpu/gpu-0-half-1"]})
    assert got["c"][0] is None


def test_the_whole_gpu_leaves_no_counters_for_a_half() -> None:
    got = placed(
        run(
            [
                node("n0"),
                node("n1"),
                device_class(),
                *partitioned_gpu("n0"),
                *partitioned_gpu("n1"),
                template("half", sized("half")),
                template("whole", sized("whole")),
                pod("big", template="whole"),
                pod("small", template="half"),
            ]
        )[1]
    )
    big_node = got["big"][0]
    assert big_node in ("n0", "n1")
    assert got["small"][0] not in (None, big_node)  # the other node's GPU


def test_a_pool_whose_devices_use_a_missing_counter_set_gives_nothing() -> None:
    """kube's invalid pool: a device consuming a counter set the pool does not
    publish makes the whole pool unusable, not just that device."""
    pool = "n0-gpu"
    bad = slice_(
        "n0-devices",
        partition("gpu-0", "nope", "40Gi"),
        device("plain"),
        node="n0",
        pool=pool,
        count=2,
    )
    got = placed(
        run(
            [
                node("n0"),
                device_class(),
                counters_slice("n0-counters", pool, "n0", **{"gpu-0": {"memory": "40Gi"}}),
                bad,
                template("t", request()),
                pod("p", template="t"),
            ]
        )[1]
    )
    assert got["p"][0] is None


def nic(name: str, bandwidth: str = "10G", **policy: Any) -> dict[str, Any]:
    d = device(name)
    d["allowMultipleAllocations"] = True
    cap: dict[str, Any] = {"value": bandwidth}
    if policy:
        cap["requestPolicy"] = policy
    d["capacity"] = {"bandwidth": cap}
    return d


def bandwidth(amount: str | None) -> dict[str, Any]:
    r = request("nic", None)
    if amount is not None:
        r["exactly"]["capacity"] = {"requests": {"bandwidth": amount}}
    return r


def nic_pod(name: str, template_name: str) -> dict[str, Any]:
    p = pod(name, template=template_name)
    p["spec"]["resourceClaims"][0]["name"] = "nic"
    return p


def test_claims_share_a_device_each_taking_part_of_its_capacity() -> None:
    """A 10G NIC that allows multiple allocations, in steps of 1G from 1G:
    3 pods asking 2.5G each take 3G (rounded up to the step); a fourth would
    need 12G and waits. Each allocation has its own shareID and records what
    it consumed."""
    sim, result = run(
        [
            node("n0"),
            device_class(),
            slice_("n0-nics", nic("nic-0", validRange={"min": "1G", "step": "1G"}), node="n0"),
            template("t", bandwidth("2500M")),
            *(nic_pod(f"p{i}", "t") for i in range(4)),
        ]
    )
    got = placed(result)
    on_n0 = [k for k, (n, _) in got.items() if n == "n0"]
    assert len(on_n0) == 3 and got["p3"][0] is None
    shares = set()
    for c in sim.cluster.resource_claims.values():
        alloc = c.get("status", {}).get("allocation")
        if alloc is None:
            continue
        (r,) = alloc["devices"]["results"]
        assert r["device"] == "nic-0"
        assert parse_quantity(r["consumedCapacity"]["bandwidth"]) == Fraction(3 * 10**9)
        shares.add(r["shareID"])
    assert len(shares) == 3


def test_a_share_without_a_request_takes_the_policy_default_or_all() -> None:
    """No capacity asked: the request policy's default (here 4G) is taken, so
    two fit a 10G NIC; without a policy a share takes the whole capacity."""
    objs = [
        node("n0"),
        device_class(),
        slice_(
            "n0-nics",
            nic("nic-0", default="4G", validRange={"min": "1G", "step": "1G"}),
            nic("nic-1"),
            node="n0",
        ),
        template("t", bandwidth(None)),
        *(nic_pod(f"p{i}", "t") for i in range(4)),
    ]
    got = placed(run(objs)[1])
    devices = sorted(d["nic"][0] for n, d in got.values() if n is not None)
    assert devices == [f"{DRIVER}/n0/nic-0", f"{DRIVER}/n0/nic-0", f"{DRIVER}/n0/nic-1"]


def test_an_amount_outside_the_policy_or_a_capacity_the_device_lacks_is_not_allocated() -> None:
    objs = [
        node("n0"),
        device_class(),
        slice_("n0-nics", nic("nic-0", validRange={"min": "1G", "max": "4G"}), node="n0"),
        template("big", bandwidth("5G")),
        template(
            "other",
            {
                "name": "nic",
                "exactly": {"deviceClassName": DRIVER, "capacity": {"requests": {"queues": "1"}}},
            },
        ),
        nic_pod("big", "big"),
        nic_pod("other", "other"),
    ]
    got = placed(run(objs)[1])
    assert got["big"][0] is None and got["other"][0] is None


def test_distinct_attribute_makes_two_shares_land_on_two_devices() -> None:
    """Two requests of one claim on devices claims share: without a
    constraint both shares come from the first NIC; `distinctAttribute` on the
    NIC's id makes them two NICs."""
    a = nic("nic-0")
    b = nic("nic-1")
    a["attributes"] = {"id": {"int": 0}}
    b["attributes"] = {"id": {"int": 1}}
    a["capacity"]["bandwidth"]["value"] = b["capacity"]["bandwidth"]["value"] = "10G"

    def with_constraint(constraints: Any) -> dict[str, Any]:
        reqs = [bandwidth("1G"), bandwidth("1G")]
        reqs[0]["name"], reqs[1]["name"] = "a", "b"
        return template("t", *reqs, constraints=constraints)

    def devices(constraints: Any) -> list[str]:
        p = pod("p", template="t")
        got = placed(
            run(
                [
                    node("n0"),
                    device_class(),
                    slice_("n0-nics", a, b, node="n0"),
                    with_constraint(constraints),
                    p,
                ]
            )[1]
        )
        return sorted(d for ds in got["p"][1].values() for d in ds)

    assert devices(None) == [f"{DRIVER}/n0/nic-0"] * 2
    assert devices([{"distinctAttribute": f"{DRIVER}/id"}]) == [
        f"{DRIVER}/n0/nic-0",
        f"{DRIVER}/n0/nic-1",
    ]


def test_per_device_node_selection_and_binds_to_node() -> None:
    """A slice that leaves node selection to each device: a device for n1 only
    is not used on n0; a device for all nodes that binds to the node it is
    allocated for ties the claim to that node."""
    on_n1 = device("gpu-n1")
    on_n1["nodeName"] = "n1"
    anywhere = device("gpu-any")
    anywhere["allNodes"] = True
    anywhere["bindsToNode"] = True
    s = slice_("fabric", on_n1, anywhere, pool="fabric", all_nodes=True)
    del s["spec"]["allNodes"]
    s["spec"]["perDeviceNodeSelection"] = True
    sim, result = run(
        [
            node("n0"),
            device_class(),
            s,
            template("t", request()),
            pod("p", template="t"),
        ]
    )
    got = placed(result)
    assert got["p"] == ("n0", {"gpu": [f"{DRIVER}/fabric/gpu-any"]})
    (c,) = [c for k, c in sim.cluster.resource_claims.items() if k.startswith("default/p-gpu")]
    terms = c["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0"]}]}
    ]


def test_preemption_counts_the_share_its_victim_would_free() -> None:
    """A 10G NIC holds a low-priority pod's 8G share: a pod asking 4G
    preempts it, and its claim records a share of its own."""
    held = claim("held", bandwidth("8G"))
    held["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "nic",
                        "driver": DRIVER,
                        "pool": "n0",
                        "device": "nic-0",
                        "shareID": "11111111-1111-1111-1111-111111111111",
                        "consumedCapacity": {"bandwidth": "8G"},
                    }
                ]
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
    victim["spec"]["resourceClaims"][0]["name"] = "nic"
    victim["spec"]["nodeName"] = "n0"
    victim["spec"]["priority"] = 0
    victim["status"]["phase"] = "Running"
    preemptor = nic_pod("preemptor", "t")
    preemptor["spec"]["priority"] = 100
    small = nic_pod("small", "small")
    objs = [
        node("n0"),
        device_class(),
        slice_("n0-nics", nic("nic-0"), node="n0"),
        held,
        template("t", bandwidth("4G")),
        template("small", bandwidth("2G")),
    ]
    # 8G + 2G fit in 10G: the small pod needs no victim.
    out = run(copy.deepcopy([*objs, victim, small]))[1].to_json_obj()["pods"]
    assert out["default/small"]["node"] == "n0" and out["default/victim"]["preemptedBy"] is None
    out = run(copy.deepcopy([*objs, victim, preemptor]))[1].to_json_obj()["pods"]
    assert out["default/victim"]["preemptedBy"] == "default/preemptor"
    assert out["default/preemptor"]["node"] == "n0"
    assert out["default/preemptor"]["devices"] == {"nic": [f"{DRIVER}/n0/nic-0"]}


def test_a_slice_with_devices_and_shared_counters_is_invalid() -> None:
    from troupe.dra.types import parse_dra_object

    s = slice_("s", device("gpu-0"), node="n0")
    s["spec"]["sharedCounters"] = [{"name": "x", "counters": {"memory": {"value": "1Gi"}}}]
    got = parse_dra_object("ResourceSlice", s)
    assert "only one of `devices` or `sharedCounters`" in getattr(got, "message", "")
