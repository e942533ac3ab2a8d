"""A scenario through the `troupe simulate` command (a child process, as a user
runs it): its input file, and the placement class of its JSON output."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from apiserver.replica import REPO
from tests.harness.scenarios import Scenario, class_of


def write_input(scenario: Scenario, path: Path) -> Path:
    path.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": scenario.objects()})
    )
    return path


def write_config(scenario: Scenario, path: Path) -> Path | None:
    if not scenario.config:
        return None
    cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
    path.write_text(yaml.safe_dump({**cfg, **scenario.config}))
    return path


def simulate(scenario: Scenario, workdir: Path, timeout: float = 120.0) -> dict[str, Any]:
    """`troupe simulate <input> -o json` on the scenario: its JSON output."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "troupe", "simulate", "-o", "json"]
    cfg = write_config(scenario, workdir / "sim-config.yaml")
    if cfg is not None:
        cmd.append(f"--config={cfg}")
    cmd.append(str(write_input(scenario, workdir / "sim-input.yaml")))
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise AssertionError(f"troupe simulate failed ({done.returncode}): {done.stderr.decode()}")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def placement_class(scenario: Scenario, output: dict[str, Any]) -> dict[str, int]:
    """Bound pods per class in the simulator's output (victims count as not bound)."""
    bound: Counter[str] = Counter()
    for p in scenario.pods():
        md = p["metadata"]
        got = output["pods"].get(f"{md.get('namespace') or 'default'}/{md['name']}") or {}
        bound[class_of(p)] += 1 if got.get("node") else 0
    return dict(bound)
