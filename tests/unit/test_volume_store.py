"""The volume store's PV indexes: free PVs by class and the rest by the claim
their claimRef names, as readers see them (assumed versions over the API's)."""

from __future__ import annotations

from typing import Any

from tests.volume_builders import pv, pvc
from troupe.api.storage import PersistentVolume, PersistentVolumeClaim, parse_storage_object
from troupe.core.volumes import VolumeStore


def parsed(obj: dict[str, Any]) -> Any:
    out = parse_storage_object(obj["kind"], obj)
    assert isinstance(out, PersistentVolume | PersistentVolumeClaim), out
    return out


def names(pvs: list[PersistentVolume]) -> list[str]:
    return [p.name for p in pvs]


def test_free_and_claimed_pvs_follow_assume_restore_and_api_updates() -> None:
    store = VolumeStore()
    for obj in (pv("b", sc="local"), pv("a", sc="local"), pv("x", sc="other")):
        store.set(parsed(obj))
    store.set(parsed(pv("pre", sc="local", claim="data")))
    claim = parsed(pvc("data", sc="local"))
    store.set(claim)
    assert names(store.free_pvs_in_class("local")) == ["a", "b"]
    assert names(store.pvs_claimed_by("default/data")) == ["pre"]

    store.assume_pv(parsed(pv("a", sc="local")), claim)  # Reserve
    assert names(store.free_pvs_in_class("local")) == ["b"]
    assert names(store.pvs_claimed_by("default/data")) == ["a", "pre"]
    store.restore_pv("a")  # Unreserve
    assert names(store.free_pvs_in_class("local")) == ["a", "b"]

    store.assume_pv(parsed(pv("a", sc="local")), claim)
    # The API's newer version (the write went through) replaces the assumed one.
    bound = pv("a", sc="local", claim="data", phase="Bound")
    bound["metadata"]["resourceVersion"] = "2"
    store.set(parsed(bound))
    assert names(store.free_pvs_in_class("local")) == ["b"]
    store.set(parsed(bound), deleted=True)
    assert names(store.pvs_claimed_by("default/data")) == ["pre"]
    assert names(store.free_pvs_in_class("other")) == ["x"]
