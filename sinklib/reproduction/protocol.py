"""90_scorecard's protocol: no sizes, no model and no steps (it reads the other notebooks' results), its budget
(:class:`~sinklib.core.protocol.NotebookProtocol`)."""

from __future__ import annotations

from sinklib.core.protocol import NotebookProtocol

PROTOCOL = NotebookProtocol(name="90_scorecard", families=(), cpu_budget_s=15)
