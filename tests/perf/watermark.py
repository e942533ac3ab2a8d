"""troupe.scoreWatermark against full scoring and against sampling: speed and
placement quality, in process (real Scheduler, in-memory cluster, virtual clock).

    python -m tests.perf.watermark [--nodes 5000] [--running 5000] [--pods 5000]

The cluster is uneven on purpose, or every placement would be as good as any:
node sizes cycle through 4, 8, 16 and 32 cpu (memory alike), and the running
pods sit on random nodes (seeded), so nodes differ in free room and balance.

Speed: pods/s of the scheduling cycles alone (a timed run without measuring).
Quality: a second, untimed run in which every decision is re-examined at the
moment it is made: the pod is filtered and scored against *every* node with a
fresh CycleState (PreFilter, Filter, PreScore, Score, NormalizeScore over all
feasible nodes: full scoring), and the chosen node's total is divided by the
best total of that full scoring. 1.0 means the decision was as good as full
scoring's; the mean over all pods is reported, with the share of pods whose
node was not a full-scoring best.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from typing import Any

import numpy as np

from scheduler.api.types import PodKey
from scheduler.clock import VirtualClock
from scheduler.cluster import InMemoryCluster
from scheduler.config import parse_config
from scheduler.framework.cycle_state import CycleState
from scheduler.plugins.registry import IN_TREE
from scheduler.scheduler import Scheduler, ScheduleResult
from tests.perf import workloads

VARIANTS: dict[str, dict[str, Any]] = {
    "full (percentageOfNodesToScore 100)": {"percentageOfNodesToScore": 100},
    "sampling (adaptive default)": {},
    "scoreWatermark 0.70": {"troupe": {"scoreWatermark": 0.70}},
    "scoreWatermark 0.75": {"troupe": {"scoreWatermark": 0.75}},
    "scoreWatermark 0.80": {"troupe": {"scoreWatermark": 0.80}},
}


def _node(i: int) -> dict[str, Any]:
    obj = workloads.node(i)
    size = 4 << (i % 4)
    alloc = {"cpu": str(size), "memory": f"{8 * size}Gi", "pods": "110"}
    obj["status"] = {"allocatable": dict(alloc), "capacity": dict(alloc)}
    return obj


def _quality_probe(s: Scheduler, ratios: list[float]) -> None:
    """Wrap `s._schedule_pod` to re-score each decision against full scoring."""
    inner = s._schedule_pod

    def probed(profile: Any, state: CycleState, pod: Any, post_filter: bool = True) -> Any:
        result = inner(profile, state, pod, post_filter)
        if isinstance(result, ScheduleResult):
            snap = s.snapshot
            st = CycleState()
            profile.run_pre_filter(st, pod, snap)
            rows = snap.valid_rows()
            out = profile.run_filters(st, pod, snap, rows)
            feasible = rows[np.flatnonzero(out.feasible)]
            profile.run_pre_score(st, pod, snap, feasible)
            scores = profile.run_score(st, pod, snap, feasible)
            chosen = scores[feasible == snap.row_of[result.node]]
            ratios.append(float(chosen[0]) / float(scores.max()) if scores.max() else 1.0)
        return result

    s._schedule_pod = probed  # type: ignore[method-assign]


async def _run(config: dict[str, Any], nodes: int, running: int, pods: int, probe: bool) -> Any:
    cluster = InMemoryCluster()
    s = Scheduler(parse_config(config, IN_TREE), cluster, VirtualClock())

    def bound(key: PodKey, node: str) -> None:
        obj = cluster.pods[key]
        obj["status"]["phase"] = "Running"
        s.on_pod(obj)

    cluster.on_pod_bound = bound
    for i in range(nodes):
        s.on_node(_node(i))
    rng = random.Random(7)
    for i in range(running):
        o = workloads.pod(i, "running", node_name=f"node-{rng.randrange(nodes)}")
        # Uneven requests: 100m..2 cpu.
        o["spec"]["containers"][0]["resources"]["requests"]["cpu"] = f"{rng.choice((1, 5, 20))}00m"
        cluster.pods[PodKey(f"sched-perf/running-{i}")] = o
        s.on_pod(o)
    for i in range(pods):
        o = workloads.pod(i)
        cluster.pods[PodKey(f"sched-perf/pod-{i}")] = o
        s.on_pod(o)
    ratios: list[float] = []
    if probe:
        _quality_probe(s, ratios)
    t0 = time.perf_counter()
    n = 0
    while s.schedule_one():
        n += 1
        if n % 256 == 0:
            await s.settle()
    await s.settle()
    elapsed = time.perf_counter() - t0
    return cluster.binds, elapsed, ratios


def run(nodes: int, running: int, pods: int) -> list[dict[str, Any]]:
    rows = []
    for name, config in VARIANTS.items():
        bound, elapsed, _ = asyncio.run(_run(config, nodes, running, pods, probe=False))
        _, _, ratios = asyncio.run(_run(config, nodes, running, pods, probe=True))
        r = np.array(ratios)
        rows.append(
            {
                "variant": name,
                "bound": bound,
                "pods_per_s": round(bound / elapsed, 1),
                "mean_quality": round(float(r.mean()), 4) if len(r) else None,
                "not_best_share": round(float((r < 1.0 - 1e-9).mean()), 3) if len(r) else None,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--running", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = run(args.nodes, args.running, args.pods)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"scoreWatermark: {args.pods} pods on {args.nodes} uneven nodes ({args.running} running)")
    print(f"{'variant':38} {'bound':>6} {'pods/s':>8} {'quality':>8} {'not best':>8}")
    for row in rows:
        print(
            f"{row['variant']:38} {row['bound']:>6} {row['pods_per_s']:>8} "
            f"{row['mean_quality']:>8} {row['not_best_share']:>8}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
