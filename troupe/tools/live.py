"""`troupe simulate --kubeconfig`: the cluster as it is now, read once, for a what-if.

Every kind `troupe simulate` reads and `troupe run` watches (the rows of
`troupe.api.kinds.KINDS` that are both simulated and watched) is listed once,
in the table's order, through the client `troupe run` uses (`KubeClient`: the
same credentials, the reflectors' lane and `Reflector.list_once`, so the same
pages, the same paths and the same RBAC: get/list of what the chart's
ClusterRole grants). Nothing is watched and nothing is written. A kind served
in several versions is listed in the first the cluster serves (API discovery,
as `troupe run` picks its watches); a kind the cluster does not serve (a CRD
not installed) is left out and named in `Snapshot.not_served`.

ResourceClaimTemplates are the one simulated kind `troupe run` does not read
(the chart grants no access to them): the claims the cluster's resourceclaim
controller made from them are listed as ResourceClaims, and a template a new
pod uses is given in the user's files.

`dump_snapshot` writes the objects as one `kind: List` (YAML, or JSON for a
name ending in .json), an input `troupe simulate FILE` reads again; the
kubectl command that makes the same dump (`dump_command`) is generated from
the same rows, for the docs (docs/simulate.md and the README hold it; a
test checks it there, and runs it with kubectl).
"""

from __future__ import annotations

import asyncio
import logging
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from troupe.api.kinds import KINDS, Kind
from troupe.core.cluster import NotFound
from troupe.kube import KubeClient, discover_version
from troupe.kube.reflector import Reflector

log = logging.getLogger(__name__)

# The rows listed from a live cluster, in the table's order.
LISTED: Final = tuple(k for k in KINDS if k.simulated and k.watched)


@dataclass
class Snapshot:
    """What one read of the cluster found."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    # "<plural>.<group>" of the rows the cluster does not serve.
    not_served: list[str] = field(default_factory=list)


def resource_name(row: Kind) -> str:
    """The name kubectl takes for the row's resource: plural, with its group
    for every group but the core one (`podgroups.scheduling.x-k8s.io`)."""
    return f"{row.plural}.{row.group}" if row.group else row.plural


def dump_command(out: str = "cluster.yaml") -> str:
    """The shell commands that dump every kind `troupe simulate` reads, in the
    table's order, into `out`: one `kubectl get` per resource, so that a kind
    the cluster does not serve (kubectl says so on stderr) leaves the others
    in; each list a YAML document of its own."""
    names = dict.fromkeys(resource_name(k) for k in KINDS if k.simulated)
    lines = textwrap.wrap(
        " ".join(names),
        width=88,
        initial_indent="for r in ",
        subsequent_indent="         ",
        break_on_hyphens=False,
    )
    return (
        " \\\n".join(lines)
        + "; do\n"
        + '  echo ---; kubectl get "$r" -A -o yaml\n'
        + f"done > {out}"
    )


async def read_cluster(kube: KubeClient) -> Snapshot:
    """List every kind in `LISTED` once (no watch, no write); then close the
    client's connections."""
    lane = kube.watches(1)
    out = Snapshot()

    def sink(_key: str, obj: dict[str, Any], deleted: bool) -> None:
        if not deleted:  # (a first list delivers no deletions)
            out.objects.append(obj)

    try:
        for row in LISTED:
            version = row.versions[0]
            if row.group:
                found = await discover_version(kube, row.group, row.versions, row.plural)
                if found is None:
                    out.not_served.append(resource_name(row))
                    continue
                version = found
            before = len(out.objects)
            try:
                await Reflector(row.key(version), lane, sink).list_once()
            except NotFound:  # removed between discovery and the list
                del out.objects[before:]
                out.not_served.append(resource_name(row))
    finally:
        await lane.aclose()
        await kube.aclose()
    for name in out.not_served:
        log.info("the cluster serves no %s: none read", name)
    return out


def snapshot(kubeconfig: str | None) -> Snapshot:
    """`read_cluster` with the credentials of `kubeconfig` (None: in-cluster,
    else the default kubeconfig), as `troupe run --kubeconfig` loads them."""
    from troupe.kube import load_connection

    if kubeconfig:  # the kubernetes library's own message does not name the file
        try:
            with open(kubeconfig, "rb"):
                pass
        except OSError as e:
            raise OSError(f"--kubeconfig {kubeconfig}: {e.strerror or e}") from e
    kube = KubeClient(load_connection(kubeconfig), identity="troupe-simulate")
    return asyncio.run(read_cluster(kube))


def dump_snapshot(objects: Sequence[dict[str, Any]], path: str) -> None:
    """The objects as one `kind: List` document, JSON if `path` ends in .json."""
    from troupe.tools.simulate import dump_output

    doc = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    text = dump_output(doc, "json" if path.endswith(".json") else "yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
