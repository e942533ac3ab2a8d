"""`make bench`, JSON decoders on Troupe's own input: why troupe.api.jsonio uses orjson.

    python -m bench.jsondecode [--pods 2000] [--nodes 1000] [--rounds 5]

Three inputs, as Troupe reads them:

- a watch line of a pod as kubectl would show it (bench/sim_input.py: labels,
  managedFields, containers with probes, status), one JSON object per line,
  `{"type": "MODIFIED", "object": ...}`, compact as the API server writes it;
- a watch line of the end-to-end benchmark's pod (bench/workloads.py, what
  bench.e2e creates: scheduler_perf's minimal pod);
- a `kubectl get nodes,pods -A -o json` List of the same rich objects,
  indented as kubectl prints it (what `troupe simulate` reads).

Each decoder decodes every line, and the List, `--rounds` times; the best round
is shown, in CPU time (a shared machine only ever adds time). The List's memory is the growth
of the peak resident size of a fresh process that decodes it once (the objects
built, plus the decoder's own buffers). Decoders: the standard library as
troupe.api.jsonio called it before orjson (`json.loads(data,
parse_constant=...)`, which builds a decoder per call), the standard library
with one decoder made once, orjson, and msgspec's untyped decoder if msgspec
is installed (it is not a dependency: `pip install msgspec` to compare).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import sim_input, workloads

Decoder = Callable[[bytes], Any]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decoders() -> dict[str, Decoder]:
    stdlib = json.JSONDecoder(parse_constant=_no_constant)
    out: dict[str, Decoder] = {
        "json (per call)": lambda b: json.loads(b, parse_constant=_no_constant),
        "json (one decoder)": lambda b: stdlib.decode(b.decode()),
    }
    import orjson

    out["orjson"] = orjson.loads
    try:
        import msgspec
    except ImportError:
        pass
    else:
        out["msgspec"] = msgspec.json.Decoder().decode
    return out


def watch_lines(objects: list[dict[str, Any]], type_: str) -> list[bytes]:
    return [
        json.dumps({"type": type_, "object": o}, separators=(",", ":")).encode() for o in objects
    ]


def kube_list(nodes: int, pods: int) -> bytes:
    items = [sim_input.node(i) for i in range(nodes)] + [sim_input.pod(i) for i in range(pods)]
    return (json.dumps(sim_input.kube_list(items), indent=4, sort_keys=True) + "\n").encode()


def cpu_per_item(decode: Decoder, data: list[bytes]) -> float:
    """CPU seconds per item: on a shared machine, wall time also counts the
    time the process waited for a CPU."""
    t = time.process_time()
    for item in data:
        decode(item)
    return (time.process_time() - t) / len(data)


def peak_kib() -> int:
    """This process's peak resident size (Linux: /proc/self/status VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def list_memory_mib(name: str, path: Path) -> float:
    """Peak resident growth of a fresh process decoding the List (read from
    `path`, so that building it leaves no peak behind) once: VmHWM, this
    process's own (getrusage's maxrss keeps the parent's from before exec)."""
    code = (
        "import gc\n"
        "from bench import jsondecode\n"
        f"decode = jsondecode.decoders()[{name!r}]\n"
        f"data = open({str(path)!r}, 'rb').read()\n"
        "gc.collect(); gc.disable()\n"
        "before = jsondecode.peak_kib()\n"
        "obj = decode(data)\n"
        "print(jsondecode.peak_kib() - before)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return int(out) / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    rich = watch_lines([sim_input.pod(i) for i in range(args.pods)], "MODIFIED")
    small = watch_lines([workloads.pod(i) for i in range(args.pods)], "ADDED")
    listed = kube_list(args.nodes, args.pods)
    items = args.nodes + args.pods
    print(
        f"JSON decoders: {args.pods} watch lines of each kind (kubectl-like pod "
        f"{sum(map(len, rich)) // len(rich)} B, e2e pod {sum(map(len, small)) // len(small)} B), "
        f"and a List of {args.nodes} nodes + {args.pods} pods ({len(listed) / 2**20:.1f} MiB, "
        f"indented); best of {args.rounds} rounds"
    )
    print(
        f"{'decoder':<20} {'kubectl pod µs':>14} {'e2e pod µs':>11} {'List ms':>9} "
        f"{'objects/s':>10} {'List +MiB':>10}"
    )
    gc.disable()  # as `troupe simulate` reads; the watch lines' objects die at once
    inputs = {"kubectl pod": rich, "e2e pod": small, "List": [listed]}
    best: dict[tuple[str, str], float] = {}
    named = decoders()
    for _ in range(args.rounds):  # every decoder in each round: load shifts hit all alike
        for name, decode in named.items():
            for what, data in inputs.items():
                t = cpu_per_item(decode, data)
                best[name, what] = min(best.get((name, what), t), t)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        f.write(listed)
        f.flush()
        for name in named:
            per_list = best[name, "List"]
            print(
                f"{name:<20} {best[name, 'kubectl pod'] * 1e6:>14.1f} "
                f"{best[name, 'e2e pod'] * 1e6:>11.2f} {per_list * 1e3:>9.1f} "
                f"{items / per_list:>10.0f} {list_memory_mib(name, Path(f.name)):>10.1f}",
                flush=True,
            )
    gc.enable()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"(this process's peak: {peak:.0f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
