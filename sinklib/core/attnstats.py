"""Sink statistics at long context without materialising attention: O(chunk x N) extra memory per head.

:class:`AttentionStats` registers a function in transformers' ``AttentionInterface`` that computes the attention
probabilities of a block of ``chunk`` queries at a time from the layer's (post-RoPE) queries and keys and, in the
same pass, the layer's output ``P V`` for that block (``fused``, the default, when the tower's backend is plain
sdpa or eager and no dropout is active: one QK^T + softmax per layer instead of the backend's plus ours; equal to
sdpa's output within float32 rounding). Otherwise -- an outer switch (a mitigation variant, an intervention), dropout
in training, or ``fused=False`` -- the model's own backend computes the output and the probabilities are recomputed
beside it. When only a few keys are wanted (``keys=[0]``: the first token's alpha at long context) and the tower
runs plain sdpa / eager attention on a CPU, the output and each query's log-sum-exp come from torch's own
flash-attention kernel in one pass, and the probabilities of the wanted keys follow from it:
p_tj = exp(q_t . k_j * scaling - lse_t) -- the statistics cost one (T x |keys|) product. Otherwise each block is
reduced at once to

* ``col_sum[b, h, j]`` = sum_t A[t, j] and ``visible[b, j]`` = number of queries allowed to see key j, so the sink
  mass per key is m_j = col_sum_j / visible_j (= Gu et al.'s alpha_j for every key j);
* optionally per-query entropy H_t = -sum_j A[t, j] log A[t, j];
* the mass that goes to a learned sink logit (gpt-oss style): p_sink,t = exp(s_h) / (exp(s_h) + sum_j exp(l_tj)),
  reported, not dropped.

Masks are honoured as the backend gets them (:mod:`sinklib.core.attention_masks`): a 4-D mask (causal, padding,
sliding windows) as given; ``None`` as sdpa reads it -- for a causal module (``module.is_causal``, decoders) and
T > 1 queries, query t sees keys 0..t (torch's top-left alignment, which is also what a static-cache prefill gets:
its empty slots after the prompt stay unseen), and every key for a single query; for a bidirectional module (ViT
encoders, ``is_causal = False``) every query sees every key. timm ViTs have no attention interface: their fused path
is switched off and the statistics are reduced from the probabilities timm passes through ``attn_drop`` (full
attention, O(N^2) per layer as timm's own eager path). Grouped-query heads are handled without repeating keys;
soft-capping is applied when the layer passes it. Backends whose masks cannot be read here -- flash-attention (2-D
padding masks, windows passed as a keyword) and flex attention (block masks) -- are refused with a one-line error
instead of giving statistics of another attention than the model's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch

from sinklib.core import lse_attention
from sinklib.core.adapters import Adapter, model_and_adapter
from sinklib.core.attention_masks import allowed, allowed_keys, refuse_unseen_window, visible
from sinklib.core.attention_switch import AttentionSwitch, Patch, TimmEagerAttention
from sinklib.core.errors import InputError

UNREADABLE_BACKENDS = ("flash", "flex")  # implementations whose masks AttentionStats cannot mirror

DEFAULT_BLOCK_BYTES = 8 * 2**20  # float32 scratch per query block (all heads) on a CPU: small enough to stay in cache
CUDA_MAX_BLOCK_BYTES = 2 * 2**30  # on CUDA blocks follow the free memory, up to this
DEVICE_KEEP_BYTES = 512 * 2**20  # CUDA statistics wait on the device up to this, then go to the host in one sync


def _scaling(module, kwargs: dict, head_dim: int) -> float:
    """The logit scale the layer uses: the one it passes, else its attribute, else 1/sqrt(head_dim)."""
    return kwargs.get("scaling") or getattr(module, "scaling", None) or head_dim ** -0.5


def _pad_keys(p: torch.Tensor, k: int) -> torch.Tensor:
    """(B, H, T, K') -> (B, H, T, k): tracked keys beyond the sequence (K' < k) get 0."""
    return p if p.shape[-1] == k else torch.nn.functional.pad(p, (0, k - p.shape[-1]))


class AttentionStats:
    """Context manager collecting per-layer sink statistics while the model runs its normal attention.

    >>> with AttentionStats(lm) as st:
    ...     lm.model(ids)
    >>> st.key_mass(layer=5).shape    # (B, H, N): sink mass per key
    >>> st.alpha(keys=[0]).shape      # (L, B, H, 1)

    ``keys``: when only these keys' statistics are needed; on the fast path (CPU, plain sdpa / eager, no soft-cap or
    learned sink) only they are measured and :meth:`key_mass` is NaN at every other key. ``entropy`` needs all keys.
    Results accumulate over forwards of equal length; call :meth:`clear` between batches of different length.
    """

    def __init__(self, model, *, entropy: bool = False, chunk: int | None = None,
                 block_bytes: int | None = None, fused: bool = True, keys: Sequence[int] | None = None,
                 adapter: Adapter | None = None):
        if keys is not None and entropy:
            raise ValueError("entropy needs every key's probability: use keys=None with entropy=True")
        self.model, self.adapter = model_and_adapter(model, adapter)  # model: nn.Module, or a LoadedModel
        self.fused = fused
        self.keys = None if keys is None else sorted({int(k) for k in keys})
        self.entropy = entropy
        self.chunk = chunk
        self.block_bytes = block_bytes
        self.col_sum: dict[int, list[torch.Tensor]] = defaultdict(list)  # layer -> [(B, H, N)]
        self.visible: dict[int, list[torch.Tensor]] = defaultdict(list)  # layer -> [(B, N)]
        self.query_entropy: dict[int, list[torch.Tensor]] = defaultdict(list)  # layer -> [(B, H, T)]
        self.sink_mass: dict[int, list[torch.Tensor]] = defaultdict(list)  # layer -> [(B, H, T)]
        self.key_probs: dict[int, list[torch.Tensor]] = defaultdict(list)  # layer -> [(B, H, T, len(keys))]
        self._device_bytes = 0  # statistics still on the GPU (see :meth:`_keep`)
        self._switch = AttentionSwitch(self.model, "sinklib_stats", self._attention, mask="previous")
        self._timm = _TimmProbabilities(self) if self.adapter.backend == "timm" else None

    # ------------------------------------------------------------------------------------------------ computation
    def _block_bytes(self, device: torch.device) -> int:
        """Scratch per query block: ``block_bytes`` if given; on a CPU 8 MiB (stays in cache); on CUDA a sixteenth
        of the free memory, at most 2 GiB (few large blocks: a 32k forward in 8 MiB blocks was ~140k kernels)."""
        if self.block_bytes is not None:
            return self.block_bytes
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            return int(min(max(free // 16, DEFAULT_BLOCK_BYTES), CUDA_MAX_BLOCK_BYTES))
        return DEFAULT_BLOCK_BYTES

    def _chunk_size(self, batch: int, heads: int, k_len: int, device: torch.device) -> int:
        if self.chunk:
            return self.chunk
        return max(16, self._block_bytes(device) // (4 * batch * heads * k_len))

    @torch.no_grad()
    def _reduce(self, layer: int, module, query, key, attention_mask, kwargs,
                value: torch.Tensor | None = None) -> torch.Tensor | None:
        """Reduce one layer's attention to statistics, ``chunk`` queries at a time.

        Per block of C queries: logits l = q k^T * scaling (one GEMM per KV head, the G query heads of a group
        stacked), p = softmax_j(l) (times 1 - p_sink for a learned sink logit), and the column sums sum_t p_tj --
        the probabilities are never stored beyond the block. With ``value`` (B, Hkv, N, hd_v) the block's output
        o = p v is computed too and the layer's output returned as the backends return it: (B, T, H, hd_v) in the
        query's dtype (rows that see no key give 0). hd_v may differ from the query / key width hd (multi-head
        latent attention, DeepSeek-V2: hd = qk_nope + qk_rope = 192, hd_v = 128).
        """
        B, H, T, hd = query.shape  # T queries
        N, Hkv = key.shape[2], key.shape[1]
        if attention_mask is not None and attention_mask.ndim != 4:
            raise InputError(f"AttentionStats needs a 4-D attention mask, got shape {tuple(attention_mask.shape)}; "
                             "load the model with attn_implementation='sdpa' or 'eager'.")
        refuse_unseen_window(attention_mask, kwargs, N)
        # with no mask: sdpa's is_causal (top-left) for T > 1, all keys for one query (see the module docstring);
        # a bidirectional module (ViT) sees every key, i.e. a mask that allows everything
        if attention_mask is None and not getattr(module, "is_causal", True):
            attention_mask = torch.zeros(1, 1, T, N, device=query.device)
        G, off = H // Hkv, (N - 1 if T == 1 else 0)
        scaling = _scaling(module, kwargs, hd)
        softcap = kwargs.get("softcap")
        sinks = kwargs.get("s_aux", getattr(module, "sinks", None))
        q = (query.float() * scaling).view(B, Hkv, G, T, hd)
        kt = key.float().transpose(-1, -2)  # (B, Hkv, hd, N): shared by the G heads of a group, never repeated
        col = torch.zeros(B, Hkv, G, N, dtype=torch.float64, device=query.device)
        if attention_mask is None:  # causal (T > 1: key j seen by queries t >= j), or one query that sees every key
            vis = visible(None, T, N, T > 1, B, query.device, self._block_bytes(query.device))
        else:  # counted block by block below
            vis = torch.zeros(B, N, dtype=torch.float64, device=query.device)
        ent = torch.empty(B, Hkv, G, T, device=query.device) if self.entropy else None
        tracked = [j for j in self.keys if j < N] if self.keys is not None else []
        probs = torch.zeros(B, Hkv, G, T, len(tracked), device=query.device) if tracked else None
        hd_v = value.shape[-1] if value is not None else hd
        out = torch.empty(B, Hkv, G, T, hd_v, device=query.device) if value is not None else None
        v = value.float() if value is not None else None  # (B, Hkv, N, hd_v), shared by the G heads of a group
        sink = torch.empty(B, Hkv, G, T, device=query.device) if sinks is not None else None
        step = self._chunk_size(B, H, N, query.device)
        for start in range(0, T, step):
            stop = min(T, start + step)
            C = stop - start
            k_hi = N if attention_mask is not None else stop + off  # later keys are causally invisible
            qc = q[:, :, :, start:stop].reshape(B, Hkv, G * C, hd)
            logits = torch.matmul(qc, kt[..., :k_hi]).view(B, Hkv, G, C, k_hi)
            if softcap is not None:
                logits = torch.tanh(logits / softcap) * softcap
            if attention_mask is None:  # only the diagonal square needs the causal mask
                diag = torch.ones(C, C, dtype=torch.bool, device=query.device).triu(1)
                logits[..., start + off:k_hi].masked_fill_(diag, float("-inf"))
            else:
                ok = allowed(attention_mask, T, N, start, stop, query.device)  # (B|1, 1, C, N)
                logits.masked_fill_(~ok.unsqueeze(2), float("-inf"))
                vis += ok.sum(dim=2).flatten(1).double().expand(B, -1)
            if sinks is not None:  # mass kept by the real keys: 1 - p_sink, p_sink = sigmoid(s_h - logsumexp_j l_tj)
                lse = torch.logsumexp(logits, dim=-1, keepdim=True)
                p_sink = torch.sigmoid(sinks.float().view(1, Hkv, G, 1, 1) - lse)
                sink[..., start:stop] = p_sink.squeeze(-1)
            e = torch.softmax(logits, dim=-1).nan_to_num_(0.0)  # rows with nothing visible (padding) -> 0
            if sinks is not None:
                e.mul_(1.0 - p_sink)
            col[..., :k_hi] += e.sum(dim=3).double()
            if probs is not None:  # tracked keys beyond k_hi are causally invisible to this block: 0
                seen = [i for i, j in enumerate(tracked) if j < k_hi]
                probs[:, :, :, start:stop, seen] = e[..., [tracked[i] for i in seen]]
            if out is not None:  # o = p v: one GEMM per KV head, (B, Hkv, G * C, hd_v)
                out[:, :, :, start:stop] = torch.matmul(e.view(B, Hkv, G * C, k_hi), v[..., :k_hi, :]).view(
                    B, Hkv, G, C, hd_v)
            if ent is not None:  # H_t = -sum_j p_tj log p_tj (- p_sink log p_sink)
                h = torch.special.entr(e).sum(-1)
                ent[..., start:stop] = h + torch.special.entr(p_sink.squeeze(-1)) if sinks is not None else h
            del logits, e
        self._keep(self.col_sum, layer, col.flatten(1, 2).float())
        self._keep(self.visible, layer, vis.float())
        if ent is not None:
            self._keep(self.query_entropy, layer, ent.flatten(1, 2))
        if sink is not None:
            self._keep(self.sink_mass, layer, sink.flatten(1, 2))
        if self.keys is not None:
            self._keep(self.key_probs, layer, _pad_keys(probs.flatten(1, 2) if probs is not None else
                                                         torch.zeros(B, H, T, 0), len(self.keys)))
        if out is None:
            return None
        return out.view(B, H, T, hd_v).transpose(1, 2).contiguous().to(query.dtype)  # (B, T, H, hd_v)

    @torch.no_grad()
    def _reduce_lse(self, layer: int, module, query, key, value, attention_mask, kwargs) -> torch.Tensor:
        """Output and statistics from one fused attention kernel that also returns each query's log-sum-exp.

        The kernel (:func:`lse_attention.attention_lse`: torch's flash kernel on the CPU; flash-attention 2 or the
        memory-efficient kernel on CUDA) gives o = softmax(l) v and lse_t = log sum_j exp(l_tj) (l = q k^T *
        scaling, masked); then p_tj = exp(l_tj - lse_t) where query t may see key j, else 0: the tracked keys'
        probabilities from one (T x |keys|) product, or every key's column sum from one more pass over q k^T
        (:func:`lse_attention.column_sums`: a Triton kernel on CUDA). Masks as sdpa reads them (None: causal for
        T > 1 in a causal module, all keys otherwise). Returns (B, T, H, hd).
        """
        B, H, T, hd = query.shape
        N = key.shape[2]
        scaling = _scaling(module, kwargs, hd)
        refuse_unseen_window(attention_mask, kwargs, N)
        causal = attention_mask is None and T > 1 and getattr(module, "is_causal", True)
        mask = attention_mask[:, :, :, :N] if attention_mask is not None else None
        out, lse = lse_attention.attention_lse(query, key, value, mask, causal, scaling)  # (B, H, T, hd), (B, H, T)
        if self.keys is not None:
            keys = [j for j in self.keys if j < N]
            ok = allowed_keys(attention_mask, T, keys, causal, query.device)  # (B|1, 1, T, K)
            p = lse_attention.tracked_probabilities(query, key, lse, ok, keys, scaling)  # (B, H, T, K)
            col = torch.zeros(B, H, N, device=query.device)
            vis = torch.zeros(B, N, device=query.device)
            self._keep(self.key_probs, layer, _pad_keys(p, len(self.keys)))
            col[..., keys] = p.sum(dim=2)
            vis[:, keys] = ok.sum(dim=2).flatten(1).float().expand(B, -1)
        else:
            col = lse_attention.column_sums(query, key, lse, mask, 0 if causal else None, scaling,
                                            self._block_bytes(query.device))
            vis = visible(mask, T, N, causal, B, query.device, self._block_bytes(query.device))
        self._keep(self.col_sum, layer, col.float())
        self._keep(self.visible, layer, vis.float())
        return out.transpose(1, 2).contiguous()

    def _lse_path(self, module, query, value, kwargs) -> bool:
        """Output and statistics from one kernel with the log-sum-exp (:meth:`_reduce_lse`): plain sdpa / eager
        (no outer switch, no dropout), nothing the kernels do not do (soft-cap, a learned sink logit, a value width
        other than the query's), no entropy; on the CPU only when a few keys are tracked (every key's mass is
        cheaper there from the blocked softmax), on CUDA always."""
        if self.entropy or not self._can_fuse(module, kwargs) or kwargs.get("softcap") is not None:
            return False
        if kwargs.get("s_aux", getattr(module, "sinks", None)) is not None or value.shape[-1] != query.shape[-1]:
            return False
        if query.device.type == "cuda":
            return query.dtype in (torch.float32, torch.float16, torch.bfloat16)
        return self.keys is not None and query.device.type == "cpu" and query.dtype in (torch.float32, torch.bfloat16)

    def _can_fuse(self, module, kwargs) -> bool:
        """Compute the output here only when the backend it replaces is plain sdpa / eager (not an outer switch) and
        no dropout is active (transformers passes ``dropout`` > 0 only in training)."""
        return self.fused and self._switch.backend_for(module) in ("sdpa", "eager") and not kwargs.get("dropout")

    def _attention(self, module, query, key, value, attention_mask, **kwargs):
        layer = self.adapter.index_of(module)
        if layer is None:  # other towers (an MLLM's vision encoder) are not reduced
            return self._switch.delegate(module, query, key, value, attention_mask, **kwargs)
        if self._lse_path(module, query, value, kwargs):
            return self._reduce_lse(layer, module, query, key, value, attention_mask, kwargs), None
        if self._can_fuse(module, kwargs):
            return self._reduce(layer, module, query, key, attention_mask, kwargs, value=value), None
        self._reduce(layer, module, query, key, attention_mask, kwargs)
        return self._switch.delegate(module, query, key, value, attention_mask, **kwargs)

    def _keep(self, store: dict[int, list[torch.Tensor]], layer: int, value: torch.Tensor) -> None:
        """Append a layer's statistic. A GPU value stays on the device until :meth:`_to_host` (at the context's
        exit, before any reading method, or once :data:`DEVICE_KEEP_BYTES` wait): a ``.cpu()`` per layer would make
        the host wait for the GPU at every layer, and the forward would lose its overlap of launches and kernels."""
        store[layer].append(value)
        if value.device.type != "cpu":
            self._device_bytes += value.numel() * value.element_size()
            if self._device_bytes > DEVICE_KEEP_BYTES:
                self._to_host()

    def _to_host(self) -> None:
        """Move every kept statistic to the host (one synchronisation for all of them)."""
        if not self._device_bytes:
            return
        for store in (self.col_sum, self.visible, self.query_entropy, self.sink_mass, self.key_probs):
            for values in store.values():
                values[:] = [v.cpu() for v in values]
        self._device_bytes = 0

    # ------------------------------------------------------------------------------------------------ context
    @torch.no_grad()
    def _reduce_probabilities(self, layer: int, probs: torch.Tensor) -> None:
        """timm: the same statistics from full probabilities (B, H, N, N) of bidirectional attention."""
        B, H, T, N = probs.shape
        p = probs.float()
        self._keep(self.col_sum, layer, p.sum(dim=2))
        self.visible[layer].append(torch.full((B, N), float(T)))
        if self.entropy:
            self._keep(self.query_entropy, layer, torch.special.entr(p).sum(-1))

    def __enter__(self) -> AttentionStats:
        if self._timm is not None:
            self._timm.__enter__()
            return self
        backend = str(self.model.config._attn_implementation)
        if any(name in backend for name in UNREADABLE_BACKENDS):
            raise InputError(f"AttentionStats cannot mirror {backend!r} (its masks are 2-D padding masks, keyword "
                             "windows or block masks); load the model with attn_implementation='sdpa' or 'eager'.")
        self._switch.__enter__()  # the backend gets the very mask it would have built (None for causal sdpa)
        return self

    def __exit__(self, *exc) -> None:
        try:
            (self._timm if self._timm is not None else self._switch).__exit__(*exc)
        finally:
            self._to_host()

    # ------------------------------------------------------------------------------------------------ results
    @property
    def layers(self) -> list[int]:
        return sorted(self.col_sum)

    def key_mass(self, layer: int) -> torch.Tensor:
        """Sink mass per key m_j = sum_t A[t, j] / #queries that see j: (B_total, H, N); NaN where none sees j."""
        self._to_host()
        col = torch.cat(self.col_sum[layer])
        vis = torch.cat(self.visible[layer])[:, None, :]
        return col / vis.where(vis > 0, torch.full_like(vis, float("nan")))

    def alpha(self, keys: list[int] | None = None) -> torch.Tensor:
        """alpha_k for every layer: (L, B_total, H, len(keys)) (default key 0)."""
        keys = [0] if keys is None else list(keys)
        if self.keys is not None and (missing := sorted(set(keys) - set(self.keys))):
            raise ValueError(f"keys {missing} were not measured: AttentionStats(..., keys={self.keys}) tracks only those")
        return torch.stack([self.key_mass(i)[..., keys] for i in self.layers])

    def probs_of_keys(self, layer: int) -> torch.Tensor:
        """A[t, j] for every query t and each tracked key j (``keys=``): (B_total, H, T, len(keys)), 0 where t may
        not see j. With causal attention the first n queries are exactly a forward of the first n tokens, so
        alpha_j of every prefix follows: ``probs[..., j:n, i].mean(-1)``."""
        self._to_host()
        if self.keys is None:
            raise RuntimeError("per-query probabilities are kept for chosen keys only: AttentionStats(model, keys=[0])")
        return torch.cat(self.key_probs[layer])

    def entropy_by_query(self, layer: int) -> torch.Tensor:
        """Per-query attention entropy (B_total, H, T); needs ``entropy=True``."""
        self._to_host()
        if not self.query_entropy[layer]:
            raise RuntimeError("entropy was not requested: use AttentionStats(model, entropy=True)")
        return torch.cat(self.query_entropy[layer])

    def learned_sink_mass(self, layer: int) -> torch.Tensor | None:
        """Per-query mass sent to a learned sink logit (B_total, H, T), or None when the layer has none."""
        self._to_host()
        return torch.cat(self.sink_mass[layer]) if self.sink_mass[layer] else None

    def clear(self) -> None:
        for store in (self.col_sum, self.visible, self.query_entropy, self.sink_mass, self.key_probs):
            store.clear()
        self._device_bytes = 0


class _TimmProbabilities(Patch):
    """timm ViTs: fused attention off, and a hook on each block's ``attn_drop`` handing the probabilities over."""

    def __init__(self, stats: AttentionStats):
        super().__init__()
        self.stats = stats

    def _install(self) -> None:
        layers = self.stats.adapter.layers
        self._switches.append(TimmEagerAttention([p.attn for p in layers]).__enter__())
        for p in layers:
            self._handles.append(p.attn.attn_drop.register_forward_hook(
                lambda m, a, out, i=p.index: self.stats._reduce_probabilities(i, out)))
