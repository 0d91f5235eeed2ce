"""The "What we saw" paragraphs of ``11_moe``, rendered from the run's results and claims (one function per
section). Every number and direction word comes from the inputs, so the text stays true on another model, profile
or seed; the notebook displays them with :func:`sinklib.core.takeaways.show`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from sinklib.core.claims import Claim
from sinklib.core.takeaways import claim_line, compare, layer_ranges, num, paragraph, pct, span


def windows(n: int, tokens: int, kind: str = "held-out windows") -> str:
    """What a number was measured on: "32 held-out windows of 64 tokens" (:func:`sinklib.core.takeaways.unmeasured`
    asks every takeaway's heading for such a size)."""
    return f"{n:,} {kind} of {tokens:,} tokens"


def _heading(title: str, size: str) -> str:
    """The takeaway's heading: the model's label, then what it was measured on."""
    return f"{title}, {size}" if size else title


def routing(same_first: Sequence[float], same_rest: Sequence[float], entropy_first: Sequence[float],
            entropy_rest: Sequence[float], n_experts: int, title: str, layers: Sequence[int] | None = None,
            size: str = "") -> str:
    """Section 1: in how many layers every window sends the first token to the same experts (share = 1), the middle
    token's most-common-set share over layers, and the router entropy against ln E. One entry per MoE layer;
    ``layers``: their indices in the model, as the layers are named (default 0, 1, ...); ``size``: what it was
    measured on (:func:`windows`), in the heading."""
    every = list(range(len(same_first)))
    layers = every if layers is None else list(layers)
    kind = "layers" if layers == every else "layers with routed experts"  # e.g. DeepSeek-V2's dense layer 0: none
    always = [layer for layer, s in zip(layers, same_first) if s == 1.0]
    first, rest = sum(same_first) / len(same_first), sum(same_rest) / len(same_rest)
    if always:
        fixed = (f"In {len(always)} of the {len(same_first)} {kind} ({layer_ranges(always)}) every window sends the "
                 f"first token to the same set of experts.")
    else:
        fixed = f"In none of the {len(same_first)} {kind} does every window send the first token to the same experts."
    middle = (f"A token in the middle of the window gets its most common set in {pct(min(same_rest), 2)}-"
              f"{pct(max(same_rest), 2)} of the windows, depending on the layer; averaged over layers the first "
              f"token gets its most common set {compare(first, rest, 'more often than', 'less often than', 'as often as')}"
              f" the middle token ({pct(first, 2)} of the windows against {pct(rest, 2)}).")
    uniform = math.log(n_experts)
    h_first, h_rest = sum(entropy_first) / len(entropy_first), sum(entropy_rest) / len(entropy_rest)
    near = abs(h_first - uniform) < 0.01 * uniform and abs(h_rest - uniform) < 0.01 * uniform
    entropy = (f"The router entropy is {num(h_first, 4)} nats on the first token and {num(h_rest, 4)} on the others, "
               f"against ln {n_experts} = {num(uniform, 4)}"
               + (": the router's probabilities are near-uniform, so the entropy cannot tell tokens apart here."
                  if near else "."))
    return paragraph(_heading(title, size), fixed, middle, entropy)


def super_experts(claim: Claim, total: int, title: str, size: str = "") -> str:
    """Section 2: how many super experts the authors' rule finds among ``total`` candidate experts, their a, how far
    they stand out (effect size against the cut), and the claim's verdict; ``size``: the calibration windows
    (:func:`windows`), in the heading."""
    m = claim.measured
    found = m["super_experts"]
    if found:
        where = "; ".join(f"{'the shared expert' if e == -1 else f'expert {e}'} of layer {layer} (a = {num(a)})"
                          for (layer, e), a in zip(found, m["a of the super experts"]))
        first = f"The authors' rule finds {len(found)} super expert{'s' if len(found) > 1 else ''} of {num(total)}: {where}."
        cut = (f"{'The smallest of them' if len(found) > 1 else 'It'} is {num(m['effect size'])} x the median a of the other routed experts, "
               f"{compare(m['effect size'], 10.0, 'above', 'below', 'at')} the cut of 10 x that makes an output "
               f"extreme.")
    else:
        first, cut = f"The authors' rule finds no super expert among {num(total)} experts.", ""
    return paragraph(_heading(title, size), first, cut, f"{claim_line(claim)}.")


def pruning(summary: Mapping[str, Mapping[str, float]], claim: Claim | None, title: str, size: str = "",
            ppl_size: str = "") -> str:
    """Section 3: what pruning the super experts does to mean alpha_0, perplexity and the first token's largest |h|,
    against the random-expert draws; the claim's verdict. ``size``: the windows alpha_0 and |h| were measured on,
    ``ppl_size``: those of the perplexity (:func:`windows`); the heading names each."""
    base, pruned = summary["as is"], summary.get("super experts pruned")
    if size and ppl_size:
        title = _heading(title, f"alpha_0 and |h| on {size}, perplexity on {ppl_size}")
    else:
        title = _heading(title, size or ppl_size)
    if pruned is None or claim is None:
        return paragraph(title, "No super expert was found, so nothing was pruned.")
    alpha = (f"Pruning the super experts moves alpha_0 averaged over layers from {num(base['alpha'])} to "
             f"{num(pruned['alpha'])} ({compare(pruned['alpha'], base['alpha'], 'a rise', 'a fall', 'no change')} of "
             f"{pct(abs(pruned['alpha'] / base['alpha'] - 1), 2)}), perplexity from {num(base['ppl'])} to "
             f"{num(pruned['ppl'])} ({num(pruned['ppl'] / base['ppl'], 2)}x), and the first token's largest |h| over "
             f"layers from {num(base['max_abs_first'])} to {num(pruned['max_abs_first'])}.")
    controls = [v for k, v in summary.items() if k.startswith("random")]
    if controls:
        d_alpha = max(abs(c["alpha"] / base["alpha"] - 1) for c in controls)
        d_ppl = max(abs(c["ppl"] / base["ppl"] - 1) for c in controls)
        several = len(controls) > 1
        random = (f"{len(controls)} draw{'s' if several else ''} of as many random experts of the same layers "
                  f"change{'' if several else 's'} alpha_0 by at most {pct(d_alpha, 2)} and perplexity by at most {pct(d_ppl, 2)} "
                  f"(perplexity {span([c['ppl'] for c in controls])}).")
    else:
        random = "No random-expert draw was run."
    return paragraph(title, alpha, random, f"{claim_line(claim)}.")


def trained_router(routers: Sequence, label: str, size: str = "") -> str:
    """Section 4: what a router trained with the model does with the first token, and whether a sink formed, per
    seed (:class:`~sinklib.architectures.moe.trained_router.TrainedRouter`); ``size``: the held-out sequences each
    seed was measured on (:func:`windows`), in the heading with the number of seeds."""
    sink = [r for r in routers if r.sink_rate > 0.3]
    fixed = [r for r in routers if min(r.same_set_first) > 0.9 and max(r.same_set_middle) < 0.5]
    rows = "; ".join(f"seed {r.seed}: sink rate {pct(r.sink_rate, 2)}, first token on its most common expert set in "
                     f"{pct(min(r.same_set_first), 2)}-{pct(max(r.same_set_first), 2)} of sequences by layer, a middle "
                     f"token in {pct(min(r.same_set_middle), 2)}-{pct(max(r.same_set_middle), 2)}" for r in routers)
    n = len(routers)
    return paragraph(
        _heading(label, f"{n} seed{'s' if n != 1 else ''}" + (f", each on {size}" if size else "")),
        f"{rows}.",
        f"A sink (sink rate above 30%) formed in {num(len(sink))} of {num(len(routers))} seeds; the first token took "
        f"a fixed route (the same expert set in over 90% of sequences in every layer, a middle token under 50%) in "
        f"{num(len(fixed))} of {num(len(routers))}.")
