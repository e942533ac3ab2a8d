"""`make demo`: Troupe against an embedded, emulated Kubernetes API server.

Starts kmock's Kubernetes emulator (extended in tests/integration/emulator.py
with the pods/binding subresource) on localhost, loads the nodes, PodGroups
and pods of manifests/examples/demo-cluster.yaml into it, and runs the real
operator against it over HTTP: kopf watches, the scheduler schedules, binds
through pods/binding and writes conditions and PodGroup status. It prints the
pods as they get bound and the PodGroups as their status changes, and ends by
itself once nothing has changed for a few seconds; with --keep-running it stays
up so you can look with kubectl (`kubectl --server URL get pods -A`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import kmock
from kubernetes import client as k8s

from scheduler import operator
from scheduler.config import load_config
from scheduler.kube import WATCHED, KubeClient
from scheduler.plugins.registry import IN_TREE
from scheduler.simulate import load_objects
from tests.integration.emulator import TroupeEmulator

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "manifests" / "examples" / "demo-cluster.yaml"
# kmock 0.8 cannot serve the namespaces resource itself (see the emulator).
KINDS = tuple(k for k in WATCHED if k != "Namespace")
PATHS = {
    "Node": "/api/v1/nodes",
    "PriorityClass": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "PodGroup": "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups",
    "Pod": "/api/v1/namespaces/{ns}/pods",
}


def say(msg: str) -> None:
    print(msg, flush=True)


async def load(emu: TroupeEmulator, objects: list[dict[str, Any]]) -> None:
    for kind in ("PriorityClass", "Node", "PodGroup", "Pod"):
        for obj in objects:
            if obj.get("kind") != kind:
                continue
            ns = (obj.get("metadata") or {}).get("namespace") or "default"
            async with emu.post(PATHS[kind].format(ns=ns), json=obj) as resp:
                if resp.status >= 300:
                    raise RuntimeError(f"cannot create {kind}: {await resp.text()}")


def snapshot(emu: TroupeEmulator) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    pods, groups = {}, {}
    for (res, ns, name), obj in list(emu._objects.items()):
        if obj.deleted:
            continue
        raw = obj.raw
        if res.plural == "pods":
            node = (raw.get("spec") or {}).get("nodeName")
            conds = (raw.get("status") or {}).get("conditions") or []
            pods[f"{ns}/{name}"] = node or (conds[0]["message"] if conds else "pending")
        elif res.plural == "podgroups":
            groups[f"{ns}/{name}"] = dict(raw.get("status") or {})
    return pods, groups


async def demo(args: argparse.Namespace) -> int:
    config = load_config(args.config, IN_TREE)
    objects = load_objects([str(args.file)])
    async with TroupeEmulator() as emu, kmock.Server(emu, port=args.port) as srv:
        url = str(srv.url).rstrip("/")
        await load(emu, objects)
        say(f"Embedded Kubernetes API: {url}   (kubectl --server {url} get pods -A)")
        say(f"Metrics: http://127.0.0.1:{args.metrics_port}/metrics")
        cfg = k8s.Configuration()
        cfg.host = url
        stop = asyncio.Event()
        run = asyncio.create_task(
            operator.run(
                config,
                KubeClient(k8s.ApiClient(cfg)),
                server=url,
                metrics_host="127.0.0.1",
                metrics_port=args.metrics_port,
                stop=stop,
                identity="demo",
                kinds=KINDS,
                lease_namespace="default",
            )
        )
        seen_pods: dict[str, str] = {}
        seen_groups: dict[str, dict[str, Any]] = {}
        quiet = 0.0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + args.timeout
        while not run.done():
            await asyncio.sleep(0.25)
            emu._requests.clear()  # the emulator slows down as its request log grows
            pods, groups = snapshot(emu)
            changed = False
            for key, where in sorted(pods.items()):
                if seen_pods.get(key) != where:
                    seen_pods[key] = where
                    if where == "pending":
                        continue  # not tried yet
                    bound = not where.startswith(("0/", "pending", "PodGroup"))
                    say(f"  pod {key:<28} {'-> ' + where if bound else 'pending: ' + where}")
                    changed = True
            for key, st in sorted(groups.items()):
                if st and seen_groups.get(key) != st:
                    say(
                        f"  podgroup {key:<23} phase={st.get('phase')} "
                        f"running={st.get('running')} succeeded={st.get('succeeded')}"
                    )
                    seen_groups[key] = st
                    changed = True
            quiet = 0.0 if changed else quiet + 0.25
            decided = bool(seen_pods) and all(w != "pending" for w in seen_pods.values())
            if not args.keep_running and ((decided and quiet >= 3.0) or loop.time() > deadline):
                break
        bound = sum(
            1 for w in seen_pods.values() if not w.startswith(("0/", "pending", "PodGroup"))
        )
        say(f"{bound} of {len(seen_pods)} pods bound; the rest say why they wait.")
        stop.set()
        await run
        return 0 if bound else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("file", nargs="?", default=EXAMPLE, type=Path)
    ap.add_argument("--config", default=None)
    ap.add_argument("--port", type=int, default=None, help="API server port (default: any)")
    ap.add_argument("--metrics-port", type=int, default=10259)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument(
        "--keep-running", action="store_true", help="stay up until Ctrl-C so kubectl can look"
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    try:
        return asyncio.run(demo(args))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
