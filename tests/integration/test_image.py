"""The image is what CI tested: the Dockerfile's install steps, replayed.

The build stage's COPY and RUN lines are read from the Dockerfile (not copied
here) and run in a fresh virtual environment, which plays the image's
interpreter prefix: the stage installs into the directory the final stage
copies onto /usr/local, so that directory is the environment here. pip finds
packages as `make install` does (the machine's configuration, PyPI). Then the
image's entry point, `troupe`, runs from that environment: `version`,
`run --help`, and `simulate` on the demo cluster (manifests/examples), whose
result must be the one the development environment gives. Apart from that:
requirements-runtime.lock pins every package at requirements.lock's version.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.markers import Marker

from apiserver.demo import EXAMPLE

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
LOCK, RUNTIME_LOCK = REPO / "requirements.lock", REPO / "requirements-runtime.lock"


@dataclass(frozen=True)
class Stage:
    name: str
    instructions: list[tuple[str, str]]  # (INSTRUCTION, arguments)


def stages(text: str) -> list[Stage]:
    """The Dockerfile's stages, continuation lines joined, comments dropped."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    out: list[Stage] = []
    for line in joined.splitlines():
        if not line.strip():
            continue
        instruction, _, args = line.strip().partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
            out.append(Stage(name, []))
        else:
            out[-1].instructions.append((instruction, args.strip()))
    return out


def install_steps() -> tuple[list[tuple[str, str]], str]:
    """The build stage's instructions, and the directory it installs into (what
    the final stage copies onto /usr/local, the interpreter's prefix)."""
    *builds, final = stages(DOCKERFILE.read_text())
    (copy,) = [a for i, a in final.instructions if i == "COPY" and a.startswith("--from=")]
    m = re.fullmatch(r"--from=(\S+) (\S+) (\S+)", copy)
    assert m is not None and m[3] == "/usr/local", copy
    source_stage, prefix = m[1], m[2]
    (build,) = [s for s in builds if s.name == source_stage]
    assert ("ENTRYPOINT", '["troupe"]') in final.instructions
    return build.instructions, prefix


def replay(instructions: list[tuple[str, str]], prefix: str, root: Path, venv: Path) -> None:
    """Run the build stage's WORKDIR, COPY and RUN in `root`, with `venv` as the
    install prefix."""
    workdir = root
    for instruction, args in instructions:
        if instruction == "WORKDIR":
            workdir = root / args.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif instruction == "COPY":
            *sources, dest = args.split()
            assert not any(s.startswith("--") for s in sources), args
            target = workdir / dest
            for s in sources:
                src = REPO / s
                if src.is_dir():
                    shutil.copytree(
                        src, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
                    )
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, target / src.name)
        elif instruction == "RUN":
            argv = shlex.split(args)
            assert argv[0] == "pip", f"only pip runs in the build stage: {args}"
            argv = [str(venv / "bin" / "python"), "-m", "pip", *argv[1:]]
            argv = [a.replace(prefix, str(venv)) if prefix in a else a for a in argv]
            proc = subprocess.run(
                argv, cwd=workdir, env=clean_env(), capture_output=True, text=True, timeout=900
            )
            assert proc.returncode == 0, f"RUN {args}:\n{proc.stdout}\n{proc.stderr}"
        else:
            raise AssertionError(f"the test does not replay {instruction} {args}")


def clean_env() -> dict[str, str]:
    """The environment without this checkout or its virtual environment in it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(
        p
        for p in env.get("PATH", "").split(os.pathsep)
        if p and Path(p).resolve() != Path(sys.executable).parent.resolve()
    )
    return env


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A virtual environment the Dockerfile's install steps were run into."""
    root = tmp_path_factory.mktemp("image")
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", str(venv)],
        check=True,
        capture_output=True,
        env=clean_env(),
        timeout=300,
    )
    instructions, prefix = install_steps()
    replay(instructions, prefix, root / "fs", venv)
    yield venv


def troupe(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "troupe"), *args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_installed_troupe_runs(image: Path, tmp_path: Path) -> None:
    where = subprocess.run(
        [str(image / "bin" / "python"), "-c", "import troupe; print(troupe.__file__)"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(where.strip()).is_relative_to(image), where  # installed, not this checkout

    version = troupe(image, "version", cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == "0.1.0"

    run_help = troupe(image, "run", "--help", cwd=tmp_path)
    assert run_help.returncode == 0, run_help.stderr
    assert "--kubeconfig" in run_help.stdout and "--config" in run_help.stdout


def test_the_installed_troupe_simulates_the_demo_cluster_as_the_tested_one(
    image: Path, tmp_path: Path
) -> None:
    sim = troupe(image, "simulate", str(EXAMPLE), "-o", "json", cwd=tmp_path)
    assert sim.returncode == 0, sim.stderr
    got = json.loads(sim.stdout)
    tested = subprocess.run(
        [sys.executable, "-m", "troupe", "simulate", str(EXAMPLE), "-o", "json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert got == json.loads(tested.stdout)
    placed = {name: p["node"] for name, p in got["pods"].items() if p["node"]}
    assert len(placed) >= 10 and placed["shop/db"]  # volumes and devices too
    assert all(placed[f"ml/finetune-{i}"] for i in range(4))


def test_installed_versions_are_the_locks(image: Path) -> None:
    """Every package in the environment (pip's own aside) at the runtime lock's
    version, and Troupe."""
    out = subprocess.run(
        [str(image / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {canon(p["name"]): p["version"] for p in json.loads(out)}
    # the lock is universal: the pins whose environment marker holds here
    locked = {
        name: v
        for (name, marker), v in pins(RUNTIME_LOCK).items()
        if not marker or Marker(marker).evaluate()
    }
    assert installed.pop("troupe-scheduler") == "0.1.0"
    for tool in ("pip", "setuptools"):  # the virtual environment's own
        installed.pop(tool, None)
    assert installed == locked


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?:\s*;\s*(.*?))?\s*\\?$")


def pins(lock: Path) -> dict[tuple[str, str], str]:
    """(package, environment marker) -> version, as the lock pins them."""
    out = {}
    for line in lock.read_text().splitlines():
        m = PIN.match(line)
        if m:
            out[canon(m[1]), m[3] or ""] = m[2]
    return out


def test_the_runtime_lock_pins_what_requirements_lock_pins() -> None:
    runtime, full = pins(RUNTIME_LOCK), pins(LOCK)
    assert runtime
    assert {k: v for k, v in runtime.items() if k in full} == runtime, (
        "requirements-runtime.lock differs from requirements.lock: run make lock"
    )
    # every runtime dependency is in it, with the same hashes
    hashes = set(re.findall(r"--hash=(sha256:[0-9a-f]{64})", LOCK.read_text()))
    assert set(re.findall(r"--hash=(sha256:[0-9a-f]{64})", RUNTIME_LOCK.read_text())) <= hashes
