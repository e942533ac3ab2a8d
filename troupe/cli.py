"""The `troupe` command: `simulate` and `version` (the operator adds `run`)."""

from __future__ import annotations

import argparse
import copy
import gc
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

from troupe import __version__

if TYPE_CHECKING:
    from troupe.tools.report import Provenance
    from troupe.tools.simulate import SimulationResult


def _simulate(args: argparse.Namespace) -> int:
    from troupe.config import ConfigError, load_config
    from troupe.framework.runtime import ProfileError
    from troupe.plugins.registry import IN_TREE
    from troupe.tools.simulate import InputError, format_output, load_objects, simulate

    if args.compare and args.config:
        print("troupe: --compare takes the two configurations; leave out --config", file=sys.stderr)
        return 2
    refused = _refused_simulate_flags(args)
    if refused:
        print(f"troupe: {refused}", file=sys.stderr)
        return 2
    configs = []
    for path in args.compare or [args.config]:
        try:
            configs.append(load_config(path, IN_TREE))
        except ConfigError as e:
            where = f" {path}" if args.compare else ""
            print(f"troupe: configuration{where}: {e}", file=sys.stderr)
            return 2
    if args.seed is not None:
        from dataclasses import replace

        configs = [replace(c, troupe=replace(c.troupe, seed=args.seed)) for c in configs]
    if args.until is not None and not (math.isfinite(args.until) and args.until >= 0):
        print(f"troupe: --until: must be a finite number >= 0, got {args.until}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    cluster: list[dict[str, Any]] = []
    if args.kubeconfig is not None:
        from troupe.tools.live import dump_snapshot, snapshot

        try:
            cluster = snapshot(args.kubeconfig or None).objects
        except Exception as e:
            print(f"troupe: cannot read the cluster: {e}", file=sys.stderr)
            return 1
        if args.save:
            dump_snapshot(cluster, args.save)
    workloads: list[tuple[str, dict[str, Any]]] = []
    try:
        objects = load_objects(args.files, cluster, workloads)
    except InputError as e:
        print(f"troupe: {e}", file=sys.stderr)
        return 2
    from troupe.tools.simulate import workloads_without_pods

    for warning in workloads_without_pods(workloads, objects):
        print(f"troupe: warning: {warning}", file=sys.stderr)
    from troupe.tools.simulate import unknown_explained

    for name in unknown_explained(objects, args.explain):
        print(f"troupe: --explain {name}: no pod and no PodGroup of that name", file=sys.stderr)
        return 2
    t1 = time.perf_counter()
    # The input lives until the end: the cyclic collector need not walk it
    # again on every full collection while scheduling.
    gc.freeze()
    try:
        # A run writes status into the objects it schedules (as the API would):
        # each configuration gets its own copy of the input.
        inputs = [copy.deepcopy(objects) for _ in configs] if len(configs) > 1 else [objects]
        results = [
            simulate(o, c, until=args.until, explain=args.explain)
            for o, c in zip(inputs, configs, strict=True)
        ]
    except ProfileError as e:
        print(f"troupe: configuration: {e}", file=sys.stderr)
        return 2
    finally:
        gc.unfreeze()
    result = results[0]
    if args.compare:
        return _print_compare(args, objects, results)
    t2 = time.perf_counter()
    if args.explain_all:
        result.explain_top = None
    if args.output == "html":
        from troupe.tools.report import render_html

        out = render_html(result, objects, _provenance(args, (args.config or "",)))
    else:
        out = format_output(result, args.output)
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
    if args.timings:
        pods = sum(1 for o in objects if o.get("kind") == "Pod")
        print(
            f"troupe: timings: read {t1 - t0:.3f} s ({len(objects)} objects), "
            f"schedule {t2 - t1:.3f} s (load {result.load_seconds:.3f} s, "
            f"{result.cycles} cycles, {pods} pods), "
            f"output {time.perf_counter() - t2:.3f} s",
            file=sys.stderr,
        )
    return 0


def _provenance(args: argparse.Namespace, configs: tuple[str, ...]) -> Provenance:
    """What the HTML report names as its source: the input files (and the
    cluster read through --kubeconfig), the configurations, the seed."""
    from troupe.tools.report import Provenance

    live = getattr(args, "kubeconfig", None)
    cluster = () if live is None else (f"the cluster of kubeconfig {live or '(default)'}",)
    return Provenance((*cluster, *args.files), configs, args.seed)


def _refused_simulate_flags(args: argparse.Namespace) -> str:
    """Why the flags given together make no sense ("" if they do)."""
    if args.explain and args.compare:
        return "--explain does not combine with --compare; explain under one --config"
    if args.explain_all and not args.explain:
        return "--explain-all only widens --explain NS/NAME; name the pod with --explain"
    if not args.files and args.kubeconfig is None:
        return "give input files, or --kubeconfig to read the cluster"
    if args.save and args.kubeconfig is None:
        return "--save keeps what --kubeconfig read; give --kubeconfig"
    return ""


def _print_compare(
    args: argparse.Namespace, objects: list[dict[str, Any]], results: list[SimulationResult]
) -> int:
    from pathlib import Path

    from troupe.tools.compare import ZONE_LABEL, compare, format_compare
    from troupe.tools.simulate import dump_output

    names = tuple(Path(p).stem for p in args.compare)
    if names[0] == names[1]:
        names = ("A", "B")
    zones = {
        str(o["metadata"]["name"]): str(((o["metadata"].get("labels") or {}).get(ZONE_LABEL)) or "")
        for o in objects
        if o.get("kind") == "Node"
    }
    diff = compare(
        results[0], results[1], (names[0], names[1]), zones if any(zones.values()) else None
    )
    if args.output == "html":
        from troupe.tools.report import render_compare_html

        prov = _provenance(args, tuple(args.compare))
        out = render_compare_html(results, names, diff, objects, prov)
    elif args.output == "table":
        out = format_compare(diff)
    else:
        out = dump_output(diff, args.output)
    sys.stdout.write(out + "\n")
    return 0


# The cyclic collector's thresholds for `troupe run`: (young, middle, old).
# At CPython's (700, 10, 10) a scheduler under load spent a third of its CPU
# collecting: a young collection every 700 objects of net growth promoted what
# was merely in flight (requests, watch events, queued pods), and every 25 %
# of growth of the old generation walked the whole heap (~0.5 s for 5000
# nodes) to free nothing. Larger young generations leave in-flight objects
# time to die by reference counting; the old one's 25 % rule stays.
GC_THRESHOLDS: Final = (50_000, 20, 10)


def collect_for_long_run() -> None:
    """Set the collector's thresholds for a process that runs for long."""
    gc.set_threshold(*GC_THRESHOLDS)


def freeze_synced() -> None:
    """Once the caches hold the initial lists: collect, then move everything
    alive to the permanent generation (gc.freeze), which no collection walks
    again. The caches, kopf and the modules live as long as the process; what
    of them is freed later is freed by reference counting, and cyclic garbage
    among them (none in the parsed objects) is bounded by what lives now."""
    gc.collect()
    gc.freeze()


def _run(args: argparse.Namespace) -> int:
    import asyncio
    from dataclasses import replace

    from troupe.config import ConfigError, load_config
    from troupe.framework.runtime import ProfileError
    from troupe.kube import KubeClient, load_connection
    from troupe.operator.main import new_event_loop, run
    from troupe.operator.serving import ServeError, ServingConfigError, server_tls
    from troupe.plugins.registry import IN_TREE

    try:
        config = load_config(args.config, IN_TREE)
    except ConfigError as e:
        print(f"troupe: configuration: {e}", file=sys.stderr)
        return 2
    # Flags take precedence over the configuration file, as kube-scheduler's do.
    cc = config.client_connection
    cc = replace(
        cc,
        kubeconfig=args.kubeconfig if args.kubeconfig is not None else cc.kubeconfig,
        qps=args.qps if args.qps is not None else cc.qps,
        burst=args.burst if args.burst is not None else cc.burst,
    )
    le = config.leader_election
    if args.lease_namespace is not None:
        le = replace(le, resource_namespace=args.lease_namespace)
    if args.leader_elect is not None:
        le = replace(le, leader_elect=args.leader_elect == "true")
    config = replace(config, client_connection=cc, leader_election=le)
    if cc.qps <= 0 or cc.burst < 1:
        print("troupe: --qps must be > 0 and --burst >= 1", file=sys.stderr)
        return 2
    if cc.kubeconfig:
        # The kubernetes library's own message for a missing file does not name it.
        where = "--kubeconfig" if args.kubeconfig is not None else "clientConnection.kubeconfig"
        try:
            with open(cc.kubeconfig, "rb"):
                pass
        except OSError as e:
            print(f"troupe: {where} {cc.kubeconfig}: {e.strerror or e}", file=sys.stderr)
            return 2
    try:
        kube = KubeClient(
            load_connection(cc.kubeconfig or None),
            qps=cc.qps,
            burst=cc.burst,
            identity=args.identity,
        )
    except Exception as e:
        print(f"troupe: cannot load cluster credentials: {e}", file=sys.stderr)
        return 2
    port = config.troupe.metrics_port if args.secure_port is None else args.secure_port
    try:
        tls = (
            server_tls(args.tls_cert_file, args.tls_private_key_file, args.cert_dir)
            if port
            else None
        )
    except ServingConfigError as e:
        print(f"troupe: {e}", file=sys.stderr)
        return 2
    collect_for_long_run()
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(
                run(
                    config,
                    kube,
                    metrics_host=args.bind_address,
                    metrics_port=port,
                    tls=tls,
                    identity=args.identity,
                    on_synced=freeze_synced,
                )
            )
    except ProfileError as e:
        print(f"troupe: configuration: {e}", file=sys.stderr)
        return 2
    except ServeError as e:
        print(f"troupe: {e}", file=sys.stderr)
        return 1


def _simulated_kinds() -> str:
    """The kinds `troupe simulate` reads, in plural, from the table of kinds."""
    from troupe.api.kinds import SIMULATED

    names = [
        k[:-1] + "ies" if k.endswith("y") else k + ("es" if k.endswith("s") else "s")
        for k in SIMULATED
    ]
    return ", ".join(names[:-1]) + " and " + names[-1]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="troupe", description="Troupe, a gang scheduler for Kubernetes"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more logging (-vv: debug); `run` logs at info by default",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: one object per line, for log collectors",
    )
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser(
        "simulate",
        help="schedule a cluster described in YAML or JSON, or read from the API server "
        "(--kubeconfig), writing nothing",
    )
    sim.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help=f"YAML or JSON files (kubectl get -o yaml|json) of {_simulated_kinds()}",
    )
    sim.add_argument("--config", help="a KubeSchedulerConfiguration file")
    sim.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="what if: list the cluster's objects (every kind Troupe reads; read only) and "
        "schedule FILEs' objects added to them ('': in-cluster or the default kubeconfig)",
    )
    sim.add_argument(
        "--save",
        metavar="DUMP",
        help="with --kubeconfig: write what was read to DUMP (YAML; JSON if it ends in .json), "
        "an input for later runs",
    )
    sim.add_argument(
        "--compare",
        nargs=2,
        metavar=("A.yaml", "B.yaml"),
        default=None,
        help="what if: schedule the input under two configurations and report the "
        "differences (placements, pending pods, gangs, preemptions, use per node and zone)",
    )
    sim.add_argument(
        "--output",
        "-o",
        choices=("table", "json", "yaml", "html"),
        default="table",
        help="html: one self-contained page to keep (where it came from, use per node and "
        "resource by zone and rack with totals, pending pods by reason, gangs, preemptions, "
        "placements); open it in any browser",
    )
    sim.add_argument(
        "--until",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop at this virtual time even if pods could still change",
    )
    sim.add_argument("--seed", type=int, default=None, help="seed of the random tie-break")
    sim.add_argument(
        "--explain",
        action="append",
        default=[],
        metavar="NS/NAME",
        help="explain the pod's last scheduling attempt: each node's Filter verdict, each Score "
        "plugin's scores, the node chosen and why; or a PodGroup's last group cycle: per "
        "domain (or node) how many members fit, what stopped the rest, what preemption did "
        "(repeatable)",
    )
    sim.add_argument(
        "--explain-all",
        action="store_true",
        help="with --explain: every feasible node's scores, not only the best ten",
    )
    sim.add_argument(
        "--timings",
        action="store_true",
        help="print to stderr the time spent reading the input, scheduling and printing",
    )
    sim.set_defaults(func=_simulate)
    run = sub.add_parser("run", help="schedule pods in a cluster (in-cluster or --kubeconfig)")
    run.add_argument("--config", help="a KubeSchedulerConfiguration file")
    run.add_argument(
        "--kubeconfig",
        default=None,
        help="a kubeconfig file (default: clientConnection.kubeconfig, else in-cluster, "
        "else ~/.kube/config)",
    )
    run.add_argument(
        "--secure-port",
        "--metrics-port",
        dest="secure_port",
        type=int,
        default=None,
        metavar="P",
        help="HTTPS port of /metrics, /debug/explain, /healthz, /livez, /readyz; 0: none "
        "(default: troupe.metricsPort, 10259; --metrics-port is its older name)",
    )
    run.add_argument(
        "--bind-address",
        default="0.0.0.0",
        help="address of the secure port (default 0.0.0.0, as kube-scheduler)",
    )
    run.add_argument(
        "--tls-cert-file",
        default=None,
        metavar="FILE",
        help="the serving certificate (PEM, with its intermediates after it); default: "
        "a self-signed one (in --cert-dir if given, else in memory)",
    )
    run.add_argument(
        "--tls-private-key-file", default=None, metavar="FILE", help="its private key (PEM)"
    )
    run.add_argument(
        "--cert-dir",
        default=None,
        metavar="DIR",
        help="where the self-signed pair troupe-scheduler.crt/.key is kept (made if missing); "
        "ignored with --tls-cert-file",
    )
    run.add_argument(
        "--lease-namespace",
        default=None,
        help="namespace of the leader-election Lease (default: leaderElection.resourceNamespace, "
        "kube-system)",
    )
    run.add_argument(
        "--leader-elect",
        default=None,
        type=str.lower,
        choices=("true", "false"),
        help="take part in leader election (default: leaderElection.leaderElect, true)",
    )
    run.add_argument(
        "--identity", default=None, help="this replica's name in the Lease (default: POD_NAME)"
    )
    run.add_argument("--qps", type=float, default=None, help="API requests per second (default 50)")
    run.add_argument("--burst", type=int, default=None, help="API request burst (default 100)")
    run.set_defaults(func=_run)
    ver = sub.add_parser("version", help="print the version")
    ver.set_defaults(func=lambda a: print(__version__) or 0)
    return parser


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the exception)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def main(argv: Sequence[str] | None = None) -> int:
    return _main(argv)[0]


def console() -> NoReturn:
    """The `troupe` command (its console script and `python -m troupe`).

    After `simulate` the process ends as soon as its output is flushed: the
    interpreter's orderly shutdown would free a large input's millions of
    objects one by one (over a second for 16000 objects as kubectl prints
    them) and change nothing. Other commands shut down as usual."""
    rc, command = _main(None)
    if command != "simulate":
        raise SystemExit(rc)
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(rc)


def _main(argv: Sequence[str] | None) -> tuple[int, str]:
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = args.verbose + (1 if args.command == "run" else 0)
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler()
    if args.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    return int(args.func(args)), str(args.command)


if __name__ == "__main__":
    console()
