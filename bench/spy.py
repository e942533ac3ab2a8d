"""py-spy for the benchmarks: sample a running Troupe and say where its time went.

`record(pid, dir)` starts `py-spy record --gil --format raw` on the process:
only the thread holding the GIL is sampled, so the samples approximate the
interpreter's CPU (threads blocked in a socket read are not counted); `stop` ends it and
py-spy writes the folded stacks. `breakdown` sorts every sample into one
bucket, the first of `BUCKETS` whose marker appears anywhere in its stack, so
that the buckets add up to 100 %: the scheduling cycle first (everything it
calls), then the intake of events, the API calls by kind, kopf, and the rest.
"""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Final

# (bucket, markers): a sample whose stack contains any marker lands in the bucket.
BUCKETS: Final = (
    ("scheduling cycle (schedule_one)", ("schedule_one (",)),
    ("parse_pod / parse_node", ("parse_pod (", "parse_node (")),
    ("handlers: cache + queue", ("_safely (", "Intake._drain (")),
    # KubeClient's methods on the loop, and their requests in the lane's threads
    # (`KubeClient.bind.<locals>.<lambda>` calling `_send`).
    ("client: binds", ("create_namespaced_pod_binding", "_post_binding", "KubeClient.bind")),
    ("client: events", ("namespaced_event", "record_event", "_post_event", "_create_event")),
    (
        "client: conditions/status",
        ("patch_namespaced_pod_status", "_patch_pod_status", "set_pod_condition ("),
    ),
    ("client: lease", ("namespaced_lease", "KubeLease", "leader.py")),
    ("binding cycle (scheduler)", ("_binding_cycle (",)),
    ("kopf: watch stream + JSON", ("iter_jsonlines", "watch_objs", "continuous_watch")),
    ("kopf: event processing", ("kopf/",)),
    ("kubernetes client / urllib3 (other)", ("kubernetes/", "urllib3/")),
    ("aiohttp (other)", ("aiohttp/",)),
    ("json", ("json/",)),
    ("logging", ("logging/",)),
    ("asyncio loop", ("asyncio/",)),
    ("threads (pool, queue)", ("threading.py", "concurrent/")),
)


def record(pid: int, directory: Path, rate: int = 100) -> subprocess.Popen[bytes]:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out = directory / f"troupe-{pid}.txt"
    cmd = [exe, "record", "--gil", "--format", "raw", "-r", str(rate), "-o", str(out)]
    return subprocess.Popen(
        [*cmd, "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(60)


def breakdown(path: Path) -> dict[str, float]:
    """Share of samples per bucket (in %, "samples" holds the count)."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        k = int(n)
        total += k
        for name, markers in BUCKETS:
            if any(m in stack for m in markers):
                counts[name] += k
                break
        else:
            counts["other"] += k
    out = {name: round(100 * c / total, 1) for name, c in counts.most_common()} if total else {}
    out["samples"] = total
    return out


def show(b: dict[str, float]) -> str:
    lines = [f"py-spy: {int(b.get('samples', 0))} samples"]
    lines += [f"  {v:5.1f}%  {k}" for k, v in b.items() if k != "samples"]
    return "\n".join(lines)
