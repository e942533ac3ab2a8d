"""`make bench`, the simulator's intake: `troupe simulate` end to end, as a user runs it.

Input is what `kubectl get nodes,pods -A -o yaml` (or `-o json`) prints for a
cluster of 5000 nodes with 1000 running pods, plus 10000 pending pods
(bench/sim_input.py; generated once and kept in the system's temporary
directory). Each run is a fresh `troupe simulate --timings` process; we report
its wall time, pods/s (pending pods / wall time, process start-up and imports
included), the CPU time it used, and the split it prints: reading (file read,
UTF-8, parse, checks), scheduling, output. `make bench` compiles Troupe's
bytecode first, as `pip install` does (with PYTHONDONTWRITEBYTECODE set, an
editable install would otherwise compile every module in every run: ~0.3 s).

    python -m bench.simulate_bench [--runs 2] [--format yaml --format json ...]

A third input, `yaml+text`, is the same cluster with pending pods that carry long
text kubectl folds over lines (sim_input.with_text): it times that path of the
YAML reader; the 1000 pods/s target is for the first two.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import sim_input

NODES, RUNNING, PENDING = 5000, 1000, 10000
TARGET_PODS_PER_S = 1000.0
# The input the target is set for (the dump); "yaml+text" is the same
# cluster with pending pods carrying long text that kubectl folds over lines.
TARGET_FORMATS = ("yaml", "json")
TIMINGS = re.compile(r"read ([\d.]+) s .* schedule ([\d.]+) s .* output ([\d.]+) s")


def input_files(nodes: int, running: int, pending: int) -> dict[str, list[Path]]:
    """Generated input, reused while the generator is unchanged."""
    version = hashlib.sha256(Path(sim_input.__file__).read_bytes()).hexdigest()[:12]
    d = Path(tempfile.gettempdir()) / f"troupe-sim-input-{nodes}-{running}-{pending}-{version}"
    done = d / "done"
    if not done.exists():
        print(f"generating {d} ...", file=sys.stderr, flush=True)
        sim_input.write(d, nodes, running, pending)
        done.touch()
    return {
        "yaml": [d / "cluster.yaml", d / "pods.yaml"],
        "json": [d / "cluster.json", d / "pods.json"],
        "yaml+text": [d / "cluster.yaml", d / "pods-text.yaml"],
    }


def run_once(
    files: list[Path], output: str, timings: bool = True, command: str | None = None
) -> dict[str, Any]:
    troupe = shlex.split(command) if command else [sys.executable, "-m", "troupe.cli"]
    cmd = (
        [*troupe, "simulate", "-o", output]
        + (["--timings"] if timings else [])
        + [str(f) for f in files]
    )
    # wait4: this run's own CPU and peak memory (children it reaped included);
    # getrusage(RUSAGE_CHILDREN) would give the largest child of any run so far.
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read()
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, stderr=stderr)
    m = TIMINGS.search(stderr)
    if m is None and timings:
        raise RuntimeError(f"no timings in stderr: {stderr!r}")
    nan = float("nan")
    read_s, schedule_s, output_s = (float(g) for g in m.groups()) if m else (nan, nan, nan)
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "read": read_s,
        "schedule": schedule_s,
        "output": output_s,
        "peak_mib": usage.ru_maxrss / 1024,
    }


def _span(runs: list[dict[str, Any]], key: str, fmt: str = "{:.1f}") -> str:
    lo, hi = min(r[key] for r in runs), max(r[key] for r in runs)
    if lo != lo:  # NaN: the process printed no timings (an older troupe, --legacy)
        return "-"
    a, b = fmt.format(lo), fmt.format(hi)
    return a if a == b else f"{a}–{b}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--format", action="append", choices=("yaml", "json", "yaml+text"))
    ap.add_argument("--output", default="table", choices=("table", "json", "yaml"))
    ap.add_argument("--nodes", type=int, default=NODES)
    ap.add_argument("--running", type=int, default=RUNNING)
    ap.add_argument("--pending", type=int, default=PENDING)
    ap.add_argument("--json", action="store_true", help="also print each run as a JSON line")
    ap.add_argument(
        "--legacy",
        action="store_true",
        help="time a troupe without --timings (an older checkout, see --command): no split",
    )
    ap.add_argument(
        "--command",
        default=None,
        help='how to start troupe (default: this python -m troupe.cli); e.g. "python -S '
        '-m troupe.cli" with PYTHONPATH=an older checkout:site-packages',
    )
    args = ap.parse_args(argv)
    files = input_files(args.nodes, args.running, args.pending)
    print(
        f"troupe simulate: {args.nodes} nodes, {args.running} running, {args.pending} pending "
        f"pods, -o {args.output}, {args.runs} runs (min–max)"
    )
    print(
        f"{'input':<9} {'MiB':>5} {'wall s':>11} {'pods/s':>11} {'cpu s':>11} "
        f"{'read s':>11} {'schedule s':>11} {'output s':>9} {'peak MiB':>11}  target"
    )
    for fmt in args.format or ["yaml", "json", "yaml+text"]:
        runs = []
        for _ in range(args.runs):
            r = run_once(files[fmt], args.output, not args.legacy, args.command)
            r["pods_per_s"] = args.pending / r["wall"]
            runs.append(r)
            if args.json:
                print(json.dumps({"format": fmt, **r}), file=sys.stderr)
        mib = sum(f.stat().st_size for f in files[fmt]) / 2**20
        worst = min(r["pods_per_s"] for r in runs)
        verdict = "MET" if worst >= TARGET_PODS_PER_S else "MISSED"
        if fmt not in TARGET_FORMATS:
            verdict = "(no target: a variant)"
        pods_s = _span(runs, "pods_per_s", "{:.0f}")
        print(
            f"{fmt:<9} {mib:>5.0f} {_span(runs, 'wall'):>11} {pods_s:>11} {_span(runs, 'cpu'):>11}"
            f" {_span(runs, 'read'):>11} {_span(runs, 'schedule'):>11} "
            f"{_span(runs, 'output', '{:.2f}'):>9} {_span(runs, 'peak_mib', '{:.0f}'):>11}  "
            f">= {TARGET_PODS_PER_S:g} {verdict}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
