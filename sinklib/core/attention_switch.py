"""The one place that changes how a model runs attention (and its experts), always undone on exit.

* :class:`AttentionSwitch` registers a function under a fresh name in transformers' ``AttentionInterface`` (and a
  mask function in ``AttentionMaskInterface``), switches the model -- every tower of a multimodal model -- to it,
  and on exit puts each config's own implementation back and removes both entries;
* :class:`ExpertsSwitch` does the same with ``ExpertsInterface`` for transformers 5's fused MoE experts;
* :class:`TimmEagerAttention` turns timm's fused attention off so the probabilities pass through ``attn_drop``.

Capture, the O(N) statistics and the interventions all use them, so they nest (outer first) and leave no trace.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable

from torch import nn

_counter = itertools.count()


def model_configs(model: nn.Module) -> list:
    """The configs whose ``_attn_implementation`` a switch changes: the model's, every sub-config's (text, vision,
    ...) and every sub-model's, each once."""
    seen, out, todo = set(), [], [model.config]
    todo += [m.config for m in model.modules() if hasattr(m, "config") and hasattr(m.config, "_attn_implementation")]
    while todo:
        config = todo.pop(0)
        if config is None or id(config) in seen:
            continue
        seen.add(id(config))
        out.append(config)
        todo += [getattr(config, key, None) for key in getattr(config, "sub_configs", {})]
    return out


class _Implementations:
    """Every config's ``_attn_implementation`` (or ``_experts_implementation``) before a switch, per tower, so that
    each gets its own back afterwards and a module can be handed to the backend its tower used."""

    def __init__(self, model: nn.Module, kind: str):
        self.attr = f"_{kind}_implementation"
        self.saved = [(c, getattr(c, self.attr)) for c in model_configs(model) if hasattr(c, self.attr)]
        self.by_config = {id(c): impl for c, impl in self.saved}

    def before(self, module: nn.Module, default: str | None) -> str | None:
        return self.by_config.get(id(getattr(module, "config", None)), default)

    def restore(self, name: str) -> None:
        for config, implementation in self.saved:
            if getattr(config, self.attr) == name:  # still ours (an inner switch has already put ours back)
                setattr(config, f"{self.attr}_internal", implementation)


def _switch_to(switch, set_implementation: Callable) -> None:
    """Apply a registered name; on failure undo the registration before re-raising."""
    try:
        set_implementation(switch.name)
    except BaseException:
        switch.__exit__(None, None, None)
        raise


def eager_for(module: nn.Module) -> Callable:
    """The eager attention function of the module's own modeling file (handles GQA, soft-capping, sinks, ...)."""
    fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if fn is None:
        from transformers.models.llama.modeling_llama import eager_attention_forward as fn
    return fn


class AttentionSwitch:
    """Context manager: route the model's attention through ``fn`` for the duration of a ``with`` block.

    ``mask``: "eager" gives ``fn`` the 4D additive float mask eager attention uses (always materialised, easy to
    edit); "previous" gives it exactly what the previous backend would have received (None for plain causal sdpa).
    """

    def __init__(self, model: nn.Module, prefix: str, fn: Callable, mask: str = "eager"):
        if mask not in ("eager", "previous"):
            raise ValueError("mask must be 'eager' or 'previous'")
        self.model, self.prefix, self.fn, self.mask = model, prefix, fn, mask
        self.name: str | None = None
        self.previous: str | None = None

    def __enter__(self) -> AttentionSwitch:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask

        self.previous = self.model.config._attn_implementation
        self._before = _Implementations(self.model, "attn")
        self.name = f"{self.prefix}_{next(_counter)}"
        AttentionInterface.register(self.name, self.fn)
        mask_fn = eager_mask if self.mask == "eager" else \
            AttentionMaskInterface._global_mapping.get(self.previous, eager_mask)
        AttentionMaskInterface.register(self.name, mask_fn)
        _switch_to(self, self.model.set_attn_implementation)
        return self

    def __exit__(self, *exc) -> None:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface

        if self.name is None:
            return
        self._before.restore(self.name)  # each tower gets its own implementation back
        AttentionInterface._global_mapping.pop(self.name, None)
        AttentionMaskInterface._global_mapping.pop(self.name, None)
        self.name = None

    def backend_for(self, module: nn.Module) -> str | None:
        """Name of the attention function this module's tower used before the switch (sdpa, eager, an outer switch)."""
        return self._before.before(module, self.previous)

    def delegate(self, module: nn.Module, *args, **kwargs):
        """Call the attention function that was active for this module's tower before the switch (sdpa, eager, an
        outer switch, ...)."""
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        previous = self.backend_for(module)
        return ALL_ATTENTION_FUNCTIONS.get_interface(previous, eager_for(module))(module, *args, **kwargs)


class ExpertsSwitch:
    """Context manager: route transformers 5's fused MoE experts through ``fn(module, hidden (N, d), top_k_index
    (N, k), top_k_weights (N, k)) -> (N, d)`` (``ExpertsInterface``); :meth:`delegate` calls the previous one."""

    def __init__(self, model: nn.Module, prefix: str, fn: Callable):
        self.model, self.prefix, self.fn = model, prefix, fn
        self.name: str | None = None

    def __enter__(self) -> ExpertsSwitch:
        from transformers.integrations.moe import ExpertsInterface

        self._before = _Implementations(self.model, "experts")
        self.name = f"{self.prefix}_{next(_counter)}"
        ExpertsInterface.register(self.name, self.fn)
        _switch_to(self, self.model.set_experts_implementation)
        return self

    def __exit__(self, *exc) -> None:
        from transformers.integrations.moe import ExpertsInterface

        if self.name is None:
            return
        self._before.restore(self.name)
        ExpertsInterface._global_mapping.pop(self.name, None)
        self.name = None

    def delegate(self, module: nn.Module, *args, **kwargs):
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

        previous = self._before.before(module, "eager")
        own = type(module).forward.__wrapped__  # the class's own (eager) forward, under transformers' dispatcher
        return ALL_EXPERTS_FUNCTIONS.get_interface(previous, own)(module, *args, **kwargs)


class TimmEagerAttention:
    """Context manager: set ``fused_attn = False`` on the given timm ``Attention`` modules (their own switch), so
    the softmax probabilities are computed explicitly and pass through ``attn_drop``; restores each flag on exit."""

    def __init__(self, modules: list[nn.Module]):
        self.modules = modules
        self._saved: list[tuple[nn.Module, bool]] = []

    def __enter__(self) -> TimmEagerAttention:
        for module in self.modules:
            self._saved.append((module, module.fused_attn))
            module.fused_attn = False
        return self

    def __exit__(self, *exc) -> None:
        for module, fused in self._saved:
            module.fused_attn = fused
        self._saved = []


class Patch:
    """Base for context managers that add forward hooks and/or an :class:`AttentionSwitch` to a model.

    Subclasses implement :meth:`_install` (append hook handles to ``self._handles``, set ``self._switch``);
    ``__exit__`` always removes both, also when ``_install`` or the ``with`` body raises.
    """

    def __init__(self) -> None:
        self._handles: list = []
        self._switch: AttentionSwitch | None = None
        self._switches: list = []  # further switches (experts, timm), undone in reverse order

    def _install(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            self._install()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for switch in reversed(self._switches):
            switch.__exit__(None, None, None)
        self._switches = []
        if self._switch is not None:
            self._switch.__exit__(None, None, None)
            self._switch = None
