"""11_moe's rendered takeaways: numbers and direction words come from the inputs."""

import torch

from sinklib.architectures.moe import su_claims
from sinklib.architectures.moe import takeaways as tk
from sinklib.core.claims import with_control


def test_routing_takeaway_follows_the_numbers():
    fixed = tk.routing([1.0, 1.0, 0.5], [0.3, 0.4, 0.5], [2.079] * 3, [2.079] * 3, 8, "m")
    assert fixed.startswith("**What we saw (m).**") and "In 2 of the 3 layers (0-1)" in fixed
    assert "more often than the middle token" in fixed and "near-uniform" in fixed
    loose = tk.routing([0.2, 0.3, 0.4], [0.6, 0.7, 0.8], [1.0] * 3, [1.5] * 3, 8, "m")
    assert "In none of the 3 layers" in loose and "less often than the middle token" in loose
    assert "near-uniform" not in loose


def test_super_experts_takeaway_says_above_or_below_the_cut():
    table = torch.ones(30, 8)
    table[11, 0] = 1e5
    claim = with_control(su_claims.super_experts_claim(table), su_claims.super_experts_claim(torch.rand(30, 8) + 1))
    text = tk.super_experts(claim, table.numel(), "m")
    assert "expert 0 of layer 11 (a = 100,000)" in text and "above the cut" in text and "holds" in text
    assert "on random weights it fails" in text
    weak = torch.ones(30, 8)
    weak[11, 0] = 3.0
    text = tk.super_experts(su_claims.super_experts_claim(weak), weak.numel(), "m")
    assert "below the cut" in text and "does not hold" in text


def test_pruning_takeaway_direction_words():
    base, ok = {"alpha": 0.5, "ppl": 40.0, "max_abs_first": 2e4}, {"alpha": 0.5, "ppl": 41.0, "max_abs_first": 2e4}
    runs = {"as is": base, "super experts pruned": {"alpha": 0.2, "ppl": 150.0, "max_abs_first": 700.0},
            "random experts [a]": ok, "random experts [b]": ok, "random experts [c]": ok}
    text = tk.pruning(runs, su_claims.pruning_over_draws(runs), "m")
    assert "from 0.500 to 0.200 (a fall of 60%)" in text and "3 draws" in text and "change alpha_0" in text
    assert "holds (3 of 3 draws hold" in text
    runs["super experts pruned"] = {"alpha": 0.6, "ppl": 42.0, "max_abs_first": 2e4}
    text = tk.pruning(runs, su_claims.pruning_over_draws(runs), "m")
    assert "(a rise of 20%)" in text and "does not hold" in text
    assert "nothing was pruned" in tk.pruning({"as is": base}, None, "m")
