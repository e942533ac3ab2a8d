"""Devices with binding conditions (a driver readies them, e.g. attaches a
fabric GPU, before the pod may bind), through the whole pipeline: the
allocation carries the conditions and an allocationTimestamp, PreBind waits
for the driver's status.devices (the simulator plays a driver that readies
them at once), and a failure condition or the binding timeout sends the pod
back to be tried again, its claim given up."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

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
from troupe.config.decode import parse_config
from troupe.plugins.registry import IN_TREE
from troupe.tools import simulate as simulate_module
from troupe.tools.simulate import Simulation


def fabric_gpu(name: str) -> dict[str, Any]:
    d = device(name)
    d["bindsToNode"] = True
    d["bindingConditions"] = ["Attached"]
    d["bindingFailureConditions"] = ["AttachFailed"]
    return d


def fabric(*devices: dict[str, Any]) -> dict[str, Any]:
    return slice_("fabric", *devices, pool="fabric", all_nodes=True)


def claim_of(sim: Simulation, pod_name: str) -> dict[str, Any]:
    (c,) = [
        c for k, c in sim.cluster.resource_claims.items() if k.startswith(f"default/{pod_name}-")
    ]
    return c


def test_prebind_waits_for_the_drivers_binding_conditions() -> None:
    sim, result = run(
        [
            node("n0"),
            device_class(),
            fabric(fabric_gpu("gpu-0")),
            template("t", request()),
            pod("p", template="t"),
        ]
    )
    assert placed(result)["p"] == ("n0", {"gpu": [f"{DRIVER}/fabric/gpu-0"]})
    c = claim_of(sim, "p")
    alloc = c["status"]["allocation"]
    (r,) = alloc["devices"]["results"]
    assert r["bindingConditions"] == ["Attached"]
    assert r["bindingFailureConditions"] == ["AttachFailed"]
    assert "allocationTimestamp" in alloc
    # bindsToNode: the claim is the node's now, though the device is for all nodes.
    assert alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n0"]
    (d,) = c["status"]["devices"]
    assert [(x["type"], x["status"]) for x in d["conditions"]] == [("Attached", "True")]
    (ev,) = [e for e in sim.cluster.events if e.reason == "BindingConditionsPending"]
    assert ev.message == "waiting for binding conditions for device on node n0"
    assert ev.type == "Normal"


def test_devices_without_binding_conditions_are_taken_first() -> None:
    """kube's allocator tries pools with binding conditions last."""
    plain = slice_("plain", device("gpu-9"), pool="zzz-plain", all_nodes=True)
    _, result = run(
        [
            node("n0"),
            device_class(),
            fabric(fabric_gpu("gpu-0")),
            plain,
            template("t", request()),
            pod("p", template="t"),
        ]
    )
    assert placed(result)["p"][1] == {"gpu": [f"{DRIVER}/zzz-plain/gpu-9"]}


def _failing_driver(claim: Any, stamp: str) -> list[dict[str, Any]] | None:
    results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    if claim.get("status", {}).get("devices") or not results:
        return None
    r = results[0]
    return [
        {
            "driver": r["driver"],
            "pool": r["pool"],
            "device": r["device"],
            "conditions": [
                {
                    "type": "AttachFailed",
                    "status": "True",
                    "reason": "NoFabricPort",
                    "message": "no free port",
                    "lastTransitionTime": stamp,
                }
            ],
        }
    ]


def test_a_failure_condition_fails_the_binding_and_gives_the_claim_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(simulate_module, "readied_devices", _failing_driver)
    sim, result = run(
        [
            node("n0"),
            device_class(),
            fabric(fabric_gpu("gpu-0")),
            template("t", request()),
            pod("p", template="t"),
        ]
    )
    out = result.to_json_obj()["pods"]["default/p"]
    assert out["node"] is None
    c = claim_of(sim, "p")
    assert out["reason"].endswith(
        f'claim {c["metadata"]["name"]} binding failed: reason=NoFabricPort, message="no free port"'
    )
    # Unreserve gave the allocation and the driver's device status up.
    assert "allocation" not in c.get("status", {}) and "devices" not in c.get("status", {})


