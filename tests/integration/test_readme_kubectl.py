"""The README's kubectl lines, run as written with the real kubectl, against
the demo cluster with `troupe run --kubeconfig` scheduling it.

The commands are read from the README itself (the block after `make demo
DEMO_ARGS=...`), so the README and this test cannot drift apart.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from apiserver import ApiServer, demo
from apiserver.replica import REPO, Troupe, until
from troupe.tools.simulate import load_objects

KUBECTL = Path(sys.executable).parent / "kubectl"

pytestmark = pytest.mark.skipif(
    not KUBECTL.exists(), reason=f"kubectl not installed at {KUBECTL} (run `make install`)"
)


def readme_kubectl_lines() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = text.split("make demo DEMO_ARGS=", 1)[1].split("```", 1)[0]
    lines = []
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("kubectl "):
            lines.append(line)
    return lines


def test_the_readme_kubectl_lines_work_against_make_demo(tmp_path: Path) -> None:
    lines = readme_kubectl_lines()
    assert lines == [
        "kubectl get nodes",
        "kubectl get podgroups -A",
        "kubectl get podgroups.scheduling.x-k8s.io -A",
        "kubectl get pods -A -o wide",
        "kubectl describe pod -n shop huge",
    ]
    srv = ApiServer(native_podgroups=demo.NATIVE_VERSION)
    with srv.start_in_thread():
        demo.load(srv, load_objects([str(demo.EXAMPLE)]))
        kubeconfig = srv.write_kubeconfig(tmp_path / "troupe-demo.kubeconfig")
        with Troupe(tmp_path, kubeconfig=kubeconfig) as t:
            t.wait_ready()
            until(
                lambda: any(
                    e["involvedObject"]["name"] == "huge" and e["reason"] == "FailedScheduling"
                    for e in srv.objects("events")
                ),
                what="huge's FailedScheduling event",
            )
            until(lambda: (srv.get("pods", "ml", "trainer") or {}).get("spec", {}).get("nodeName"))
            env = {
                **os.environ,
                "KUBECONFIG": str(kubeconfig),
                "PATH": f"{KUBECTL.parent}{os.pathsep}{os.environ.get('PATH', '')}",
                "HOME": str(tmp_path),  # kubectl's discovery cache goes under $HOME/.kube
            }
            out = {}
            for line in lines:
                r = subprocess.run(
                    line.split(), env=env, capture_output=True, text=True, timeout=60, check=False
                )
                assert r.returncode == 0, f"{line}: {r.stderr}"
                out[line] = r.stdout
            t.stop()
    nodes = out["kubectl get nodes"]
    assert re.search(r"^NAME\s+STATUS", nodes, re.M) and "worker-a1" in nodes
    # The demo's API server serves Kubernetes' own PodGroups too, and, as on a real
    # cluster, a built-in group comes before a CRD's in discovery: plain
    # `podgroups` names scheduling.k8s.io's (the native gang), the CRD's need
    # their group spelled out.
    groups = out["kubectl get podgroups -A"]
    assert re.search(r"^NAMESPACE\s+NAME\s+AGE", groups, re.M)
    assert re.search(r"^ml\s+ring\s+", groups, re.M)
    crd = out["kubectl get podgroups.scheduling.x-k8s.io -A"]
    assert re.search(r"^NAMESPACE\s+NAME\s+PHASE", crd, re.M)
    assert re.search(r"^ml\s+allreduce\s+", crd, re.M)
    pods = out["kubectl get pods -A -o wide"]
    assert re.search(r"^ml\s+trainer\s+.*\sgpu-b1\s", pods, re.M)
    described = out["kubectl describe pod -n shop huge"]
    assert "Events:" in described
    assert re.search(r"Warning\s+FailedScheduling\s+.*troupe-scheduler", described)
    assert "0/5 nodes are available" in described
