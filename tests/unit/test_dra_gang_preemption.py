"""A gang preempts as one unit, and its dry run counts the devices its members
claim as the pod path counts them: each member's claims are held on its node
before the next member is searched (the dry run once let two members take the
same GPU, evicted, and the gang still did not fit), and the devices its victims'
claims hold count as freed (with GPUs the only shortage, the gang preempts)."""

from __future__ import annotations

import copy
from typing import Any

from tests.unit.dra_helpers import (
    DRIVER,
    claim,
    device_class,
    gang,
    gpus,
    node,
    pod,
    request,
    run,
    template,
)


def holder(name: str, node_name: str, device_name: str) -> list[dict[str, Any]]:
    """A running low-priority pod `name` on `node_name` whose own claim holds
    the GPU `device_name`."""
    c = claim(f"{name}-gpu", request())
    c["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": node_name, "device": device_name}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node_name]}
                        ]
                    }
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-default-{name}"}],
    }
    p = pod(name, claim=f"{name}-gpu")
    p["spec"]["nodeName"] = node_name
    p["spec"]["priority"] = 0
    p["status"]["phase"] = "Running"
    return [c, p]


def members(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        p = pod(f"m{i}", template="t", group="g")
        p["spec"]["priority"] = 100
        out.append(p)
    return out


def test_a_gang_preempts_when_gpus_are_its_only_shortage() -> None:
    """Two nodes, one GPU each, both held by low-priority pods; a gang of two
    high-priority members, one GPU each: both holders go, the gang runs."""
    objs = [
        node("n0"),
        node("n1"),
        device_class(),
        gpus("n0", 1),
        gpus("n1", 1),
        *holder("v0", "n0", "gpu-0"),
        *holder("v1", "n1", "gpu-0"),
        gang("g", 2),
        template("t", request()),
        *members(2),
    ]
    _, result = run(copy.deepcopy(objs))
    out = result.to_json_obj()["pods"]
    assert out["default/v0"]["preemptedBy"] and out["default/v1"]["preemptedBy"]
    assert {out["default/m0"]["node"], out["default/m1"]["node"]} == {"n0", "n1"}


def test_a_gang_does_not_evict_when_even_then_its_members_lack_gpus() -> None:
    """One node with two GPUs, one held by a low-priority pod; a gang of three
    members, one GPU each: even without the holder there are two GPUs for three
    members, so nobody is evicted (the dry run gave the free GPU to two members)."""
    objs = [
        node("n0"),
        device_class(),
        gpus("n0", 2),
        *holder("v0", "n0", "gpu-0"),
        gang("g", 3),
        template("t", request()),
        *members(3),
    ]
    _, result = run(copy.deepcopy(objs))
    out = result.to_json_obj()["pods"]
    assert out["default/v0"]["preemptedBy"] is None
    assert out["default/v0"]["node"] == "n0"
    assert all(out[f"default/m{i}"]["node"] is None for i in range(3))


def test_a_gang_takes_only_the_gpus_it_lacks() -> None:
    """One node with three GPUs, two held by low-priority pods; a gang of two
    members: one takes the free GPU, the other needs one holder gone — one
    victim, not two."""
    objs = [
        node("n0"),
        device_class(),
        gpus("n0", 3),
        *holder("v0", "n0", "gpu-0"),
        *holder("v1", "n0", "gpu-1"),
        gang("g", 2),
        template("t", request()),
        *members(2),
    ]
    _, result = run(copy.deepcopy(objs))
    out = result.to_json_obj()["pods"]
    victims = [k for k in ("default/v0", "default/v1") if out[k]["preemptedBy"]]
    assert len(victims) == 1
    assert out["default/m0"]["node"] == "n0" and out["default/m1"]["node"] == "n0"
