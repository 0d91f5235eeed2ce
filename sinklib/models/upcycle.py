"""An honest mixture-of-experts stand-in: a dense Llama's FFNs split into experts of a real ``MixtralForCausalLM``.

No pretrained MoE ships offline, so ``11_moe`` studies an *upcycled* SmolLM2 (labelled so everywhere): every layer's
F FFN neurons are split into E experts of F / E neurons each, grouped by co-activation on Bible text
(:func:`neuron_groups`), and a router is fitted to pick, per token, the experts whose outputs are largest
(:func:`fit_router`). Mixtral combines the top-k experts with weights that sum to 1, so each expert's down projection
is scaled by k: with near-equal weights the MoE output is the sum of the chosen experts, i.e. the dense FFN minus the
E - k experts left out. With k = E and a zero router the stand-in equals the dense model exactly (tested).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from sinklib.core.loaded import LoadedModel
from sinklib.core.manifest import note


def neuron_groups(acts: torch.Tensor, n_experts: int, iters: int = 20, seed: int = 0) -> torch.Tensor:
    """Split F neurons into ``n_experts`` equal groups of neurons that fire together.

    acts: (N tokens, F) activations act(W_gate x) * (W_up x). Each neuron is its |activation| profile over the N
    tokens, centred and unit-normed; k-means (cosine) finds E centres, then a balanced assignment fills each group
    to F / E neurons, most similar first. -> (E, F / E) neuron indices, each neuron exactly once.
    """
    F = acts.shape[1]
    if F % n_experts:
        raise ValueError(f"{F} neurons do not split into {n_experts} equal experts")
    size = F // n_experts
    prof = acts.abs().float().T  # (F, N)
    prof = prof - prof.mean(dim=1, keepdim=True)
    prof = prof / prof.norm(dim=1, keepdim=True).clamp_min(1e-8)
    gen = torch.Generator().manual_seed(seed)
    rows = prof.contiguous()  # the same values row-major: gathers and products ~7x faster (the products' rounding
    # differs from the column-major ones, enough to move a near-tie: a stand-in cached before this may differ)
    centres = prof[torch.randperm(F, generator=gen)[:n_experts]]  # (E, N)
    for _ in range(iters):
        assign = (rows @ centres.T).argmax(dim=1)  # (F,)
        for e in range(n_experts):
            members = rows[assign == e]
            if len(members):
                centres[e] = members.mean(dim=0) / members.mean(dim=0).norm().clamp_min(1e-8)
    sim = rows @ centres.T  # (F, E)
    groups: list[list[int]] = [[] for _ in range(n_experts)]
    taken = [False] * F
    for flat in sim.flatten().argsort(descending=True).tolist():  # most similar (neuron, expert) pairs first
        f, e = divmod(flat, n_experts)
        if not taken[f] and len(groups[e]) < size:
            groups[e].append(f)
            taken[f] = True
    return torch.tensor(groups)


def fit_router(x: torch.Tensor, expert_norms: torch.Tensor, ridge: float = 1e-2) -> torch.Tensor:
    """Router weights W (E, d) so that x W^T ranks the experts like their output norms: ridge regression of each
    token's standardised log norms log|y_e| on the MLP input x. x: (N, d); expert_norms: (N, E)."""
    target = expert_norms.clamp_min(1e-8).log()
    target = (target - target.mean(dim=1, keepdim=True)) / target.std(dim=1, keepdim=True).clamp_min(1e-8)
    x = x.double()
    gram = x.T @ x + ridge * len(x) * torch.eye(x.shape[1], dtype=x.dtype)
    return torch.linalg.solve(gram, x.T @ target.double()).T.float()  # (E, d)


