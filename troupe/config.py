"""The configuration file: load, default, validate.

The file is a KubeSchedulerConfiguration (`kubescheduler.config.k8s.io/v1`),
read as kube-scheduler reads it, so a kube-scheduler configuration reads the
same here:

    apiVersion: kubescheduler.config.k8s.io/v1
    kind: KubeSchedulerConfiguration
    percentageOfNodesToScore: 0        # 0: adaptive; a profile may override it
    podInitialBackoffSeconds: 1
    podMaxBackoffSeconds: 10
    profiles:
    - schedulerName: troupe-scheduler  # defaulted only when there is one profile
      percentageOfNodesToScore: 50
      plugins:
        multiPoint: {enabled: [...], disabled: [{name: "*"}]}
        score: {enabled: [{name: NodeResourcesFit, weight: 5}]}
      pluginConfig:
      - name: NodeResourcesFit
        args: {scoringStrategy: {type: MostAllocated}}

Troupe's own settings live in a top-level `troupe:` section (all optional):

    troupe:
      fifoFallback:                    # serve the queue in arrival order for a
        enabled: true                  #   while when sorting keeps failing
        minQueueLength: 100            #   ... with at least this many queued pods
        failureStreak: 50              #   ... after this many failures in a row
        durationSeconds: 30
      unschedulableFlushSeconds: 300   # podMaxInUnschedulablePodsDuration
      assumedPodTTLSeconds: 0          # 0: assumed pods never expire
      seed: 0                          # random tie-break between equal nodes
      gangGroupCycle: true             # place a gang's pods together (atomic)
      podGroupStatusCoalesceSeconds: 1
      metricsPort: 10259               # /metrics, /healthz, /readyz
      featureGates:                    # as kube-scheduler's --feature-gates
        StorageCapacityScoring: true   #   (troupe.framework.features)

How the plugin sets are built (as kube-scheduler's v1 defaulting, `mergePlugins`
in apis/config/v1/default_plugins.go, then the framework's `NewFramework`,
`expandMultiPointPlugins` and `getScoreWeights` in framework/runtime):

1. The profile's `multiPoint` is merged into the default multiPoint set: the
   defaults minus `multiPoint.disabled` (`"*"`: all of them), where an entry of
   `multiPoint.enabled` naming a default replaces it in place (its weight
   included), and the other entries are appended in their order.
2. At each extension point, the plugins of that set which implement the point
   are added unless the point disables them (`"*"` there: no multiPoint plugin
   at all at that point). Plugins the point enables itself come first when
   they are also in the multiPoint set (they override it), in the point's
   order; then the multiPoint ones; then the point's other plugins.
3. A score weight is the `score.enabled` entry's if there is one, else the
   multiPoint entry's; 0 or unset means 1. Weights at other points are ignored.

Decoding is strict, as kube-scheduler's: unknown fields, repeated YAML keys and
wrong types are errors. Two leniencies: a document without `apiVersion`/`kind`
is read as v1, and kube-scheduler plugins Troupe does not have
(`DefaultPreemption`, `VolumeBinding`...) may be disabled or given a
`pluginConfig` entry, which is then ignored, so that a kube-scheduler
configuration can be used as it is; enabling one is an error.
`leaderElection` (leases only; durations as Go durations) and
`clientConnection` (kubeconfig, qps, burst; JSON content types only) are
honored, command-line flags taking precedence. Top-level fields that have no
effect in Troupe (`parallelism`, profiling, `delayCacheUntilActive`) are
checked and ignored, with a log line.

Any error stops start-up with one `ConfigError` naming the field, e.g.
`profiles[0].plugins.score.enabled[0]: plugin "PrioritySort" does not implement
score`. Plugin arguments are validated by the plugins themselves when the
profile is built (`framework.runtime.Profile`), with the field path of their
`args` (`PluginSpec.args_path`); here an `args` only has to be an object.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import yaml

from troupe.api.types import (
    INT64_MAX,
    INT64_MIN,
    ISOLATED_CPU_RESOURCE,
    MAX_DURATION_SECONDS,
    describe_int,
)
from troupe.framework.features import GATES, Features
from troupe.framework.interface import (
    EXTENSION_POINTS,
    MAX_NODE_SCORE,
    PluginSpec,
    implements,
)

log = logging.getLogger(__name__)

API_VERSION: Final = "kubescheduler.config.k8s.io/v1"
KIND: Final = "KubeSchedulerConfiguration"
DEFAULT_SCHEDULER_NAME: Final = "troupe-scheduler"
MULTI_POINT: Final = "multiPoint"
ALL: Final = "*"

# Extension point names in file order (multiPoint is expanded into these).
POINTS: Final = tuple(EXTENSION_POINTS)

# kube-scheduler's in-tree plugins (framework/plugins/names). Those missing from
# the registry may be disabled or configured, but not enabled.
KUBE_SCHEDULER_PLUGINS: Final = frozenset(
    {
        "PrioritySort",
        "DefaultBinder",
        "DefaultPreemption",
        "DynamicResources",
        "ImageLocality",
        "InterPodAffinity",
        "NodeAffinity",
        "NodeName",
        "NodePorts",
        "NodeResourcesBalancedAllocation",
        "NodeResourcesFit",
        "NodeUnschedulable",
        "NodeVolumeLimits",
        "AzureDiskLimits",
        "CinderLimits",
        "EBSLimits",
        "GCEPDLimits",
        "PodTopologySpread",
        "SchedulingGates",
        "TaintToleration",
        "VolumeBinding",
        "VolumeRestrictions",
        "VolumeZone",
    }
)

# As kube-scheduler's framework.MaxTotalScore: the weighted sum must fit an int64.
MAX_TOTAL_SCORE: Final = 2**63 - 1
# A plugin's weight is an int32 in kube-scheduler's API (its validation sets no
# other bound; 0 means 1, and the total is checked against MAX_TOTAL_SCORE).
MAX_PLUGIN_WEIGHT: Final = 2**31 - 1
# Resources that are not extended resources, so cannot be the isolated-CPU one.
_NATIVE_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage", "pods", "storage"})
_QUALIFIED_PREFIX: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_QUALIFIED_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


class ConfigError(ValueError):
    """A bad configuration: one message naming the file (when there is one),
    the field and the problem, e.g. `percentageOfNodesToScore: must be between
    0 and 100, got 120`."""

    def __init__(self, field_path: str, problem: str, file: str = "") -> None:
        super().__init__(": ".join(p for p in (file, field_path, problem) if p))
        self.field_path = field_path
        self.problem = problem
        self.file = file


# ---- records --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TroupeSettings:
    """The `troupe:` section."""

    fifo_enabled: bool = True
    fifo_min_queue_length: int = 100
    fifo_failure_streak: int = 50
    fifo_duration_seconds: float = 30.0
    unschedulable_flush_seconds: float = 300.0
    # As kube-scheduler's durationToExpireAssumedPod: 0 means never expire.
    assumed_pod_ttl_seconds: float = 0.0
    seed: int = 0
    group_cycle: bool = True
    podgroup_status_coalesce_seconds: float = 1.0
    metrics_port: int = 10259
    # Fraction in (0, 1] of a profile's highest total score (100 x the sum of its
    # Score weights); None = off. See Scheduler._score_to_watermark.
    score_watermark: float | None = None
    features: Features = field(default_factory=Features)


@dataclass(frozen=True, slots=True)
class LeaderElection:
    """kube-scheduler's `leaderElection` (LeaderElectionConfiguration), with
    Troupe's Lease name. Durations in seconds."""

    leader_elect: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_name: str = "troupe-scheduler"
    resource_namespace: str = "kube-system"


