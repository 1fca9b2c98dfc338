"""What an operator sees of the jobs: OpenTelemetry metrics (``metrics``), the SDK set up
from the standard ``OTEL_*`` variables (``otel``), and the status page (``page``)."""
