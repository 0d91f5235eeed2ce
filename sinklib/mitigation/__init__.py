"""Removing sinks: attention variants, the tiny LM, its tasks and training, comparison and verdicts."""