@torch.no_grad()
def upcycle(dense: nn.Module, ids: torch.Tensor, n_experts: int = 8, top_k: int = 6, router_scale: float = 1.0,
            seed: int = 0, zero_router: bool = False) -> nn.Module:
    """A ``MixtralForCausalLM`` built from a dense Llama-layout causal LM (same attention, norms, embeddings).

    ids: (B, T) calibration text for the neuron groups and the router. ``router_scale`` multiplies the fitted router
    (smaller: weights closer to 1/k). ``zero_router``: all logits 0 (equal weights; with top_k = n_experts the
    model equals the dense one).
    """
    from transformers import MixtralConfig, MixtralForCausalLM

    from sinklib.core.adapters import adapter_for
    from sinklib.core.capture import Capture

    cfg = dense.config
    if cfg.intermediate_size % n_experts:
        raise ValueError(f"intermediate size {cfg.intermediate_size} does not split into {n_experts} experts")
    moe_cfg = MixtralConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size // n_experts,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads, head_dim=getattr(cfg, "head_dim", None),
        hidden_act=cfg.hidden_act, max_position_embeddings=cfg.max_position_embeddings, rms_norm_eps=cfg.rms_norm_eps,
        rope_parameters=getattr(cfg, "rope_parameters", None), tie_word_embeddings=cfg.tie_word_embeddings,
        num_local_experts=n_experts, num_experts_per_tok=top_k, sliding_window=None,
        bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id, pad_token_id=getattr(cfg, "pad_token_id", None),
    )
    moe = MixtralForCausalLM(moe_cfg).to(next(dense.parameters()).dtype).eval()
    missing = moe.load_state_dict({k: v for k, v in dense.state_dict().items() if ".mlp." not in k}, strict=False)
    unexpected = [k for k in missing.missing_keys if ".mlp." not in k and not k.endswith("lm_head.weight")]
    if unexpected or missing.unexpected_keys:
        raise ValueError(f"dense -> MoE weights do not line up: missing {unexpected}, extra {missing.unexpected_keys}")
    if cfg.tie_word_embeddings:
        moe.tie_weights()
    with Capture(dense, kinds=["mlp_inputs", "mlp_activations"]) as cap:
        getattr(dense, "model", dense)(ids, use_cache=False)  # the blocks only: the output head's logits are unused
    for part, block in zip(adapter_for(dense).layers, moe.model.layers):
        mlp = part.mlp
        x = cap.get("mlp_inputs", part.index).flatten(0, 1).float()  # (N, d)
        acts = cap.get("mlp_activations", part.index).flatten(0, 1).float()  # (N, F)
        groups = neuron_groups(acts, n_experts, seed=seed)  # (E, F / E)
        experts = block.mlp.experts
        for e, idx in enumerate(groups):
            experts.gate_up_proj[e] = torch.cat([mlp.gate_proj.weight[idx], mlp.up_proj.weight[idx]])
            experts.down_proj[e] = mlp.down_proj.weight[:, idx] * top_k
        if zero_router:
            block.mlp.gate.weight.zero_()
            continue
        norms = torch.stack([(acts[:, idx] @ mlp.down_proj.weight[:, idx].float().T).norm(dim=-1)
                             for idx in groups], dim=1)  # (N, E): each expert's output norm per token
        block.mlp.gate.weight.copy_(router_scale * fit_router(x, norms))
    return moe


STANDIN = "smollm2-moe"
STANDIN_LABEL = "SmolLM2-MoE (upcycled stand-in, not a trained MoE)"
# Measured here (8 held-out Bible windows of 256 tokens): dense SmolLM2 23.8; router scale 1.0 -> 6,731, 0.3 -> 57.9,
# 0.15 -> 42.6, 0.05 -> 39.7, 0 (selection by index, not by the router) -> 1,793. 0.05: the router picks, the
# weights stay near 1/k.
STANDIN_RECIPE = {"base": "smollm2-135m", "n_experts": 8, "top_k": 6, "router_scale": 0.05, "calib_windows": 16,
                  "calib_len": 256, "seed": 0}
