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
      metricsPort: 10259               # HTTPS: /metrics, /healthz, /readyz
      explain:                         # /debug/explain/<ns>/<name> on metricsPort, and
        enabled: false                 #   troupe.dev/explain: "true" pods annotated
        maxPods: 10000                 #   decisions kept (the oldest go first)
      featureGates:                    # as kube-scheduler's --feature-gates
        StorageCapacityScoring: true   #   (troupe.framework.features)
        CompositePodGroup: false

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
configuration can be used as it is; enabling one is an error. Kubernetes
1.37's workload-scheduling plugins and plugin sets (GangScheduling,
TopologyPlacementGenerator, PodGroupPodsCount; placementGenerate,
placementScore, podGroupPostFilter) are read onto Coscheduling by
`troupe.config.workload`.
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

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

import yaml

from troupe.api.duration import parse_duration
from troupe.api.readers import (
    as_map,
    get_bool,
    get_int,
    get_list,
    get_map,
    get_name,
    get_objs,
    get_seconds,
    get_str,
    invalid,
    number_value,
    show,
    unsupported,
)
from troupe.api.types import ParseError
from troupe.api.yamlio import BoundedLoader
from troupe.config.defaults import PROFILE_FIELDS, profile_config
from troupe.config.types import (
    API_VERSION,
    KIND,
    ClientConnection,
    ConfigError,
    LeaderElection,
    SchedulerConfig,
    TroupeSettings,
)
from troupe.config.validation import check_profiles
from troupe.framework.features import GATES, Features
from troupe.framework.interface import (
    PluginSpec,
)

log = logging.getLogger(__name__)

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
    "explain",
)
EXPLAIN_FIELDS: Final = ("enabled", "maxPods")


def _int(
    m: Mapping[str, Any],
    key: str,
    prefix: str,
    default: int,
    lo: int | None = None,
    hi: int | None = None,
) -> int:
    """An integer as kube-scheduler decodes one (strictly), `default` when absent."""
    v = get_int(m, key, prefix, lo, hi, strict=True)
    return default if v is None else v


def _seconds(
    m: Mapping[str, Any], key: str, prefix: str, default: float, *, positive: bool = False
) -> float:
    v = get_seconds(m, key, prefix, positive=positive)
    return default if v is None else v


def _fraction(m: Mapping[str, Any], key: str, prefix: str) -> float | None:
    """A number in (0, 1], None when absent."""
    v = m.get(key)
    if v is None:
        return None
    detail = "must be a number in (0, 1]"
    x = number_value(v, prefix + key, detail)
    if not 0 < x <= 1:
        raise invalid(prefix + key, v, detail)
    return x


def _features(m: Mapping[str, Any], prefix: str) -> Features:
    """`featureGates`: gate name -> true | false; a gate left out keeps its default."""
    gates = get_map(m, "featureGates", prefix, tuple(GATES))
    p = f"{prefix}featureGates."
    return Features(**{GATES[k]: get_bool(gates, k, p) for k, v in gates.items() if v is not None})


