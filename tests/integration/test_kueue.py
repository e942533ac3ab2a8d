"""Behind Kueue (issue #32): Kueue admits, Troupe schedules. The real `troupe
run` against the embedded API server, with the pods as Kueue's pod integration
writes them: created with Kueue's admission scheduling gate
(`kueue.x-k8s.io/admission`, its `SchedulingGateName`), its labels and
finalizer; admitted by one patch that removes the gate and merges the chosen
ResourceFlavor's `nodeLabels` into `spec.nodeSelector` (Kueue's Pod.Run:
ungate, then podset.Merge), sent as a JSON merge patch with the
resourceVersion as Kueue's optimistic-lock patch sends it.

Troupe leaves a gated pod alone (SchedulingGates: it waits in the gated queue,
and the PodScheduled condition stays the API server's "SchedulingGated") and,
once it is ungated, places it on a node of the admitted flavor. Troupe's
profile is the default one: with quotas in Kueue, CapacityScheduling is off."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from apiserver import ApiServer
from apiserver.replica import Troupe, metrics_reader, until
from tests.builders import make_node, make_pod
from tests.integration.test_operator import node_of

# Kueue's names (pkg/controller/jobs/pod/constants and pkg/constants).
ADMISSION_GATE: Final = "kueue.x-k8s.io/admission"
QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"
MANAGED_LABEL: Final = "kueue.x-k8s.io/managed"
# A ResourceFlavor's spec.nodeLabels: what Kueue injects on admission.
SPOT_FLAVOR_LABELS: Final = {"instance-type": "spot"}
NS: Final = "team-a"


@pytest.fixture
def api() -> Iterator[ApiServer]:
    srv = ApiServer()
    with srv.start_in_thread():
        yield srv


def kueue_pod(name: str) -> dict[str, Any]:
    """A pod as it is stored after Kueue's pod webhook: gated, labelled, with
    Kueue's finalizer (the queue named by the user's label)."""
    obj = make_pod(name, NS).req(cpu="1").gate(ADMISSION_GATE).obj()
    md = obj["metadata"]
    md.pop("uid", None)
    md["labels"] = {QUEUE_NAME_LABEL: "team-a-queue", MANAGED_LABEL: "true"}
    md["finalizers"] = [MANAGED_LABEL]
    return obj


def admit(api: ApiServer, name: str, node_labels: dict[str, str]) -> None:
    """What Kueue does when the pod's Workload is admitted: one merge patch,
    guarded by the resourceVersion, that removes its gate and merges the
    flavor's node labels into the node selector."""
    current = api.get("pods", NS, name)
    assert current is not None
    spec = current["spec"]
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != ADMISSION_GATE]
    patch = {
        "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
        "spec": {
            "schedulingGates": gates or None,
            "nodeSelector": {**(spec.get("nodeSelector") or {}), **node_labels},
        },
    }
    request = urllib.request.Request(
        f"{api.url}/api/v1/namespaces/{NS}/pods/{name}",
        data=json.dumps(patch).encode(),
        method="PATCH",
        headers={"Content-Type": "application/merge-patch+json"},
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200


def scheduled_condition(api: ApiServer, name: str) -> dict[str, Any]:
    p = api.get("pods", NS, name) or {}
    conds = (p.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "PodScheduled"), {})


def test_a_kueue_gated_pod_waits_and_once_admitted_goes_to_its_flavors_nodes(
    api: ApiServer, tmp_path: Path
) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.create(
        make_node("on-demand")
        .capacity(cpu=4, memory="8Gi", pods=10)
        .label("instance-type", "on-demand")
        .obj()
    )
    api.create(
        make_node("spot")
        .capacity(cpu=4, memory="8Gi", pods=10)
        .label("instance-type", "spot")
        .obj()
    )
    # The spot node is the busier one: left to itself, Troupe would place a
    # small pod on the emptier on-demand node, so landing on spot is the
    # selector's doing.
    busy = make_pod("busy", NS).req(cpu="3").node("spot").phase("Running").obj()
    busy["metadata"].pop("uid", None)
    api.create(busy)
    reader = metrics_reader(api)
    with Troupe(tmp_path, kubeconfig=kubeconfig, token=reader) as t:
        t.wait_ready()
        api.create(kueue_pod("job-0"))
        # A pod created after it, ungated, is bound: Troupe has seen job-0 and
        # left it waiting at PreEnqueue.
        later = make_pod("later", NS).req(cpu="1").obj()
        later["metadata"].pop("uid", None)
        api.create(later)
        until(lambda: node_of(api, "later", NS), what="the ungated pod bound")
        until(
            lambda: t.metric("scheduler_pending_pods", {"queue": "gated"}) == 1,
            what="job-0 in the gated queue",
        )
        assert node_of(api, "job-0", NS) is None
        cond = scheduled_condition(api, "job-0")
        assert (cond.get("status"), cond.get("reason"), cond.get("message")) == (
            "False",
            "SchedulingGated",
            "Scheduling is blocked due to non-empty scheduling gates",
        )

        admit(api, "job-0", SPOT_FLAVOR_LABELS)
        node = until(lambda: node_of(api, "job-0", NS), what="job-0 bound once admitted")
        assert node == "spot"
        assert node_of(api, "later", NS) == "on-demand"
        assert scheduled_condition(api, "job-0").get("status") == "True"
        pod = api.get("pods", NS, "job-0")
        assert pod is not None
        assert pod["spec"]["nodeSelector"] == SPOT_FLAVOR_LABELS
        assert pod["metadata"]["finalizers"] == [MANAGED_LABEL]  # Kueue's, left alone
        assert t.metric("scheduler_pending_pods", {"queue": "gated"}) == 0


def test_an_admitted_flavor_with_no_room_leaves_the_pod_pending_with_the_selectors_reason(
    api: ApiServer, tmp_path: Path
) -> None:
    """Kueue's quota said yes, the flavor's nodes are full: Troupe does not
    place the pod elsewhere, and says why as kube-scheduler does."""
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.create(
        make_node("on-demand")
        .capacity(cpu=4, memory="8Gi", pods=10)
        .label("instance-type", "on-demand")
        .obj()
    )
    with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
        t.wait_ready()
        api.create(kueue_pod("job-0"))
        admit(api, "job-0", SPOT_FLAVOR_LABELS)

        def reason() -> str:
            c = scheduled_condition(api, "job-0")
            return str(c.get("message", "")) if c.get("reason") == "Unschedulable" else ""

        message = until(reason, what="job-0 refused")
        assert message.startswith(
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
        ), message
        assert node_of(api, "job-0", NS) is None