# The smoke profile's and the tests' stand-in: the same recipe on 4 windows of 64 calibration tokens instead of 16 of
# 256 (~10 s to build instead of ~1 min; its experts and router are fitted on 1/16 of the text, so its numbers are
# its own). The same-seed test rebuilds it, with its two draw seeds, into an empty cache.
SMOKE_STANDIN = "smollm2-moe-smoke"
RECIPES = {STANDIN: STANDIN_RECIPE, SMOKE_STANDIN: {**STANDIN_RECIPE, "calib_windows": 4, "calib_len": 64}}
LABELS = {STANDIN: STANDIN_LABEL,
          SMOKE_STANDIN: "SmolLM2-MoE, smoke size (upcycled stand-in on 256 calibration tokens, not a trained MoE)"}
# The build's version, part of the cache folder's name: bump it whenever a code change can move the stand-in's weights,
# so a cache built by older code is never read as this code's stand-in. 2: :func:`neuron_groups` computes its
# products on a row-major copy (c6c4793), which can resolve a near-tie between two experts differently.
STANDIN_VERSION = 2


def build_standin(target: Path, dense: LoadedModel, seed: int | None = None, name: str = STANDIN) -> None:
    """Upcycle ``dense`` (the offline SmolLM2, the recipe's ``base`` loaded on the CPU in float32, handed in by
    :func:`sinklib.models.load.load_model`) with the recipe of ``name`` (:data:`RECIPES`; Bible *train* split;
    ``seed``: another seed for the calibration windows and the neuron grouping) and save model + tokenizer."""
    from sinklib.core.data import text_windows

    recipe = RECIPES[name]
    r = recipe if seed is None else {**recipe, "seed": seed}
    calib = text_windows(dense.tokenizer, r["calib_windows"], r["calib_len"], r["seed"], split="train")
    note(f"upcycling {r['base']} into {name} ({r['n_experts']} experts, top-{r['top_k']}; once)")
    moe = upcycle(dense.model, calib, r["n_experts"], r["top_k"], r["router_scale"], r["seed"])
    moe.config.sinklib_standin = {"label": LABELS[name], **r} | ({"name": name} if name != STANDIN else {})
    moe.save_pretrained(target)
    dense.tokenizer.save_pretrained(target)


def standin_name(seed: int, name: str = STANDIN) -> str:
    """The cache folder of the stand-in ``name`` built with ``seed`` by this :data:`STANDIN_VERSION`:
    ``smollm2-moe-v2`` (the registry's ``smollm2-moe``) for the recipe's seed, ``smollm2-moe-v2-s<seed>`` for
    another; ``smollm2-moe-smoke-v2``, ``smollm2-moe-smoke-v2-s<seed>`` for the smoke-size one."""
    base = f"{name}-v{STANDIN_VERSION}"
    return base if seed == RECIPES[name]["seed"] else f"{base}-s{seed}"


def load_standin(seed: int, like: LoadedModel, dense) -> LoadedModel:
    """The stand-in upcycled with ``seed`` (its own calibration windows and neuron grouping; built once into
    ``<cache>/converted/smollm2-moe-v2-s<seed>``), on ``like``'s device and dtype, labelled with its seed.

    ``like``: the registry stand-in as :func:`sinklib.models.load.load_model` returns it (its tokenizer and shape
    facts are shared). ``dense``: a function returning the dense base (``STANDIN_RECIPE["base"]`` on the CPU in
    float32), called only when this seed's stand-in is not cached yet."""
    from dataclasses import replace

    from transformers import AutoModelForCausalLM

    from sinklib.models.conversion import build_once

    if seed == STANDIN_RECIPE["seed"]:
        return like
    name = like.model.config.sinklib_standin.get("name", STANDIN)  # the recipe ``like`` was built with
    path = build_once(standin_name(seed, name), lambda out: build_standin(out, dense(), seed=seed, name=name))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=like.dtype).to(like.device).eval()
    label = f"{LABELS[name][:-1]}, upcycling seed {seed})"
    return replace(like, model=model, spec=replace(like.spec, label=label))
