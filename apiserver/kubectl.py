"""Run the real kubectl against an embedded API server (tests and the demo).

`Kubectl(server, workdir)` writes a kubeconfig for the server and gives each call
its own discovery cache under `workdir`, so a CRD applied a moment ago is seen.
The binary is the one `make install` puts next to the interpreter.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from apiserver.server import ApiServer

KUBECTL = Path(sys.executable).parent / "kubectl"


class KubectlError(AssertionError):
    pass


class Kubectl:
    def __init__(
        self, server: ApiServer, workdir: Path, binary: Path = KUBECTL, token: str | None = None
    ) -> None:
        self.binary = binary
        self.workdir = workdir
        self.kubeconfig = server.write_kubeconfig(workdir / "kubeconfig", token=token)

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        cmd = [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.workdir / 'kube-cache'}",
            *args,
        ]
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise KubectlError(
                f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
            )
        return proc

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        """stdout of a kubectl call that must succeed."""
        return self.run(*args, stdin=stdin).stdout

    def apply(self, manifest: str) -> str:
        return self("apply", "-f", "-", stdin=manifest)


def table(output: str) -> list[dict[str, str]]:
    """Rows of kubectl's column output as dicts keyed by header; cells are cut at the
    header's column positions, so empty cells read as ""."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0]
    names = re.split(r"\s{2,}", header.strip())
    starts, pos = [], 0
    for name in names:
        pos = header.index(name, pos)
        starts.append(pos)
        pos += len(name)
    rows = []
    for line in lines[1:]:
        cells = []
        for j, start in enumerate(starts):
            end = starts[j + 1] if j + 1 < len(starts) else len(line)
            cells.append(line[start:end].strip())
        rows.append(dict(zip(names, cells, strict=True)))
    return rows
