"""Routers, experts and the sink in a mixture-of-experts decoder (``11_moe``).

* :func:`routing` -- per layer: the router's entropy H = -sum_e p_e log p_e (p = softmax of the router logits) on the
  first token vs the others, how often the first token gets the same expert set across inputs, the experts' load
  on the first token vs the others, and each expert's largest output (for
  :func:`~sinklib.architectures.moe.super_experts.super_experts`).

The pruning runs (:class:`~sinklib.architectures.moe.pruning.PruneExperts`, ``SharedPrefix``, ``compare_pruning``)
are in :mod:`sinklib.architectures.moe.pruning`, Su et al.'s claims and what the stand-in cannot test in
:mod:`sinklib.architectures.moe.su_claims`: import each name from the module that defines it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass

import torch

from sinklib.architectures.moe.super_experts import (
    expert_output_max,
    first_routed_max,
)
from sinklib.core.capture import Capture
from sinklib.core.loaded import LoadedModel
from sinklib.interpretation.origin import batches


@dataclass
class Routing:
    """Per MoE layer (lists and the load tables: one entry per layer with routed experts, entry i being the model's
    layer ``moe_layers[i]``); position 0 = the first token, "rest" = positions >= 1. ``output_max`` and
    ``shared_max`` are indexed by the model's own layer index (as :class:`PruneExperts` and the authors'
    ``layer_index``): NaN on a layer without routed / shared experts (e.g. DeepSeek-V2-Lite's dense first layer)."""

    entropy_first: list[float]  # mean router entropy (nats) on position 0
    entropy_rest: list[float]
    same_set_first: list[float]  # fraction of sequences whose position-0 expert set is the most common one
    same_set_rest: list[float]  # the same for a later position (the middle one), as a baseline
    load_first: torch.Tensor  # (L, E): share of position 0's top-k slots each expert takes
    load_rest: torch.Tensor  # (L, E)
    output_max: torch.Tensor  # (L_model, E): largest |down_proj output| of each expert over all tokens (NaN: no MoE)
    moe_layers: list[int]  # the model's layer index of each per-MoE-layer entry (DeepSeek-V2-Lite: 1..26)
    first_state: dict[str, list[float]] | None = None  # first_token_state of the same forwards (first_token=True)
    shared_max: torch.Tensor | None = None  # (L_model,): the shared expert's largest |output| (None: no shared one)
    first_routed_max: torch.Tensor | None = None  # (L_model, E): a as the authors' hook records it (first_routed_max)


def router_entropy(logits: torch.Tensor) -> torch.Tensor:
    """H = -sum_e p_e log p_e (nats), p = softmax of the router logits over the E experts. (..., E) -> (...)."""
    return torch.special.entr(torch.softmax(logits.float(), dim=-1)).sum(-1)


def _same_set(choice: torch.Tensor) -> float:
    """choice: (N, k) -> fraction of rows whose (sorted) expert set is the most common one."""
    sets = Counter(tuple(sorted(row)) for row in choice.tolist())
    return sets.most_common(1)[0][1] / len(choice)


@torch.inference_mode()
def routing(lm: LoadedModel, ids: torch.Tensor, batch_size: int = 8, first_token: bool = False) -> Routing:
    """Route ``ids`` (N, T) and summarise per layer (see :class:`Routing`). Only per-token maxima of the expert
    outputs are kept (Capture's ``reduce``), so memory stays O(N T k) per layer. ``first_token``: also
    :func:`first_token_state` of ``ids`` from the same forwards (the capture leaves the model's output as it is), for
    :func:`compare_pruning`'s run as is."""
    from sinklib.core.attnstats import AttentionStats

    parts = lm.adapter.layers
    layers = [p for p in parts if p.experts is not None]
    n_experts = layers[0].experts.num_experts
    shared_peaks: dict[int, float] = {}  # layer -> largest |shared-expert output| (Su et al. list it as expert -1)

    def shared_hook(index: int):
        def hook(module, args, output):
            y = output[0] if isinstance(output, tuple) else output
            shared_peaks[index] = max(shared_peaks.get(index, 0.0), float(y.detach().abs().amax()))
        return hook

    handles = [p.shared_expert.register_forward_hook(shared_hook(p.index)) for p in layers
               if p.shared_expert is not None]
    kinds = ["router_logits", "expert_choice", "expert_outputs"] + (["hidden_states"] if first_token else [])
    reduce = {"expert_outputs": lambda t, layer: t.abs().amax(dim=-1),  # (B, T, k, d) -> (B, T, k)
              "hidden_states": lambda h, layer: h[:, 0].abs().amax(dim=-1)}  # (B, T, d) -> (B,)
    logits, choice, peaks, alphas, first_peaks = [], [], [], [], []
    try:
        for batch in batches(ids, batch_size):
            with Capture(lm, kinds=kinds, reduce=reduce) as cap, \
                    (AttentionStats(lm, keys=[0]) if first_token else contextlib.nullcontext()) as st:
                lm.model(batch.to(lm.device), use_cache=False, logits_to_keep=1)
            # rows: cap.layers_of(kind), the layers with routed experts (= ``layers``), in order
            logits.append(cap.stack("router_logits"))  # (L_moe, B, T, E)
            choice.append(cap.stack("expert_choice"))  # (L_moe, B, T, k)
            peaks.append(cap.stack("expert_outputs"))  # (L_moe, B, T, k)
            if first_token:
                alphas.append(torch.stack([st.key_mass(i)[..., 0] for i in range(lm.n_layers)]).mean(dim=-1))
                first_peaks.append(cap.stack("hidden_states"))  # (L, B)
    finally:
        for h in handles:
            h.remove()
    logits, choice, peaks = (torch.cat(x, dim=1) for x in (logits, choice, peaks))
    first_state = {"alpha_first": torch.cat(alphas, 1).mean(1).tolist(),
                   "max_abs_first": torch.cat(first_peaks, 1).mean(1).tolist()} if first_token else None
    ent = router_entropy(logits)  # (L, N, T)
    mid = ids.shape[1] // 2

    def load(c: torch.Tensor) -> torch.Tensor:  # (L, ..., k) -> (L, E): share of the top-k slots per expert
        flat = c.flatten(1)
        return torch.stack([torch.bincount(row, minlength=n_experts) for row in flat]).float() / flat.shape[1]

    output_max = torch.full((len(parts), n_experts), float("nan"))  # rows: the model's layers
    as_hooked = torch.full((len(parts), n_experts), float("nan"))
    for i, p in enumerate(layers):
        output_max[p.index] = expert_output_max(choice[i], peaks[i][..., None], n_experts).float()
        as_hooked[p.index] = first_routed_max(choice[i], peaks[i], n_experts).float()
    shared_max = None
    if shared_peaks:
        shared_max = torch.full((len(parts),), float("nan"))
        for index, value in shared_peaks.items():
            shared_max[index] = value
    return Routing(
        entropy_first=ent[:, :, 0].mean(1).tolist(), entropy_rest=ent[:, :, 1:].mean((1, 2)).tolist(),
        same_set_first=[_same_set(c[:, 0]) for c in choice], same_set_rest=[_same_set(c[:, mid]) for c in choice],
        load_first=load(choice[:, :, 0]), load_rest=load(choice[:, :, 1:]),
        output_max=output_max,  # float32 whatever the model's dtype
        moe_layers=[p.index for p in layers],
        first_state=first_state, shared_max=shared_max, first_routed_max=as_hooked,
    )


def expert_name(layer: int, expert: int) -> str:
    """An expert in words, for legends: "expert 5 of layer 11", "the shared expert of layer 3"."""
    return f"the shared expert of layer {layer}" if expert == -1 else f"expert {expert} of layer {layer}"
