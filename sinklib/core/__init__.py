"""Shared machinery: model loading, inputs, capture and O(N) attention statistics, metrics, memory checks, evaluation, the attention switch, plotting style."""