@dataclass(frozen=True, slots=True)
class ClientConnection:
    """kube-scheduler's `clientConnection`: the kubeconfig ("" = in-cluster,
    then the default kubeconfig) and the API request budget."""

    kubeconfig: str = ""
    qps: float = 50.0
    burst: int = 100


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    """One profile: per extension point (every key of EXTENSION_POINTS), the
    enabled plugins in the order they run, with score weights and args."""

    scheduler_name: str
    plugins: Mapping[str, tuple[PluginSpec, ...]]
    percentage_of_nodes_to_score: int | None = None  # None: the global value


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    profiles: tuple[ProfileConfig, ...]
    percentage_of_nodes_to_score: int = 0  # 0: adaptive, as kube-scheduler
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    troupe: TroupeSettings = field(default_factory=TroupeSettings)
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    client_connection: ClientConnection = field(default_factory=ClientConnection)

    def profile(self, scheduler_name: str) -> ProfileConfig | None:
        for p in self.profiles:
            if p.scheduler_name == scheduler_name:
                return p
        return None


# ---- typed readers --------------------------------------------------------------------


def _show(v: object) -> str:
    """A value as the user wrote it, for messages."""
    if isinstance(v, Mapping):
        return "an object"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, str) and len(v) > 60:
        v = v[:57] + "..."
    if isinstance(v, int) and not isinstance(v, bool):
        return describe_int(v)
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _suggest(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _object(v: object, path: str, allowed: Sequence[str] | None = None) -> Mapping[str, Any]:
    """An object (None reads as empty); with `allowed`, unknown keys are errors."""
    if v is None:
        return {}
    if not isinstance(v, Mapping):
        raise ConfigError(path, f"must be an object, got {_show(v)}")
    for k in v:
        if not isinstance(k, str):
            raise ConfigError(path, f"field names must be strings, got {_show(k)}")
        if allowed is not None and k not in allowed:
            raise ConfigError(_join(path, k), "unknown field" + _suggest(k, allowed))
    return v


def _list(v: object, path: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ConfigError(path, f"must be a list, got {_show(v)}")
    return v


# kube-scheduler decodes its integers into Go's int64 (or narrower) and its
# durations into time.Duration: a larger number is refused where it is read,
# never left to overflow later.
MAX_SECONDS: Final = MAX_DURATION_SECONDS


def _finite(v: int | float) -> bool:
    """A number that float arithmetic can take: not inf or NaN, and not an
    integer too large for a float (1e308 and more: 10**400 is a valid YAML int)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _int(v: object, path: str, lo: int | None = None, hi: int | None = None) -> int:
    """An integer within [lo, hi], and within Go's int64 whatever the bounds."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(path, f"must be an integer, got {_show(v)}")
    low = INT64_MIN if lo is None else lo
    high = INT64_MAX if hi is None else hi
    if low <= v <= high:
        return v
    if lo is not None and hi is not None:
        raise ConfigError(path, f"must be between {lo} and {hi}, got {describe_int(v)}")
    if v < low and lo is not None:
        raise ConfigError(path, f"must be >= {lo}, got {describe_int(v)}")
    if v > high and hi is not None:
        raise ConfigError(path, f"must be <= {hi}, got {describe_int(v)}")
    raise ConfigError(path, f"must be a 64-bit integer, got {describe_int(v)}")


def _seconds(v: object, path: str, *, positive: bool = False) -> float:
    """A finite, non-negative number of seconds (> 0 with `positive`)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not _finite(v):
        raise ConfigError(path, f"must be a number of seconds, got {_show(v)}")
    if v > MAX_SECONDS:
        raise ConfigError(path, f"must be at most {MAX_SECONDS} seconds, got {_show(v)}")
    if positive and v <= 0:
        raise ConfigError(path, f"must be > 0, got {v:g}")
    if v < 0:
        raise ConfigError(path, f"must be >= 0, got {v:g}")
    return float(v)


def _bool(v: object, path: str) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(path, f"must be true or false, got {_show(v)}")
    return v


def _name(v: object, path: str) -> str:
    if not isinstance(v, str):
        raise ConfigError(path, f"must be a string, got {_show(v)}")
    if not v:
        raise ConfigError(path, "must not be empty")
    return v


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


def _unknown_plugin(name: str, registry: Mapping[str, type]) -> str:
    if name in KUBE_SCHEDULER_PLUGINS:
        return f'plugin "{name}" is a kube-scheduler plugin that Troupe does not have'
    return f'unknown plugin "{name}"' + _suggest(name, registry)


def _plugin_set(obj: object, path: str, registry: Mapping[str, type]) -> _PluginSet:
    m = _object(obj, path, ("enabled", "disabled"))
    enabled: list[_Entry] = []
    for i, e in enumerate(_list(m.get("enabled"), f"{path}.enabled")):
        p = f"{path}.enabled[{i}]"
        e = _object(e, p, ("name", "weight"))
        name = _name(e.get("name"), f"{p}.name")
        if name not in registry:
            raise ConfigError(f"{p}.name", _unknown_plugin(name, registry))
        if any(x.name == name for x in enabled):
            raise ConfigError(f"{p}.name", f'plugin "{name}" is enabled twice')
        weight = (
            0
            if e.get("weight") is None
            else _int(e["weight"], f"{p}.weight", lo=0, hi=MAX_PLUGIN_WEIGHT)
        )
        enabled.append(_Entry(name, weight, p))
    disabled: set[str] = set()
    for i, d in enumerate(_list(m.get("disabled"), f"{path}.disabled")):
        p = f"{path}.disabled[{i}]"
        d = _object(d, p, ("name", "weight"))
        name = _name(d.get("name"), f"{p}.name")
        if name != ALL and name not in registry and name not in KUBE_SCHEDULER_PLUGINS:
            raise ConfigError(f"{p}.name", _unknown_plugin(name, registry))
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


def _plugin_args(
    obj: object, path: str, registry: Mapping[str, type]
) -> dict[str, tuple[Mapping[str, Any], str]]:
    """pluginConfig: plugin name -> (args, args path)."""
    out: dict[str, tuple[Mapping[str, Any], str]] = {}
    for j, pc in enumerate(_list(obj, path)):
        p = f"{path}[{j}]"
        pc = _object(pc, p, ("name", "args"))
        name = _name(pc.get("name"), f"{p}.name")
        if name in out:
            raise ConfigError(f"{p}.name", f'duplicate "{name}"')
        args = dict(_object(pc.get("args"), f"{p}.args"))
        if name not in registry:
            if name not in KUBE_SCHEDULER_PLUGINS:
                raise ConfigError(f"{p}.name", _unknown_plugin(name, registry))
            log.info("configuration: %s: ignored, Troupe has no plugin %s", p, name)
            continue
        # A dumped kube-scheduler configuration types its args; the type is the plugin's.
        api_version, kind = args.pop("apiVersion", None), args.pop("kind", None)
        if api_version is not None and api_version != API_VERSION:
            raise ConfigError(
                f"{p}.args.apiVersion", f"expected {API_VERSION}, got {_show(api_version)}"
            )
        if kind is not None and kind != f"{name}Args":
            raise ConfigError(f"{p}.args.kind", f"expected {name}Args, got {_show(kind)}")
        out[name] = (args, f"{p}.args")
    return out


PROFILE_FIELDS: Final = ("schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig")


def _profile(
    obj: object,
    i: int,
    count: int,
    registry: Mapping[str, type],
    defaults: Sequence[PluginSpec],
) -> ProfileConfig:
    path = f"profiles[{i}]"
    m = _object(obj, path, PROFILE_FIELDS)
    # As kube-scheduler: only a lone profile gets the default name.
    raw_name = m.get("schedulerName")
    if raw_name is None and count > 1:
        raise ConfigError(f"{path}.schedulerName", "required when there are several profiles")
    name = _name(DEFAULT_SCHEDULER_NAME if raw_name is None else raw_name, f"{path}.schedulerName")
    pct = m.get("percentageOfNodesToScore")
    percentage = None if pct is None else _int(pct, f"{path}.percentageOfNodesToScore", 0, 100)

    pp = f"{path}.plugins"
    plugins = _object(m.get("plugins"), pp, (MULTI_POINT, *POINTS))
    multi = _merge_multi_point(
        defaults,
        _plugin_set(plugins.get(MULTI_POINT), f"{pp}.{MULTI_POINT}", registry),
        f"{pp}.{MULTI_POINT}",
        registry,
    )
    rows = {
        point: _expand_point(
            point, _plugin_set(plugins.get(point), f"{pp}.{point}", registry), multi, registry
        )
        for point in POINTS
    }
    args = _plugin_args(m.get("pluginConfig"), f"{path}.pluginConfig", registry)

    def spec(e: _Entry, point: str) -> PluginSpec:
        weight = (e.weight or 1) if point == "score" else 1
        a, a_path = args.get(e.name, ({}, ""))
        return PluginSpec(e.name, weight, a, a_path)

    specs = MappingProxyType(
        {point: tuple(spec(e, point) for e in row) for point, row in rows.items()}
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


def extended_resource_problem(name: object) -> str | None:
    """Why `name` is not an extended resource name (domain/name, outside
    kubernetes.io, not a native resource such as cpu or hugepages-*), or None."""
    if not isinstance(name, str):
        return f"must be a string, got {_show(name)}"
    prefix, slash, rest = name.rpartition("/")
    if name in _NATIVE_RESOURCES or name.startswith(("hugepages-", "requests.")) or not slash:
        return f"must be an extended resource name (domain/name), not {_show(name)}"
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return f"must be outside the kubernetes.io domain, got {_show(name)}"
    if len(prefix) > 253 or not _QUALIFIED_PREFIX.fullmatch(prefix):
        return f"prefix part must be a lowercase RFC 1123 subdomain, got {_show(name)}"
    if len(rest) > 63 or not _QUALIFIED_NAME.fullmatch(rest):
        return f"name part must be a qualified name, got {_show(name)}"
    return None


def _check_isolated(profiles: Sequence[ProfileConfig]) -> None:
    """The cache charges isolated pods by one resource name for all profiles: it
    must be an extended resource, and the same wherever NodeResourcesFit runs."""
    seen: tuple[object, str] | None = None
    for i, p in enumerate(profiles):
        for specs in p.plugins.values():
            for spec in specs:
                if spec.name != "NodeResourcesFit":
                    continue
                path = f"{spec.args_path or f'profiles[{i}].pluginConfig'}.isolatedCPUResource"
                resource = spec.args.get("isolatedCPUResource", ISOLATED_CPU_RESOURCE)
                problem = extended_resource_problem(resource)
                if problem is not None:
                    raise ConfigError(path, problem)
                if seen is None:
                    seen = (resource, path)
                elif resource != seen[0]:
                    raise ConfigError(
                        path, f"must be the same in every profile: {seen[1]} is {_show(seen[0])}"
                    )


def _check_profiles(profiles: Sequence[ProfileConfig]) -> None:
    """Names are unique; all profiles share one queue, so one queueSort (and its args)."""
    _check_isolated(profiles)
    first = profiles[0].plugins["queueSort"][0]
    names: set[str] = set()
    for i, p in enumerate(profiles):
        if p.scheduler_name in names:
            raise ConfigError(f"profiles[{i}].schedulerName", f'duplicate "{p.scheduler_name}"')
        names.add(p.scheduler_name)
        sort = p.plugins["queueSort"][0]
        if sort.name != first.name:
            raise ConfigError(
                f"profiles[{i}].plugins.queueSort",
                f'must be the same for all profiles: "{sort.name}" here, '
                f'"{first.name}" in profiles[0]',
            )
        if sort.args != first.args:
            raise ConfigError(
                sort.args_path or f"profiles[{i}].pluginConfig",
                f'the args of queueSort plugin "{sort.name}" must be the same for all profiles',
            )


# ---- the troupe section -------------------------------------------------------------------

FIFO_FIELDS: Final = ("enabled", "minQueueLength", "failureStreak", "durationSeconds")
TROUPE_FIELDS: Final = (
    "fifoFallback",
    "unschedulableFlushSeconds",
    "assumedPodTTLSeconds",
    "seed",
    "gangGroupCycle",
    "podGroupStatusCoalesceSeconds",
    "metricsPort",
    "scoreWatermark",
    "featureGates",
)


def _fraction(v: object, path: str) -> float:
    """A number in (0, 1]."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not _finite(v):
        raise ConfigError(path, f"must be a number in (0, 1], got {_show(v)}")
    if not 0 < v <= 1:
        raise ConfigError(path, f"must be a number in (0, 1], got {v}")
    return float(v)


def _features(obj: object, path: str) -> Features:
    """`featureGates`: gate name -> true | false; a gate left out keeps its default."""
    m = _object(obj, path, tuple(GATES))
    return Features(**{GATES[k]: _bool(v, _join(path, k)) for k, v in m.items()})


def _troupe(obj: object) -> TroupeSettings:
    path = "troupe"
    m = _object(obj, path, TROUPE_FIELDS)
    fp = f"{path}.fifoFallback"
    f = _object(m.get("fifoFallback"), fp, FIFO_FIELDS)
    d = TroupeSettings()

    def get(section: Mapping[str, Any], where: str, key: str, default: Any, read: Any) -> Any:
        v = section.get(key)
        return default if v is None else read(v, f"{where}.{key}")

    return TroupeSettings(
        fifo_enabled=get(f, fp, "enabled", d.fifo_enabled, _bool),
        fifo_min_queue_length=get(
            f, fp, "minQueueLength", d.fifo_min_queue_length, lambda v, p: _int(v, p, lo=0)
        ),
        fifo_failure_streak=get(
            f, fp, "failureStreak", d.fifo_failure_streak, lambda v, p: _int(v, p, lo=1)
        ),
        fifo_duration_seconds=get(
            f,
            fp,
            "durationSeconds",
            d.fifo_duration_seconds,
            lambda v, p: _seconds(v, p, positive=True),
        ),
        unschedulable_flush_seconds=get(
            m,
            path,
            "unschedulableFlushSeconds",
            d.unschedulable_flush_seconds,
            lambda v, p: _seconds(v, p, positive=True),
        ),
        assumed_pod_ttl_seconds=get(
            m, path, "assumedPodTTLSeconds", d.assumed_pod_ttl_seconds, _seconds
        ),
        seed=get(m, path, "seed", d.seed, _int),
        group_cycle=get(m, path, "gangGroupCycle", d.group_cycle, _bool),
        podgroup_status_coalesce_seconds=get(
            m, path, "podGroupStatusCoalesceSeconds", d.podgroup_status_coalesce_seconds, _seconds
        ),
        metrics_port=get(m, path, "metricsPort", d.metrics_port, lambda v, p: _int(v, p, 1, 65535)),
        score_watermark=get(m, path, "scoreWatermark", d.score_watermark, _fraction),
        features=_features(m.get("featureGates"), f"{path}.featureGates"),
    )


# ---- the document -------------------------------------------------------------------------

LEADER_ELECTION_FIELDS: Final = (
    "leaderElect",
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
    "resourceLock",
    "resourceName",
    "resourceNamespace",
)
CLIENT_CONNECTION_FIELDS: Final = (
    "kubeconfig",
    "acceptContentTypes",
    "contentType",
    "qps",
    "burst",
)
# kube-scheduler fields that have no effect in Troupe: checked, then ignored with a log line.
IGNORED_FIELDS: Final = (
    "parallelism",
    "enableProfiling",
    "enableContentionProfiling",
    "delayCacheUntilActive",
)
TOP_LEVEL_FIELDS: Final = (
    "apiVersion",
    "kind",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "profiles",
    "extenders",
    "troupe",
    "leaderElection",
    "clientConnection",
    *IGNORED_FIELDS,
)
JSON_CONTENT_TYPES: Final = ("application/json", "*/*")
_DURATION_UNITS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART: Final = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")


def _duration(v: object, path: str) -> float:
    """A Go duration as metav1.Duration reads it ("15s", "1m30s", "500ms"), in seconds."""
    if not isinstance(v, str) or not v or len(v) > 64:
        raise ConfigError(path, f'must be a duration such as "15s", got {_show(v)}')
    text, total, pos = v, 0.0, 0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None:
            raise ConfigError(path, f'must be a duration such as "15s", got {_show(v)}')
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if not math.isfinite(total) or total <= 0:
        raise ConfigError(path, f"must be a positive duration, got {_show(v)}")
    return total


def _leader_election(v: object) -> LeaderElection:
    m = _object(v, "leaderElection", LEADER_ELECTION_FIELDS)
    d = LeaderElection()
    path = "leaderElection."
    lock = m.get("resourceLock")
    if lock is not None and lock != "leases":
        raise ConfigError(f"{path}resourceLock", f'only "leases" is supported, got {_show(lock)}')
    out = LeaderElection(
        leader_elect=d.leader_elect
        if m.get("leaderElect") is None
        else _bool(m["leaderElect"], f"{path}leaderElect"),
        lease_duration=d.lease_duration
        if m.get("leaseDuration") is None
        else _duration(m["leaseDuration"], f"{path}leaseDuration"),
        renew_deadline=d.renew_deadline
        if m.get("renewDeadline") is None
        else _duration(m["renewDeadline"], f"{path}renewDeadline"),
        retry_period=d.retry_period
        if m.get("retryPeriod") is None
        else _duration(m["retryPeriod"], f"{path}retryPeriod"),
        resource_name=d.resource_name
        if m.get("resourceName") is None
        else _name(m["resourceName"], f"{path}resourceName"),
        resource_namespace=d.resource_namespace
        if m.get("resourceNamespace") is None
        else _name(m["resourceNamespace"], f"{path}resourceNamespace"),
    )
    # As client-go's leaderelection.NewLeaderElector.
    if out.leader_elect and not out.lease_duration > out.renew_deadline:
        raise ConfigError(f"{path}leaseDuration", "must be greater than renewDeadline")
    if out.leader_elect and not out.renew_deadline > out.retry_period * 1.2:
        raise ConfigError(f"{path}renewDeadline", "must be greater than retryPeriod*1.2")
    return out


def _client_connection(v: object) -> ClientConnection:
    m = _object(v, "clientConnection", CLIENT_CONNECTION_FIELDS)
    path = "clientConnection."
    for key in ("contentType", "acceptContentTypes"):
        ct = m.get(key)
        if ct is None or ct == "":
            continue
        types = [t.strip() for t in ct.split(",")] if isinstance(ct, str) else [ct]
        if any(t not in JSON_CONTENT_TYPES for t in types):
            raise ConfigError(
                f"{path}{key}", f"Troupe speaks JSON only (application/json), got {_show(ct)}"
            )
    kubeconfig = m.get("kubeconfig")
    if kubeconfig is not None and not isinstance(kubeconfig, str):
        raise ConfigError(f"{path}kubeconfig", f"must be a file path, got {_show(kubeconfig)}")
    qps = m.get("qps")
    if qps is not None and (
        isinstance(qps, bool) or not isinstance(qps, int | float) or not _finite(qps) or qps <= 0
    ):
        raise ConfigError(f"{path}qps", f"must be a positive number, got {_show(qps)}")
    burst = m.get("burst")
    return ClientConnection(
        kubeconfig=kubeconfig or "",
        qps=50.0 if qps is None else float(qps),
        burst=100 if burst is None else _int(burst, f"{path}burst", lo=1),
    )


def _check_ignored(m: Mapping[str, Any]) -> None:
    if m.get("parallelism") is not None:
        _int(m["parallelism"], "parallelism", lo=1)
    for key in ("enableProfiling", "enableContentionProfiling", "delayCacheUntilActive"):
        if m.get(key) is not None:
            _bool(m[key], key)
    present = [k for k in IGNORED_FIELDS if m.get(k) is not None]
    if present:
        log.warning(
            "configuration: %s ignored: no effect in Troupe",
            ", ".join(present),
        )


def _default_multi_point() -> Sequence[PluginSpec]:
    # Imported here so that this module stays below the plugins in the layers.
    from troupe.plugins.registry import DEFAULT_MULTI_POINT

    return DEFAULT_MULTI_POINT


def parse_config(
    obj: object,
    registry: Mapping[str, type],
    multi_point: Sequence[PluginSpec] | None = None,
) -> SchedulerConfig:
    """Default and validate a decoded KubeSchedulerConfiguration (None: empty).

    `registry` maps plugin names to plugin classes; `multi_point` is the default
    multiPoint set (the in-tree DEFAULT_MULTI_POINT when None)."""
    if obj is None:
        obj = {}
    if not isinstance(obj, Mapping):
        raise ConfigError("", f"must be a {KIND} object, got {_show(obj)}")
    m = _object(obj, "", TOP_LEVEL_FIELDS)
    if m.get("apiVersion", API_VERSION) != API_VERSION:
        raise ConfigError("apiVersion", f"expected {API_VERSION}, got {_show(m['apiVersion'])}")
    if m.get("kind", KIND) != KIND:
        raise ConfigError("kind", f"expected {KIND}, got {_show(m['kind'])}")
    if _list(m.get("extenders"), "extenders"):
        raise ConfigError("extenders", "not supported by Troupe")
    _check_ignored(m)

    pct = m.get("percentageOfNodesToScore")
    percentage = 0 if pct is None else _int(pct, "percentageOfNodesToScore", 0, 100)
    init_b = m.get("podInitialBackoffSeconds")
    initial = 1 if init_b is None else _int(init_b, "podInitialBackoffSeconds", lo=1)
    max_b = m.get("podMaxBackoffSeconds")
    maximum = 10 if max_b is None else _int(max_b, "podMaxBackoffSeconds", lo=1)
    if maximum < initial:
        raise ConfigError(
            "podMaxBackoffSeconds",
            f"must be >= podInitialBackoffSeconds ({initial}), got {maximum}",
        )

    defaults = _default_multi_point() if multi_point is None else multi_point
    raw = _list(m.get("profiles"), "profiles") or [{}]
    profiles = tuple(_profile(p, i, len(raw), registry, defaults) for i, p in enumerate(raw))
    _check_profiles(profiles)
    return SchedulerConfig(
        profiles=profiles,
        percentage_of_nodes_to_score=percentage,
        pod_initial_backoff_seconds=float(initial),
        pod_max_backoff_seconds=float(maximum),
        troupe=_troupe(m.get("troupe")),
        leader_election=_leader_election(m.get("leaderElection")),
        client_connection=_client_connection(m.get("clientConnection")),
    )


def default_config(
    registry: Mapping[str, type], multi_point: Sequence[PluginSpec] | None = None
) -> SchedulerConfig:
    """One profile, troupe-scheduler, with the default multiPoint set expanded."""
    return parse_config({}, registry, multi_point)


# ---- the file -----------------------------------------------------------------------------


# Bounds on what one YAML file may make us build: nesting (the composer recurses)
# and nodes reached through aliases (an "alias bomb" is a few lines that expand
# to billions of nodes for whoever walks the result).
MAX_YAML_DEPTH: Final = 200
# libyaml's own message when nesting passes its limit (0.2.6 and later).
LIBYAML_NESTING: Final = "exceeded maximum nesting depth"
MAX_YAML_ALIAS_NODES: Final = 100_000


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader with bounded nesting and bounded alias expansion: past either
    bound it raises a `yaml.composer.ComposerError` naming the line."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0  # nodes composed, counting each alias as its anchor's size
        self._alias_nodes = 0
        self._anchor_size: dict[str, int] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        mark: Any = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            size = self._anchor_size.get(str(event.anchor), 1)
            self._alias_nodes += size
            self._nodes += size
            if self._alias_nodes > MAX_YAML_ALIAS_NODES:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"aliases expand to more than {MAX_YAML_ALIAS_NODES} nodes",
                    mark,
                )
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested more than {MAX_YAML_DEPTH} levels deep", mark
            )
        start = self._nodes
        self._nodes += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._anchor_size[str(anchor)] = self._nodes - start
        return node


