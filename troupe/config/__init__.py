"""The configuration: a KubeSchedulerConfiguration read as kube-scheduler
reads it, and Troupe's own `troupe:` section.

Arranged as kube-scheduler's apis/config: `types` (the records), `decode`
(strict decoding of the file into them, through the typed readers of
`troupe.api.readers` that the object parsers use too), `defaults` (the
default plugin sets, multiPoint merged and expanded per extension point),
`args` (each plugin's arguments and their path), `workload` (Kubernetes
1.37's workload-scheduling plugins read onto Coscheduling) and `validation`
(checks across profiles). `decode` opens with the file's format and the rules.
"""

from troupe.api.yamlio import FAST_PARSER, MAX_YAML_DEPTH, load_yaml_documents
from troupe.config.decode import default_config, load_config, parse_config
from troupe.config.types import (
    API_VERSION,
    DEFAULT_SCHEDULER_NAME,
    KIND,
    KUBE_SCHEDULER_PLUGINS,
    ClientConnection,
    ConfigError,
    LeaderElection,
    ProfileConfig,
    SchedulerConfig,
    TroupeSettings,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_SCHEDULER_NAME",
    "FAST_PARSER",
    "KIND",
    "KUBE_SCHEDULER_PLUGINS",
    "MAX_YAML_DEPTH",
    "ClientConnection",
    "ConfigError",
    "LeaderElection",
    "ProfileConfig",
    "SchedulerConfig",
    "TroupeSettings",
    "default_config",
    "load_config",
    "load_yaml_documents",
    "parse_config",
]
