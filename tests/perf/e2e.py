"""End-to-end figure: pods/s from creation to bound, through the emulated API
server, with the real operator (kopf watching, bindings over HTTP).

    python -m tests.perf.e2e [--nodes 500] [--pods 2000]

It reports where the wall time goes: inside the scheduler (scheduling cycles
and the handlers that feed the cache and queue) versus everything else (the
emulator serving HTTP and watches, kopf, the kubernetes client) — all in this
one process, so the split is of one CPU's time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import kmock
from kubernetes import client as k8s

from scheduler import operator
from scheduler.config import default_config
from scheduler.kube import WATCHED, KubeClient
from scheduler.plugins.registry import IN_TREE
from scheduler.scheduler import Scheduler
from tests.integration.emulator import TroupeEmulator
from tests.perf import workloads

KINDS = tuple(k for k in WATCHED if k != "Namespace")


class Meter:
    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, obj: Any, name: str) -> None:
        fn = getattr(obj, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0

        setattr(obj, name, timed)


async def run(nodes: int, pods: int) -> dict[str, Any]:
    meter = Meter()

    def instrument(s: Scheduler) -> None:
        for name in ("schedule_one", "on_pod", "on_node", "on_pod_group"):
            meter.wrap(s, name)

    async with TroupeEmulator() as emu, kmock.Server(emu) as srv:
        url = str(srv.url).rstrip("/")
        for i in range(nodes):
            async with emu.post("/api/v1/nodes", json=workloads.node(i)) as r:
                assert r.status < 300
        cfg = k8s.Configuration()
        cfg.host = url
        stop = asyncio.Event()
        task = asyncio.create_task(
            operator.run(
                default_config(IN_TREE),
                KubeClient(k8s.ApiClient(cfg), qps=5000, burst=5000),
                server=url,
                metrics_port=0,
                stop=stop,
                identity="bench",
                kinds=KINDS,
                lease_namespace="default",
                on_scheduler=instrument,
            )
        )
        loop = asyncio.get_running_loop()
        while not any(r.plural == "leases" for (r, _, _) in emu._objects):
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # initial lists and watches established
        emu._requests.clear()
        meter.seconds = 0.0
        t0 = loop.time()
        for i in range(pods):
            async with emu.post("/api/v1/namespaces/sched-perf/pods", json=workloads.pod(i)) as r:
                assert r.status < 300
            if i % 200 == 0:
                emu._requests.clear()
        while emu.binds < pods and loop.time() - t0 < 600:
            await asyncio.sleep(0.05)
            emu._requests.clear()  # the emulator slows down as its request log grows
        elapsed = loop.time() - t0
        stop.set()
        await task
    return {
        "case": f"e2e-{nodes}",
        "nodes": nodes,
        "pods": pods,
        "bound": emu.binds,
        "seconds": round(elapsed, 2),
        "pods_per_s": round(emu.binds / elapsed, 1),
        "scheduler_seconds": round(meter.seconds, 2),
        "scheduler_share": round(meter.seconds / elapsed, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    r = asyncio.run(run(args.nodes, args.pods))
    if args.json:
        print(json.dumps(r))
    else:
        print(
            f"end to end through the emulator: {r['bound']}/{r['pods']} pods bound on "
            f"{r['nodes']} nodes in {r['seconds']}s = {r['pods_per_s']} pods/s "
            f"(creation to bound); scheduler code {r['scheduler_seconds']}s "
            f"({100 * r['scheduler_share']:.0f}%), the rest is the emulator, HTTP, kopf "
            f"and the client"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
