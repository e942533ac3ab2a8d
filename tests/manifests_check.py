"""`make manifests-check`: validate every manifest we ship.

Kubernetes kinds are checked by kubernetes-validate against the Kubernetes
OpenAPI schemas (strict: unknown fields are errors); PodGroups against the
openAPIV3Schema of the CRD we ship; the scheduler configuration in the
ConfigMap by Troupe's own loader. Then the pieces that must agree: the
Lease the RBAC names is the one `troupe run` takes by default, the probes use
the health endpoints the scheduler serves, and the PodDisruptionBudget and the
anti-affinity select the Deployment's pods.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from troupe.config import ConfigError, LeaderElection, parse_config
from troupe.plugins.registry import IN_TREE

ROOT = Path(__file__).resolve().parent.parent
# The ServiceMonitor needs the Prometheus Operator's CRDs: not checked.
SKIP = {"servicemonitor.example.yaml", "demo-cluster.yaml"}


def main() -> int:
    files = sorted(p for p in (ROOT / "manifests").rglob("*.yaml") if p.name not in SKIP)
    files += sorted((ROOT / "crds").glob("*.yaml"))
    failed = 0
    crd = yaml.safe_load((ROOT / "crds" / "scheduling.x-k8s.io_podgroups.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    kube_files = []
    for f in files:
        docs = [d for d in yaml.safe_load_all(f.read_text()) if d]
        for d in docs:
            if d.get("kind") == "PodGroup":
                try:
                    jsonschema.validate(d, schema)
                    print(f"OK   {f.relative_to(ROOT)}: PodGroup {d['metadata']['name']}")
                except jsonschema.ValidationError as e:
                    print(f"FAIL {f.relative_to(ROOT)}: PodGroup: {e.message}")
                    failed += 1
            elif d.get("kind") == "ConfigMap" and "config.yaml" in d.get("data", {}):
                try:
                    parse_config(yaml.safe_load(d["data"]["config.yaml"]), IN_TREE)
                    print(f"OK   {f.relative_to(ROOT)}: scheduler configuration")
                except ConfigError as e:
                    print(f"FAIL {f.relative_to(ROOT)}: scheduler configuration: {e}")
                    failed += 1
        if any(d.get("kind") != "PodGroup" for d in docs):
            kube_files.append(str(f))
    failed += consistency(ROOT / "manifests")
    r = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "--no-warn", *kube_files],
        check=False,
    )
    return 1 if failed or r.returncode else 0


def consistency(manifests: Path) -> int:
    docs: list[dict[str, Any]] = []
    for name in ("rbac.yaml", "deployment.yaml"):
        docs += [d for d in yaml.safe_load_all((manifests / name).read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    problems = []
    lease = LeaderElection().resource_name
    named = [
        r
        for r in by_kind["Role"]["rules"]
        if "leases" in r["resources"] and r.get("resourceNames") == [lease]
    ]
    if not named or not {"get", "update", "patch"} <= set(named[0]["verbs"]):
        problems.append(f"Role: get/update/patch of Lease {lease!r} by resourceNames")
    dep = by_kind["Deployment"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        if container[probe]["httpGet"]["path"] != path:
            problems.append(f"Deployment: {probe} should GET {path}")
    pdb = by_kind["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]
    anti = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    for what, selector in (
        ("PodDisruptionBudget", pdb),
        ("anti-affinity", term["podAffinityTerm"]["labelSelector"]["matchLabels"]),
    ):
        if not selector.items() <= labels.items():
            problems.append(f"{what}: selector {selector} does not select the Deployment's pods")
    for p in problems:
        print(f"FAIL manifests: {p}")
    if not problems:
        print("OK   manifests: Lease RBAC, probes, PodDisruptionBudget and anti-affinity agree")
    return len(problems)


if __name__ == "__main__":
    raise SystemExit(main())
