"""10_llm's protocol: its model lists and sizes per profile, what the gpu profile cut, the model families it takes,
its budget and the steps the dry run counts (:class:`~sinklib.core.protocol.NotebookProtocol`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sinklib.core.protocol import NotebookProtocol, Step, forwards, models_of
from sinklib.models import tiny_random_hub


@dataclass(frozen=True)
class LlmSizes:
    """10_llm's size knobs in one profile (a :class:`~sinklib.pipeline.profiles.Run` reads them through)."""

    models: tuple[str, ...]  # compared side by side (MODEL= replaces the list with one model)
    num_seqs: int  # sequences per input type (Gu et al.: 100)
    seq_len: int
    batch_size: int
    placement_seqs: int  # windows for where the mass sits, position or token, chat template
    context_lengths: tuple[int, ...]  # alpha_0 against context length (O(N) statistics)
    context_windows: int
    draw_seqs: int = 0  # random-token sequences in each of the two extra draws (seeds seed+1, seed+2)
    draws: int = 3  # draws of windows in all (the run's own first) for the draws and the chain; smoke: 2 (plumbing)
    draw_windows: int = 0  # Bible windows in each extra draw (delimiter, position or token); 0: draw_seqs
    control_seqs: int = 0  # sequences per input on the random-weight control
    stream_tokens: int = 0  # Xiao et al.'s position test: held-out tokens streamed per model (0: not run)
    stream_budget: int = 0  # its KV cache: 4 sinks + (budget - 4) recent tokens
    stream_chunk: int = 16  # tokens per step (1: token by token, as the paper)
    mid_windows: int = 0  # mid-sequence sinks: windows of the longest context length (0: not run); control: 1
    chat_template: bool = True  # raw text vs the chat template (section 5b)
    rung: tuple[str, ...] = ()  # a scale rung: one family's models, smallest first, each measured under rung_cut
    rung_cut: tuple[tuple[str, Any], ...] = ()  # (size, value) pairs replacing these sizes for the rung (a stated cut)


OFFLINE_LLMS = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b")  # three families that ship offline
OFFLINE_RUNG = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")  # one family at two sizes (the 1.5B ~3.4x the 0.5B's cost)
# What the cpu profile's rung cuts so that the 1.5B fits make figures' budgets on 2 cores (both sizes are measured
# under it, so the two are compared on the same windows): 6 sequences per input and 6 windows instead of 32 and 16,
# one draw, two sequences per input on the random-weight control, Xiao et al.'s streams 192 tokens with a 64-token
# cache; the context sweep (256 tokens only), the chat template and the mid-sequence search are not run.
RUNG_CUT = (("num_seqs", 6), ("batch_size", 6), ("placement_seqs", 6), ("draw_seqs", 0), ("draw_windows", 0),
            ("draws", 1), ("control_seqs", 2), ("context_lengths", (256,)), ("stream_tokens", 192),
            ("stream_budget", 64), ("mid_windows", 0), ("chat_template", False))
GU_FAMILIES = ("openai-community/gpt2-xl", "EleutherAI/pythia-6.9b", "facebook/opt-6.7b", "meta-llama/Llama-2-7b-hf",
               "meta-llama/Meta-Llama-3-8B", "mistralai/Mistral-7B-v0.1", "Qwen/Qwen2.5-7B")  # Gu et al.'s families

SMOKE = LlmSizes(models=OFFLINE_LLMS, num_seqs=4, seq_len=32, batch_size=4, placement_seqs=4,
                 context_lengths=(64, 128), context_windows=1, draw_seqs=2, draw_windows=2, draws=2,
                 control_seqs=2, stream_tokens=96, stream_budget=32, stream_chunk=8, mid_windows=1)

SIZES: dict[str, LlmSizes] = {
    "smoke": SMOKE,
    "cpu": LlmSizes(models=OFFLINE_LLMS, num_seqs=32, seq_len=64, batch_size=16, placement_seqs=16,
                    context_lengths=(256, 1024, 2048), context_windows=1, draw_seqs=8, draw_windows=4,
                    control_seqs=2, stream_tokens=1024, stream_budget=128, stream_chunk=16, mid_windows=2,
                    rung=OFFLINE_RUNG, rung_cut=RUNG_CUT),
    "gpu": LlmSizes(models=GU_FAMILIES, num_seqs=100, seq_len=64, batch_size=10, placement_seqs=100,
                    context_lengths=(512, 2048, 8192, 32768), context_windows=4, draw_seqs=100,
                    draw_windows=100, control_seqs=16, stream_tokens=4096, stream_budget=1024, stream_chunk=16,
                    mid_windows=4, rung=("Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B", "Qwen/Qwen2.5-7B")),
    "tiny-gpu": replace(SMOKE, models=tiny_random_hub.LLMS),  # the gpu profile's model classes as tiny hub repositories
}

