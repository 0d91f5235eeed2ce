"""Checks for the exercise notebooks (``notebooks/exercises/``): pass the function you wrote, read the verdict.

>>> from sinklib.teaching import check
>>> check.alpha(my_alpha)            # prints "PASS  alpha: ..." or "NOT YET  alpha: <what is wrong>"

Each check runs the student's function on hand-built cases -- worked out by hand in the check's docstring, so a
student can redo them on paper -- and on random cases against sinklib's own implementation (the one the research
notebooks use). It stops at the first case that is wrong and says which case, what was expected and what came back
(or which exception was raised). It returns a :class:`Result`, truthy when everything passed, so a test can assert it.

One module per exercise notebook: :mod:`.tour` (00), :mod:`.utilization` (01), :mod:`.interpretation` (02),
:mod:`.mitigation` (03), :mod:`.llm` (10), :mod:`.moe` (11), :mod:`.mllm` (12), :mod:`.vit` (13); :mod:`._core` holds what they share.
"""

from __future__ import annotations

from sinklib.teaching.check._core import Result
from sinklib.teaching.check.interpretation import position_variance, self_only_mask, super_neuron
from sinklib.teaching.check.llm import mass_by_kind, position_verdict, sink_mass
from sinklib.teaching.check.mitigation import (
    attention_function,
    head_rmsnorm,
    softmax_off_by_one,
    softpick,
    train_step,
)
from sinklib.teaching.check.mllm import image_centric_rows, phi, var_redistribute
from sinklib.teaching.check.moe import expert_output_max, router_entropy, super_experts
from sinklib.teaching.check.tour import alpha, dom_ratio, massive, sink_rate, uniform_alpha
from sinklib.teaching.check.utilization import (
    act_redistribute,
    fake_quantize,
    kept_positions,
    sink_window_layer,
)
from sinklib.teaching.check.vit import move_to_registers, outlier_mask, register_scores

ALL = {f.__name__: f for f in (
    alpha, sink_rate, uniform_alpha, dom_ratio, massive,  # 00
    kept_positions, fake_quantize, act_redistribute, sink_window_layer,  # 01
    position_variance, super_neuron, self_only_mask,  # 02
    softmax_off_by_one, softpick, head_rmsnorm, attention_function, train_step,  # 03
    sink_mass, mass_by_kind, position_verdict,  # 10
    router_entropy, expert_output_max, super_experts,  # 11
    phi, image_centric_rows, var_redistribute,  # 12
    outlier_mask, register_scores, move_to_registers,  # 13
)}
"""Every check by name (the tests run each against its solution, a stub and a wrong answer)."""

__all__ = ["ALL", "Result", *ALL]
