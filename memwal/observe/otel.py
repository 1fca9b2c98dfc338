"""Set up the OpenTelemetry SDK from the standard ``OTEL_*`` variables (applications only).

The core only records through the API (:mod:`memwal.observe.metrics`). An application
configures the SDK; the ``memwal`` CLI and the Spark jobs are applications, so they call
:func:`configure_from_env` at start. Nothing happens unless ``OTEL_METRICS_EXPORTER`` names
an exporter, as the specification of the variable says:

- ``console``: the metrics on stderr when the process ends (stdout carries ``--json``);
- ``otlp``: to ``OTEL_EXPORTER_OTLP_ENDPOINT`` over ``OTEL_EXPORTER_OTLP_PROTOCOL``
  (``http/protobuf`` by default, or ``grpc``), with the exporter's own variables;
- ``prometheus``: a scrape endpoint on ``OTEL_EXPORTER_PROMETHEUS_HOST``:``..._PORT``
  (``localhost:9464``) for as long as the process runs.

``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_METRIC_EXPORT_INTERVAL`` work as
everywhere. Lance's own object-store metrics are bridged into the same provider
(``lance.otel.instrument_lance_metrics``). The SDK and exporters come with the ``otel``
extra (``pip install memwal-jobs[otel]``).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the SDK is the otel extra's, imported only when asked for
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader

log = logging.getLogger(__name__)

_configured: MeterProvider | None = None


def exporters_from_env() -> list[str]:
    value = os.environ.get("OTEL_METRICS_EXPORTER", "")
    return [e.strip().lower() for e in value.split(",") if e.strip() and e.strip().lower() != "none"]


def configure_from_env() -> MeterProvider | None:
    """The process's MeterProvider built from ``OTEL_*`` (None when no exporter is asked for)."""
    global _configured
    names = exporters_from_env()
    if _configured is not None or not names:
        return _configured
    try:
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        log.warning("OTEL_METRICS_EXPORTER=%s, but the OpenTelemetry SDK is not installed "
                    "(pip install 'memwal-jobs[otel]'): no metrics are exported", ",".join(names))
        return None
    readers = [r for r in (_reader(n) for n in names) if r is not None]
    if not readers:
        return None
    provider = MeterProvider(metric_readers=readers, resource=Resource.create())
    metrics.set_meter_provider(provider)
    _bridge_lance(provider)
    atexit.register(provider.shutdown)
    _configured = provider
    return provider


def _reader(name: str) -> MetricReader | None:
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader

    if name == "console":
        return PeriodicExportingMetricReader(ConsoleMetricExporter(out=sys.stderr))
    if name == "otlp":
        protocol = (os.environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
                    or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as OverGrpc

            return PeriodicExportingMetricReader(OverGrpc())
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as OverHttp

        return PeriodicExportingMetricReader(OverHttp())
    if name == "prometheus":
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        start_http_server(port=int(os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT", "9464")),
                          addr=os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "localhost"))
        return PrometheusMetricReader()
    log.warning("OTEL_METRICS_EXPORTER: unknown exporter %r (expected console, otlp or prometheus): ignored", name)
    return None


def _bridge_lance(provider: MeterProvider) -> None:
    """Lance's object-store metrics in the same provider (a no-op where pylance cannot)."""
    try:
        from lance.otel import instrument_lance_metrics

        instrument_lance_metrics(provider)
    except Exception as exc:  # noqa: BLE001 - Lance's metrics are a bonus, never a failure
        log.debug("Lance metrics not bridged: %s", exc)
