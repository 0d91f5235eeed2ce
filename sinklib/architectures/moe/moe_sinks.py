"""Routers, experts and the sink in a mixture-of-experts decoder (``11_moe``).

* :func:`routing` -- per layer: the router's entropy H = -sum_e p_e log p_e (p = softmax of the router logits) on the
  first token vs the others, how often the first token gets the same expert set across inputs, the experts' load
  on the first token vs the others, and each expert's largest output (for
  :func:`~sinklib.architectures.moe.super_experts.super_experts`);
* :class:`PruneExperts` -- zero the weights of chosen (layer, expert) pairs for the duration of a ``with`` block (the
  router still picks them; their output is 0), restored on exit;
* :class:`SharedPrefix` -- the blocks before the first pruned layer computed once for every pruned run of
  :func:`compare_pruning` (they are the same as the model's as is).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
from torch import nn

from sinklib.architectures.moe.super_experts import (
    EFFECT,
    effect_size,
    expert_output_max,
    first_routed_max,
    super_experts,
)
from sinklib.core.adapters import adapter_for
from sinklib.core.capture import Capture
from sinklib.core.claims import Claim, over_draws
from sinklib.core.evaluation import perplexity
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

    parts = adapter_for(lm.model).layers
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
            with Capture(lm.model, kinds=kinds, reduce=reduce) as cap, \
                    (AttentionStats(lm.model, keys=[0]) if first_token else contextlib.nullcontext()) as st:
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


class PruneExperts:
    """Context manager: zero the fused weights of ``experts`` = [(layer, expert), ...] and restore them on exit.
    ``layer`` is the model's own layer index (a dense layer counts); expert -1 is the layer's shared expert (Su et
    al.'s notation), whose down projection is zeroed.

    The router is left as it is (it may still choose a pruned expert, whose output is then 0), as when an expert's
    weights are removed from a checkpoint.
    """

    def __init__(self, model: nn.Module, experts: Sequence[tuple[int, int]]):
        self.layers = adapter_for(model).layers
        self.experts = [(int(layer), int(e)) for layer, e in experts]
        self._saved: list[tuple[nn.Parameter, int | slice, torch.Tensor]] = []

    def __enter__(self) -> PruneExperts:
        with torch.no_grad():
            for layer, e in self.experts:
                part = self.layers[layer]
                if e == -1:
                    if part.shared_expert is None:
                        raise ValueError(f"PruneExperts: layer {layer} has no shared expert (expert -1)")
                    weight = part.shared_expert.down_proj.weight
                    self._saved.append((weight, slice(None), weight.clone()))
                    weight.zero_()
                    continue
                fused = part.experts
                if fused is None:
                    raise ValueError(f"PruneExperts: layer {layer} has no routed experts (a dense layer)")
                for name in ("gate_up_proj", "up_proj", "down_proj"):
                    param = getattr(fused, name, None)
                    if isinstance(param, nn.Parameter):
                        self._saved.append((param, e, param[e].clone()))
                        param[e].zero_()
        return self

    def __exit__(self, *exc) -> None:
        with torch.no_grad():
            for param, e, value in reversed(self._saved):
                param[e].copy_(value)
        self._saved = []


SU = "Su et al., Unveiling Super Experts in MoE LLMs, arXiv 2507.23279"


@torch.inference_mode()
def first_token_state(lm: LoadedModel, ids: torch.Tensor, batch_size: int = 8,
                      layers: Sequence[int] | None = None) -> dict[str, list[float]]:
    """Per layer: alpha_0 (mean over sequences and heads, O(N) statistics) and the first token's largest |h|.
    ``layers``: the layers read (default: all), in order -- under :meth:`SharedPrefix.replay` only the later ones
    run."""
    from sinklib.core.attnstats import AttentionStats

    layers = list(range(lm.n_layers)) if layers is None else list(layers)
    alphas, peaks = [], []
    for batch in batches(ids, batch_size):
        first = {"hidden_states": lambda h, layer: h[:, 0].abs().amax(dim=-1)}  # (B,)
        with AttentionStats(lm.model, keys=[0]) as st, \
                Capture(lm.model, hidden_states=True, layers=layers, reduce=first) as cap:
            lm.model(batch.to(lm.device), use_cache=False, logits_to_keep=1)
        alphas.append(torch.stack([st.key_mass(i)[..., 0] for i in layers]).mean(dim=-1))  # (L, B)
        peaks.append(cap.stack("hidden_states"))  # (L, B)
    return {"alpha_first": torch.cat(alphas, 1).mean(1).tolist(), "max_abs_first": torch.cat(peaks, 1).mean(1).tolist()}


class SharedPrefix:
    """Blocks 0..start-1 computed once for many runs that differ only from block ``start`` on.

    Under :meth:`record` every forward of the model keeps h^(start-1), the residual stream leaving block start-1,
    keyed by the batch's token ids; under :meth:`replay` blocks 0..start-1 are skipped for a recorded batch and block
    ``start`` receives the recorded tensor -- exactly what it would have received, as long as nothing in blocks
    0..start-1 changed in between (:func:`compare_pruning` prunes experts of layers >= start only). The skipped
    blocks' hooks see their input passed through, so statistics of layers < start must come from the recorded run.
    """

    def __init__(self, model: nn.Module, start: int):
        self.model, self.start = model, start
        self.blocks = [p.block for p in adapter_for(model).layers][:start]
        self.states: dict[bytes, torch.Tensor] = {}
        self._key: bytes | None = None

    def _read_ids(self, module, args, kwargs) -> None:  # forward pre-hook on the model: which batch is this?
        ids = kwargs.get("input_ids", args[0] if args else None)
        self._key = None if ids is None else repr(tuple(ids.shape)).encode() + ids.cpu().numpy().tobytes()

    def _keep(self, module, args, output) -> None:  # forward hook on block start-1
        self.states[self._key] = output

    def _recorded(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if self._key not in self.states:
            raise KeyError("SharedPrefix.replay: this batch was not run under record()")
        return self.states[self._key].clone()  # a later block may write into its input: the record stays as it was

    @contextmanager
    def record(self) -> Iterator[SharedPrefix]:
        if not self.blocks:
            yield self
            return
        handles = [self.model.register_forward_pre_hook(self._read_ids, with_kwargs=True),
                   self.blocks[-1].register_forward_hook(self._keep)]
        try:
            yield self
        finally:
            for h in handles:
                h.remove()

    @torch.inference_mode()
    def record_prefix(self, lm: LoadedModel, ids: torch.Tensor, batch_size: int) -> None:
        """Record ``ids`` batch by batch (as :func:`first_token_state` batches them) running blocks 0..start-1 only:
        the forward stops once block start-1 has handed over its output."""
        def stop(module, args, output):
            raise _PrefixDone

        with self.record():
            handle = self.blocks[-1].register_forward_hook(stop) if self.blocks else None  # after _keep
            try:
                for batch in batches(ids, batch_size) if handle is not None else []:
                    try:
                        lm.model(batch.to(lm.device), use_cache=False, logits_to_keep=1)
                    except _PrefixDone:
                        pass
            finally:
                if handle is not None:
                    handle.remove()

    @contextmanager
    def replay(self) -> Iterator[SharedPrefix]:
        if not self.blocks:
            yield self
            return
        handle = self.model.register_forward_pre_hook(self._read_ids, with_kwargs=True)
        saved = [b.__dict__.get("forward") for b in self.blocks]  # an instance-level forward (accelerate) comes back
        for b in self.blocks[:-1]:
            b.forward = _passed_through
        self.blocks[-1].forward = self._recorded
        try:
            yield self
        finally:
            handle.remove()
            for b, forward in zip(self.blocks, saved):
                if forward is None:
                    del b.forward
                else:
                    b.forward = forward


class _PrefixDone(Exception):
    """Raised after the last shared block under :meth:`SharedPrefix.record_prefix`: the later blocks are not run."""


def _passed_through(hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """A skipped block's forward (:meth:`SharedPrefix.replay`): its input, unchanged."""
    return hidden_states


def random_controls(supers: Sequence[tuple[int, int]], n_experts: int, draws: int, seed: int = 0
                    ) -> list[list[tuple[int, int]]]:
    """``draws`` sets of random experts, one per super expert and in the same layer, never a super expert."""
    gen = torch.Generator().manual_seed(seed)
    taken = set(supers)
    out = []
    for _ in range(draws):
        pick = []
        for layer, _ in supers:
            options = [e for e in range(n_experts) if (layer, e) not in taken]
            pick.append((layer, options[int(torch.randint(len(options), (1,), generator=gen))]))
        out.append(pick)
    return out


@dataclass
class PruneRun:
    """One model state under :class:`PruneExperts`: per-layer alpha_0 and first-token max |h|, and perplexity."""

    alpha_first: list[float]
    max_abs_first: list[float]
    ppl: float

    def summary(self) -> dict[str, float]:
        """alpha_0 averaged over layers, perplexity, and the first token's largest |h| over layers."""
        return {"alpha": sum(self.alpha_first) / len(self.alpha_first), "ppl": self.ppl,
                "max_abs_first": max(self.max_abs_first)}


def sink_drop_by_layer(as_is: Sequence[float], pruned: Sequence[float]) -> list[float]:
    """Per layer, the fraction of alpha_0 that pruning removed: 1 - alpha_pruned / alpha_as_is (NaN where alpha_0
    as is is 0) -- beside Su et al.'s "attention sink decay" of about 90% or more in every layer (Sec. 4)."""
    return [1 - p / a if a > 0 else float("nan") for a, p in zip(as_is, pruned)]


@torch.inference_mode()
def expert_channels(lm: LoadedModel, ids: torch.Tensor, experts: Sequence[tuple[int, int]],
                    batch_size: int = 8) -> dict[tuple[int, int], tuple[int, float]]:
    """For each routed (layer, expert): the output channel holding its largest |down_proj output| over ``ids`` and
    that value, from the same captures as :func:`routing` (``expert_outputs`` with ``expert_choice``). Su et al.:
    a super expert's extreme output sits in the channel of the residual's massive activation."""
    layers = sorted({layer for layer, e in experts if e != -1})
    best: dict[tuple[int, int], tuple[int, float]] = {}
    reduce = {"expert_outputs": lambda t, layer: torch.stack([t.abs().amax(dim=-1).float(),
                                                              t.abs().argmax(dim=-1).float()], dim=-1)}
    # (B, T, k, d) -> (B, T, k, 2): max |y| and its channel (float32 holds channel ids exactly)
    for batch in batches(ids, batch_size):
        with Capture(lm.model, kinds=["expert_choice", "expert_outputs"], layers=layers, reduce=reduce) as cap:
            lm.model(batch.to(lm.device), use_cache=False, logits_to_keep=1)
            for layer, e in experts:
                if e == -1:
                    continue
                choice, peak = cap.get("expert_choice", layer), cap.get("expert_outputs", layer).float()
                mask = choice == e  # (B, T, k)
                if not mask.any():
                    continue
                values, channels = peak[..., 0][mask], peak[..., 1][mask]
                i = int(values.argmax())
                if (layer, e) not in best or float(values[i]) > best[(layer, e)][1]:
                    best[(layer, e)] = (int(channels[i]), float(values[i]))
    return best


def compare_pruning(lm: LoadedModel, supers: Sequence[tuple[int, int]], ids: torch.Tensor, held: torch.Tensor,
                    draws: int, seed: int = 0, batch_size: int = 8,
                    as_is: dict[str, list[float]] | None = None) -> dict[str, PruneRun]:
    """The model as is, with ``supers`` pruned, and with ``draws`` sets of as many random experts of the same layers
    pruned (:func:`random_controls`): {"as is", "super experts pruned", "random experts: expert e of layer l, ...",
    ...} -> run.
    ``as_is``: :func:`first_token_state` of ``ids`` (batches of ``batch_size``) when already measured
    (:attr:`Routing.first_state`).

    Every pruned expert sits in layer s or later (s: the earliest layer of ``supers``; the random experts share their
    layers), so blocks 0..s-1 compute the same in every run: the run as is records the residual stream entering
    block s (:class:`SharedPrefix`), each pruned run starts there, and its alpha_0 and first-token |h| of layers < s
    are the run as is's."""
    n_experts = adapter_for(lm.model).layers[supers[0][0]].experts.num_experts if supers else 0
    prunes = {"super experts pruned": list(supers)}
    for pick in random_controls(supers, n_experts, draws, seed) if supers else []:
        prunes["random experts: " + ", ".join(expert_name(layer, e) for layer, e in pick)] = pick
    start = min((layer for pick in prunes.values() for layer, _ in pick), default=lm.n_layers)
    shared = SharedPrefix(lm.model, start if supers else 0)  # nothing pruned: nothing to replay
    if as_is is None:
        with shared.record():
            as_is = first_token_state(lm, ids, batch_size)
    else:
        shared.record_prefix(lm, ids, batch_size)
    with shared.record():
        runs = {"as is": PruneRun(list(as_is["alpha_first"]), list(as_is["max_abs_first"]), perplexity(lm, held))}
    base = runs["as is"]
    for name, pick in prunes.items():
        if not pick:  # nothing pruned: the model as is
            runs[name] = PruneRun(list(base.alpha_first), list(base.max_abs_first), base.ppl)
            continue
        with PruneExperts(lm.model, pick), shared.replay():
            later = first_token_state(lm, ids, batch_size, layers=range(start, lm.n_layers))
            runs[name] = PruneRun(base.alpha_first[:start] + later["alpha_first"],
                                  base.max_abs_first[:start] + later["max_abs_first"], perplexity(lm, held))
    return runs


STAND_IN_NOTE = ("stand-in: its experts are slices of SmolLM2-135M's dense MLP and its router was fitted afterwards, "
                 "not a trained MoE")
SE_CODE = "ZunhaiSu/Super-Experts-Profilling:eval_utils.py"

# What the upcycled stand-in cannot test, claim by claim: its experts are column slices of one dense MLP and its
# router a regression fitted afterwards, so these are measured and shown but judged "cannot be judged here".
STANDIN_CANNOT_TEST = {
    "su2025.few_super_experts": "the stand-in's experts are slices of SmolLM2's dense MLP: the neurons that write "
                                "its massive activation land in some expert by construction, so finding a super "
                                "expert says how the split was made, not that training makes few super experts",
    "su2025.pruning_super_experts_breaks_the_sink": "pruning a stand-in expert zeroes an eighth of a dense MLP's "
                                                    "neurons, including the super neuron that writes the massive "
                                                    "dimension: a dense super-neuron ablation (02_interpretation's "
                                                    "question), not Su et al.'s expert pruning",
    "routing.first_token_fixed_route": "the router was fitted to the dense activations after the split, not trained "
                                       "with the experts: whether the first token takes a fixed route in training is "
                                       "not in it",
    "routing.load_balance": "no load-balancing loss ever acted on the stand-in's router",
    "su2025.super_experts_form_in_training": "the stand-in was never trained as a MoE",
}


def standin_verdict(claim: Claim) -> Claim:
    """``claim`` as measured on the upcycled stand-in: the numbers kept, the verdict "cannot be judged here"
    (``holds=None``) with the reason from :data:`STANDIN_CANNOT_TEST` and what the rule gave."""
    reason = STANDIN_CANNOT_TEST[claim.id]
    ruled = {True: "holds", False: "fails", None: "cannot decide"}[claim.holds]
    return replace(claim, holds=None,
                   note=f"not judgeable on the stand-in: {reason} (the rule on these numbers {ruled})"
                        + (f"; {claim.note}" if claim.note else ""))


def super_experts_claim(output_max: torch.Tensor, include_layers: float = 0.75, effect: float = EFFECT,
                        note: str = "", shared: torch.Tensor | None = None) -> Claim:
    """Su et al.: a few super experts carry "rare but extreme activation outliers in the output of the down_proj"
    (Sec. 3; Mixtral-8x7B: 1 of 256, < 0.5% of the experts in every model studied).

    Rule: S = the authors' super experts (:func:`super_experts`: first 75% of layers, a > P99.5 and a > max // 10);
    holds iff 1 <= |S| <= 1% of all experts **and** min_{s in S} a_s >= ``effect`` x the median a of the other
    routed experts (:func:`effect_size`). output_max: (L, E) largest |down_proj output| per layer (the model's
    index; NaN rows: no routed experts) and expert; ``shared``: (L,) the shared experts' (candidates as expert -1)."""
    supers = super_experts(output_max, include_layers, shared=shared)
    total = int(torch.isfinite(output_max).sum()) + (0 if shared is None else int(torch.isfinite(shared).sum()))
    share = len(supers) / total
    size = effect_size(output_max, supers, include_layers)
    return Claim(id="su2025.few_super_experts", source=f"{SU}, Section 3 (authors' code: _identify_super_experts)",
                 statement="a few experts produce the extreme down_proj outputs behind the massive activations",
                 rule=f"the authors' rule (first 75% of layers, a > 99.5th percentile and > max // 10) finds 1 or more "
                      f"super experts, at most 1% of all experts, and each has a >= {effect:g} x the median a of the "
                      f"other routed experts",
                 published={"Mixtral-8x7B": "1 of 256", "DeepSeek-V2-Lite": "2 of 1,782", "Qwen3-30B-A3B": "3 of 6,144"},
                 measured={"super_experts": [list(s[:2]) for s in supers], "share": share,
                           "a of the super experts": [s[2] for s in supers], "effect size": size,
                           "authors' rule finds": len(supers)},
                 holds=bool(supers) and share <= 0.01 and size >= effect, note=note,
                 follows=f"Sec. 3.2.1, Eq. 6 and Algorithm 1; {SE_CODE}:_identify_super_experts (quantile=99.5, "
                         f"times=10) after _super_experts_analysis (include_layers=0.75)",
                 adapted=f"a is the max |down_proj output| over every token routed to the expert, where the authors' "
                         f"hook keeps the first routed token's row per call (output[0].abs().max(), the earliest routed "
                         f"token's row: super_experts.first_routed_max, whose selection the notebook prints beside "
                         f"it); the authors' rule is kept as the "
                         f"selection; the claim adds an effect size (each super "
                         f"expert's a >= {effect:g} x the median a of the other routed experts), because with few "
                         f"layer-experts (the stand-in keeps 22 x 8 = 176) the 99.5th percentile lies between the two "
                         f"largest a and the rank rule alone passes exactly one expert for any weights",
                 at_init=False)


def candidate_count(route: Routing) -> int:
    """How many experts the super-expert rule chooses from: every routed expert of a MoE layer, plus shared ones."""
    shared = 0 if route.shared_max is None else int(torch.isfinite(route.shared_max).sum())
    return int(torch.isfinite(route.output_max).sum()) + shared


def super_experts_over_draws(lm: LoadedModel, first: torch.Tensor, n_first: int, seed: int, n_windows: int,
                             seq_len: int, batch_size: int = 8, note: str = "",
                             shared: torch.Tensor | None = None) -> Claim:
    """:func:`super_experts_claim` judged over 3 draws (:func:`sinklib.core.claims.over_draws`): ``first`` -- the
    run's own (L, E) expert maxima over ``n_first`` windows (seed ``seed``) -- and two more draws of ``n_windows`` held-out windows (seeds
    seed + 1, seed + 2). On the upcycled stand-in its construction is a draw too: each extra draw routes through the
    stand-in upcycled with that seed (:func:`sinklib.models.upcycle.load_standin`, built once and cached)."""
    from sinklib.core.claims import over_draws
    from sinklib.core.data import text_windows
    from sinklib.models import upcycle
    from sinklib.models.load import load_model

    def dense() -> LoadedModel:
        return load_model(upcycle.STANDIN_RECIPE["base"], device="cpu", dtype="float32")

    rebuilt = lm.spec.source == "upcycled"
    draws = [super_experts_claim(first, note=note, shared=shared)]
    for draw_seed in (seed + 1, seed + 2):
        ids = text_windows(lm.tokenizer, n_windows, seq_len, draw_seed, split="heldout")
        other = upcycle.load_standin(draw_seed, lm, dense) if rebuilt else lm
        route = routing(other, ids, batch_size=batch_size)
        draws.append(super_experts_claim(route.output_max, note=note, shared=route.shared_max))
        del other
    what = "stand-ins upcycled with seeds" if rebuilt else "draws of held-out windows (seeds"
    return over_draws(draws, f"3 {what} {seed}-{seed + 2}{'' if rebuilt else ')'}, each routing its own held-out "
                             f"windows ({n_first}, {n_windows} and {n_windows})",
                      key=lambda c: c.measured["effect size"])


def pruning_claim(base: dict, pruned: dict, controls: list[dict], note: str = "") -> Claim:
    """Su et al.: pruning the super experts collapses the sink and the model; pruning as many random experts does
    not. Each dict: {"alpha": mean alpha_0 over layers, "ppl": perplexity}. Rule: the super-expert prune lowers alpha
    by > 50% and raises perplexity > 1.5x, while every random control changes alpha by < 10% and perplexity by
    < 10%."""
    def rel(a, b):
        return b / a - 1

    se_ok = rel(base["alpha"], pruned["alpha"]) < -0.5 and pruned["ppl"] > 1.5 * base["ppl"]
    ctl_ok = all(abs(rel(base["alpha"], c["alpha"])) < 0.1 and abs(rel(base["ppl"], c["ppl"])) < 0.1
                 for c in controls)
    return Claim(id="su2025.pruning_super_experts_breaks_the_sink", source=f"{SU}, Table 3 and Section 4",
                 statement="pruning the super experts collapses the attention sink and the model; random pruning "
                           "does not",
                 rule="super-expert prune: alpha_0 down > 50% and perplexity up > 1.5x; each random control of as "
                      "many experts in the same layers: both within 10%",
                 published={"Mixtral-8x7B ppl": {"baseline": 3.84, "prune SEs": 6.23, "random": 3.86},
                            "attention sink decay": "about 90% or more in every layer"},
                 measured={"baseline": base, "prune super experts": pruned, "random": controls},
                 holds=bool(se_ok and ctl_ok), note=note,
                 follows=f"Table 3 (perplexity with the super experts vs as many random experts pruned) and Sec. 4 "
                         f"(attention sink decay); {SE_CODE}:evaluate_ppl (prune_SE)",
                 adapted="the paper reports numbers and no threshold: the cuts (alpha_0 down > 50%, perplexity up > "
                         "1.5x, each random control within 10%) are this project's; pruning zeroes the expert's "
                         "weights and leaves the router as it is",
                 at_init=False)


def pruning_over_draws(summary: dict[str, dict], note: str = "") -> Claim:
    """:func:`pruning_claim` judged once per random-expert draw (the super-expert prune against that draw) and
    combined with :func:`~sinklib.core.claims.over_draws`: holds only if every draw holds. summary: the
    :meth:`PruneRun.summary` of each run of :func:`compare_pruning` ("as is", "super experts pruned",
    "random experts: ...", ...). The record's ``measured`` keeps every draw; ``spread`` is each draw's largest
    relative perplexity change."""
    base, pruned = summary["as is"], summary["super experts pruned"]
    controls = [v for k, v in summary.items() if k.startswith("random")]
    per_draw = [pruning_claim(base, pruned, [c], note) for c in controls] or [pruning_claim(base, pruned, [], note)]
    combined = over_draws(per_draw, f"{len(controls)} draw{'' if len(controls) == 1 else 's'} of as many random experts of the same layers",
                          key=lambda c: max([abs(r["ppl"] / base["ppl"] - 1) for r in c.measured["random"]],
                                            default=0.0))
    return replace(combined, measured={"baseline": base, "prune super experts": pruned, "random": controls})
