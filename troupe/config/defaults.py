"""Plugin sets as kube-scheduler defaults and merges them (multiPoint merged
into the defaults, expanded per extension point, score weights) and the
profile built from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from troupe.api.readers import get_int, get_map, get_name, get_objs, required
from troupe.config.args import plugin_args, unknown_plugin
from troupe.config.types import (
    ALL,
    DEFAULT_SCHEDULER_NAME,
    KUBE_SCHEDULER_PLUGINS,
    MAX_PLUGIN_WEIGHT,
    MAX_TOTAL_SCORE,
    MULTI_POINT,
    POINTS,
    ConfigError,
    ProfileConfig,
)
from troupe.config.workload import (
    WORKLOAD_POINTS,
    apply_workload_profile,
    read_workload_plugins,
)
from troupe.framework.interface import (
    MAX_NODE_SCORE,
    PluginSpec,
    implements,
)

# ---- plugin sets ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Entry:
    """One enabled plugin as written (weight 0: unset)."""

    name: str
    weight: int
    path: str  # where it was enabled, "" for a default


@dataclass(frozen=True, slots=True)
class _PluginSet:
    enabled: tuple[_Entry, ...]
    disabled: frozenset[str]


def _plugin_set(
    plugins: Mapping[str, Any], point: str, prefix: str, registry: Mapping[str, type]
) -> _PluginSet:
    """`plugins.<point>`: its enabled and disabled plugins (`prefix` is plugins')."""
    m = get_map(plugins, point, prefix, ("enabled", "disabled"))
    p = f"{prefix}{point}."
    enabled: list[_Entry] = []
    for q, e in get_objs(m, "enabled", p, ("name", "weight")):
        name = get_name(e, "name", q)
        if name not in registry:
            raise ConfigError(f"{q}name", unknown_plugin(name, registry))
        if any(x.name == name for x in enabled):
            raise ConfigError(f"{q}name", f'plugin "{name}" is enabled twice')
        weight = get_int(e, "weight", q, 0, MAX_PLUGIN_WEIGHT, strict=True) or 0
        enabled.append(_Entry(name, weight, q[:-1]))
    disabled: set[str] = set()
    for q, d in get_objs(m, "disabled", p, ("name", "weight")):
        name = get_name(d, "name", q)
        if name != ALL and name not in registry and name not in KUBE_SCHEDULER_PLUGINS:
            raise ConfigError(f"{q}name", unknown_plugin(name, registry))
        disabled.add(name)
    return _PluginSet(tuple(enabled), frozenset(disabled))


def _merge_multi_point(
    defaults: Sequence[PluginSpec], custom: _PluginSet, path: str, registry: Mapping[str, type]
) -> list[_Entry]:
    """The profile's multiPoint set: kube-scheduler's mergePluginSet."""
    by_name = {e.name: e for e in custom.enabled}
    merged: list[_Entry] = []
    if ALL not in custom.disabled:
        for d in defaults:
            if d.name in custom.disabled:
                continue
            if d.name not in registry:
                raise ConfigError(path, f'default plugin "{d.name}" is not in the registry')
            merged.append(by_name.get(d.name, _Entry(d.name, d.weight, "")))
    replaced = {e.name for e in merged}
    merged.extend(e for e in custom.enabled if e.name not in replaced)
    return merged


def _expand_point(
    point: str, own: _PluginSet, multi: Sequence[_Entry], registry: Mapping[str, type]
) -> list[_Entry]:
    """One point's plugins: kube-scheduler's expandMultiPointPlugins."""
    for e in own.enabled:
        if not implements(registry[e.name], point):
            raise ConfigError(e.path, f'plugin "{e.name}" does not implement {point}')
    if ALL in own.disabled:
        return list(own.enabled)
    explicit = {e.name for e in own.enabled}
    overridden: set[str] = set()
    from_multi: list[_Entry] = []
    for e in multi:
        if not implements(registry[e.name], point) or e.name in own.disabled:
            continue
        if e.name in explicit:
            overridden.add(e.name)
        else:
            from_multi.append(e)
    return (
        [e for e in own.enabled if e.name in overridden]
        + from_multi
        + [e for e in own.enabled if e.name not in overridden]
    )


PROFILE_FIELDS: Final = ("schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig")


def profile_config(
    prefix: str,
    m: Mapping[str, Any],
    count: int,
    registry: Mapping[str, type],
    defaults: Sequence[PluginSpec],
) -> ProfileConfig:
    """One of `count` profiles, `m`, whose path prefix is `prefix` ("profiles[0].")."""
    # As kube-scheduler: only a lone profile gets the default name.
    if m.get("schedulerName") is None and count > 1:
        raise required(f"{prefix}schedulerName", "a profile must be named when there are several")
    name = (
        DEFAULT_SCHEDULER_NAME
        if m.get("schedulerName") is None
        else get_name(m, "schedulerName", prefix)
    )
    percentage = get_int(m, "percentageOfNodesToScore", prefix, 0, 100, strict=True)

    pp = f"{prefix}plugins"
    plugins, workload = read_workload_plugins(
        get_map(m, "plugins", prefix, (MULTI_POINT, *POINTS, *WORKLOAD_POINTS)), f"{pp}.", registry
    )
    multi = _merge_multi_point(
        defaults,
        _plugin_set(plugins, MULTI_POINT, f"{pp}.", registry),
        f"{pp}.{MULTI_POINT}",
        registry,
    )
    rows = {
        point: _expand_point(
            point, _plugin_set(plugins, point, f"{pp}.", registry), multi, registry
        )
        for point in POINTS
    }
    args = plugin_args(m, prefix, registry)

    def spec(e: _Entry, point: str) -> PluginSpec:
        weight = (e.weight or 1) if point == "score" else 1
        a, a_path = args.get(e.name, ({}, ""))
        return PluginSpec(e.name, weight, a, a_path)

    specs = MappingProxyType(
        apply_workload_profile(
            workload,
            {point: tuple(spec(e, point) for e in row) for point, row in rows.items()},
            registry,
            f"{prefix}pluginConfig",
        )
    )
    total = sum(s.weight * MAX_NODE_SCORE for s in specs["score"])
    if total > MAX_TOTAL_SCORE:
        raise ConfigError(f"{pp}.score", "total score of Score plugins could overflow")
    sorts = specs["queueSort"]
    if len(sorts) != 1:
        got = ", ".join(f'"{s.name}"' for s in sorts)
        raise ConfigError(
            f"{pp}.queueSort",
            f"exactly one queueSort plugin must be enabled, got {len(sorts)}"
            + (f": {got}" if got else ""),
        )
    if not specs["bind"]:
        raise ConfigError(f"{pp}.bind", "at least one bind plugin must be enabled")
    return ProfileConfig(name, specs, percentage)
