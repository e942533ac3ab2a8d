"""The resourceclaim controller's part that the scheduler waits for: a pod's
claim from a ResourceClaimTemplate becomes a ResourceClaim of its own.

In a cluster kube-controller-manager does this; the simulator and `make demo`
play it with these functions. As the controller does: the claim is named
`<pod>-<claim name>-<5 characters>` (generateName), is owned by the pod
(controller, blockOwnerDeletion), carries the annotation naming the pod's
claim, takes the template's labels, annotations and spec, and the pod's
status.resourceClaimStatuses records the name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
RESOURCE_API: Final = "resource.k8s.io/v1"
_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's rand.String


def pending_template_claims(
    pod: Mapping[str, Any], group_claims: list[Any] | None = None
) -> list[tuple[str, str]]:
    """(pod claim name, template name) of the pod's template claims that have
    no entry in status.resourceClaimStatuses yet; entries equal to one of its
    PodGroup's `group_claims` are the group's, made for the group instead."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    done = {s.get("name") for s in status.get("resourceClaimStatuses") or [] if isinstance(s, dict)}
    out = []
    for c in spec.get("resourceClaims") or []:
        if not isinstance(c, Mapping) or (group_claims and dict(c) in group_claims):
            continue
        template = c.get("resourceClaimTemplateName")
        if isinstance(template, str) and template and c.get("name") not in done:
            out.append((str(c.get("name")), template))
    return out


def generated_suffix(pod_uid: str, claim: str) -> str:
    """Five characters from the controller's alphabet, stable for one pod and
    claim (the real controller's are random; a simulation must be repeatable)."""
    digest = hashlib.sha256(f"{pod_uid}/{claim}".encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:5])


def claim_from_template(
    pod: Mapping[str, Any], pod_claim: str, template: Mapping[str, Any]
) -> dict[str, Any]:
    """The ResourceClaim the controller creates for the pod's `pod_claim` (or a
    PodGroup's: the owner is whatever object `pod` is)."""
    md = pod.get("metadata") or {}
    tmd = ((template.get("spec") or {}).get("metadata")) or {}
    name = f"{md.get('name')}-{pod_claim}-{generated_suffix(str(md.get('uid') or ''), pod_claim)}"
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": md.get("namespace") or "default",
            "labels": dict(tmd.get("labels") or {}),
            "annotations": {
                **dict(tmd.get("annotations") or {}),
                POD_CLAIM_NAME_ANNOTATION: pod_claim,
            },
            "ownerReferences": [
                {
                    "apiVersion": pod.get("apiVersion") or "v1",
                    "kind": pod.get("kind") or "Pod",
                    "name": md.get("name"),
                    "uid": md.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": dict(((template.get("spec") or {}).get("spec")) or {}),
    }


def record_claim(pod: dict[str, Any], pod_claim: str, claim_name: str) -> None:
    """The pod's status.resourceClaimStatuses entry, as the controller writes it."""
    status = pod.setdefault("status", {})
    entries = [s for s in status.get("resourceClaimStatuses") or [] if s.get("name") != pod_claim]
    entries.append({"name": pod_claim, "resourceClaimName": claim_name})
    status["resourceClaimStatuses"] = entries


def release_pod(
    claims: dict[str, dict[str, Any]], pod: Mapping[str, Any]
) -> list[tuple[dict[str, Any], bool]]:
    """What the controller does with the claims of a pod that is gone: the pod
    leaves `status.reservedFor`; a claim nobody uses any more is deleted if the
    pod owned it (made from its template; the garbage collector), else its
    allocation is removed. `claims` (ns/name -> object) is changed in place;
    returns the changed objects, each with whether it was deleted."""
    md = pod.get("metadata") or {}
    uid = md.get("uid")
    out: list[tuple[dict[str, Any], bool]] = []
    for key, c in list(claims.items()):
        status = c.get("status") or {}
        reserved = status.get("reservedFor") or []
        if not any(r.get("uid") == uid for r in reserved):
            continue
        rest = [r for r in reserved if r.get("uid") != uid]
        owned = any(
            o.get("uid") == uid and o.get("controller")
            for o in (c.get("metadata") or {}).get("ownerReferences") or []
        )
        if not rest and owned:
            del claims[key]
            out.append((c, True))
            continue
        new_status = {k: v for k, v in status.items() if k not in ("reservedFor", "allocation")}
        if rest:
            new_status["reservedFor"] = rest
            if "allocation" in status:
                new_status["allocation"] = status["allocation"]
        new_md = dict(c.get("metadata") or {})
        new_md["resourceVersion"] = str(int(str(new_md.get("resourceVersion") or 0)) + 1)
        if not rest:
            new_md["finalizers"] = [
                f
                for f in new_md.get("finalizers") or []
                if f != "resource.kubernetes.io/delete-protection"
            ]
        new = {**c, "metadata": new_md, "status": new_status}
        claims[key] = new
        out.append((new, False))
    return out


def readied_devices(claim: Mapping[str, Any], stamp: str) -> list[dict[str, Any]] | None:
    """What a driver reports once it has readied the allocated devices that
    have binding conditions (attached a fabric GPU, say): the claim's
    status.devices with each of their conditions True, or None when there is
    nothing (more) to report. The simulator and `make demo` play the driver
    with it; on a cluster the driver does this."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    devices = [dict(d) for d in status.get("devices") or [] if isinstance(d, Mapping)]
    changed = False
    for r in results:
        wanted = [c for c in r.get("bindingConditions") or [] if isinstance(c, str)]
        if not wanted:
            continue
        ident = (r.get("driver"), r.get("pool"), r.get("device"))
        entry = next(
            (d for d in devices if (d.get("driver"), d.get("pool"), d.get("device")) == ident), None
        )
        if entry is None:
            entry = {"driver": ident[0], "pool": ident[1], "device": ident[2]}
            devices.append(entry)
        conditions = [dict(c) for c in entry.get("conditions") or [] if isinstance(c, Mapping)]
        for kind in wanted:
            if any(c.get("type") == kind and c.get("status") == "True" for c in conditions):
                continue
            conditions = [c for c in conditions if c.get("type") != kind]
            conditions.append(
                {
                    "type": kind,
                    "status": "True",
                    "reason": "Ready",
                    "message": "",
                    "lastTransitionTime": stamp,
                }
            )
            changed = True
        entry["conditions"] = conditions
    return devices if changed else None
