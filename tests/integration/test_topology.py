"""Topology-aware gangs through `troupe run --kubeconfig` against the embedded
API server, for both PodGroup APIs: members in one rack, the Placed event on
the PodGroup, the native condition saying where, a preferred level no node has
skipped with one Warning, and a gang that no rack holds waiting with the best
rack in its reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from apiserver import ApiServer
from apiserver.replica import Troupe, until
from tests.builders import make_node, make_pod
from tests.integration.test_operator import bound

RACK = "troupe.dev/rack"
BLOCK = "troupe.dev/block"
NATIVE = "podgroups.scheduling.k8s.io"


def racks(api: ApiServer) -> None:
    # rack r1: two 4-cpu nodes; rack r2: three.
    for name, rack in [("a0", "r1"), ("a1", "r1"), ("b0", "r2"), ("b1", "r2"), ("b2", "r2")]:
        api.create(make_node(name).capacity(cpu=4, memory="8Gi", pods=10).label(RACK, rack).obj())


def pod(
    api: ApiServer, name: str, cpu: str, group: str | None = None, native: str | None = None
) -> None:
    b = make_pod(name).req(cpu=cpu)
    if group is not None:
        b = b.group(group)
    if native is not None:
        b = b.scheduling_group(native)
    obj = b.obj()
    obj["metadata"].pop("uid", None)
    api.create(obj)


def rack_of(api: ApiServer, pod_name: str) -> str | None:
    node = bound(api).get(pod_name)
    return None if node is None else {"a": "r1", "b": "r2"}[node[0]]


def events(api: ApiServer, kind: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in api.objects("events")
        if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name
    ]


def test_both_apis_place_a_gang_in_one_rack_and_say_where(tmp_path: Path) -> None:
    api = ApiServer(native_podgroups="v1beta1")
    with api.start_in_thread():
        racks(api)
        for crd in sorted((Path(__file__).parents[2] / "crds").glob("*.yaml")):
            for doc in yaml.safe_load_all(crd.read_text()):
                if doc:
                    api.create(doc)
        # scheduler-plugins PodGroup with the annotation: 3 x 3 cpu fit only in r2.
        api.create(
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {
                    "name": "mpi",
                    "namespace": "default",
                    "annotations": {"troupe.dev/topology-required": RACK},
                },
                "spec": {"minMember": 3},
            }
        )
        for i in range(3):
            pod(api, f"mpi-{i}", "3", group="mpi")
        # native PodGroup with the field: 2 x 1 cpu, one rack.
        api.create(
            {
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "ring", "namespace": "default"},
                "spec": {
                    "schedulingPolicy": {"gang": {"minCount": 2}},
                    "schedulingConstraints": {"topology": [{"key": RACK}]},
                },
            }
        )
        for i in range(2):
            pod(api, f"ring-{i}", "1", native="ring")
        # no rack holds 3 x 4 cpu + ... : r1 has 2 nodes, r2 (after mpi) has 1 cpu per node.
        api.create(
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {
                    "name": "wide",
                    "namespace": "default",
                    "annotations": {"troupe.dev/topology-required": RACK},
                },
                "spec": {"minMember": 3},
            }
        )
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
            t.wait_ready()
            until(lambda: all(rack_of(api, f"mpi-{i}") for i in range(3)), what="mpi bound")
            until(lambda: all(rack_of(api, f"ring-{i}") for i in range(2)), what="ring bound")
            assert {rack_of(api, f"mpi-{i}") for i in range(3)} == {"r2"}
            assert len({rack_of(api, f"ring-{i}") for i in range(2)}) == 1
            placed = until(lambda: events(api, "PodGroup", "mpi"), what="the Placed event")
            assert placed[0]["reason"] == "Placed"
            assert placed[0]["message"] == f"placed in {RACK}=r2: 3 pods"

            def ring_condition() -> dict[str, Any] | None:
                pg = api.get(NATIVE, "default", "ring") or {}
                conds = (pg.get("status") or {}).get("conditions") or []
                return conds[0] if conds and conds[0].get("status") == "True" else None

            cond = until(ring_condition, what="the ring's condition")
            rack = rack_of(api, "ring-0")
            assert cond["message"] == f"placed in {RACK}={rack}"
            # A native gang that prefers a rack, then a block: no node has a block.
            api.create(
                {
                    "apiVersion": "scheduling.k8s.io/v1beta1",
                    "kind": "PodGroup",
                    "metadata": {
                        "name": "pref",
                        "namespace": "default",
                        "annotations": {"troupe.dev/topology-preferred": f"{RACK},{BLOCK}"},
                    },
                    "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
                }
            )
            for i in range(2):
                pod(api, f"pref-{i}", "1", native="pref")
            until(
                lambda: all(rack_of(api, f"pref-{i}") for i in range(2)),
                what="pref bound",
                timeout=90,
            )
            assert len({rack_of(api, f"pref-{i}") for i in range(2)}) == 1
            skipped = until(
                lambda: [
                    e
                    for e in events(api, "PodGroup", "pref")
                    if e["reason"] == "TopologyLevelSkipped"
                ],
                what="the TopologyLevelSkipped event",
                timeout=90,
            )
            assert [(e["type"], e["message"]) for e in skipped] == [
                (
                    "Warning",
                    "metadata.annotations[troupe.dev/topology-preferred]: preferred level "
                    f"{BLOCK!r} is skipped: no node has the label {BLOCK!r}",
                )
            ]
            for i in range(3):
                pod(api, f"wide-{i}", "4", group="wide")

            def wide_reason() -> str | None:
                obj = api.get("pods", "default", "wide-0") or {}
                conds = (obj.get("status") or {}).get("conditions") or []
                message = conds[0].get("message") if conds else None
                # Tried before its third pod was created: not the reason asked about.
                if message and "has fewer pods than minMember" in message:
                    return None
                return message

            reason = until(wide_reason, what="the wide gang's reason")
            assert reason.startswith(
                f'PodGroup "default/wide": no {RACK} has room for minMember 3: best '
            )
            assert t.stop() == 0
        assert "Traceback" not in t.log()
