"""`troupe run` against the embedded API server, the way users run it.

Each test starts `troupe run --kubeconfig F` (or in-cluster credentials) as a
child process, creates objects through the API and asserts on what Troupe
wrote: bindings, conditions, Events, PodGroup status, and who wrote them.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver import ApiServer
from apiserver.replica import REPO, Troupe, in_cluster_prelude, metrics_reader, until
from tests.builders import make_node, make_pod


@pytest.fixture
def api() -> Iterator[ApiServer]:
    srv = ApiServer(podgroups=True)
    with srv.start_in_thread():
        yield srv


@pytest.fixture
def kubeconfig(api: ApiServer, tmp_path: Path) -> Path:
    return api.write_kubeconfig(tmp_path / "kubeconfig")


def nodes(api: ApiServer, n: int, cpu: int = 2, max_pods: int = 10) -> None:
    for i in range(n):
        api.create(make_node(f"n{i}").capacity(cpu=cpu, memory="4Gi", pods=max_pods).obj())


def pod(api: ApiServer, name: str, cpu: str = "1", **kw: Any) -> dict[str, Any]:
    obj = make_pod(name).req(cpu=cpu).obj()
    obj["metadata"].pop("uid", None)  # the API server assigns it
    obj["metadata"].pop("resourceVersion", None)
    obj.update(kw)
    return api.create(obj)


def node_of(api: ApiServer, name: str, ns: str = "default") -> str | None:
    p = api.get("pods", ns, name)
    return None if p is None else (p.get("spec") or {}).get("nodeName")


def bound(api: ApiServer) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in api.objects("pods")
        if (p.get("spec") or {}).get("nodeName")
    }


def holder(api: ApiServer) -> str | None:
    lease = api.get("leases", "kube-system", "troupe-scheduler") or {}
    return (lease.get("spec") or {}).get("holderIdentity")


def events_of(api: ApiServer, name: str) -> list[dict[str, Any]]:
    return [e for e in api.objects("events") if e["involvedObject"]["name"] == name]


def binds_by(api: ApiServer) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in api.writes:
        if w.verb == "bind" and w.status < 300:
            who = w.user_agent.split("(")[-1].rstrip(")")
            out[who] = out.get(who, 0) + 1
    return out


def rbac_rules() -> list[tuple[set[str], set[str], set[str] | None]]:
    """(resources, verbs, resourceNames) of manifests/rbac.yaml's roles."""
    docs = yaml.safe_load_all((REPO / "manifests" / "rbac.yaml").read_text())
    return [
        (
            set(r["resources"]),
            set(r["verbs"]),
            set(r["resourceNames"]) if "resourceNames" in r else None,
        )
        for d in docs
        if d and d["kind"] in ("ClusterRole", "Role")
        for r in d["rules"]
    ]


def assert_rbac_covers(api: ApiServer) -> None:
    """Every request Troupe made is allowed by the RBAC we ship (least privilege
    is checked the other way by review: each rule says what uses it)."""
    rules = rbac_rules()
    for (verb, plural, sub), _ in api.requests.items():
        resource = f"{plural}/{sub}" if sub else plural
        assert any(resource in res and verb in verbs for res, verbs, _ in rules), (
            f"RBAC does not allow {verb} {resource}"
        )