# The fast path: libyaml's parser (when PyYAML was built with it) emits events,
# and one loop builds the Python objects from them. Composing with libyaml is not
# safe on hostile input (its composer recurses in C: a few thousand "[" crash the
# process) and costs more than the parse; building from events bounds nesting and
# alias expansion in the same loop, at the same bounds as BoundedLoader, with the
# pure-Python parser too when libyaml is missing.
FAST_PARSER: Final[type] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SCALARS: Final[dict[Any, Any]] = yaml.constructor.SafeConstructor.yaml_constructors
_MERGE_TAG: Final = "tag:yaml.org,2002:merge"
_VALUE_TAG: Final = "tag:yaml.org,2002:value"
_PLAIN_COLLECTION_TAGS: Final = (
    None,
    "!",
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG,
)
_NO_KEY: Final = object()


class _Unusual(Exception):
    """Input outside what the event loop builds itself (merge keys, a collection as
    a key, a tagged collection): the bounded loader takes the whole file."""


def _bounds_error(problem: str, mark: Any) -> yaml.composer.ComposerError:
    return yaml.composer.ComposerError(None, None, problem, mark)


_IMPLICIT: Final = yaml.resolver.Resolver.yaml_implicit_resolvers
_STR_TAG: Final = "tag:yaml.org,2002:str"
_NULL_TAG: Final = "tag:yaml.org,2002:null"
_BOOL_TAG: Final = "tag:yaml.org,2002:bool"