def test_the_binding_timeout_sends_the_pod_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver that never reports: after bindingTimeout (here 60s) PreBind
    gives up with kube's text."""
    monkeypatch.setattr(simulate_module, "readied_devices", lambda claim, stamp: None)
    config = parse_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": "troupe-scheduler",
                    "pluginConfig": [
                        {"name": "DynamicResources", "args": {"bindingTimeout": "60s"}}
                    ],
                }
            ],
        },
        IN_TREE,
    )
    objs = [
        node("n0"),
        device_class(),
        fabric(fabric_gpu("gpu-0")),
        template("t", request()),
        pod("p", template="t"),
    ]
    sim = Simulation(objs, config)
    result = asyncio.run(sim.run(until=100.0))
    out = result.to_json_obj()["pods"]["default/p"]
    assert out["node"] is None
    assert out["reason"].endswith("device binding timeout")


def test_binding_timeout_args_are_checked() -> None:
    from troupe.framework.interface import PluginArgsError
    from troupe.plugins.dynamic_resources import DynamicResources

    with pytest.raises(PluginArgsError, match="bindingTimeout"):
        DynamicResources.new({"bindingTimeout": "soon"}, None)  # type: ignore[arg-type]
    with pytest.raises(PluginArgsError, match="unknown field"):
        DynamicResources.new({"filterTimeout": "1s"}, None)  # type: ignore[arg-type]


def test_an_allocated_claim_whose_binding_failed_is_given_up_and_allocated_again() -> None:
    """upstream: bound-claim-with-failed-binding: a claim allocated with
    binding conditions whose failure condition is True is not available where
    it is allocated; PostFilter gives it up (no pod uses it), and the next
    attempt allocates it afresh (the simulated driver readies it this time)."""
    c = claim("held", request())
    c["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": DRIVER,
                        "pool": "fabric",
                        "device": "gpu-0",
                        "bindingConditions": ["Attached"],
                        "bindingFailureConditions": ["AttachFailed"],
                    }
                ]
            },
            "allocationTimestamp": "2026-01-01T00:00:00Z",
        },
        "devices": [
            {
                "driver": DRIVER,
                "pool": "fabric",
                "device": "gpu-0",
                "conditions": [
                    {
                        "type": "AttachFailed",
                        "status": "True",
                        "reason": "X",
                        "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
            }
        ],
    }
    sim, result = run(
        [node("n0"), device_class(), fabric(fabric_gpu("gpu-0")), c, pod("p", claim="held")]
    )
    assert result.to_json_obj()["pods"]["default/p"]["node"] == "n0"
    (failed, *_) = [e for e in sim.cluster.events if e.reason == "FailedScheduling"]
    assert "resourceclaim not available on the node" in failed.message
    status = sim.cluster.resource_claims["default/held"]["status"]
    (d,) = status["devices"]
    assert [(x["type"], x["status"]) for x in d["conditions"]] == [("Attached", "True")]
    assert status["reservedFor"][0]["name"] == "p"


def test_a_claim_allocated_where_the_pod_cannot_run_is_given_up_only_if_unused() -> None:
    """upstream: wrong-topology: PostFilter deallocates an allocated claim whose
    node selector rules out every node, when no other pod uses it."""

    def held(reserved: list[dict[str, str]]) -> dict[str, Any]:
        c = claim("held", request())
        c["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": "fabric", "device": "gpu-0"}
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["gone"]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": reserved,
        }
        return c

    objs = [
        node("n0"),
        device_class(),
        slice_("any", device("gpu-0"), pool="fabric", all_nodes=True),
    ]
    sim, result = run([*objs, held([]), pod("p", claim="held")])
    assert result.to_json_obj()["pods"]["default/p"]["node"] == "n0"
    other = [{"resource": "pods", "name": "other", "uid": "uid-other"}]
    sim, result = run([*objs, held(other), pod("p", claim="held")])
    out = result.to_json_obj()["pods"]["default/p"]
    assert out["node"] is None and "resourceclaim not available on the node" in out["reason"]
    assert sim.cluster.resource_claims["default/held"]["status"]["reservedFor"] == other
