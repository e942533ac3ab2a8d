"""Kubernetes' own PodGroups (scheduling.k8s.io) through `troupe run --kubeconfig`:
discovered, watched, gang-scheduled, and their status written on the status
subresource as kube-scheduler writes it. No CRD of ours is installed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from apiserver import ApiServer
from apiserver.replica import Troupe, until
from apiserver.resources import native_podgroups
from tests.builders import make_node, make_pod
from tests.integration.test_operator import assert_rbac_covers, bound
from troupe.core.cluster import NotFound
from troupe.kube import Connection, KubeClient, discover_native_pod_groups

NATIVE = "podgroups.scheduling.k8s.io"


def native_group(version: str, name: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def member(api: ApiServer, name: str, group: str, cpu: str = "2") -> None:
    obj = make_pod(name).scheduling_group(group).req(cpu=cpu).obj()
    obj["metadata"].pop("uid", None)
    api.create(obj)


def condition(api: ApiServer, name: str) -> dict[str, Any] | None:
    pg = api.get(NATIVE, "default", name) or {}
    conds = (pg.get("status") or {}).get("conditions") or []
    return conds[0] if conds else None


@pytest.mark.parametrize(
    ("version", "ctype"),
    [
        ("v1beta1", "PodGroupInitiallyScheduled"),
        ("v1alpha3", "PodGroupInitiallyScheduled"),
        ("v1alpha2", "PodGroupScheduled"),
    ],
)
def test_a_native_gang_is_bound_and_its_status_written(
    tmp_path: Path, version: str, ctype: str
) -> None:
    api = ApiServer(native_podgroups=version)
    with api.start_in_thread():
        for i in range(2):
            api.create(make_node(f"n{i}").capacity(cpu=4, memory="4Gi", pods=10).obj())
        api.create(native_group(version, "train", 3))
        for i in range(3):
            member(api, f"w{i}", "train")
        # Five 2-CPU pods of a minCount-5 gang on 8 CPUs: none may bind.
        api.create(native_group(version, "huge", 5))
        for i in range(5):
            member(api, f"h{i}", "huge")
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
            t.wait_ready()
            until(lambda: len(bound(api)) == 3, what="the gang bound")
            ok = until(lambda: condition(api, "train"), what="the gang's condition")
            assert (ok["type"], ok["status"], ok["reason"]) == (ctype, "True", "Scheduled")
            no = until(lambda: condition(api, "huge"), what="the big gang's condition")
            assert (no["type"], no["status"], no["reason"]) == (ctype, "False", "Unschedulable")
            assert re.match(
                r'PodGroup "scheduling.k8s.io/default/huge": \d of minCount 5 pods fit; ',
                no["message"],
            )
            t.stop()
        assert set(bound(api)) == {"w0", "w1", "w2"}
        assert f"watching scheduling.k8s.io/{version} PodGroups" in t.log()
        status_writes = [
            w
            for w in api.writes
            if w.plural == "podgroups" and w.subresource == "status" and w.status < 300
        ]
        assert {w.name for w in status_writes} == {"train", "huge"}
        assert_rbac_covers(api)


def test_without_the_api_native_pods_wait_and_one_line_is_logged(tmp_path: Path) -> None:
    api = ApiServer()  # no scheduling.k8s.io PodGroups, no CRD either
    with api.start_in_thread():
        api.create(make_node("n0").capacity(cpu=4, memory="4Gi", pods=10).obj())
        member(api, "w0", "train")
        plain = make_pod("plain").req(cpu="1").obj()
        plain["metadata"].pop("uid", None)
        api.create(plain)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
            t.wait_ready()
            until(lambda: bound(api).get("plain") == "n0", what="the plain pod bound")
            until(
                lambda: (
                    (api.get("pods", "default", "w0") or {}).get("status", {}).get("conditions")
                ),
                what="the member's condition",
            )
            t.stop()
        log = t.log()
        assert log.count("serves no scheduling.k8s.io PodGroups") == 1
        assert "Traceback" not in log
        cond = api.get("pods", "default", "w0")["status"]["conditions"][0]  # type: ignore[index]
        assert cond["message"] == 'PodGroup "scheduling.k8s.io/default/train" not found'


# ---- the client: discovery and the status write, over HTTP ---------------------------------


async def _discover(*versions: str) -> tuple[str | None, ApiServer, KubeClient]:
    srv = ApiServer()
    await srv.start()
    for v in versions:
        srv.store.register(native_podgroups(v))
    kube = KubeClient(Connection.to(srv.url), backoff=0.01, identity="test")
    return await discover_native_pod_groups(kube), srv, kube


@pytest.mark.parametrize(
    ("served", "want"),
    [
        ((), None),
        (("v1alpha2",), "v1alpha2"),
        (("v1beta1",), "v1beta1"),
        (("v1alpha2", "v1beta1"), "v1beta1"),  # the newer one when both are served
        # Kubernetes 1.37 serves v1beta1 and v1alpha3 (each behind --runtime-config):
        (("v1alpha3",), "v1alpha3"),
        (("v1alpha3", "v1beta1"), "v1beta1"),
        (("v1alpha2", "v1alpha3"), "v1alpha3"),
    ],
)
async def test_discovery_finds_the_version_to_watch(
    served: tuple[str, ...], want: str | None
) -> None:
    got, srv, kube = await _discover(*served)
    try:
        assert got == want
    finally:
        await kube.aclose()
        await srv.stop()


async def test_native_status_goes_to_the_native_status_subresource() -> None:
    _, srv, kube = await _discover("v1alpha2")
    try:
        kube.native_pod_group_version = "v1alpha2"
        srv.create(native_group("v1alpha2", "g", 2))
        cond = {"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled"}
        await kube.patch_pod_group_status("scheduling.k8s.io/default/g", {"conditions": [cond]})
        assert srv.get(NATIVE, "default", "g")["status"] == {"conditions": [cond]}  # type: ignore[index]
        (w,) = [w for w in srv.writes if w.plural == "podgroups"]
        assert (w.subresource, w.path) == (
            "status",
            "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups/g/status",
        )
        with pytest.raises(NotFound):
            await kube.patch_pod_group_status("scheduling.k8s.io/default/none", {})
    finally:
        await kube.aclose()
        await srv.stop()


# ---- CompositePodGroup (1.37, alpha), through troupe run -----------------------------------

COMPOSITE = "compositepodgroups.scheduling.k8s.io"


def test_a_gang_of_groups_through_troupe_run(tmp_path: Path) -> None:
    """A 1.37 cluster serving v1beta1 and v1alpha3, the CompositePodGroup gate
    on: PodGroups are read in v1alpha3 (the version with their parent), the
    composite's two child gangs are bound together, and its condition is
    written on its status subresource; a composite whose children cannot all
    fit binds nothing and says why."""
    api = ApiServer(native_podgroups="v1alpha3")
    api.store.register(native_podgroups("v1beta1"))
    config = {"troupe": {"featureGates": {"CompositePodGroup": True}}}
    with api.start_in_thread():
        for i in range(3):
            api.create(make_node(f"n{i}").capacity(cpu=4, memory="4Gi", pods=10).obj())
        for name, count in (("job", 2), ("big", 2)):
            api.create(
                {
                    "apiVersion": "scheduling.k8s.io/v1alpha3",
                    "kind": "CompositePodGroup",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {
                        "workloadRef": {"workloadName": name, "templateName": "t"},
                        "schedulingPolicy": {"gang": {"minGroupCount": count}},
                    },
                }
            )
        children = (("job", "a", 2), ("job", "b", 1), ("big", "c", 2), ("big", "d", 2))
        for parent, child, n in children:
            g = native_group("v1alpha3", child, n)
            g["spec"]["parentCompositePodGroupName"] = parent
            api.create(g)
            for i in range(n):
                member(api, f"{child}{i}", child, cpu="2" if parent == "job" else "3")
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        with Troupe(tmp_path, kubeconfig=kubeconfig, config=config) as t:
            t.wait_ready()
            until(lambda: len(bound(api)) == 3, what="the gang of groups bound")

            def cond(name: str) -> dict[str, Any] | None:
                obj = api.get(COMPOSITE, "default", name) or {}
                conds = (obj.get("status") or {}).get("conditions") or []
                return conds[0] if conds else None

            ok = until(lambda: cond("job"), what="the composite's condition")
            assert (ok["type"], ok["status"], ok["reason"]) == (
                "CompositePodGroupInitiallyScheduled",
                "True",
                "Scheduled",
            )
            no = until(lambda: cond("big"), what="the big composite's condition")
            assert (no["status"], no["reason"]) == ("False", "Unschedulable")
            assert no["message"].startswith('CompositePodGroup "default/big": ')
            t.stop()
        assert set(bound(api)) == {"a0", "a1", "b0"}
        assert "watching scheduling.k8s.io/v1alpha3 PodGroups" in t.log()
        assert_rbac_covers(api)