def resolve_plain(text: str) -> tuple[Any, str | None]:
    """A plain scalar as SafeLoader resolves it (PyYAML's own implicit resolvers):
    (its value, None) for a string, null or a boolean; (None, its tag) for the
    caller to construct otherwise."""
    tag = _STR_TAG
    for t, regexp in _IMPLICIT.get(text[:1] if text else "", ()):
        if regexp.match(text):
            tag = t
            break
    if tag == _STR_TAG:
        return text, None
    if tag == _NULL_TAG:
        return None, None
    if tag == _BOOL_TAG:
        return text.lower() in ("yes", "true", "on"), None
    return None, tag


def _scalar(ctor: yaml.constructor.SafeConstructor, ev: Any) -> Any:
    """The value SafeLoader would construct for one scalar event."""
    value: str = ev.value
    tag = ev.tag
    if tag is None or tag == "!":
        if not ev.implicit[0]:
            return value  # quoted: a string
        plain, tag = resolve_plain(value)
        if tag is None:
            return plain
        if tag in (_MERGE_TAG, _VALUE_TAG):
            raise _Unusual  # `<<` merges, `=` is a string as a key only: SafeLoader's
    node = yaml.ScalarNode(tag, value, ev.start_mark, ev.end_mark, ev.style)
    construct = _SCALARS.get(tag, _SCALARS[None])  # None: "could not determine a constructor"
    try:
        return construct(ctor, node)
    except yaml.YAMLError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as e:
        # PyYAML's constructors assume text their tag resolves to: an explicit tag on
        # other text (`!!int` on nothing, `!!float abc`) fails in Python, not in YAML.
        shown = value if len(value) <= 40 else value[:37] + "..."
        why = str(e) if isinstance(e, ValueError | OverflowError) and str(e) else type(e).__name__
        raise yaml.constructor.ConstructorError(
            None, None, f"cannot read {shown!r} as {tag} ({why})", ev.start_mark
        ) from None


