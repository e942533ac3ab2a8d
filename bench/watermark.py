"""troupe.scoreWatermark against full scoring and against sampling: speed and
placement quality, in process (real Scheduler, in-memory cluster, virtual clock).

    python -m bench.watermark [--nodes 5000] [--running 5000] [--pods 5000] [--runs 3]

The cluster is uneven on purpose, or every placement would be as good as any:
node sizes cycle through 4, 8, 16 and 32 cpu (memory alike), the running pods
(each 5-45 % of its node's cpu and, drawn apart, of its memory) sit on random
nodes (seeded), and the pods to place ask for
100m/512Mi to 2 cpu/4Gi, so nodes differ in free room and balance and their
scores spread.

Speed: pods/s of the scheduling cycles alone, `--runs` timed runs (min–max).
Quality: one more, untimed run in which every decision is re-examined at the
moment it is made: the pod is filtered and scored against *every* node with a
fresh CycleState (PreFilter, Filter, PreScore, Score, NormalizeScore over all
feasible nodes: full scoring). Reported: the mean total score of the chosen
nodes in that full scoring (out of the highest total the scoring plugins can
give, shown as "max"), the mean regret (best total minus the chosen node's)
and the share of pods whose node was not a full-scoring best.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench import workloads
from troupe.api.types import PodKey
from troupe.config import parse_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler, ScheduleResult
from troupe.framework.cycle_state import CycleState
from troupe.plugins.registry import IN_TREE

VARIANTS: dict[str, dict[str, Any]] = {
    "full (percentageOfNodesToScore 100)": {"percentageOfNodesToScore": 100},
    "sampling (adaptive default)": {},
    # (the adaptive default is 10 % at 5000 nodes: 50 - 5000/125)
    "sampling (percentageOfNodesToScore 5)": {"percentageOfNodesToScore": 5},
    "scoreWatermark 0.80": {"troupe": {"scoreWatermark": 0.80}},
    "scoreWatermark 0.90": {"troupe": {"scoreWatermark": 0.90}},
    "scoreWatermark 0.95": {"troupe": {"scoreWatermark": 0.95}},
}
POD_SIZES = (("100m", "512Mi"), ("500m", "1Gi"), ("1", "2Gi"), ("2", "4Gi"))


def _node(i: int) -> dict[str, Any]:
    obj = workloads.node(i)
    size = 4 << (i % 4)
    alloc = {"cpu": str(size), "memory": f"{8 * size}Gi", "pods": "110"}
    obj["status"] = {"allocatable": dict(alloc), "capacity": dict(alloc)}
    return obj


@dataclass
class Quality:
    chosen: list[int] = field(default_factory=list)  # the chosen node's total, full scoring
    best: list[int] = field(default_factory=list)  # the best total of full scoring
    max_total: int = 0  # the highest total the scoring plugins could give (last pod)


def _quality_probe(s: Scheduler, q: Quality) -> None:
    """Wrap `s.pods.schedule_pod` to re-score each decision against full scoring."""
    inner = s.pods.schedule_pod

    def probed(
        profile: Any, state: CycleState, pod: Any, post_filter: bool = True, **kw: Any
    ) -> Any:
        result = inner(profile, state, pod, post_filter, **kw)
        if isinstance(result, ScheduleResult):
            snap = s.snapshot
            st = CycleState()
            profile.run_pre_filter(st, pod, snap)
            rows = snap.valid_rows()
            out = profile.run_filters(st, pod, snap, rows)
            feasible = rows[np.flatnonzero(out.feasible)]
            profile.run_pre_score(st, pod, snap, feasible)
            scores = profile.run_score(st, pod, snap, feasible)
            q.chosen.append(int(scores[feasible == snap.row_of[result.node]][0]))
            q.best.append(int(scores.max()))
            q.max_total = 100 * sum(
                w for name, *_, w in profile.scores if name not in st.skip_score
            )
        return result

    s.pods.schedule_pod = probed  # type: ignore[method-assign]


async def _run(config: dict[str, Any], nodes: int, running: int, pods: int, probe: bool) -> Any:
    cluster = InMemoryCluster()
    s = Scheduler(parse_config(config, IN_TREE), cluster, VirtualClock(), registry=IN_TREE)

    def bound(key: PodKey, node: str) -> None:
        obj = cluster.pods[key]
        obj["status"]["phase"] = "Running"
        s.on_pod(obj)

    cluster.on_pod_bound = bound
    for i in range(nodes):
        s.on_node(_node(i))
    rng = random.Random(7)
    for i in range(running):
        at = rng.randrange(nodes)
        o = workloads.pod(i, "running", node_name=f"node-{at}")
        # Uneven load: 5-45 % of the node's cpu and, drawn apart, of its memory.
        size = 4 << (at % 4)
        o["spec"]["containers"][0]["resources"]["requests"] = {
            "cpu": f"{int(size * 1000 * rng.uniform(0.05, 0.45))}m",
            "memory": f"{int(size * 8 * 1024 * rng.uniform(0.05, 0.45))}Mi",
        }
        cluster.pods[PodKey(f"sched-perf/running-{i}")] = o
        s.on_pod(o)
    for i in range(pods):
        o = workloads.pod(i)
        cpu, memory = POD_SIZES[rng.randrange(len(POD_SIZES))]
        o["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu, "memory": memory}
        cluster.pods[PodKey(f"sched-perf/pod-{i}")] = o
        s.on_pod(o)
    quality = Quality()
    if probe:
        _quality_probe(s, quality)
    t0 = time.perf_counter()
    n = 0
    while s.schedule_one():
        n += 1
        if n % 256 == 0:
            await s.settle()
    await s.settle()
    elapsed = time.perf_counter() - t0
    return cluster.binds, elapsed, quality


def run(nodes: int, running: int, pods: int, runs: int) -> list[dict[str, Any]]:
    rows = []
    for name, config in VARIANTS.items():
        speeds = []
        for _ in range(runs):
            bound, elapsed, _ = asyncio.run(_run(config, nodes, running, pods, probe=False))
            speeds.append(bound / elapsed)
        bound, _, q = asyncio.run(_run(config, nodes, running, pods, probe=True))
        chosen, best = np.array(q.chosen), np.array(q.best)
        rows.append(
            {
                "variant": name,
                "bound": bound,
                "pods_per_s_min": round(min(speeds)),
                "pods_per_s_max": round(max(speeds)),
                "mean_score": round(float(chosen.mean()), 1) if len(chosen) else None,
                "max_score": q.max_total,
                "mean_regret": round(float((best - chosen).mean()), 2) if len(chosen) else None,
                "not_best_share": round(float((chosen < best).mean()), 3) if len(chosen) else None,
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
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = run(args.nodes, args.running, args.pods, args.runs)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(
        f"scoreWatermark: {args.pods} pods on {args.nodes} uneven nodes ({args.running} running), "
        f"pods/s over {args.runs} runs (min–max); score of the chosen node under full scoring"
    )
    print(
        f"{'variant':40} {'bound':>6} {'pods/s':>11} {'mean score':>10} {'max':>5} "
        f"{'regret':>7} {'not best':>8}"
    )
    for row in rows:
        lo, hi = row["pods_per_s_min"], row["pods_per_s_max"]
        speed = str(lo) if lo == hi else f"{lo}–{hi}"
        print(
            f"{row['variant']:40} {row['bound']:>6} {speed:>11} {row['mean_score']:>10} "
            f"{row['max_score']:>5} {row['mean_regret']:>7} {row['not_best_share']:>8}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
