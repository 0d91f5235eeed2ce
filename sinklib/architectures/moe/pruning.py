"""Pruning experts and what it does to the sink (Su et al.'s Table 3 protocol): :class:`PruneExperts` zeroes chosen
(layer, expert) pairs for a ``with`` block, :class:`SharedPrefix` computes the blocks before the first pruned layer
once for every pruned run, :func:`first_token_state` reads alpha_0 and the first token's largest |h| per layer, and
:func:`compare_pruning` runs the model as is, with the super experts pruned and with as many random experts pruned.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from sinklib.architectures.moe.moe_sinks import expert_name
from sinklib.core.adapters import adapter_for
from sinklib.core.capture import Capture
from sinklib.core.evaluation import perplexity
from sinklib.core.loaded import LoadedModel
from sinklib.interpretation.origin import batches


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
        with AttentionStats(lm, keys=[0]) as st, \
                Capture(lm, hidden_states=True, layers=layers, reduce=first) as cap:
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
        with Capture(lm, kinds=["expert_choice", "expert_outputs"], layers=layers, reduce=reduce) as cap:
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
    n_experts = lm.adapter.layers[supers[0][0]].experts.num_experts if supers else 0
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
