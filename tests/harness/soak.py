"""`make soak`: the harness's long run. Every scenario of the corpus under every
timing profile, the leader killed in every other run, with a new seed each
round, until the time is up (TROUPE_SOAK_SECONDS, 1200 by default; a run that
has started is finished). Prints a line per run and, at the end, how many runs
there were and how many violated each invariant; exits 1 if any did.

    make soak                                   # 20 minutes
    TROUPE_SOAK_SECONDS=300 make soak           # 5 minutes
    TROUPE_SOAK_SCENARIOS=gpu-rush,shared-claims TROUPE_SOAK_PROFILES=writes-200ms make soak

Each run's files (the replicas' logs, the simulator's input) are kept under
TROUPE_SOAK_DIR (a new temporary directory by default) for the runs that failed.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.harness.invariants import check
from tests.harness.live import run_live
from tests.harness.profiles import PROFILES
from tests.harness.scenarios import CORPUS, scenario
from tests.harness.simulated import placement_class, simulate

DEFAULT_SECONDS = 1200.0


def _names(var: str, known: dict[str, object]) -> list[str]:
    given = [n for n in os.environ.get(var, "").split(",") if n]
    unknown = [n for n in given if n not in known]
    if unknown:
        raise SystemExit(f"{var}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    return given or list(known)


def main() -> int:
    budget = float(os.environ.get("TROUPE_SOAK_SECONDS", DEFAULT_SECONDS))
    scenarios = _names("TROUPE_SOAK_SCENARIOS", dict(CORPUS))
    profiles = _names("TROUPE_SOAK_PROFILES", dict(PROFILES))
    root = Path(os.environ.get("TROUPE_SOAK_DIR") or tempfile.mkdtemp(prefix="troupe-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + budget
    runs = 0
    failed_runs = 0
    violated: Counter[str] = Counter()
    simulated: dict[str, dict[str, int]] = {}
    combos = [(s, p) for s in scenarios for p in profiles]
    print(f"soak: {len(combos)} scenario x profile pairs, {budget:.0f}s, files in {root}")
    for seed in itertools.count():
        # each round in its own order, so that a short soak still sees every scenario
        random.Random(seed).shuffle(combos)
        for i, (name, prof) in enumerate(combos):
            if time.monotonic() >= deadline:
                return _summary(runs, failed_runs, violated)
            kill = (seed + i) % 2 == 1
            where = root / f"{runs:04d}-{name}-{prof}-{seed}{'-kill' if kill else ''}"
            sc = scenario(name)
            if name not in simulated:
                simulated[name] = placement_class(sc, simulate(sc, where / "sim"))
            try:
                run = run_live(
                    sc,
                    PROFILES[prof],
                    where,
                    seed=seed,
                    kill_leader=kill,
                    simulated=simulated[name],
                )
            except Exception as e:  # a run that cannot even start is counted, not fatal
                runs += 1
                failed_runs += 1
                violated["run-failed"] += 1
                print(f"{where.name}: run failed: {e}", flush=True)
                continue
            runs += 1
            got = check(run.state)
            if not run.settled:
                got["settles"] = ["did not settle in time"]
            if run.controller_errors:
                got["harness-controllers"] = run.controller_errors[:1]
            violated.update(got.keys())
            if got:
                failed_runs += 1
                detail = "; ".join(f"{k}: {len(v)} ({v[0]})" for k, v in got.items())
                print(f"{where.name}: {run.seconds:.0f}s FAILED {detail}", flush=True)
            else:
                print(f"{where.name}: {run.seconds:.0f}s ok", flush=True)
                shutil.rmtree(where, ignore_errors=True)
    return _summary(runs, failed_runs, violated)


def _summary(runs: int, failed: int, violated: Counter[str]) -> int:
    print(f"\nsoak: {runs} runs, {failed} with violations")
    for name, n in sorted(violated.items()):
        print(f"  {name}: {n} runs")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
