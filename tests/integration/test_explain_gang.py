"""Why a gang waits, live (`troupe.explain.enabled`, through `troupe run
--kubeconfig`): the members of a PodGroup annotated `troupe.dev/explain: "true"`
carry the gang's view (per node: how many fit, what stopped the rest; what
preemption did) in /debug/explain/<ns>/<member>."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from apiserver import ApiServer
from apiserver.replica import Troupe, metrics_reader, until
from tests.builders import make_node, make_pod
from tests.integration.test_explain import created


def test_a_gang_that_asks_is_explained_as_a_whole_in_its_members_decisions(
    tmp_path: Path,
) -> None:
    api = ApiServer(podgroups=True)
    with api.start_in_thread():
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        for name in ("n0", "n1"):
            api.create(make_node(name).capacity(cpu=4, memory="8Gi", pods=10).obj())
        config = {"troupe": {"explain": {"enabled": True}}}
        with Troupe(tmp_path, kubeconfig=kubeconfig, config=config, token=metrics_reader(api)) as t:
            t.wait_ready()
            api.create(
                {
                    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {
                        "name": "g",
                        "namespace": "default",
                        "annotations": {"troupe.dev/explain": "true"},
                    },
                    "spec": {"minMember": 3},
                }
            )
            for i in range(3):
                api.create(created(make_pod(f"m{i}").req(cpu="3").group("g").obj()))

            def group_of(name: str) -> dict[str, Any] | None:
                status, body = t.http(f"/debug/explain/default/{name}")
                got = json.loads(body) if status == 200 else None
                return got.get("group") if got else None

            for name in ("m0", "m2"):
                group = until(lambda n=name: group_of(n), timeout=60, what=f"{name}'s gang")
                assert group["podGroup"] == "default/g"
                assert group["outcome"].startswith('PodGroup "default/g": 2 of minMember 3')
                (d,) = group["domains"]
                assert (d["members"], d["fits"], d["nodes"]) == (3, 2, 2)
                assert d["stopped"] == [
                    {
                        "plugin": "NodeResourcesFit",
                        "reason": "Insufficient cpu",
                        "members": 1,
                        "nodes": 2,
                    }
                ]
                assert [n["fits"] for n in d["perNode"]] == [1, 1]
                assert str(group["preemption"]).startswith("tried: ")
