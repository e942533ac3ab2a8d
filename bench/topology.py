"""Topology-aware gangs at scale (issue #20's benchmark), in process with the
real Scheduler, the in-memory cluster and a virtual clock.

5000 nodes (4 cpu, 32Gi) in racks of 40 and blocks of 10 racks, a running load
of 5000 pods (500m), then 1000 gangs of 8 (1 cpu each) that require a rack and
1000 that prefer [rack, block], created alternately. Reported: ms per group
attempt (goal <= 5 ms), the share of preferred gangs placed in one rack (goal
>= 95 %), and, as the baseline, the share of the same gangs spread over several
racks when they ask for no topology.

    python -m bench.topology [--gangs N]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from bench import workloads
from troupe.api.types import PodKey
from troupe.config import default_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler
from troupe.core.topology import PREFERRED_ANNOTATION, REQUIRED_ANNOTATION
from troupe.plugins.registry import IN_TREE

RACK = "troupe.dev/rack"
BLOCK = "troupe.dev/block"
NODES = 5000
RACK_SIZE = 40
RACKS_PER_BLOCK = 10
GANG = 8
TARGET_MS = 5.0
TARGET_SHARE = 0.95


def _node(i: int) -> dict[str, Any]:
    o = workloads.node(i)
    rack = i // RACK_SIZE
    o["metadata"]["labels"][RACK] = f"rack-{rack}"
    o["metadata"]["labels"][BLOCK] = f"block-{rack // RACKS_PER_BLOCK}"
    return o


def _gang(g: int, kind: str | None) -> dict[str, Any]:
    pg = workloads.pod_group(f"gang-{g}", GANG)
    if kind == "required":
        pg["metadata"]["annotations"] = {REQUIRED_ANNOTATION: RACK}
    elif kind == "preferred":
        pg["metadata"]["annotations"] = {PREFERRED_ANNOTATION: f"{RACK},{BLOCK}"}
    return pg


async def run(gangs: int, topology: bool) -> dict[str, Any]:
    clock = VirtualClock()
    cluster = InMemoryCluster()
    sched = Scheduler(default_config(IN_TREE), cluster, clock, registry=IN_TREE)

    def bound(key: PodKey, node: str) -> None:
        obj = cluster.pods[key]
        obj["status"]["phase"] = "Running"
        sched.on_pod(obj)

    cluster.on_pod_bound = bound
    for i in range(NODES):
        sched.on_node(_node(i))
    for i in range(NODES):
        o = workloads.pod(i, "running", node_name=f"node-{(i * 7) % NODES}")
        o["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
        cluster.pods[PodKey(f"sched-perf/running-{i}")] = o
        sched.on_pod(o)
    kinds: dict[str, str] = {}
    for g in range(2 * gangs):
        kind = ("required" if g % 2 == 0 else "preferred") if topology else None
        kinds[f"gang-{g}"] = "required" if g % 2 == 0 else "preferred"
        pg = _gang(g, kind)
        cluster.pod_groups[f"sched-perf/gang-{g}"] = pg
        sched.on_pod_group(pg)
        for m in range(GANG):
            o = workloads.pod(g * GANG + m, group=f"gang-{g}")
            o["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
            cluster.pods[PodKey(f"sched-perf/pod-{g * GANG + m}")] = o
            sched.on_pod(o)
    t0 = time.perf_counter()
    n = 0
    while sched.schedule_one():
        n += 1
        if n % 256 == 0:
            await sched.settle()
    await sched.settle()
    elapsed = time.perf_counter() - t0
    racks: dict[str, set[str]] = {}
    for o in cluster.pods.values():
        labels = o["metadata"].get("labels") or {}
        g = labels.get("scheduling.x-k8s.io/pod-group")
        node = o["spec"].get("nodeName")
        if g and node:
            racks.setdefault(g, set()).add(f"rack-{int(node.split('-')[1]) // RACK_SIZE}")
    placed = {g: r for g, r in racks.items() if len(r)}
    one_rack = {
        k: sum(1 for g, r in placed.items() if kinds[g] == k and len(r) == 1)
        for k in ("required", "preferred")
    }
    total = {k: sum(1 for g in placed if kinds[g] == k) for k in ("required", "preferred")}
    attempts = sched.group_attempts
    return {
        "elapsed": elapsed,
        "attempts": attempts,
        "ms_per_attempt": 1000 * elapsed / attempts if attempts else 0.0,
        "placed": total,
        "one_rack": one_rack,
        "bound": cluster.binds,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--gangs", type=int, default=1000, help="gangs of each kind")
    args = ap.parse_args(argv)
    base = asyncio.run(run(args.gangs, topology=False))
    topo = asyncio.run(run(args.gangs, topology=True))
    n_base = sum(base["placed"].values())
    spread = n_base - sum(base["one_rack"].values())
    print(
        f"topology: {NODES} nodes in racks of {RACK_SIZE} (blocks of {RACKS_PER_BLOCK} racks), "
        f"{NODES} running pods, {args.gangs} gangs of {GANG} requiring a rack + {args.gangs} "
        f"preferring [rack, block]"
    )
    ms = topo["ms_per_attempt"]
    verdict = "MET" if ms <= TARGET_MS else "MISSED"
    print(
        f"with topology: {topo['attempts']} group attempts, {ms:.3f} ms per group attempt "
        f"(target <= {TARGET_MS:g}: {verdict}); {topo['bound']} pods bound"
    )
    for k in ("required", "preferred"):
        placed, one = topo["placed"][k], topo["one_rack"][k]
        share = one / placed if placed else 0.0
        extra = ""
        if k == "preferred":
            extra = (
                f" (target >= {TARGET_SHARE:.0%}: {'MET' if share >= TARGET_SHARE else 'MISSED'})"
            )
        print(f"  {k}: {placed} gangs admitted, {one} in one rack = {share:.1%}{extra}")
    print(
        f"baseline without topology: {base['attempts']} group attempts, "
        f"{base['ms_per_attempt']:.3f} ms per group attempt; {n_base} gangs admitted, "
        f"{spread} spread over several racks = {spread / n_base if n_base else 0:.1%}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