# What the gpu profile cut from the papers' protocols to fit 6 GPU-hours on one 80 GB GPU.
CUTS: dict[str, str] = {"gpu": "Xiao et al.'s position test streams 4,096 tokens in chunks of 16 (was token by token)",
                        "cpu": "the scale rung (Qwen2.5-Coder 0.5B and 1.5B) runs a cut protocol: "
                               + ", ".join(f"{k} {v}" for k, v in RUNG_CUT)}

# The structural-origin chain (sinklib.architectures.llm.survey_chain, CHAIN_DRAWS draws of the placement windows):
# ~8 forwards of a draw's windows (random tokens, the measuring pass, the super neuron's ablations, held-out
# perplexity as it is, at the mean, at zero, position 0 only)
CHAIN_FORWARDS = 8


def rung_sizes(sizes: LlmSizes) -> LlmSizes:
    """The sizes the scale rung measures under: ``sizes`` with ``rung_cut`` applied (and no rung of its own)."""
    return replace(sizes, rung=(), rung_cut=(), **dict(sizes.rung_cut))


def steps(run: Any, model: str = "") -> list[Step]:
    """Per model: sink rates (attention maps over the input kinds, placement windows and draws), the long-context
    sweep, the origin chain with Sun et al.'s bias test, and Xiao et al.'s position test when the profile streams."""
    out = model_steps(run, models_of(run, model))
    if run.rung and not model:  # the scale rung, under its cut (MODEL= replaces the lists with one model)
        out += model_steps(replace(run, sizes=rung_sizes(run.sizes)), list(run.rung), "rung: ")
    return out


def model_steps(r: Any, models: list[str], prefix: str = "") -> list[Step]:
    """:func:`steps` of ``models`` under ``r``'s sizes, each step's name after ``prefix``."""
    from sinklib.architectures.llm.survey_chain import CHAIN_DRAWS

    out = []
    for m in models:
        out += [Step(f"{prefix}sink rates (attention maps)", m, r.batch_size, r.seq_len, maps=True,
                     calls=forwards(4 * (r.num_seqs + r.control_seqs) + 3 * r.placement_seqs
                                    + 2 * (r.draw_seqs + (r.draw_windows or r.draw_seqs)), r.batch_size)),
                Step(f"{prefix}long context (O(N) statistics)", m, 1, max(r.context_lengths), stats="first key",
                     call_tokens=tuple(n for n in r.context_lengths for _ in range(r.context_windows)))]
        chain_draws = CHAIN_DRAWS if r.draw_seqs else 1
        out.append(Step(f"{prefix}origin chain + bias test, {chain_draws} draws", m, r.batch_size, r.seq_len,
                        hidden_states=True, logits=True,
                        calls=chain_draws * CHAIN_FORWARDS * forwards(r.placement_seqs, r.batch_size)))
        if r.mid_windows:  # mid-sequence sinks: every key's mass and the block outputs, the control on one window
            out.append(Step(f"{prefix}mid-sequence sinks (every key, hidden states)", m, 1, max(r.context_lengths),
                            stats="every key", hidden_states=True, calls=r.mid_windows + 1))
        if r.stream_tokens:  # the trained model's three streams, then the same three on its random weights
            out.append(Step(f"{prefix}Xiao et al.'s position test (2 x 3 streams)", m, 1, r.stream_chunk,
                            kv_tokens=r.stream_budget, calls=6 * forwards(r.stream_tokens, r.stream_chunk)))
    return out


PROTOCOL = NotebookProtocol(
    name="10_llm", families=("llm", "moe"), sizes=SIZES, cuts=CUTS, cpu_budget_s=120, first_run_s=1585,
    dtype="float32",  # Gu et al.'s protocol: float32 attention on every device
    steps=steps,
)
