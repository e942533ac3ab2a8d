"""`make bench`: run every benchmark and write what they printed to
docs/benchmarks.md, with the commit and the machine they ran on.

Figures live there, written by this command, and nowhere else (not in
docstrings or the README, where they went stale). Each benchmark's progress
goes to the terminal as it runs; its report (standard output) goes to the
terminal and to the page. A benchmark that fails leaves the page unwritten and
the command's status non-zero.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
BENCHMARKS = (
    ("Scheduling throughput (scheduler_perf-like workloads)", "bench.bench"),
    ("Topology-aware gangs: 5000 nodes in racks", "bench.topology"),
    ("End to end: `troupe run` against the embedded API server", "bench.e2e"),
    ("`troupe simulate` on a kubectl-like dump", "bench.simulate_bench"),
    ("JSON decoders on watch lines and a kubectl dump", "bench.jsondecode"),
)


def _machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kib / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} CPUs{f' ({model})' if model else ''}{mem}, {platform.platform()}"


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" (with uncommitted changes)" if git("status", "--porcelain") else "")


def main(argv: list[str]) -> int:
    sections = []
    for title, module in BENCHMARKS:
        cmd = [sys.executable, "-m", module, *(argv if module == "bench.bench" else ())]
        print(f"== {title}: {shlex.join(cmd[1:])}", flush=True)
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            print(f"{module} failed (status {proc.returncode}): {PAGE} not written")
            return proc.returncode
        sections.append(
            f"## {title}\n\n`python {shlex.join(cmd[1:])}`\n\n```text\n{proc.stdout.strip()}\n```\n"
        )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    PAGE.write_text(
        "# Benchmarks\n\n"
        "Written by `make bench`; do not edit. Run on "
        f"{now}, commit {_commit()}, Python {platform.python_version()}, {_machine()}. "
        "Figures from a shared or virtual machine vary from run to run: compare runs "
        "made on the same machine, one after the other. Old and new code compared "
        "side by side, by hand: [benchmarks-side-by-side.md](benchmarks-side-by-side.md)."
        "\n\n" + "\n".join(sections)
    )
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