def load_yaml_documents(text: str) -> list[Any]:
    """Every document of a YAML stream, as SafeLoader builds them, in bounded time
    and memory: nesting past MAX_YAML_DEPTH and aliases expanding past
    MAX_YAML_ALIAS_NODES raise a `yaml.composer.ComposerError` naming the line,
    as BoundedLoader does. Uses libyaml's parser when PyYAML has it."""
    try:
        try:
            return _build(text)
        except _Unusual:
            pass
        # Rare input (merge keys...): check the bounds on events, then let the
        # bounded pure-Python loader build it.
        for _ in yaml.parse(text, Loader=FAST_PARSER):
            pass
        return list(yaml.load_all(text, Loader=BoundedLoader))
    except yaml.scanner.ScannerError as e:
        # libyaml 0.2.6 and later refuse nesting past their own limit (1000 levels)
        # while scanning ahead of the events our bound counts; past theirs is past
        # ours, so the user reads our message whatever libyaml the machine has.
        if e.problem != LIBYAML_NESTING:
            raise
        raise _bounds_error(
            f"nested more than {MAX_YAML_DEPTH} levels deep", e.problem_mark
        ) from None


def _build(text: str) -> list[Any]:
    """load_yaml_documents without the fallback. One loop with its state in
    locals, on purpose: it runs once per libyaml event, millions of times for a
    large cluster (about three times faster than libyaml's own composer and
    SafeConstructor, and bounded where libyaml's composer recurses in C)."""
    ctor = yaml.constructor.SafeConstructor()
    docs: list[Any] = []
    # The open collection is (cur, is_list, key: the pending key of a mapping);
    # `stack` keeps the enclosing ones with the node count at their start and anchor.
    cur: Any = docs
    is_list = True
    key: Any = _NO_KEY
    stack: list[tuple[Any, bool, Any, int, str | None]] = []
    depth = 0
    anchors: dict[str, Any] = {}
    # Plain scalars resolve and construct to immutable values (str, int, bool,
    # None, float, datetime...): each text once, then a lookup.
    plain: dict[str, Any] = {}
    anchor_size: dict[str, int] = {}
    nodes = 0  # nodes composed, each alias counting as its anchor's size
    alias_nodes = 0
    scalar_event, alias_event = yaml.ScalarEvent, yaml.AliasEvent
    mapping_start, sequence_start = yaml.MappingStartEvent, yaml.SequenceStartEvent
    mapping_end, sequence_end = yaml.MappingEndEvent, yaml.SequenceEndEvent
    events: Iterable[Any] = yaml.parse(text, Loader=FAST_PARSER)
    for ev in events:
        cls = ev.__class__
        if cls is scalar_event:
            if depth >= MAX_YAML_DEPTH:
                raise _bounds_error(f"nested more than {MAX_YAML_DEPTH} levels deep", ev.start_mark)
            nodes += 1
            if ev.tag is None and ev.implicit[0]:  # plain: keys, most values
                value = plain.get(ev.value, _NO_KEY)
                if value is _NO_KEY:
                    value = plain[ev.value] = _scalar(ctor, ev)
            else:
                value = _scalar(ctor, ev)
            if ev.anchor is not None:
                if ev.anchor in anchors:
                    raise _Unusual  # SafeLoader names both occurrences
                anchors[ev.anchor] = value
                anchor_size[ev.anchor] = 1
        elif cls is mapping_start or cls is sequence_start:
            if depth >= MAX_YAML_DEPTH:
                raise _bounds_error(f"nested more than {MAX_YAML_DEPTH} levels deep", ev.start_mark)
            if ev.tag not in _PLAIN_COLLECTION_TAGS:
                raise _Unusual
            if not is_list and key is _NO_KEY:
                raise _Unusual  # a collection as a key: SafeLoader refuses it in its words
            value = {} if cls is mapping_start else []
            if ev.anchor is not None:
                if ev.anchor in anchors:
                    raise _Unusual
                anchors[ev.anchor] = value
            stack.append((cur, is_list, key, nodes, ev.anchor))
            nodes += 1
            depth += 1
            cur, is_list, key = value, cls is sequence_start, _NO_KEY
            continue
        elif cls is mapping_end or cls is sequence_end:
            value = cur
            cur, is_list, key, start, anchor = stack.pop()
            depth -= 1
            if anchor is not None:
                anchor_size[anchor] = nodes - start
        elif cls is alias_event:
            if ev.anchor not in anchors:
                raise yaml.composer.ComposerError(
                    None, None, f"found undefined alias {ev.anchor!r}", ev.start_mark
                )
            size = anchor_size.get(ev.anchor, 1)
            alias_nodes += size
            nodes += size
            if alias_nodes > MAX_YAML_ALIAS_NODES:
                raise _bounds_error(
                    f"aliases expand to more than {MAX_YAML_ALIAS_NODES} nodes", ev.start_mark
                )
            value = anchors[ev.anchor]
            if not is_list and key is _NO_KEY and value.__class__ in (dict, list):
                raise _Unusual
        elif cls is yaml.DocumentStartEvent:
            anchors = {}
            continue
        else:
            continue
        if is_list:
            cur.append(value)
        elif key is _NO_KEY:
            key = value
        else:
            cur[key] = value
            key = _NO_KEY
    return docs


