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

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

import yaml

from troupe.api.duration import parse_duration
from troupe.api.yamlio import BoundedLoader
from troupe.config.defaults import profile_config
from troupe.config.readers import (
    finite,
    join,
    read_bool,
    read_int,
    read_list,
    read_name,
    read_object,
    read_seconds,
    show,
)
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


def _fraction(v: object, path: str) -> float:
    """A number in (0, 1]."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not finite(v):
        raise ConfigError(path, f"must be a number in (0, 1], got {show(v)}")
    if not 0 < v <= 1:
        raise ConfigError(path, f"must be a number in (0, 1], got {v}")
    return float(v)


def _features(obj: object, path: str) -> Features:
    """`featureGates`: gate name -> true | false; a gate left out keeps its default."""
    m = read_object(obj, path, tuple(GATES))
    return Features(**{GATES[k]: read_bool(v, join(path, k)) for k, v in m.items()})


def _troupe(obj: object) -> TroupeSettings:
    path = "troupe"
    m = read_object(obj, path, TROUPE_FIELDS)
    fp = f"{path}.fifoFallback"
    f = read_object(m.get("fifoFallback"), fp, FIFO_FIELDS)
    xp = f"{path}.explain"
    x = read_object(m.get("explain"), xp, EXPLAIN_FIELDS)
    d = TroupeSettings()

    def get(section: Mapping[str, Any], where: str, key: str, default: Any, read: Any) -> Any:
        v = section.get(key)
        return default if v is None else read(v, f"{where}.{key}")

    return TroupeSettings(
        fifo_enabled=get(f, fp, "enabled", d.fifo_enabled, read_bool),
        fifo_min_queue_length=get(
            f, fp, "minQueueLength", d.fifo_min_queue_length, lambda v, p: read_int(v, p, lo=0)
        ),
        fifo_failure_streak=get(
            f, fp, "failureStreak", d.fifo_failure_streak, lambda v, p: read_int(v, p, lo=1)
        ),
        fifo_duration_seconds=get(
            f,
            fp,
            "durationSeconds",
            d.fifo_duration_seconds,
            lambda v, p: read_seconds(v, p, positive=True),
        ),
        unschedulable_flush_seconds=get(
            m,
            path,
            "unschedulableFlushSeconds",
            d.unschedulable_flush_seconds,
            lambda v, p: read_seconds(v, p, positive=True),
        ),
        assumed_pod_ttl_seconds=get(
            m, path, "assumedPodTTLSeconds", d.assumed_pod_ttl_seconds, read_seconds
        ),
        seed=get(m, path, "seed", d.seed, read_int),
        group_cycle=get(m, path, "gangGroupCycle", d.group_cycle, read_bool),
        podgroup_status_coalesce_seconds=get(
            m,
            path,
            "podGroupStatusCoalesceSeconds",
            d.podgroup_status_coalesce_seconds,
            read_seconds,
        ),
        metrics_port=get(
            m, path, "metricsPort", d.metrics_port, lambda v, p: read_int(v, p, 1, 65535)
        ),
        score_watermark=get(m, path, "scoreWatermark", d.score_watermark, _fraction),
        features=_features(m.get("featureGates"), f"{path}.featureGates"),
        explain_enabled=get(x, xp, "enabled", d.explain_enabled, read_bool),
        explain_max_pods=get(
            x, xp, "maxPods", d.explain_max_pods, lambda v, p: read_int(v, p, lo=1)
        ),
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


def _duration(v: object, path: str) -> float:
    """A Go duration as metav1.Duration reads it ("15s", "1m30s", "500ms"), in seconds."""
    total = parse_duration(v)
    if total is None:
        raise ConfigError(path, f'must be a duration such as "15s", got {show(v)}')
    if total <= 0:
        raise ConfigError(path, f"must be a positive duration, got {show(v)}")
    return total


def _leader_election(v: object) -> LeaderElection:
    m = read_object(v, "leaderElection", LEADER_ELECTION_FIELDS)
    d = LeaderElection()
    path = "leaderElection."
    lock = m.get("resourceLock")
    if lock is not None and lock != "leases":
        raise ConfigError(f"{path}resourceLock", f'only "leases" is supported, got {show(lock)}')
    out = LeaderElection(
        leader_elect=d.leader_elect
        if m.get("leaderElect") is None
        else read_bool(m["leaderElect"], f"{path}leaderElect"),
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
        else read_name(m["resourceName"], f"{path}resourceName"),
        resource_namespace=d.resource_namespace
        if m.get("resourceNamespace") is None
        else read_name(m["resourceNamespace"], f"{path}resourceNamespace"),
    )
    # As client-go's leaderelection.NewLeaderElector.
    if out.leader_elect and not out.lease_duration > out.renew_deadline:
        raise ConfigError(f"{path}leaseDuration", "must be greater than renewDeadline")
    if out.leader_elect and not out.renew_deadline > out.retry_period * 1.2:
        raise ConfigError(f"{path}renewDeadline", "must be greater than retryPeriod*1.2")
    return out


def _client_connection(v: object) -> ClientConnection:
    m = read_object(v, "clientConnection", CLIENT_CONNECTION_FIELDS)
    path = "clientConnection."
    for key in ("contentType", "acceptContentTypes"):
        ct = m.get(key)
        if ct is None or ct == "":
            continue
        types = [t.strip() for t in ct.split(",")] if isinstance(ct, str) else [ct]
        if any(t not in JSON_CONTENT_TYPES for t in types):
            raise ConfigError(
                f"{path}{key}", f"Troupe speaks JSON only (application/json), got {show(ct)}"
            )
    kubeconfig = m.get("kubeconfig")
    if kubeconfig is not None and not isinstance(kubeconfig, str):
        raise ConfigError(f"{path}kubeconfig", f"must be a file path, got {show(kubeconfig)}")
    qps = m.get("qps")
    if qps is not None and (
        isinstance(qps, bool) or not isinstance(qps, int | float) or not finite(qps) or qps <= 0
    ):
        raise ConfigError(f"{path}qps", f"must be a positive number, got {show(qps)}")
    burst = m.get("burst")
    return ClientConnection(
        kubeconfig=kubeconfig or "",
        qps=50.0 if qps is None else float(qps),
        burst=100 if burst is None else read_int(burst, f"{path}burst", lo=1),
    )


def _check_ignored(m: Mapping[str, Any]) -> None:
    if m.get("parallelism") is not None:
        read_int(m["parallelism"], "parallelism", lo=1)
    for key in ("enableProfiling", "enableContentionProfiling", "delayCacheUntilActive"):
        if m.get(key) is not None:
            read_bool(m[key], key)
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
        raise ConfigError("", f"must be a {KIND} object, got {show(obj)}")
    m = read_object(obj, "", TOP_LEVEL_FIELDS)
    if m.get("apiVersion", API_VERSION) != API_VERSION:
        raise ConfigError("apiVersion", f"expected {API_VERSION}, got {show(m['apiVersion'])}")
    if m.get("kind", KIND) != KIND:
        raise ConfigError("kind", f"expected {KIND}, got {show(m['kind'])}")
    if read_list(m.get("extenders"), "extenders"):
        raise ConfigError("extenders", "not supported by Troupe")
    _check_ignored(m)

    pct = m.get("percentageOfNodesToScore")
    percentage = 0 if pct is None else read_int(pct, "percentageOfNodesToScore", 0, 100)
    init_b = m.get("podInitialBackoffSeconds")
    initial = 1 if init_b is None else read_int(init_b, "podInitialBackoffSeconds", lo=1)
    max_b = m.get("podMaxBackoffSeconds")
    maximum = 10 if max_b is None else read_int(max_b, "podMaxBackoffSeconds", lo=1)
    if maximum < initial:
        raise ConfigError(
            "podMaxBackoffSeconds",
            f"must be >= podInitialBackoffSeconds ({initial}), got {maximum}",
        )

    defaults = _default_multi_point() if multi_point is None else multi_point
    raw = read_list(m.get("profiles"), "profiles") or [{}]
    profiles = tuple(profile_config(p, i, len(raw), registry, defaults) for i, p in enumerate(raw))
    isolated = check_profiles(profiles)
    return SchedulerConfig(
        profiles=profiles,
        isolated=isolated,
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
