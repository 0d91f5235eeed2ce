"""Where attention calibration (ACT, arXiv 2406.15765) may apply: heads with sinks beyond the first token.

ACT itself chooses heads by calibration *accuracy* on a labelled set (a head is kept when calibrating it improves
the answers); with no such set offline, :func:`non_first_sink_heads` is this project's proxy -- heads that have a
non-first sink at all -- and the notebook says so.
"""

from __future__ import annotations

import torch

from sinklib.core.attnstats import AttentionStats
from sinklib.core.models import LoadedModel
from sinklib.pipeline.claims import Claim


@torch.inference_mode()
def non_first_sink_heads(lm: LoadedModel, ids: torch.Tensor, threshold: float = 0.1, min_fraction: float = 0.5,
                         batch_size: int = 8) -> dict[int, list[int]]:
    """Heads in which some key j >= 1 passes ACT's sink test -- sum_t A[t, j] / (T - j), the column sum over the
    queries that see key j (GATECH-EIC/ACT, ``atten_process_eval``) -- above ``threshold`` in at least
    ``min_fraction`` of the calibration sequences. ids: (N, T) -> {layer: [head, ...]}."""
    hits = None
    for start in range(0, len(ids), batch_size):
        batch = ids[start:start + batch_size].to(lm.device)
        with AttentionStats(lm.model) as st:
            lm.model(batch, use_cache=False, logits_to_keep=1)
        mass = torch.stack([st.key_mass(i) for i in st.layers])  # (L, B, H, T): sum_t A[t, j] / (T - j)
        h = (mass[..., 1:] > threshold).any(dim=-1).float().sum(dim=1)  # (L, H) sequences with such a sink
        hits = h if hits is None else hits + h
    frac = hits / len(ids)
    return {layer: heads for layer in range(frac.shape[0])
            if (heads := (frac[layer] >= min_fraction).nonzero().flatten().tolist())}


def act_claim(ppl: dict[str, float | None], n_heads: int, total_heads: int) -> Claim:
    """ACT (Yu et al., arXiv 2406.15765): calibrating the heads with hidden (non-first) sinks improves the model.

    Cannot be judged offline: ACT keeps a head only when calibrating it improves accuracy on a labelled set; here
    the heads are :func:`non_first_sink_heads` (a proxy), so the record carries the measured perplexities with
    ``holds = None`` and says whether the proxy helped."""
    helped = ppl.get("ACT") is not None and ppl["ACT"] < ppl["original"]
    return Claim(id="yu2024.act_calibration_helps", source="Yu et al., ACT, arXiv 2406.15765",
                 statement="calibrating attention in heads with non-first sinks improves the model without training",
                 rule="not applied: ACT's accuracy-based head search needs a labelled set that is not offline",
                 published=None, measured={"heads": n_heads, "of": total_heads, **ppl}, holds=None,
                 note=f"proxy head choice ({n_heads} heads with a non-first sink) "
                      f"{'lowers' if helped else 'does not lower'} held-out perplexity")
