"""sinklib."""
