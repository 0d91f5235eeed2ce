"""Shared machinery every notebook uses: capture and O(N) attention statistics, the attention switch, the
architecture adapters, interventions' base, metrics, analysis, memory checks, evaluation, inputs (text and images),
plotting, the claim record and result files, and the record each notebook's protocol module fills (``protocol``).
Imports nothing else of sinklib."""
