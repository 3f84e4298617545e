"""Starting gangsat as a cluster's scheduler: logging, client, scheduler, signals, exit status."""

from __future__ import annotations

import logging
import signal
from typing import TextIO

from pythonjsonlogger.json import JsonFormatter

from adapter.cluster import ClusterError
from adapter.kube.run import KubeOptions, KubeScheduler, api_client
from adapter.kube.source import ClusterSource
from adapter.metrics import installed_version
from adapter.settings import Settings

logger = logging.getLogger("gangsat")

EXIT_BAD_CONFIG = 2  # the client configuration cannot be loaded: the user must fix it
EXIT_NO_CLUSTER = 3  # the API server cannot be reached, or its watches never listed


def log_handler(log_format: str) -> logging.StreamHandler[TextIO]:
    """Records to stderr as text lines, or as one JSON object a line (for log pipelines
    that parse fields: ``ts``, ``level``, ``logger``, ``message``)."""
    handler: logging.StreamHandler[TextIO] = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(
            JsonFormatter(
                "%(levelname)s %(name)s %(message)s",
                rename_fields={"levelname": "level", "name": "logger"},
                timestamp="ts",  # ISO 8601 in UTC, as log pipelines parse it
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    return handler


def launch(
    source: ClusterSource,
    settings: Settings,
    options: KubeOptions,
    log_level: str,
    log_format: str = "text",
) -> int:
    """Schedule the cluster of ``source`` until stopped (SIGTERM); the exit status."""
    logging.basicConfig(level=log_level.upper(), handlers=[log_handler(log_format)])
    # Through logging, not print: with --log-format json every line must be an object.
    logger.info("gangsat %s: scheduling %s", installed_version() or "?", source.description)
    try:
        api = api_client(source.kubeconfig, in_cluster=source.in_cluster)
    except Exception as e:  # the client's loaders raise their own exception types
        # Logged, not printed: with --log-format json every line must be an object.
        logger.error("cannot load the cluster's client configuration: %s", e)
        return EXIT_BAD_CONFIG
    try:
        scheduler = KubeScheduler(api, options, settings)
    except Exception as e:  # discovery failed: the API server is unreachable or refuses us
        logger.error("cannot reach the Kubernetes API: %s: %s", type(e).__name__, e)
        return EXIT_NO_CLUSTER
    signal.signal(signal.SIGTERM, lambda *_: scheduler.stop_event.set())
    try:
        return scheduler.run()
    except ClusterError as e:
        logger.error("%s", e)
        return EXIT_NO_CLUSTER
    except KeyboardInterrupt:
        return 0
