"""Attention edits for multimodal models: hide chosen keys from the text (:class:`KeyMask`, Kang et al.'s masking of
visual sink tokens and its random control) and visual attention redistribution (:class:`VisualAttentionRedistribution`,
VAR; Kang et al., ICLR 2025, arXiv 2503.03321, the authors' ``VARProcessor.attn_redist`` and ``HeadFork`` in
seilk/VisAttnSink ``src/logic/logic.py``). Sinks are found with :func:`sinklib.architectures.mllm.visual_sinks.phi`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from sinklib.architectures.mllm.captions import caption_inputs, logits_kwargs, scores
from sinklib.architectures.mllm.kang_rules import (
    KANG_FIRST_LAYER,
    KANG_P,
    KANG_RHO,
    KANG_SUMM,
    KANG_TAU,
    sink_union,
)
from sinklib.architectures.mllm.visual_sinks import MllmProfile, phi, profile_forward, random_like
from sinklib.core.attention_switch import eager_for
from sinklib.core.intervention import Intervention


class KeyMask(Intervention):
    """Hide chosen keys from every query at or after ``from_query``: their additive mask entries become -inf, so
    the other keys share the attention (Kang et al.'s masking of visual sink tokens, and its random control).

    keys: (B, T) bool, the key positions to hide in each row. Positions are absolute: in a forward that runs only
    the last T_q tokens on a KV cache of the first N - T_q (:func:`edited_nll`), query row r is position N - T_q + r.
    """

    def __init__(self, model: nn.Module, keys: torch.Tensor, from_query: int, layers: Sequence[int] | None = None):
        super().__init__(model, layers)
        self.keys, self.from_query = keys.bool(), int(from_query)

    def _install(self) -> None:
        self._use_attention_function()

    def _attention(self, module, query, key, value, attention_mask, **kwargs):
        cached = key.shape[-2] - query.shape[-2]  # positions before the first query (0 without a KV cache)
        if self.adapter.index_of(module) in self.layers and cached + query.shape[2] > self.from_query:
            mask = self._mask(module, query, key, attention_mask).clone()  # (B|1, 1, T, N)
            mask = mask.expand(self.keys.shape[0], 1, *mask.shape[2:]).clone()
            hide = self.keys[:, None, None, :mask.shape[-1]].to(mask.device)  # (B, 1, 1, N)
            rows = torch.zeros(mask.shape[2], dtype=torch.bool, device=mask.device)
            rows[max(self.from_query - cached, 0):] = True
            mask[hide & rows[None, None, :, None]] = torch.finfo(mask.dtype).min
            attention_mask = mask
            self.calls += 1
        return self._delegate(module, query, key, value, attention_mask, **kwargs)


def var_redistribute(weights: torch.Tensor, sinks: torch.Tensor, image: torch.Tensor, rows: torch.Tensor,
                     p: float = KANG_P) -> torch.Tensor:
    """VAR on probabilities (``VARProcessor.attn_redist``): in the selected rows, A'_j = p A_j on sink keys and
    A'_j = A_j + (1 - p) S r_j on non-sink image keys, S = sum_{sinks} A_j, r_j = A_j / sum_{image non-sinks} A;
    every other entry unchanged. Rows still sum to 1.

    weights: (B, H, T, N); sinks, image: (B, N) bool; rows: (B, H, T) bool -> (B, H, T, N).
    """
    on_sink = sinks[:, None, None, :]
    target = (image & ~sinks)[:, None, None, :]
    s = (weights * on_sink).sum(-1, keepdim=True)  # (B, H, T, 1)
    i = (weights * target).sum(-1, keepdim=True).clamp_min(torch.finfo(weights.dtype).tiny)
    new = torch.where(on_sink, p * weights, weights)
    new = torch.where(target, weights + (1 - p) * s * weights / i, new)
    return torch.where(rows[..., None], new, weights)


def var_bias(weights: torch.Tensor, sinks: torch.Tensor, image: torch.Tensor, rows: torch.Tensor,
             p: float = KANG_P) -> torch.Tensor:
    """The additive logit bias with softmax(logits + bias) = :func:`var_redistribute` (softmax(logits)) exactly:
    log p on sink keys and log(1 + (1 - p) S / I) on non-sink image keys of the selected rows (the new row sums to
    p S + I + (1 - p) S + rest = 1, so no renormalisation enters). Shapes as :func:`var_redistribute`."""
    tiny = torch.finfo(torch.float32).tiny
    on_sink = sinks[:, None, None, :]
    target = (image & ~sinks)[:, None, None, :]
    w = weights.float()
    s = (w * on_sink).sum(-1, keepdim=True)
    i = (w * target).sum(-1, keepdim=True).clamp_min(tiny)
    bias = torch.where(on_sink, torch.full_like(w, float(torch.log(torch.tensor(p)))), torch.zeros_like(w))
    bias = torch.where(target, torch.log1p((1 - p) * s / i).expand_as(w), bias)
    return torch.where(rows[..., None], bias, torch.zeros_like(bias))


def image_centric_rows(weights: torch.Tensor, visual_sinks: torch.Tensor, image: torch.Tensor, from_query: int,
                       rho: float = KANG_RHO, summ: float = KANG_SUMM) -> torch.Tensor:
    """Kang et al.'s ``HeadFork``: (head, query) rows with sum_{image} A_tj >= summ and sum_{visual sinks} A_tj /
    sum_{image} A_tj <= rho, for queries t >= ``from_query``; none where the row's image has no visual sink.
    weights: (B, H, T, N); visual_sinks, image: (B, N) bool -> (B, H, T) bool."""
    w = weights.float()
    img = (w * image[:, None, None, :]).sum(-1)
    vis = (w * visual_sinks[:, None, None, :]).sum(-1)
    rows = (img >= summ) & (vis / (img + 1e-6) <= rho) & visual_sinks.any(-1)[:, None, None]
    rows[..., :from_query] = False
    return rows


class VisualAttentionRedistribution(Intervention):
    """VAR (Kang et al.) in every layer from :data:`KANG_FIRST_LAYER` to the second-to-last: sinks are found in
    the layer's input hidden state (phi >= tau over ``dims``), image-centric (head, text query) rows chosen by
    :func:`image_centric_rows`, and :func:`var_bias` added to the mask handed to the model's own attention.

    image: (T,) bool, the image tokens' positions (``MllmProfile.image``); text queries start after the last.
    prefix_sinks: (L, B, S) bool, for a forward that runs only the tokens from S on, on a KV cache of the first S
    (:func:`edited_nll`; S <= the first text query, so no edit reaches them): the sinks among those S tokens, whose
    hidden states that forward never sees (:attr:`ProfiledForward.token_phi` >= tau of the forward that filled the
    cache). Layer 0's input is not captured, so then ``first_layer`` >= 1.
    """

    def __init__(self, model: nn.Module, dims: Sequence[int], image: torch.Tensor, tau: float = KANG_TAU,
                 p: float = KANG_P, rho: float = KANG_RHO, summ: float = KANG_SUMM,
                 first_layer: int = KANG_FIRST_LAYER, prefix_sinks: torch.Tensor | None = None):
        n = len(adapter_layers(model))
        super().__init__(model, range(first_layer, n - 1))
        if prefix_sinks is not None and first_layer < 1:
            raise ValueError("prefix_sinks come from block outputs: VAR on a KV cache needs first_layer >= 1")
        self.dims, self.tau, self.p, self.rho, self.summ = list(dims), tau, p, rho, summ
        self.prefix_sinks = prefix_sinks
        self.image = image.bool()
        self.text_from = int(self.image.nonzero().max()) + 1
        self._sinks: dict[int, torch.Tensor] = {}
        self.rows_edited = 0  # (head, text query) rows VAR redistributed, summed over layers
        self.rows_seen = 0  # the (head, text query) rows it could have: every head x text query x edited layer

    def _install(self) -> None:
        for i in self.layers:
            self._handles.append(self.parts[i].block.register_forward_pre_hook(
                lambda m, args, kwargs, i=i: self._find_sinks(i, args, kwargs), with_kwargs=True))
        self._use_attention_function()

    def _find_sinks(self, layer: int, args, kwargs) -> None:
        h = args[0] if args else kwargs["hidden_states"]  # (B, T, d); on a KV cache (B, T - S, d)
        sinks = phi(h, self.dims) >= self.tau
        if self.prefix_sinks is not None:  # the cached tokens' sinks come first
            sinks = torch.cat([self.prefix_sinks[layer].to(sinks.device), sinks], dim=1)
        self._sinks[layer] = sinks  # (B, T)

    def _attention(self, module, query, key, value, attention_mask, **kwargs):
        layer = self.adapter.index_of(module)
        stop = self.text_from
        cached = key.shape[-2] - query.shape[-2]  # positions before the first query (0 without a KV cache)
        if layer in self.layers and cached + query.shape[2] > stop:
            attention_mask = self._mask(module, query, key, attention_mask)
            _, weights = eager_for(module)(module, query, key, value, attention_mask, **kwargs)  # (B, H, T, N)
            n = weights.shape[-1]
            sinks = self._sinks[layer][:, :n]
            image = self.image[None, :n].to(sinks.device).expand_as(sinks)
            rows = image_centric_rows(weights, sinks & image, image, max(stop - cached, 0), self.rho, self.summ)
            self.rows_edited += int(rows.sum())
            self.rows_seen += int(rows.shape[0] * rows.shape[1] * max(rows.shape[2] - max(stop - cached, 0), 0))
            attention_mask = attention_mask + var_bias(weights, sinks, image, rows, self.p).to(attention_mask.dtype)
            self.calls += 1
        return self._delegate(module, query, key, value, attention_mask, **kwargs)


def adapter_layers(model: nn.Module):
    from sinklib.core.adapters import adapter_for

    return adapter_for(model).layers


SCORES = ("image token", "caption")  # what an edit is scored on; the verdicts use the first


@dataclass
class EditComparison:
    """Mean NLL (nats / token) per condition and score, each random draw's mean, the visual sinks per image, and the
    rows VAR edited.

    means[score]: {"as is", "sinks hidden", "random hidden" (mean over draws), "VAR"} for score "image token" (the
    digit: the one caption token that depends on the image; Kang et al.'s claims are judged on it) and "caption"
    (the mean over all caption tokens, kept for comparison); random_draws[score]: each draw's mean."""

    means: dict[str, dict[str, float]]
    random_draws: dict[str, list[float]]
    sinks_per_image: torch.Tensor  # (N,)
    profile: MllmProfile | None = None  # the first batch's profile (sinks found with the given dims)
    var_rows: tuple[int, int] = (0, 0)  # (rows VAR edited, rows it could have), summed over batches and layers

    def nll_changes(self, score: str = SCORES[0]) -> dict[str, float]:
        """NLL changes against "as is": sinks hidden, random tokens hidden (mean of the draws), VAR; and the largest
        image-token phi of the first batch (how close a model without visual sinks comes to the threshold)."""
        m = self.means[score]
        return {"sinks": m["sinks hidden"] - m["as is"], "random": m["random hidden"] - m["as is"],
                "VAR": m["VAR"] - m["as is"],
                "max_phi": (float(torch.nan_to_num(self.profile.phi, nan=0).max()) if self.profile is not None
                            else math.nan)}

    def masking(self, score: str = SCORES[0]) -> dict:
        """The ``masking`` argument of :func:`sinklib.architectures.mllm.kang_claims.visual_sink_claims`."""
        m = self.means[score]
        return {"none": m["as is"], "sinks": m["sinks hidden"], "random": m["random hidden"],
                "random_draws": self.random_draws[score], "score": score}


# Model types whose language tower takes a KV cache of the tokens before the text with plain 1D positions, so that
# :func:`edited_nll` may run only the text on it (tested: LLaVA, the stand-in's and LLaVA-1.5's class). Others
# (Qwen2-VL's M-RoPE keeps position state between calls) run every edit as a whole forward.
PREFIX_CACHE_TYPES = ("llava",)


def uses_prefix_cache(model: nn.Module) -> bool:
    return getattr(model.config, "model_type", None) in PREFIX_CACHE_TYPES


@torch.inference_mode()
def edited_scores(model: nn.Module, inputs: dict, labels: torch.Tensor, edit,
                  prefix=None) -> dict[str, torch.Tensor]:
    """:func:`~sinklib.architectures.mllm.captions.scores` (caption NLL and the image-dependent token's NLL)
    under the intervention ``edit`` -> {score: (B,)}.

    prefix: ``(cache, S)``, a KV cache (``DynamicCache``) holding the first S positions of ``inputs``: then only the
    tokens from S on are run, attending to the cached keys and values. Exact for an edit that changes nothing
    before S (:class:`KeyMask` and VAR edit only text queries after the image, S = the first of them): positions
    before S see no later one, so their keys and values are those of the unedited forward. The cache is cut back to
    S afterwards, ready for the next edit.
    """
    if prefix is None:
        with edit:
            logits = model(**inputs, **logits_kwargs(model, labels)).logits
        return scores(logits, labels)
    cache, start = prefix
    ids = inputs["input_ids"]
    mask = inputs.get("attention_mask", torch.ones_like(ids))
    keep = min(logits_kwargs(model, labels).get("logits_to_keep", ids.shape[1]), ids.shape[1] - start)
    with edit:
        logits = model(input_ids=ids[:, start:], attention_mask=mask, past_key_values=cache, use_cache=True,
                       logits_to_keep=keep).logits  # (B, keep, V)
    cache.crop(start - cache.get_seq_length())  # a negative count: drop the positions this forward added
    return scores(logits, labels)


def edited_nll(model: nn.Module, inputs: dict, labels: torch.Tensor, edit, prefix=None) -> torch.Tensor:
    """The caption NLL of :func:`edited_scores` -> (B,)."""
    return edited_scores(model, inputs, labels, edit, prefix)["caption"]


def compare_edits(lm, pictures: list, captions: list[str], dims: Sequence[int], batch_size: int, draws: int,
                  seed: int, tau: float = KANG_TAU) -> EditComparison:
    """Caption NLL as is, with the visual sink tokens (phi >= tau = 20 in any layer from 2 on, :func:`sink_union`)
    hidden from every text query in every layer (:class:`KeyMask`), with as many random image tokens hidden
    (``draws`` draws; draw r of the batch starting at i is seeded ``seed + 1000 r + i``), and with VAR.

    Per batch one forward profiles the batch and, for a model that takes it (:func:`uses_prefix_cache`), keeps the
    keys and values of the tokens before the first text query: the edits change only text queries, so each
    condition, "as is" included, runs just the text on that cache (:func:`edited_nll`), VAR with the cached
    tokens' sinks from the same forward -- the numbers of whole forwards, to float rounding.
    """
    nll: dict[str, list[dict[str, torch.Tensor]]] = {"as is": [], "sinks hidden": [], "VAR": []}
    random_runs: list[list[dict[str, torch.Tensor]]] = [[] for _ in range(draws)]
    n_sinks, first, var_rows = [], None, [0, 0]
    cached = uses_prefix_cache(lm.model)
    for i in range(0, len(pictures), batch_size):
        x, y = caption_inputs(lm, pictures[i:i + batch_size], captions[i:i + batch_size])
        run = profile_forward(lm.model, x, dims=dims, use_cache=cached, **logits_kwargs(lm.model))
        p = run.profile
        first = p if first is None else first
        union = sink_union(p, tau)
        n_sinks.append(union.sum(-1).float())
        keys = torch.zeros_like(x["input_ids"], dtype=torch.bool)
        keys[:, p.image] = union.to(keys.device)  # the profile's statistics are on the CPU, the ids on the model's
        text = p.span[1]  # the first text query: nothing before it is edited
        prefix, prefix_sinks = None, None
        if cached:
            prefix = (run.output.past_key_values, text)
            prefix[0].crop(text - prefix[0].get_seq_length())
            prefix_sinks = run.token_phi[:, :, :text] >= tau  # (L, B, S)
        del run
        nll["as is"].append(edited_scores(lm.model, x, y, contextlib.nullcontext(), prefix))
        nll["sinks hidden"].append(edited_scores(lm.model, x, y, KeyMask(lm.model, keys, text), prefix))
        for r in range(draws):
            rand = torch.zeros_like(keys)
            rand[:, p.image] = random_like(union, seed=seed + 1000 * r + i).to(rand.device)
            random_runs[r].append(edited_scores(lm.model, x, y, KeyMask(lm.model, rand, text), prefix))
        var = VisualAttentionRedistribution(lm.model, dims, p.image, tau=tau, prefix_sinks=prefix_sinks)
        nll["VAR"].append(edited_scores(lm.model, x, y, var, prefix))
        var_rows[0] += var.rows_edited
        var_rows[1] += var.rows_seen

    def mean(batches: list[dict[str, torch.Tensor]], score: str) -> float:
        return torch.cat([b[score] for b in batches]).mean().item()

    means, random_means = {}, {}
    for score in SCORES:
        random_means[score] = [mean(v, score) for v in random_runs]
        means[score] = {"as is": mean(nll["as is"], score), "sinks hidden": mean(nll["sinks hidden"], score),
                        "random hidden": sum(random_means[score]) / len(random_means[score]),
                        "VAR": mean(nll["VAR"], score)}
    return EditComparison(means, random_means, torch.cat(n_sinks), first, tuple(var_rows))
