"""Xiao et al.'s own test of position vs content (StreamingLLM, Table 1), for ``10_llm``: held-out text streamed
through a sink + window cache with the text's own first four tokens as sinks, with them replaced by line breaks, and
with no sink at all (:func:`xiao_position_test`); and the same protocol on random weights, the negative control
(:func:`xiao_control`). :func:`sinklib.architectures.llm.llm_survey.measure_and_judge` runs both on each model.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from sinklib.core.claims import Claim
from sinklib.core.data import text_windows
from sinklib.core.loaded import LoadedModel

XIAO_SINKS = 4  # StreamingLLM keeps, and Table 1 replaces, the first four tokens


def xiao_position_test(lm: LoadedModel, n_tokens: int, budget: int, chunk: int, paper: dict, seed: int = 0,
                       progress: bool = True) -> tuple[dict[str, float], Claim]:
    """Xiao et al.'s own test of position vs content (StreamingLLM Table 1): stream held-out text through a cache of
    4 sinks + (budget - 4) recent tokens, once as it is and once with its *first four tokens replaced* by line
    breaks (a BOS among them included, as the paper's Llama-2 rows), and once with no sink (window only); the
    perplexity of the tokens predicted after the cache is full. Returns ({"window only", "own first 4",
    "4 newlines"} -> perplexity, the claim by :func:`sinklib.utilization.streaming.sink_is_positional`)."""
    from sinklib.utilization import streaming
    from sinklib.utilization.sink_cache import SinkWindowCache, why_no_sink_cache

    why = why_no_sink_cache(lm.model)  # StreamingLLM assigns positions inside the cache by re-rotating the keys
    if why:
        nan = float("nan")
        claim = streaming.sink_is_positional(nan, nan, paper, nan)
        return {}, replace(claim, holds=None, measured={}, note=f"not run: {why}")
    stream = text_windows(lm.tokenizer, 1, n_tokens, seed, split="heldout")[0]  # (T,)
    newline = lm.tokenizer("\n", add_special_tokens=False).input_ids[-1]
    replaced = stream.clone()
    replaced[:XIAO_SINKS] = newline

    def ppl(ids: torch.Tensor, sinks: int, desc: str) -> float:
        cache = SinkWindowCache.for_model(lm.model, n_sink=sinks, window=budget - sinks)
        nll = streaming.stream_nll(lm, ids, cache, chunk, desc=f"{lm.name} / {desc}", progress=progress)
        return float(nll[budget:].mean().exp())  # the targets predicted once the cache is full

    measured = {"window only": ppl(stream, 0, "window only"), "own first 4": ppl(stream, XIAO_SINKS, "4 sinks"),
                "4 newlines": ppl(replaced, XIAO_SINKS, "4 newline sinks")}
    claim = streaming.sink_is_positional(measured["4 newlines"], measured["own first 4"], paper,
                                         measured["window only"])
    claim = replace(claim, adapted=f"the first four tokens replaced by line breaks (the paper's Table 1), a "
                                   f"{budget}-token cache, {n_tokens} held-out Bible tokens, {chunk} token(s) per "
                                   f"step; the 1.25x and 1.5x cuts are ours")
    return measured, claim


def xiao_control(control: LoadedModel, name: str, n_tokens: int, budget: int, chunk: int, paper: dict,
                 seed: int = 0) -> Claim:
    """The random-weight control of :func:`xiao_position_test`: the same protocol -- the same held-out stream, its
    first four tokens replaced by line breaks, the same cache -- on ``control`` (random weights of the model's own
    configuration, :func:`sinklib.models.random_init.random_weights`), where no first token should matter and the
    rule (window only > 1.5x the text's own first 4 as sinks) must fail. The claim's id ends in ``name`` (the trained
    model's), for ``Recorder.add(..., control=...)``."""
    _, claim = xiao_position_test(control, n_tokens, budget, chunk, paper, seed, progress=False)
    return replace(claim, id=f"{claim.id}.{name}")