def _troupe(doc: Mapping[str, Any]) -> TroupeSettings:
    m = get_map(doc, "troupe", "", TROUPE_FIELDS)
    p = "troupe."
    f = get_map(m, "fifoFallback", p, FIFO_FIELDS)
    fp = f"{p}fifoFallback."
    x = get_map(m, "explain", p, EXPLAIN_FIELDS)
    xp = f"{p}explain."
    d = TroupeSettings()
    return TroupeSettings(
        fifo_enabled=get_bool(f, "enabled", fp, d.fifo_enabled),
        fifo_min_queue_length=_int(f, "minQueueLength", fp, d.fifo_min_queue_length, lo=0),
        fifo_failure_streak=_int(f, "failureStreak", fp, d.fifo_failure_streak, lo=1),
        fifo_duration_seconds=_seconds(
            f, "durationSeconds", fp, d.fifo_duration_seconds, positive=True
        ),
        unschedulable_flush_seconds=_seconds(
            m, "unschedulableFlushSeconds", p, d.unschedulable_flush_seconds, positive=True
        ),
        assumed_pod_ttl_seconds=_seconds(m, "assumedPodTTLSeconds", p, d.assumed_pod_ttl_seconds),
        seed=_int(m, "seed", p, d.seed),
        group_cycle=get_bool(m, "gangGroupCycle", p, d.group_cycle),
        podgroup_status_coalesce_seconds=_seconds(
            m, "podGroupStatusCoalesceSeconds", p, d.podgroup_status_coalesce_seconds
        ),
        metrics_port=_int(m, "metricsPort", p, d.metrics_port, 1, 65535),
        score_watermark=_fraction(m, "scoreWatermark", p),
        features=_features(m, p),
        explain_enabled=get_bool(x, "enabled", xp, d.explain_enabled),
        explain_max_pods=_int(x, "maxPods", xp, d.explain_max_pods, lo=1),
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


def _duration(m: Mapping[str, Any], key: str, prefix: str, default: float) -> float:
    """A Go duration as metav1.Duration reads it ("15s", "1m30s", "500ms"), in seconds."""
    v = m.get(key)
    if v is None:
        return default
    total = parse_duration(v)
    if total is None:
        raise invalid(prefix + key, v, 'must be a duration such as "15s"')
    if total <= 0:
        raise invalid(prefix + key, v, "must be a positive duration")
    return total


def _leader_election(doc: Mapping[str, Any]) -> LeaderElection:
    m = get_map(doc, "leaderElection", "", LEADER_ELECTION_FIELDS)
    d = LeaderElection()
    path = "leaderElection."
    lock = m.get("resourceLock")
    if lock is not None and lock != "leases":
        raise unsupported(f"{path}resourceLock", lock, ("leases",))
    out = LeaderElection(
        leader_elect=get_bool(m, "leaderElect", path, d.leader_elect),
        lease_duration=_duration(m, "leaseDuration", path, d.lease_duration),
        renew_deadline=_duration(m, "renewDeadline", path, d.renew_deadline),
        retry_period=_duration(m, "retryPeriod", path, d.retry_period),
        resource_name=d.resource_name
        if m.get("resourceName") is None
        else get_name(m, "resourceName", path),
        resource_namespace=d.resource_namespace
        if m.get("resourceNamespace") is None
        else get_name(m, "resourceNamespace", path),
    )
    # As client-go's leaderelection.NewLeaderElector.
    if out.leader_elect and not out.lease_duration > out.renew_deadline:
        raise ConfigError(f"{path}leaseDuration", "must be greater than renewDeadline")
    if out.leader_elect and not out.renew_deadline > out.retry_period * 1.2:
        raise ConfigError(f"{path}renewDeadline", "must be greater than retryPeriod*1.2")
    return out


def _client_connection(doc: Mapping[str, Any]) -> ClientConnection:
    m = get_map(doc, "clientConnection", "", CLIENT_CONNECTION_FIELDS)
    path = "clientConnection."
    for key in ("contentType", "acceptContentTypes"):
        ct = m.get(key)
        if ct is None or ct == "":
            continue
        types = [t.strip() for t in ct.split(",")] if isinstance(ct, str) else [ct]
        if any(t not in JSON_CONTENT_TYPES for t in types):
            raise unsupported(f"{path}{key}", ct, JSON_CONTENT_TYPES)
    qps = m.get("qps")
    if qps is not None and number_value(qps, f"{path}qps", "must be a positive number") <= 0:
        raise invalid(f"{path}qps", qps, "must be a positive number")
    return ClientConnection(
        kubeconfig=get_str(m, "kubeconfig", path),
        qps=50.0 if qps is None else float(qps),
        burst=_int(m, "burst", path, 100, lo=1),
    )


def _check_ignored(m: Mapping[str, Any]) -> None:
    get_int(m, "parallelism", "", lo=1, strict=True)
    for key in ("enableProfiling", "enableContentionProfiling", "delayCacheUntilActive"):
        get_bool(m, key, "")
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
    multiPoint set (the in-tree DEFAULT_MULTI_POINT when None). The readers'
    `ParseError` becomes a `ConfigError` here, at the edge."""
    try:
        return _decode({} if obj is None else obj, registry, multi_point)
    except ParseError as e:
        raise ConfigError(e.field_path, e.problem) from e


def _decode(
    obj: object, registry: Mapping[str, type], multi_point: Sequence[PluginSpec] | None
) -> SchedulerConfig:
    if not isinstance(obj, Mapping):
        raise invalid("", obj, f"must be a {KIND} object")
    m = as_map(obj, "", TOP_LEVEL_FIELDS)
    if m.get("apiVersion", API_VERSION) != API_VERSION:
        raise unsupported("apiVersion", m["apiVersion"], (API_VERSION,))
    if m.get("kind", KIND) != KIND:
        raise unsupported("kind", m["kind"], (KIND,))
    if get_list(m, "extenders", ""):
        raise ConfigError("extenders", "not supported by Troupe")
    _check_ignored(m)

    percentage = _int(m, "percentageOfNodesToScore", "", 0, 0, 100)
    initial = _int(m, "podInitialBackoffSeconds", "", 1, lo=1)
    maximum = _int(m, "podMaxBackoffSeconds", "", 10, lo=1)
    if maximum < initial:
        raise invalid(
            "podMaxBackoffSeconds",
            maximum,
            f"must be greater than or equal to podInitialBackoffSeconds ({initial})",
        )

    defaults = _default_multi_point() if multi_point is None else multi_point
    raw = get_objs(m, "profiles", "", PROFILE_FIELDS) or [("profiles[0].", {})]
    profiles = tuple(profile_config(p, pm, len(raw), registry, defaults) for p, pm in raw)
    isolated = check_profiles(profiles)
    return SchedulerConfig(
        profiles=profiles,
        isolated=isolated,
        percentage_of_nodes_to_score=percentage,
        pod_initial_backoff_seconds=float(initial),
        pod_max_backoff_seconds=float(maximum),
        troupe=_troupe(m),
        leader_election=_leader_election(m),
        client_connection=_client_connection(m),
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
                None, None, f"repeated key {show(key)}", key_node.start_mark
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
