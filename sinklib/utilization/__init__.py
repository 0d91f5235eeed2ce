"""Using sinks: StreamingLLM's sink + window cache, sink-preserving KV quantisation, attention calibration (ACT)."""
