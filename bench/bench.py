"""`make bench`: scheduler_perf-like benchmarks of the in-process pipeline.

Each case runs in its own process (so peak memory is the case's own) with the
real Scheduler, the in-memory ClusterClient and a virtual clock. The timed
part starts once nodes and running pods are loaded and the pods to schedule
are queued, and ends when every one of them is bound: that is the scheduling
throughput (pods/s) kube-scheduler's scheduler_perf reports. Each case also
reports the CPU time of that part (`cpu_seconds`, `pods_per_cpu_s`), steadier
than the wall clock on a shared machine.

Quotas: `basic-5000-quotas` and `gang-5000-quotas` are basic-5000 and
gang-5000 under scheduler-plugins' CapacityScheduling profile with the pods in
20 namespaces, each with an ElasticQuota that holds them all (the quota's
cost, nothing refused); `reclaim-5000` has team-a borrowing beyond its min on
5000 nodes and team-b's pods reclaiming theirs (pods/s and victims).

    python -m bench.bench                  # every case
    python -m bench.bench --case basic-5000

The whole suite ends with bench/watermark.py: troupe.scoreWatermark
against full scoring and sampling, speed and placement quality.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from bench import workloads
from troupe.api.types import PodKey
from troupe.config import default_config, parse_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler
from troupe.plugins.registry import IN_TREE
from troupe.tools.volume_sim import VolumeControllers

CHURN_INTERVAL = 0.2  # scheduler_perf's churn intervalMilliseconds: 200
CHURN_CHECK_EVERY = 32  # scheduling cycles between two looks at the wall clock
CHURN_TIMEOUT = 600.0

# scheduler-plugins' documented profile for CapacityScheduling.
CAPACITY_SCHEDULING = {
    "profiles": [
        {
            "schedulerName": workloads.SCHEDULER,
            "plugins": {
                "multiPoint": {"enabled": [{"name": "CapacityScheduling"}]},
                "postFilter": {
                    "enabled": [{"name": "CapacityScheduling"}],
                    "disabled": [{"name": "*"}],
                },
            },
        }
    ]
}


@dataclass(frozen=True)
class Case:
    name: str
    nodes: int
    running: int
    to_schedule: int
    per_node: bool = False
    target_pods_per_s: float | None = None
    gang_size: int = 0  # >0: pods come in PodGroups of this size (minMember = size)
    spread: str | None = None  # the measured pods spread: DoNotSchedule | ScheduleAnyway
    affinity: bool = False  # the measured pods require zone-0 or zone-1
    pod_affinity: str | None = None  # "anti" | "affinity": running and measured pods
    zones: int = 3
    # "bound": each measured pod's claim is bound to a PV with zone node affinity;
    # "wffc": each has its own WaitForFirstConsumer claim, provisioned on the
    # chosen node by the simulated provisioner (troupe.tools.volume_sim) at PreBind
    volumes: str | None = None
    target_ms_per_group: float | None = None
    # >0: every node is filled with `running` low-priority pods of 900m and the
    # measured pods (3 CPUs, this priority) must preempt (scheduler_perf's
    # PreemptionBasic templates); the timed part ends when all are bound, the
    # victims removed after their grace period on the virtual clock.
    preempt_priority: int = 0
    # scheduler_perf's churn op (mode create, every 200 ms of the measured time):
    # "preemptor" (pod-high-priority.yaml: 3 CPUs, priority 10, over nodes full of
    # pod-low-priority.yaml pods: PreemptionAsync) or "large-cpu"
    # (pod-high-priority-large-cpu.yaml: 9 CPUs, fits no node: Unschedulable).
    # The measured pods are pod-default.yaml; only they count toward pods/s.
    churn: str | None = None
    # >0: Dynamic Resource Allocation (scheduler_perf's SchedulingWithResourceClaimTemplate):
    # every node publishes this many devices of the test driver; each running pod
    # holds one through an allocated claim, each measured pod claims one through
    # its template (the claim created, as the resourceclaim controller would).
    devices: int = 0
    # DRA with partitionable devices: every node's GPU is published whole, in
    # halves, quarters and eighths sharing its memory counter; each measured
    # pod claims an eighth (devices must be 0).
    partitioned: bool = False
    # troupe.explain.enabled: every pod's decision kept for /debug/explain
    explain: bool = False
    # >0: scheduler-plugins' CapacityScheduling profile, and the measured pods
    # (and gangs) in this many namespaces, each with an ElasticQuota that holds
    # all of its pods (min 1/20 of the cluster's cpu, max all of it): the
    # quota's cost per cycle, nothing refused.
    quotas: int = 0
    # Quota reclaim (two teams): team-a's running pods (900m, priority 0)
    # borrow beyond its min; team-b's measured pods (3 CPUs, priority 0) are
    # within team-b's min and reclaim it from team-a, whatever the priorities.
    reclaim: bool = False


CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case("basic-500", 500, 1000, 10000),
        Case("basic-5000", 5000, 1000, 10000, target_pods_per_s=1000.0),
        Case("basic-5000-explain", 5000, 1000, 10000, explain=True),
        Case("basic-500-per-node", 500, 1000, 2000, per_node=True),
        Case("basic-5000-per-node", 5000, 1000, 1000, per_node=True),
        Case("gang-5000", 5000, 0, 3000, gang_size=3, target_ms_per_group=3.7),
        Case("basic-5000-quotas", 5000, 1000, 10000, quotas=20),
        Case("gang-5000-quotas", 5000, 0, 3000, gang_size=3, quotas=20),
        Case("reclaim-5000", 5000, 15000, 50, reclaim=True),
        Case("node-affinity-5000", 5000, 5000, 10000, affinity=True, target_pods_per_s=330.0),
        Case(
            "pod-anti-affinity-5000", 5000, 1000, 2000, pod_affinity="anti", target_pods_per_s=90.0
        ),
        Case(
            "pod-affinity-5000",
            5000,
            5000,
            5000,
            pod_affinity="affinity",
            zones=1,
            target_pods_per_s=53.0,
        ),
        Case("spread-5000", 5000, 5000, 5000, spread="DoNotSchedule", target_pods_per_s=700.0),
        Case("preemption-basic-1000", 1000, 4000, 1000, preempt_priority=10),
        Case("preemption-gang-1000", 1000, 4000, 800, gang_size=4, preempt_priority=10),
        Case(
            "preemption-async-5000", 5000, 20000, 5000, churn="preemptor", target_pods_per_s=570.0
        ),
        Case("unschedulable-5000", 5000, 20000, 10000, churn="large-cpu", target_pods_per_s=600.0),
        Case(
            "preferred-spread-5000",
            5000,
            5000,
            5000,
            spread="ScheduleAnyway",
            target_pods_per_s=510.0,
        ),
        Case("volume-bound-5000", 5000, 1000, 5000, volumes="bound"),
        Case("volume-wffc-5000", 5000, 1000, 5000, volumes="wffc"),
        # 5000pods_500nodes_QueueingHintsEnabled: threshold 56 pods/s; 1.5x that.
        Case("dra-500", 500, 2500, 2500, devices=10, target_pods_per_s=84.0),
        Case("dra-5000", 5000, 0, 10000, devices=8),
        Case("dra-gang-500", 500, 0, 2400, devices=10, gang_size=8),
        Case("dra-partitioned-500", 500, 0, 4000, partitioned=True),
    )
}


async def _run_case(case: Case) -> dict[str, Any]:
    clock = VirtualClock()
    cluster = InMemoryCluster()
    quotas = case.quotas or case.reclaim
    config = parse_config(CAPACITY_SCHEDULING, IN_TREE) if quotas else default_config(IN_TREE)
    if case.explain:
        config = replace(config, troupe=replace(config.troupe, explain_enabled=True))
    sched = Scheduler(config, cluster, clock, prefer_per_node=case.per_node, registry=IN_TREE)
    measured_bound = 0

    def bound(key: PodKey, node: str) -> None:
        nonlocal measured_bound
        obj = cluster.pods[key]
        obj["status"]["phase"] = "Running"
        sched.on_pod(obj)
        if "/pod-" in key:
            measured_bound += 1

    cluster.on_pod_bound = bound
    if case.preempt_priority or case.churn or case.reclaim:

        def deleted(key: PodKey, grace: int) -> None:
            sched.on_pod(cluster.pods[key])  # the update with its deletionTimestamp

            def gone() -> None:
                obj = cluster.pods.pop(key, None)
                if obj is not None:
                    sched.on_pod(obj, deleted=True)

            clock.call_at(clock.now() + grace, gone)

        cluster.on_pod_deleted = deleted
    t0 = time.perf_counter()
    for i in range(case.nodes):
        sched.on_node(workloads.node(i, zones=case.zones))
    controllers = _volumes(case, sched, cluster)
    if case.devices or case.partitioned:
        sched.on_dra_object("DeviceClass", workloads.device_class())
        for i in range(case.nodes):
            if case.partitioned:
                for s in workloads.partitioned_slices(i):
                    sched.on_dra_object("ResourceSlice", s)
            else:
                sched.on_dra_object("ResourceSlice", workloads.resource_slice(i, case.devices))
        cluster.on_claim_write = lambda o: sched.on_dra_object("ResourceClaim", o)
    for eq in _elastic_quotas(case):
        cluster.elastic_quotas[f"{eq['metadata']['namespace']}/{eq['metadata']['name']}"] = eq
        sched.events.on_elastic_quota(eq)
    for i in range(case.running):
        o = workloads.pod(
            i,
            "running",
            node_name=f"node-{i % case.nodes}",
            pod_affinity=case.pod_affinity,
            namespace="team-a" if case.reclaim else "sched-perf",
        )
        if case.devices:
            name = f"running-{i}-resource"
            claim = workloads.resource_claim(
                name, f"running-{i}", f"uid-running-{i}", (i % case.nodes, i // case.nodes)
            )
            cluster.resource_claims[f"sched-perf/{name}"] = claim
            sched.on_dra_object("ResourceClaim", claim)
            workloads.with_resource_claim(o, name)
        if case.preempt_priority or case.churn == "preemptor" or case.reclaim:
            _low_priority(o)
        cluster.pods[f"{o['metadata']['namespace']}/running-{i}"] = o
        sched.on_pod(o)
    if case.gang_size:
        for g in range(case.to_schedule // case.gang_size):
            ns = _namespace(case, g)
            pg = workloads.pod_group(f"gang-{g}", case.gang_size, ns)
            cluster.pod_groups[f"{ns}/gang-{g}"] = pg
            sched.on_pod_group(pg)
    for i in range(case.to_schedule):
        group = f"gang-{i // case.gang_size}" if case.gang_size else None
        o = workloads.pod(
            i,
            group=group,
            spread=case.spread,
            affinity=case.affinity,
            pod_affinity=case.pod_affinity,
            namespace=_namespace(case, i // case.gang_size if case.gang_size else i),
        )
        if case.volumes:
            workloads.with_claim(o, f"data-{i}")
        if case.devices or case.partitioned:
            name = f"pod-{i}-resource"
            eighth = f'device.attributes["{workloads.DRA_DRIVER}"].size == "eighth"'
            claim = workloads.resource_claim(
                name, f"pod-{i}", f"uid-pod-{i}", selector=eighth if case.partitioned else ""
            )
            cluster.resource_claims[f"sched-perf/{name}"] = claim
            sched.on_dra_object("ResourceClaim", claim)
            workloads.with_resource_claim(o, name)
        if case.preempt_priority or case.reclaim:
            _sized(o, "3", case.preempt_priority)
        cluster.pods[f"{o['metadata']['namespace']}/pod-{i}"] = o
        sched.on_pod(o)
    t_load = time.perf_counter() - t0

    t1, c1 = time.perf_counter(), time.process_time()
    churned = 0
    if case.churn:
        churned = await _run_churn(case, sched, cluster, clock, lambda: measured_bound)
    while not case.churn:
        n = 0
        while sched.schedule_one():
            n += 1
            if n % 256 == 0:
                await sched.settle()
        await sched.settle()
        if sched.queue.statistics().active:
            continue
        if not (case.preempt_priority or case.reclaim) or cluster.binds >= case.to_schedule:
            break
        # preemption: move the virtual clock to the next removal (or backoff)
        nxt = clock.next_deadline()
        w = sched.queue.next_wakeup()
        if w is not None and sched.queue.statistics().backoff:
            nxt = w if nxt is None else min(nxt, w)
        if nxt is None or nxt > 3600.0:
            break
        clock.advance_to(nxt)
        sched.queue.flush()
        sched.cache.cleanup_expired()
        await sched.settle()
    elapsed = time.perf_counter() - t1
    cpu = time.process_time() - c1
    stats = sched.statistics()
    bound_pods = measured_bound if case.churn else cluster.binds
    if controllers is not None:
        assert len(controllers.outcomes) == bound_pods, "a pod bound without its volume"
    if case.devices or case.partitioned:
        allocated = [
            r["device"] + "@" + r["pool"]
            for c in cluster.resource_claims.values()
            for r in ((c.get("status") or {}).get("allocation") or {})
            .get("devices", {})
            .get("results", [])
        ]
        assert len(allocated) == len(set(allocated)) == case.running + bound_pods, (
            "a device given twice, or a pod bound without its device"
        )
        if case.partitioned:
            # Eight eighths fill a GPU's counters: any other partition would not fit.
            assert all(d.startswith("gpu-eighth-") for d in allocated), "counters overrun"
    return {
        "case": case.name,
        "nodes": case.nodes,
        "running": case.running,
        "to_schedule": case.to_schedule,
        "bound": bound_pods,
        "cycles": stats.cycles,
        "seconds": round(elapsed, 3),
        "pods_per_s": round(bound_pods / elapsed, 1) if elapsed else 0.0,
        "ms_per_pod": round(1000 * elapsed / max(bound_pods, 1), 3),
        # CPU time of the timed part: on a shared machine, steadier than the wall clock
        "cpu_seconds": round(cpu, 3),
        "pods_per_cpu_s": round(bound_pods / cpu, 1) if cpu else 0.0,
        "load_seconds": round(t_load, 3),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "target_pods_per_s": case.target_pods_per_s,
        "group_attempts": sched.group_attempts,
        "ms_per_group_attempt": round(1000 * elapsed / sched.group_attempts, 3)
        if sched.group_attempts
        else None,
        "target_ms_per_group": case.target_ms_per_group,
        "victims": len(cluster.deletions),
        "churned": churned,
        "preemptors_bound": cluster.binds - measured_bound if case.churn else None,
        "ms_per_gang": round(1000 * elapsed / (case.to_schedule // case.gang_size), 3)
        if case.gang_size
        else None,
    }


def _namespace(case: Case, i: int) -> str:
    """The namespace of measured pod (or gang) `i`."""
    if case.reclaim:
        return "team-b"
    return f"team-{i % case.quotas}" if case.quotas else "sched-perf"


def _elastic_quotas(case: Case) -> list[dict[str, Any]]:
    """The cases' ElasticQuotas: `quotas` teams with room for all their pods, or
    reclaim's two teams with half the cluster each as min, all of it as max."""
    cpu, mem = 4 * case.nodes, 32 * case.nodes  # node-default.yaml: 4 cpu, 32Gi
    if case.reclaim:
        half = {"cpu": str(cpu // 2), "memory": f"{mem // 2}Gi"}
        whole = {"cpu": str(cpu), "memory": f"{mem}Gi"}
        return [workloads.elastic_quota(ns, half, whole) for ns in ("team-a", "team-b")]
    share = {"cpu": str(cpu // 20), "memory": f"{mem // 20}Gi"}
    whole = {"cpu": str(cpu), "memory": f"{mem}Gi"}
    return [workloads.elastic_quota(f"team-{k}", share, whole) for k in range(case.quotas)]


def _volumes(case: Case, sched: Scheduler, cluster: InMemoryCluster) -> VolumeControllers | None:
    """The measured pods' claims (and PVs), loaded before the timed part."""
    if case.volumes == "bound":
        for i in range(case.to_schedule):
            pv, claim = workloads.zone_volume(i, zones=case.zones)
            cluster.volumes[pv["metadata"]["name"]] = pv
            cluster.claims[f"sched-perf/data-{i}"] = claim
            sched.on_volume_object("PersistentVolume", pv)
            sched.on_volume_object("PersistentVolumeClaim", claim)
        return None
    if case.volumes == "wffc":
        sc = workloads.wffc_class()
        sched.on_volume_object("StorageClass", sc)
        controllers = VolumeControllers(
            cluster, sched.on_volume_object, {sc["metadata"]["name"]: sc}
        )
        for i in range(case.to_schedule):
            claim = workloads.claim_obj(f"data-{i}", sc["metadata"]["name"])
            cluster.claims[f"sched-perf/data-{i}"] = claim
            sched.on_volume_object("PersistentVolumeClaim", claim)
        return controllers
    return None


async def _run_churn(
    case: Case,
    sched: Scheduler,
    cluster: InMemoryCluster,
    clock: VirtualClock,
    measured_bound: Callable[[], int],
) -> int:
    """Schedule the measured pods while scheduler_perf's churn op creates one
    high-priority pod every CHURN_INTERVAL seconds of wall time. The virtual
    clock follows the wall clock, so that backoff, the unschedulable pool and
    the victims' grace periods take the time they take in a live scheduler.
    Returns how many churn pods were created."""
    t1 = time.perf_counter()
    v0 = clock.now()
    churned = 0
    while measured_bound() < case.to_schedule:
        wall = time.perf_counter() - t1
        if wall > CHURN_TIMEOUT:
            break
        # scheduler_perf's churn starts before the measured pods are created:
        # its first pod is there at the start of the measured part
        while churned <= wall / CHURN_INTERVAL:
            o = workloads.pod(churned, "churn")
            if case.churn == "preemptor":
                _sized(o, "3", 10)
            else:
                _sized(o, "9", 10)
            key = f"sched-perf/churn-{churned}"
            cluster.pods[key] = o
            sched.on_pod(o)
            churned += 1
        clock.advance_to(v0 + wall)
        sched.queue.flush()
        sched.cache.cleanup_expired()
        n = 0
        while n < CHURN_CHECK_EVERY and sched.schedule_one():
            n += 1
        await sched.settle()
    return churned


def _low_priority(o: dict[str, Any]) -> None:
    """pod-low-priority.yaml: 900m, priority 0, terminationGracePeriodSeconds 0."""
    _sized(o, "900m", 0)
    o["spec"]["terminationGracePeriodSeconds"] = 0
    o["status"] = {"phase": "Running"}


def _sized(o: dict[str, Any], cpu: str, priority: int) -> None:
    """PreemptionBasic's templates: the pod's CPU request and priority."""
    o["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    o["spec"]["priority"] = priority


def run_case(name: str) -> dict[str, Any]:
    return asyncio.run(_run_case(CASES[name]))


def _in_subprocess(name: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.bench", "--case", name, "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _print_table(rows: list[dict[str, Any]], say: Callable[[str], None] = print) -> None:
    say(
        f"{'case':<22} {'nodes':>6} {'bound':>6} {'pods/s':>9} {'ms/pod':>8} "
        f"{'peak MiB':>9}  target"
    )
    for r in rows:
        tgt = r.get("target_pods_per_s")
        verdict = (
            ""
            if tgt is None
            else (f">= {tgt:g} " + ("MET" if r["pods_per_s"] >= tgt else "MISSED"))
        )
        say(
            f"{r['case']:<22} {r['nodes']:>6} {r['bound']:>6} {r['pods_per_s']:>9} "
            f"{r['ms_per_pod']:>8} {r['peak_rss_mib']:>9}  {verdict}"
        )
    for r in rows:
        if r.get("group_attempts"):
            tgt = r.get("target_ms_per_group")
            verdict = (
                ""
                if tgt is None
                else (
                    f" (target <= {tgt:g}: "
                    + ("MET" if r["ms_per_group_attempt"] <= tgt else "MISSED")
                    + ")"
                )
            )
            say(
                f"{r['case']}: {r['group_attempts']} group attempts, "
                f"{r['ms_per_group_attempt']} ms per group attempt{verdict}"
            )
    for r in rows:
        if r.get("victims") and not r.get("churned"):
            per_gang = f", {r['ms_per_gang']} ms per gang" if r.get("ms_per_gang") else ""
            say(
                f"{r['case']}: {r['bound']} preemptors bound, {r['victims']} victims, "
                f"{r['pods_per_s']} pods/s{per_gang}"
            )
    for r in rows:
        if r.get("churned"):
            say(
                f"{r['case']}: {r['churned']} churn pods created (one per 200 ms), "
                f"{r['preemptors_bound']} of them bound, {r['victims']} victims"
            )
    by = {r["case"]: r for r in rows}
    for base in ("basic-5000", "gang-5000"):
        plain, quotas = by.get(base), by.get(f"{base}-quotas")
        if plain and quotas and plain["pods_per_s"]:
            say(
                f"{base} with 20 quotas / without: "
                f"{100 * quotas['pods_per_s'] / plain['pods_per_s']:.0f} % of the pods/s "
                f"({100 * quotas['pods_per_cpu_s'] / plain['pods_per_cpu_s']:.0f} % per CPU second)"
            )
    for n in (500, 5000):
        col, row = by.get(f"basic-{n}"), by.get(f"basic-{n}-per-node")
        if col and row and row["pods_per_s"]:
            say(f"columnar / per-node at {n} nodes: {col['pods_per_s'] / row['pods_per_s']:.1f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    ap.add_argument("--json", action="store_true", help="print one JSON line per case")
    args = ap.parse_args(argv)
    names = args.case or list(CASES)
    if args.json:
        for n in names:
            print(json.dumps(run_case(n)))
        return 0
    rows = []
    for n in names:
        print(f"running {n} ...", file=sys.stderr, flush=True)
        rows.append(_in_subprocess(n))
    _print_table(rows)
    if not args.case:  # the whole suite: troupe.scoreWatermark too
        sys.stdout.flush()
        subprocess.run([sys.executable, "-m", "bench.watermark"], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
