"""DeviceTaintRules (an admin's taints on devices, GA in Kubernetes 1.37):
a device a rule selects carries the rule's taint as if its slice said so, as
kube-scheduler reads them; device taints with the effect None (or one this
version does not know) keep no pod off."""

from __future__ import annotations

from typing import Any

from tests.unit.dra_helpers import (
    DRIVER,
    device,
    device_class,
    node,
    placed,
    pod,
    request,
    run,
    slice_,
    template,
)
from troupe.dra.types import DeviceTaintRule, parse_dra_object


def rule(name: str, effect: str = "NoSchedule", **selector: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": {"key": "broken", "value": "ecc", "effect": effect}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": spec,
    }


def gpus() -> dict[str, Any]:
    return slice_(
        "n0-gpus", device("gpu-0", model="a100"), device("gpu-1", model="h100"), node="n0"
    )


def devices_of(*extra: dict[str, Any], tolerate: bool = False) -> Any:
    r = request()
    if tolerate:
        r["exactly"]["tolerations"] = [{"key": "broken", "operator": "Exists"}]
    got = placed(
        run([node("n0"), device_class(), gpus(), *extra, template("t", r), pod("p", template="t")])[
            1
        ]
    )
    return got["p"][1].get("gpu")


def test_a_rule_keeps_pods_off_the_devices_it_selects() -> None:
    assert devices_of() == [f"{DRIVER}/n0/gpu-0"]
    assert devices_of(rule("r", device="gpu-0")) == [f"{DRIVER}/n0/gpu-1"]
    assert devices_of(rule("r", driver=DRIVER, pool="n0")) is None  # the whole pool
    assert devices_of(rule("r", driver=DRIVER, pool="n0"), tolerate=True) == [f"{DRIVER}/n0/gpu-0"]


def test_a_rule_selects_by_class_and_cel() -> None:
    h100 = device_class("h100", f'device.attributes["{DRIVER}"].model == "h100"')
    by_class = rule("r", deviceClassName="h100")
    assert devices_of(h100, by_class) == [f"{DRIVER}/n0/gpu-0"]
    cel = rule(
        "r", selectors=[{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "a100"'}}]
    )
    assert devices_of(cel) == [f"{DRIVER}/n0/gpu-1"]


def test_what_taints_nothing() -> None:
    # No deviceSelector: no device (an accident must not taint them all).
    no_selector = rule("r")
    del no_selector["spec"]["deviceSelector"]
    assert devices_of(no_selector) == [f"{DRIVER}/n0/gpu-0"]
    # The effect None is for people and dry runs; unknown effects are treated alike.
    assert devices_of(rule("r", "None", device="gpu-0")) == [f"{DRIVER}/n0/gpu-0"]
    assert devices_of(rule("r", "Degrade", device="gpu-0")) == [f"{DRIVER}/n0/gpu-0"]


def test_a_slices_taint_with_the_effect_none_is_read_and_keeps_no_pod_off() -> None:
    d = device("gpu-0")
    d["taints"] = [{"key": "health", "value": "degraded", "effect": "None"}]
    got = placed(
        run(
            [
                node("n0"),
                device_class(),
                slice_("s", d, node="n0"),
                template("t", request()),
                pod("p", template="t"),
            ]
        )[1]
    )
    assert got["p"] == ("n0", {"gpu": [f"{DRIVER}/n0/gpu-0"]})


def test_rules_are_read_in_every_version_kube_served() -> None:
    for version in ("v1", "v1beta2", "v1alpha3"):
        obj = rule("r", device="gpu-0")
        obj["apiVersion"] = f"resource.k8s.io/{version}"
        got = parse_dra_object("DeviceTaintRule", obj)
        assert isinstance(got, DeviceTaintRule) and got.device == "gpu-0"
        assert devices_of(obj) == [f"{DRIVER}/n0/gpu-1"]
