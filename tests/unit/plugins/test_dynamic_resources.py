"""DynamicResources: a pod that claims devices is never bound without them
(issue #21's first fault: a claiming pod was bound to a node with no device)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.unit.plugins.conftest import make_handle
from troupe.api.parse import parse_pod
from troupe.api.types import InvalidObject, Pod
from troupe.config import default_config
from troupe.framework.events import QueueingHint
from troupe.plugins.dynamic_resources import DynamicResources
from troupe.plugins.registry import DEFAULT_MULTI_POINT, IN_TREE
from troupe.tools.simulate import simulate


def claiming(name: str, *claims: dict[str, Any], status: Any = None) -> dict[str, Any]:
    p = make_pod(name).req(cpu="1").obj()
    p["spec"]["resourceClaims"] = list(claims)
    if status is not None:
        p["status"] = {"resourceClaimStatuses": status}
    return p


def test_it_runs_before_default_preemption_as_in_kube_scheduler() -> None:
    names = [s.name for s in DEFAULT_MULTI_POINT]
    assert names.index("DynamicResources") == names.index("DefaultPreemption") - 1


def test_a_claiming_pod_is_not_bound_to_a_node_without_devices() -> None:
    node = make_node("n0").capacity(cpu=4, memory="8Gi", pods=110).obj()
    pods = [
        claiming("from-template", {"name": "gpu", "resourceClaimTemplateName": "gpu"}),
        claiming(
            "created",
            {"name": "gpu", "resourceClaimTemplateName": "gpu"},
            status=[{"name": "gpu", "resourceClaimName": "created-gpu-x7k2p"}],
        ),
        claiming("named", {"name": "gpu", "resourceClaimName": "shared-gpu"}),
        make_pod("plain").req(cpu="1").obj(),
    ]
    out = simulate([node, *pods], default_config(IN_TREE)).to_json_obj()["pods"]
    assert out["default/plain"]["node"] == "n0"
    assert out["default/from-template"]["node"] is None
    assert out["default/from-template"]["reason"] == (
        'pod "default/from-template": ResourceClaim not created yet'
    )
    assert out["default/created"]["reason"] == (
        'resourceclaim.resource.k8s.io "created-gpu-x7k2p" not found'
    )
    assert out["default/named"]["reason"] == 'resourceclaim.resource.k8s.io "shared-gpu" not found'


def test_the_claim_being_created_requeues_the_pod() -> None:
    plugin = DynamicResources(make_handle())
    event = plugin.events_to_register()[0]
    old = parse_pod(claiming("p", {"name": "gpu", "resourceClaimTemplateName": "t"}), {})
    new = parse_pod(
        claiming(
            "p",
            {"name": "gpu", "resourceClaimTemplateName": "t"},
            status=[{"name": "gpu", "resourceClaimName": "p-gpu-1"}],
        ),
        {},
    )
    assert isinstance(old, Pod) and isinstance(new, Pod)
    assert event.hint is not None
    assert event.hint(old, old, new) == QueueingHint.QUEUE
    assert event.hint(old, old, old) == QueueingHint.SKIP
    assert plugin.pre_enqueue(new).message == 'resourceclaim.resource.k8s.io "p-gpu-1" not found'
    assert plugin.pre_enqueue(old).message == 'pod "default/p": ResourceClaim not created yet'


@pytest.mark.parametrize(
    ("claims", "problem"),
    [
        ([{"name": "gpu"}], "spec.resourceClaims[0]: Invalid value"),
        (
            [{"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}],
            "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
        ),
        ([{"resourceClaimName": "a"}], "spec.resourceClaims[0].name: Required value"),
        (
            [{"name": "g", "resourceClaimName": "a"}, {"name": "g", "resourceClaimName": "b"}],
            'spec.resourceClaims[1].name: Duplicate value: "g"',
        ),
    ],
)
def test_claims_the_api_server_refuses_are_refused(
    claims: list[dict[str, Any]], problem: str
) -> None:
    got = parse_pod(claiming("p", *claims), {})
    assert isinstance(got, InvalidObject)
    assert problem in got.message
