"""02_interpretation's protocol: its sizes per profile, the model families it takes, its budget and the steps the
dry run counts (:class:`~sinklib.core.protocol.NotebookProtocol`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sinklib.core.protocol import NotebookProtocol, Step, forwards


@dataclass(frozen=True)
class InterpretationSizes:
    """02_interpretation's size knobs in one profile (a :class:`~sinklib.pipeline.profiles.Run` reads them through)."""

    batch_size: int
    probe_seqs: int  # sequences for activation statistics and interventions
    seq_len: int
    eval_seqs: int  # held-out windows for perplexity under Sun et al.'s interventions
    eval_seq_len: int
    lambdas: tuple[float, ...]  # variance-amplification sweep
    control_seqs: int = 8  # random-weight control: windows / random sequences for every analysis
    draws: int = 3  # seeds of random tokens for the variance discrepancy (its input is a random draw)


SMOKE = InterpretationSizes(batch_size=8, probe_seqs=8, seq_len=32, eval_seqs=4, eval_seq_len=64,
                            lambdas=(1.0, 8.0, 64.0), control_seqs=4)

SIZES: dict[str, InterpretationSizes] = {
    "smoke": SMOKE,
    "cpu": InterpretationSizes(batch_size=20, probe_seqs=32, seq_len=64, eval_seqs=16, eval_seq_len=256,
                               lambdas=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0), control_seqs=8),
    "gpu": InterpretationSizes(batch_size=10, probe_seqs=64, seq_len=64, eval_seqs=64, eval_seq_len=1024,
                               lambdas=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0), control_seqs=16),
    "tiny-gpu": SMOKE,
}


def steps(run: Any, model: str = "") -> list[Step]:
    """The probe (statistics and hidden states, over the random-token draws too) and perplexity under the
    interventions (each lambda of the variance sweep and four more)."""
    r, m = run, model or run.profile.model
    return [Step("probe (statistics + hidden states)", m, r.batch_size, r.seq_len, hidden_states=True,
                 calls=forwards(r.probe_seqs, r.batch_size) * (4 + r.draws)),
            Step("perplexity under interventions", m, r.batch_size, r.eval_seq_len, logits=True,
                 calls=forwards(r.eval_seqs, r.batch_size) * (len(r.lambdas) + 4))]


PROTOCOL = NotebookProtocol(name="02_interpretation", families=("llm", "moe"), sizes=SIZES, cpu_budget_s=90,
                            first_run_s=277, steps=steps)