class _StrictLoader(BoundedLoader):
    """BoundedLoader that refuses a key repeated in one mapping (kube decodes strictly)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
            continue
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"repeated key {_show(key)}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _yaml_problem(e: yaml.YAMLError) -> str:
    if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
        mark, where = e.problem_mark, e.context_mark
        context = (
            f" ({e.context} at line {where.line + 1}, column {where.column + 1})"
            if e.context and where is not None
            else ""
        )
        return (
            f"not valid YAML at line {mark.line + 1}, column {mark.column + 1}: "
            f"{e.problem}{context}"
        )
    return f"not valid YAML: {e}"


def load_config(
    path: str | None,
    registry: Mapping[str, type],
    multi_point: Sequence[PluginSpec] | None = None,
) -> SchedulerConfig:
    """Read, default and validate a configuration file (None: the defaults).
    Every error is a ConfigError whose message starts with the file name."""
    if path is None:
        return default_config(registry, multi_point)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError("", f"cannot read: {e.strerror or e}", file=path) from e
    except UnicodeDecodeError as e:
        raise ConfigError("", "cannot read: not UTF-8 text", file=path) from e
    try:
        obj = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as e:
        raise ConfigError("", _yaml_problem(e), file=path) from e
    except (ValueError, RecursionError) as e:  # e.g. an integer of 5000 digits
        raise ConfigError("", f"not valid YAML: {e}", file=path) from e
    try:
        return parse_config(obj, registry, multi_point)
    except ConfigError as e:
        raise ConfigError(e.field_path, e.problem, file=path) from e
