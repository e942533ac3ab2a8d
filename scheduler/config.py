"""The configuration file: load, default, validate.

The file is a KubeSchedulerConfiguration (`kubescheduler.config.k8s.io/v1`),
read as kube-scheduler reads it: profiles with `schedulerName`, `plugins` per
extension point and `multiPoint` (enabled / disabled with `"*"` / weight),
`pluginConfig` args, `percentageOfNodesToScore`, `podInitialBackoffSeconds`,
`podMaxBackoffSeconds`. Unknown fields are errors (kube-scheduler decodes
strictly). Troupe's own settings live in a top-level `troupe:` section:

    troupe:
      fifoFallback: {enabled: true, minQueueLength: 100, failureStreak: 50,
                     durationSeconds: 30}
      unschedulableFlushSeconds: 300   # podMaxInUnschedulablePodsDuration
      assumedPodTTLSeconds: 0          # 0: assumed pods never expire
      seed: 0                          # random tie-break between equal nodes
      gangGroupCycle: true             # place a gang's pods together (atomic)
      podGroupStatusCoalesceSeconds: 1
      metricsPort: 10259

Any error stops start-up with one `ConfigError` naming the field. Plugin
arguments are validated by the plugins themselves when the profile is built
(`framework.runtime.Profile`), with the field path of their `args`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from scheduler.framework.interface import EXTENSION_POINTS, PluginSpec, implements
from scheduler.plugins.registry import DEFAULT_MULTI_POINT

API_VERSION: Final = "kubescheduler.config.k8s.io/v1"
KIND: Final = "KubeSchedulerConfiguration"
DEFAULT_SCHEDULER_NAME: Final = "troupe-scheduler"

# Extension point names in file order (multiPoint is expanded into these).
POINTS: Final = tuple(EXTENSION_POINTS)


class ConfigError(ValueError):
    """A bad configuration; the message names the field."""


@dataclass(frozen=True, slots=True)
class TroupeSettings:
    fifo_enabled: bool = True
    fifo_min_queue_length: int = 100
    fifo_failure_streak: int = 50
    fifo_duration_seconds: float = 30.0
    unschedulable_flush_seconds: float = 300.0
    assumed_pod_ttl_seconds: float = 0.0
    seed: int = 0
    group_cycle: bool = True
    podgroup_status_coalesce_seconds: float = 1.0
    metrics_port: int = 10259


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    scheduler_name: str
    plugins: Mapping[str, tuple[PluginSpec, ...]]
    percentage_of_nodes_to_score: int | None = None


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    profiles: tuple[ProfileConfig, ...]
    percentage_of_nodes_to_score: int = 0
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    troupe: TroupeSettings = field(default_factory=TroupeSettings)

    def profile(self, scheduler_name: str) -> ProfileConfig | None:
        for p in self.profiles:
            if p.scheduler_name == scheduler_name:
                return p
        return None


# ---- readers ----------------------------------------------------------------------


def _check_keys(obj: Mapping[str, Any], allowed: Sequence[str], path: str) -> None:
    for k in obj:
        if k not in allowed:
            where = f"{path}.{k}" if path else str(k)
            raise ConfigError(f"{where}: unknown field")


def _mapping(v: object, path: str) -> Mapping[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise ConfigError(f"{path}: must be an object")
    return v


def _seq(v: object, path: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ConfigError(f"{path}: must be a list")
    return v


def _int(v: object, path: str, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{path}: must be an integer, got {v!r}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = (
            f"between {lo} and {hi}"
            if lo is not None and hi is not None
            else (f">= {lo}" if lo is not None else f"<= {hi}")
        )
        raise ConfigError(f"{path}: must be {rng}, got {v}")
    return v


def _num(v: object, path: str, lo: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ConfigError(f"{path}: must be a number, got {v!r}")
    if lo is not None and v < lo:
        raise ConfigError(f"{path}: must be >= {lo:g}, got {v}")
    return float(v)


def _bool(v: object, path: str) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"{path}: must be true or false, got {v!r}")
    return v


def _str(v: object, path: str) -> str:
    if not isinstance(v, str) or not v:
        raise ConfigError(f"{path}: must be a non-empty string")
    return v


def _implements(cls: type, point: str) -> bool:
    return implements(cls, point)


# ---- plugins --------------------------------------------------------------------------


def _plugin_set(
    obj: object, path: str, registry: Mapping[str, type]
) -> tuple[list[tuple[str, int | None, str]], set[str]]:
    """(enabled [(name, weight, path)], disabled names) of one PluginSet."""
    m = _mapping(obj, path)
    _check_keys(m, ("enabled", "disabled"), path)
    enabled = []
    seen: set[str] = set()
    for i, e in enumerate(_seq(m.get("enabled"), f"{path}.enabled")):
        p = f"{path}.enabled[{i}]"
        e = _mapping(e, p)
        _check_keys(e, ("name", "weight"), p)
        name = _str(e.get("name"), f"{p}.name")
        if name not in registry:
            raise ConfigError(f'{p}.name: unknown plugin "{name}"')
        if name in seen:
            raise ConfigError(f'{p}.name: plugin "{name}" is enabled twice')
        seen.add(name)
        w = e.get("weight")
        weight = None if w is None else _int(w, f"{p}.weight", 0)
        enabled.append((name, weight or None, p))
    disabled: set[str] = set()
    for i, d in enumerate(_seq(m.get("disabled"), f"{path}.disabled")):
        p = f"{path}.disabled[{i}]"
        d = _mapping(d, p)
        _check_keys(d, ("name", "weight"), p)
        name = _str(d.get("name"), f"{p}.name")
        if name != "*" and name not in registry:
            raise ConfigError(f'{p}.name: unknown plugin "{name}"')
        disabled.add(name)
    return enabled, disabled


def _expand(
    plugins: Mapping[str, Any],
    path: str,
    registry: Mapping[str, type],
    defaults: Sequence[PluginSpec],
) -> dict[str, list[tuple[str, int]]]:
    """Per point, the ordered (name, weight) list, as kube-scheduler's multiPoint
    expansion and mergePlugins: defaults (multiPoint) minus disabled, plus
    the profile's multiPoint, then each point's own enabled/disabled."""
    _check_keys(plugins, ("multiPoint", *POINTS), path)
    mp_enabled, mp_disabled = _plugin_set(plugins.get("multiPoint"), f"{path}.multiPoint", registry)
    multi: list[tuple[str, int | None]] = []
    if "*" not in mp_disabled:
        multi = [(s.name, s.weight) for s in defaults if s.name not in mp_disabled]
    for name, weight, _ in mp_enabled:
        multi = [(n, w) for n, w in multi if n != name]
        multi.append((name, weight))
    out: dict[str, list[tuple[str, int]]] = {}
    for point in POINTS:
        enabled, disabled = _plugin_set(plugins.get(point), f"{path}.{point}", registry)
        base = (
            []
            if "*" in disabled
            else [(n, w) for n, w in multi if n not in disabled and _implements(registry[n], point)]
        )
        explicit = {n for n, _, _ in enabled}
        row = [(n, w or 1) for n, w in base if n not in explicit]
        for name, weight, p in enabled:
            if not _implements(registry[name], point):
                raise ConfigError(f'{p}: plugin "{name}" does not implement {point}')
            default_w = next((w for n, w in multi if n == name), None)
            row.append((name, weight or default_w or 1))
        out[point] = row
    return out


def _profile(
    obj: object, i: int, registry: Mapping[str, type], defaults: Sequence[PluginSpec]
) -> ProfileConfig:
    path = f"profiles[{i}]"
    m = _mapping(obj, path)
    _check_keys(m, ("schedulerName", "plugins", "pluginConfig", "percentageOfNodesToScore"), path)
    name = _str(m.get("schedulerName", DEFAULT_SCHEDULER_NAME), f"{path}.schedulerName")
    per_point = _expand(
        _mapping(m.get("plugins"), f"{path}.plugins"), f"{path}.plugins", registry, defaults
    )
    args: dict[str, tuple[Mapping[str, Any], str]] = {}
    for j, pc in enumerate(_seq(m.get("pluginConfig"), f"{path}.pluginConfig")):
        p = f"{path}.pluginConfig[{j}]"
        pc = _mapping(pc, p)
        _check_keys(pc, ("name", "args"), p)
        pname = _str(pc.get("name"), f"{p}.name")
        if pname not in registry:
            raise ConfigError(f'{p}.name: unknown plugin "{pname}"')
        if pname in args:
            raise ConfigError(f'{p}.name: repeated config for plugin "{pname}"')
        args[pname] = (_mapping(pc.get("args"), f"{p}.args"), f"{p}.args")
    pct = m.get("percentageOfNodesToScore")
    percentage = None if pct is None else _int(pct, f"{path}.percentageOfNodesToScore", 0, 100)
    plugins = {
        point: tuple(
            PluginSpec(n, w, args.get(n, ({}, ""))[0], args.get(n, ({}, ""))[1]) for n, w in row
        )
        for point, row in per_point.items()
    }
    if len(plugins["queueSort"]) != 1:
        raise ConfigError(
            f"{path}.plugins.queueSort: exactly one queueSort plugin must be "
            f"enabled, got {len(plugins['queueSort'])}"
        )
    if not plugins["bind"]:
        raise ConfigError(f"{path}.plugins.bind: at least one bind plugin must be enabled")
    return ProfileConfig(name, plugins, percentage)


def _troupe(obj: object) -> TroupeSettings:
    path = "troupe"
    m = _mapping(obj, path)
    _check_keys(
        m,
        (
            "fifoFallback",
            "unschedulableFlushSeconds",
            "assumedPodTTLSeconds",
            "seed",
            "gangGroupCycle",
            "podGroupStatusCoalesceSeconds",
            "metricsPort",
        ),
        path,
    )
    d = TroupeSettings()
    f = _mapping(m.get("fifoFallback"), f"{path}.fifoFallback")
    _check_keys(
        f, ("enabled", "minQueueLength", "failureStreak", "durationSeconds"), f"{path}.fifoFallback"
    )

    def get(obj: Mapping[str, Any], key: str, default: Any, conv: Any, p: str) -> Any:
        return default if obj.get(key) is None else conv(obj[key], f"{p}.{key}")

    fp = f"{path}.fifoFallback"
    return TroupeSettings(
        fifo_enabled=get(f, "enabled", d.fifo_enabled, _bool, fp),
        fifo_min_queue_length=get(
            f, "minQueueLength", d.fifo_min_queue_length, lambda v, p: _int(v, p, 0), fp
        ),
        fifo_failure_streak=get(
            f, "failureStreak", d.fifo_failure_streak, lambda v, p: _int(v, p, 1), fp
        ),
        fifo_duration_seconds=get(
            f, "durationSeconds", d.fifo_duration_seconds, lambda v, p: _num(v, p, 0.0), fp
        ),
        unschedulable_flush_seconds=get(
            m,
            "unschedulableFlushSeconds",
            d.unschedulable_flush_seconds,
            lambda v, p: _num(v, p, 1.0),
            path,
        ),
        assumed_pod_ttl_seconds=get(
            m, "assumedPodTTLSeconds", d.assumed_pod_ttl_seconds, lambda v, p: _num(v, p, 0.0), path
        ),
        seed=get(m, "seed", d.seed, _int, path),
        group_cycle=get(m, "gangGroupCycle", d.group_cycle, _bool, path),
        podgroup_status_coalesce_seconds=get(
            m,
            "podGroupStatusCoalesceSeconds",
            d.podgroup_status_coalesce_seconds,
            lambda v, p: _num(v, p, 0.0),
            path,
        ),
        metrics_port=get(m, "metricsPort", d.metrics_port, lambda v, p: _int(v, p, 1, 65535), path),
    )


TOP_LEVEL: Final = (
    "apiVersion",
    "kind",
    "profiles",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "parallelism",
    "leaderElection",
    "clientConnection",
    "extenders",
    "delayCacheUntilActive",
    "troupe",
)


def parse_config(
    obj: object,
    registry: Mapping[str, type],
    multi_point: Sequence[PluginSpec] = DEFAULT_MULTI_POINT,
) -> SchedulerConfig:
    m = _mapping(obj, "configuration")
    _check_keys(m, TOP_LEVEL, "")
    if m.get("apiVersion", API_VERSION) != API_VERSION:
        raise ConfigError(f"apiVersion: expected {API_VERSION}, got {m.get('apiVersion')!r}")
    if m.get("kind", KIND) != KIND:
        raise ConfigError(f"kind: expected {KIND}, got {m.get('kind')!r}")
    if m.get("extenders"):
        raise ConfigError("extenders: not supported by Troupe")
    raw_profiles = _seq(m.get("profiles"), "profiles") or [{}]
    profiles = tuple(_profile(p, i, registry, multi_point) for i, p in enumerate(raw_profiles))
    names: set[str] = set()
    for i, p in enumerate(profiles):
        if p.scheduler_name in names:
            raise ConfigError(f'profiles[{i}].schedulerName: duplicate "{p.scheduler_name}"')
        names.add(p.scheduler_name)
    sorts = {p.plugins["queueSort"][0].name for p in profiles}
    if len(sorts) > 1:
        raise ConfigError(
            "profiles: all profiles must use the same queueSort plugin, got "
            + ", ".join(sorted(sorts))
        )
    pct = m.get("percentageOfNodesToScore")
    percentage = 0 if pct is None else _int(pct, "percentageOfNodesToScore", 0, 100)
    init_b = m.get("podInitialBackoffSeconds")
    initial = 1.0 if init_b is None else float(_int(init_b, "podInitialBackoffSeconds", 1))
    max_b = m.get("podMaxBackoffSeconds")
    maximum = 10.0 if max_b is None else float(_int(max_b, "podMaxBackoffSeconds", 1))
    if maximum < initial:
        raise ConfigError(
            "podMaxBackoffSeconds: must be greater than or equal to "
            f"podInitialBackoffSeconds ({initial:g}), got {maximum:g}"
        )
    return SchedulerConfig(profiles, percentage, initial, maximum, _troupe(m.get("troupe")))


def default_config(
    registry: Mapping[str, type], multi_point: Sequence[PluginSpec] = DEFAULT_MULTI_POINT
) -> SchedulerConfig:
    return parse_config({}, registry, multi_point)


def load_config(
    path: str | None,
    registry: Mapping[str, type],
    multi_point: Sequence[PluginSpec] = DEFAULT_MULTI_POINT,
) -> SchedulerConfig:
    if path is None:
        return default_config(registry, multi_point)
    try:
        with open(path, encoding="utf-8") as f:
            obj = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    try:
        return parse_config(obj or {}, registry, multi_point)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
