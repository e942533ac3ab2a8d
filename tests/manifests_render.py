"""`make manifests`: render manifests/ from the Helm chart, so there is one source.

The plain manifests are the chart's templates rendered with the default values
(release `troupe` in namespace `troupe-system`, the Namespace included, as
`kubectl apply -f manifests/` needs it), one file per template; the
ServiceMonitor example is the same render with `metrics.serviceMonitor.enabled`.
`check()` tells whether the files in the tree are what the chart renders (the
test suite runs it); `python -m tests.manifests_render` rewrites them, and the
chart's copy of the CRDs from crds/.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from apiserver.helm import helm

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "troupe"
MANIFESTS = ROOT / "manifests"
RELEASE, NAMESPACE = "troupe", "troupe-system"
HEADER = (
    "# Generated from charts/troupe by `make manifests` (helm template with the chart's\n"
    "# default values): edit the chart, not this file.\n"
)
# manifests/<file> <- the chart's templates/<template> rendered with these settings
FILES = {
    "namespace.yaml": ("namespace.yaml", ()),
    "rbac.yaml": ("rbac.yaml", ()),
    "configmap.yaml": ("configmap.yaml", ()),
    "deployment.yaml": ("deployment.yaml", ()),
    "service.yaml": ("service.yaml", ()),
    "servicemonitor.example.yaml": (
        "servicemonitor.yaml",
        ("metrics.serviceMonitor.enabled=true",),
    ),
}


def template(*settings: str, chart: Path = CHART) -> dict[str, str]:
    """The chart rendered by `helm template`: template file name -> its YAML."""
    with tempfile.TemporaryDirectory(prefix="troupe-chart-") as tmp:
        args = [str(helm()), "template", RELEASE, str(chart), "--namespace", NAMESPACE]
        args += ["--set", "createNamespace=true", "--output-dir", tmp]
        for s in settings:
            args += ["--set", s]
        subprocess.run(args, check=True, capture_output=True, text=True)
        out = {}
        for f in sorted((Path(tmp) / chart.name / "templates").glob("*.yaml")):
            docs = [
                "\n".join(line for line in d.splitlines() if not line.startswith("# Source: "))
                for d in f.read_text().split("\n---\n")
            ]
            out[f.name] = "---\n".join(d.strip("-\n") + "\n" for d in docs if d.strip("-\n"))
        return out


def rendered() -> dict[str, str]:
    """manifests/<file> -> the text it must hold."""
    renders: dict[tuple[str, ...], dict[str, str]] = {}
    out = {}
    for name, (tpl, settings) in FILES.items():
        if settings not in renders:
            renders[settings] = template(*settings)
        out[name] = HEADER + renders[settings][tpl]
    return out


def crd_copies() -> list[tuple[Path, Path]]:
    """(crds/<f>, charts/troupe/crds/<f>): the chart ships the same CRDs."""
    return [(f, CHART / "crds" / f.name) for f in sorted((ROOT / "crds").glob("*.yaml"))]


def check() -> list[str]:
    """What differs between the tree and the chart's render (empty when they agree)."""
    problems = [
        f"manifests/{name} differs from the chart's render (run make manifests)"
        for name, text in rendered().items()
        if not (MANIFESTS / name).exists() or (MANIFESTS / name).read_text() != text
    ]
    problems += [
        f"{copy.relative_to(ROOT)} differs from {src.relative_to(ROOT)} (run make manifests)"
        for src, copy in crd_copies()
        if not copy.exists() or copy.read_bytes() != src.read_bytes()
    ]
    return problems


def main() -> int:
    for name, text in rendered().items():
        (MANIFESTS / name).write_text(text)
        print(f"wrote manifests/{name}")
    for src, copy in crd_copies():
        shutil.copyfile(src, copy)
        print(f"wrote {copy.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
