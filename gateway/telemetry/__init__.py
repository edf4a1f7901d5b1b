"""telemetry layer."""