def test_a_pod_created_after_start_up_is_bound_through_a_kubeconfig(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    nodes(api, 3)
    for i in range(4):
        pod(api, f"p{i}")
    with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
        t.wait_ready()
        until(lambda: len(bound(api)) == 4, what="the pods present at start-up bound")
        late = pod(api, "late")  # the first thing a user tries
        until(lambda: node_of(api, "late"), what="a pod created after start-up bound")
        huge = pod(api, "huge", cpu="64")
        until(
            lambda: (api.get("pods", "default", "huge") or {}).get("status", {}).get("conditions")
        )
        cond = api.get("pods", "default", "huge")["status"]["conditions"][0]  # type: ignore[index]
        assert cond["type"] == "PodScheduled" and cond["reason"] == "Unschedulable"
        assert cond["message"] == (
            "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: "
            "3 Preemption is not helpful for scheduling.."
        )
        ev = until(lambda: events_of(api, "huge"), what="FailedScheduling event")[0]
        assert ev["reason"] == "FailedScheduling" and ev["type"] == "Warning"
        assert ev["involvedObject"]["uid"] == huge["metadata"]["uid"]
        assert ev["involvedObject"]["apiVersion"] == "v1"
        assert ev["involvedObject"]["resourceVersion"]
        assert ev["reportingComponent"] == "troupe-scheduler"
        assert ev["reportingInstance"] == "troupe-scheduler-troupe-0"
        sched = until(lambda: [e for e in events_of(api, "late") if e["reason"] == "Scheduled"])
        assert (
            sched[0]["message"] == f"Successfully assigned default/late to {node_of(api, 'late')}"
        )
        assert late["metadata"]["uid"] == sched[0]["involvedObject"]["uid"]
        assert api.binds == 5
        assert t.stop() == 0
    assert "Traceback" not in t.log()
    assert_rbac_covers(api)


def test_in_cluster_credentials_bind_a_pod_created_after_start_up(tmp_path: Path) -> None:
    token = "sa-token-0123456789"
    srv = ApiServer(podgroups=True, tls=True, token=token)
    with srv.start_in_thread():
        secrets = tmp_path / "serviceaccount"
        secrets.mkdir()
        (secrets / "token").write_text(token)
        assert srv.ca_pem_path is not None
        (secrets / "ca.crt").write_bytes(srv.ca_pem_path.read_bytes())
        host, port = srv.url.removeprefix("https://").rsplit(":", 1)
        nodes(srv, 1)
        t = Troupe(
            tmp_path,
            kubeconfig=None,
            env={"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port},
            prelude=in_cluster_prelude(secrets),
        )
        with t:
            t.wait_ready()
            pod(srv, "after")
            until(lambda: node_of(srv, "after") == "n0", what="pod bound with in-cluster creds")
            assert t.stop() == 0
        # every request carried the service account's token (the server refuses others)
        assert not [w for w in srv.writes if w.status == 401]


def test_the_lease_won_during_api_discovery_starts_scheduling(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    # The elector child may win the Lease before API discovery has answered: the
    # parent then starts scheduling from a callback that ran before the scheduling
    # task was defined (a NameError, and a leader that never scheduled).
    nodes(api, 1)
    pod(api, "p0")
    held = api.hang("/apis/scheduling.k8s.io")
    with Troupe(tmp_path, kubeconfig=kubeconfig, identity="a") as t:
        until(
            lambda: (
                (api.get("leases", "kube-system", "troupe-scheduler") or {})
                .get("spec", {})
                .get("holderIdentity")
                == "a"
            ),
            what="the Lease taken while discovery hangs",
        )
        until(lambda: held.waiting >= 1, what="discovery waiting on the API server")
        api.unhang(held)
        t.wait_ready()
        until(lambda: node_of(api, "p0") == "n0", what="p0 bound by the new leader")
        assert t.stop() == 0
    assert "Traceback" not in t.log()


def test_a_replica_stopped_while_api_discovery_hangs_ends_and_gives_its_lease_up(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    # Discovery waits on an API server that may not answer (30 s a try, then
    # again): SIGTERM meanwhile must end the replica, not wait for it.
    nodes(api, 1)
    held = api.hang("/apis/scheduling.k8s.io")
    t = Troupe(tmp_path, kubeconfig=kubeconfig, identity="a")
    try:
        t.start()
        until(lambda: holder(api) == "a", what="the Lease taken while discovery hangs")
        until(lambda: held.waiting >= 1, what="discovery waiting on the API server")
        assert t.stop(timeout=10) == 0
        assert "stopped during API discovery" in t.log()
        assert holder(api) in (None, "")
        assert "Traceback" not in t.log()
    finally:
        api.unhang(held)


def test_a_wrong_token_is_refused_and_said(tmp_path: Path) -> None:
    srv = ApiServer(podgroups=True, token="right")
    with srv.start_in_thread():
        kc = srv.write_kubeconfig(tmp_path / "kubeconfig", token="wrong")
        with Troupe(tmp_path, kubeconfig=kc) as t:
            until(lambda: "401" in t.log() or "Unauthorized" in t.log(), what="a 401 in the log")
            assert not t.ready()  # caches cannot sync without credentials
            t.stop()


def test_two_replicas_standby_is_ready_each_pod_bound_once_and_fail_over(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    nodes(api, 2, cpu=4)
    for i in range(4):
        pod(api, f"p{i}")
    reader = metrics_reader(api)
    a = Troupe(tmp_path, kubeconfig=kubeconfig, identity="a", token=reader).start()
    try:
        a.wait_ready()
        until(lambda: len(bound(api)) == 4)
        b = Troupe(tmp_path, kubeconfig=kubeconfig, identity="b", token=reader).start()
        try:
            b.wait_ready()  # a standby is Ready: it syncs caches, as kube-scheduler's
            assert a.metric("leader_election_master_status", {"name": "troupe-scheduler"}) == 1
            assert b.metric("leader_election_master_status", {"name": "troupe-scheduler"}) == 0
            lease = api.get("leases", "kube-system", "troupe-scheduler")
            assert lease is not None and lease["spec"]["holderIdentity"] == "a"
            a_stopped = time.time()
            assert a.stop() == 0  # SIGTERM: releases the Lease
            until(
                lambda: (
                    (api.get("leases", "kube-system", "troupe-scheduler") or {})
                    .get("spec", {})
                    .get("holderIdentity")
                    == "b"
                ),
                what="b takes over",
            )
            for i in range(4, 6):
                pod(api, f"p{i}")
            until(lambda: len(bound(api)) == 6)
            assert api.binds == 6  # every pod bound exactly once
            assert binds_by(api) == {"a": 4, "b": 2}
            # the standby wrote nothing but its Lease attempts while a led
            b_writes = [
                w
                for w in api.writes
                if "(b)" in w.user_agent and "leader-election" not in w.user_agent
            ]
            assert b_writes and all(w.time > a_stopped for w in b_writes)
        finally:
            b.stop()
    finally:
        if a.running:
            a.stop()
    assert_rbac_covers(api)


def test_bind_errors_409_and_500_and_a_dropped_watch(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    nodes(api, 1, cpu=8)
    with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
        t.wait_ready()
        # 500, 503 then success: retried with backoff
        api.fail_next["/pods/flaky/binding"] = [500, 503]
        pod(api, "flaky")
        until(lambda: node_of(api, "flaky") == "n0", what="flaky bound after retries")
        # a dropped watch is resumed and later pods still bind
        api.drop_watches("pods", 2)
        pod(api, "after-drop")
        until(lambda: node_of(api, "after-drop") == "n0", what="bound after a dropped watch")
        t.stop()
    assert "Traceback" not in t.log()


def test_a_watch_resumed_too_late_gets_410_relists_and_loses_nothing(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    nodes(api, 1, cpu=8)
    with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
        t.wait_ready()
        pod(api, "before")
        until(lambda: node_of(api, "before"))
        api.compact()  # every resume from an earlier version now gets 410 Gone
        api.drop_watches("pods", 1)
        for i in range(3):
            pod(api, f"during-{i}")
        until(lambda: len(bound(api)) == 4, what="pods created around the 410 bound")
        t.stop()


def test_a_pod_deleted_while_the_watch_is_down_leaves_the_cache_after_the_relist(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    # One node with room for one pod. "hog" holds it; it is deleted while the
    # pods watch cannot resume and the event log is compacted, so the watch gets
    # 410 and re-lists. The re-list must delete "hog" from the cache, or "after"
    # never fits (a re-list that only upserts keeps the deleted pod forever).
    nodes(api, 1, cpu=2)
    with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
        t.wait_ready()
        pod(api, "hog", cpu="2")
        until(lambda: node_of(api, "hog") == "n0", what="hog bound")
        held = api.hang("/api/v1/pods?watch=1")
        api.drop_watches("pods", 1)
        until(lambda: held.waiting, what="the pods watch held")
        api.delete("pods", "default", "hog")
        api.compact()
        pod(api, "after", cpu="2")
        api.unhang(held)
        until(lambda: node_of(api, "after") == "n0", what="after bound once hog left the cache")
        t.stop()
    assert "Traceback" not in t.log()


def test_readyz_waits_for_every_kind_listed_and_pods_come_after_what_they_read(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    # The PodDisruptionBudgets' list hangs: the replica is alive (/healthz) but not
    # ready, and has bound nothing (pods are listed after the kinds before them).
    nodes(api, 1, cpu=2)
    pod(api, "early")
    held = api.hang("/apis/policy/v1/poddisruptionbudgets?limit=")
    with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
        until(lambda: held.waiting, what="the PDB list held")
        until(lambda: t.http("/healthz")[0] == 200, what="alive")
        assert t.http("/readyz")[0] != 200
        assert node_of(api, "early") is None
        api.unhang(held)
        t.wait_ready()
        until(lambda: node_of(api, "early") == "n0", what="early bound once synced")
        t.stop()


def test_issue14_a_malformed_pod_is_reported_once_and_skipped(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    nodes(api, 1, cpu=4)
    bad = make_pod("bad").obj()
    bad["metadata"].pop("uid", None)
    bad["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    api.create(bad)
    pod(api, "good")
    with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
        t.wait_ready()
        until(lambda: node_of(api, "good") == "n0")
        until(lambda: (api.get("pods", "default", "bad") or {}).get("status", {}).get("conditions"))
        msg = api.get("pods", "default", "bad")["status"]["conditions"][0]["message"]  # type: ignore[index]
        assert msg.startswith("spec.containers[0].resources.requests.cpu: quantities must")
        ev = until(lambda: events_of(api, "bad"))
        assert ev[0]["reason"] == "FailedScheduling"
        # its own condition patch comes back as an update: no second report
        pod(api, "later")
        until(lambda: node_of(api, "later"))
        t.stop()
    status_patches = [
        w for w in api.writes if w.name == "bad" and w.subresource == "status" and w.status < 300
    ]
    assert len(status_patches) == 1
    assert len(events_of(api, "bad")) == 1 and events_of(api, "bad")[0].get("count", 1) == 1


def test_a_gang_is_bound_and_its_podgroup_status_written(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    nodes(api, 2, cpu=4)
    api.create(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": "default"},
            "spec": {"minMember": 3},
        }
    )
    for i in range(3):
        obj = make_pod(f"w{i}").group("job").req(cpu="2").obj()
        obj["metadata"].pop("uid", None)
        api.create(obj)
    with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
        t.wait_ready()
        until(lambda: len(bound(api)) == 3, what="the gang bound")
        until(
            lambda: (
                (api.get("podgroups", "default", "job") or {}).get("status", {}).get("phase")
                not in (None, "Pending")
            ),
            what="PodGroup status",
        )
        t.stop()
    assert_rbac_covers(api)


def test_credentials_are_not_in_the_log(api: ApiServer, tmp_path: Path) -> None:
    srv = ApiServer(podgroups=True, token="s3cr3t-token")
    with srv.start_in_thread():
        kc = srv.write_kubeconfig(tmp_path / "kc", token="s3cr3t-token")
        with Troupe(tmp_path, kubeconfig=kc) as t:
            t.wait_ready()
            t.stop()
        assert "s3cr3t-token" not in t.log()
        assert base64.b64encode(b"s3cr3t-token").decode() not in t.log()


def test_issue14_a_leader_that_cannot_renew_stops_binding_before_another_leads(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """#14.3: the Lease API hangs for the leader only. It must stop binding
    within renewDeadline of its last renewal (the fence), before the standby
    may take over (leaseDuration), and exit; no two replicas bind at once."""
    nodes(api, 4, cpu=64, max_pods=110)
    a = Troupe(tmp_path, kubeconfig=kubeconfig, identity="a").start()
    b = Troupe(tmp_path, kubeconfig=kubeconfig, identity="b").start()
    try:
        a.wait_ready()
        b.wait_ready()
        until(
            lambda: (
                (api.get("leases", "kube-system", "troupe-scheduler") or {})
                .get("spec", {})
                .get("holderIdentity")
                in ("a", "b")
            ),
            what="a leader",
        )
        leader = api.get("leases", "kube-system", "troupe-scheduler")["spec"]["holderIdentity"]  # type: ignore[index]
        first, second = (a, b) if leader == "a" else (b, a)
        api.hang(header=("User-Agent", f"({first.identity}) leader-election"))
        for i in range(60):  # pods keep coming while the leader's Lease calls hang
            pod(api, f"p{i}", cpu="100m")
            time.sleep(0.15)
        until(lambda: len(bound(api)) == 60, what="every pod bound", timeout=60)
        assert first.wait(30) == 1, "a replica that lost the Lease exits with 1"
        by = binds_by(api)
        assert sum(by.values()) == 60 and api.binds == 60
        binds = [w for w in api.writes if w.verb == "bind" and w.status < 300]
        last_first = max(
            (w.time for w in binds if f"({first.identity})" in w.user_agent), default=0
        )
        first_second = min(w.time for w in binds if f"({second.identity})" in w.user_agent)
        assert last_first < first_second, "two replicas bound at the same time"
    finally:
        api.unhang()
        for t in (a, b):
            if t.running:
                t.stop()


def test_make_demo_binds_what_fits(capsys: pytest.CaptureFixture[str]) -> None:
    from apiserver import demo
    from apiserver.replica import free_port

    assert demo.main(["--metrics-port", str(free_port()), "--timeout", "60"]) == 0
    out = capsys.readouterr().out
    assert "Starting: troupe run --kubeconfig" in out
    assert "17 of 22 pods bound, 2 preempted" in out
    # the WaitForFirstConsumer claim: Troupe picks the node, the demo's provisioner
    # makes the PV there, and the pod is bound to that node
    prov = re.search(r"provisioner: shop/db-data -> PV pvc-\S+ on (\S+)", out)
    assert prov is not None, out
    assert re.search(rf"pod shop/db +-> {prov.group(1)}$", out, re.M), out
    assert "pod ml/trainer                   -> gpu-b1" in out
    assert "podgroup ml/allreduce" in out and "phase=Scheduling" in out
    # the DRA gang: the demo plays the resourceclaim controller, Troupe allocates
    # one of the fake driver's GPUs to each member, four different ones
    for i in range(4):
        assert f"resourceclaim controller: ml/finetune-{i}-gpu-" in out, out
    got = re.findall(r"pod ml/finetune-\d +-> \S+ \(gpu: (gpu\.example\.com/\S+)\)$", out, re.M)
    assert len(got) == len(set(got)) == 4, out
    # the native gang (scheduling.k8s.io/v1beta1) binds whole and says so
    assert "pod ml/ring-0" in out and "pod ml/ring-1" in out
    assert (
        "podgroup ml/ring (scheduling.k8s.io) PodGroupInitiallyScheduled=True reason=Scheduled"
        in out
    )
    # quotas: team-a borrows beyond its min, team-b's pod comes later and reclaims
    # its min from team-a (two victims), and both quotas' status.used say so
    a_used = "elasticquota team-a/team-a       used cpu {}, memory {}Gi (min cpu 1, memory 4Gi;"
    assert a_used.format(4, 4) in out, out
    later = out[out.index("Creating the pods held back: team-b/train") :]
    assert "because total ElasticQuota used is more than min" in later
    assert len(re.findall(r"pod team-a/batch-\d +preempted \(deleted\)$", later, re.M)) == 2
    assert re.search(r"pod team-b/train +-> shared-1$", later, re.M), out
    assert a_used.format(2, 2) in later
    assert "elasticquota team-b/team-b       used cpu 2, memory 2Gi" in later


def test_client_connection_kubeconfig_from_the_config_file_binds_a_later_pod(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """The third way in: kube-scheduler's `clientConnection.kubeconfig`, no flag."""
    nodes(api, 1)
    t = Troupe(
        tmp_path,
        kubeconfig=None,
        config={"clientConnection": {"kubeconfig": str(kubeconfig), "qps": 100, "burst": 200}},
        env={"KUBERNETES_SERVICE_HOST": "", "KUBECONFIG": str(tmp_path / "missing")},
    )
    with t:
        t.wait_ready()
        pod(api, "later")
        until(lambda: node_of(api, "later") == "n0", what="bound through the config's kubeconfig")
        assert t.stop() == 0


def test_leader_elect_false_schedules_without_a_lease(
    api: ApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    nodes(api, 1)
    with Troupe(
        tmp_path, kubeconfig=kubeconfig, config={"leaderElection": {"leaderElect": False}}
    ) as t:
        t.wait_ready()
        pod(api, "p")
        until(lambda: node_of(api, "p") == "n0")
        assert api.get("leases", "kube-system", "troupe-scheduler") is None
        assert t.stop() == 0


def test_a_bad_configuration_field_stops_start_up_with_its_name(
    kubeconfig: Path, tmp_path: Path
) -> None:
    t = Troupe(tmp_path, kubeconfig=kubeconfig, config={"leaderElection": {"leaseDuration": 15}})
    t.start()
    assert t.wait(30) == 2
    assert 'leaderElection.leaseDuration: Invalid value: 15: must be a duration such as "15s"' in (
        t.log()
    )
