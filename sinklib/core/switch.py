"""One helper for everything that plugs into transformers' attention-function registry.

:class:`AttentionSwitch` registers a function under a fresh name in ``AttentionInterface`` (and a mask function in
``AttentionMaskInterface``), switches the model to it, and on exit switches back and removes both entries. Capture,
the O(N) statistics and the interventions all use it, so they can be nested (outer first) and never leave a trace.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable

from torch import nn

_counter = itertools.count()


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
        self.name = f"{self.prefix}_{next(_counter)}"
        AttentionInterface.register(self.name, self.fn)
        mask_fn = eager_mask if self.mask == "eager" else \
            AttentionMaskInterface._global_mapping.get(self.previous, eager_mask)
        AttentionMaskInterface.register(self.name, mask_fn)
        try:
            self.model.set_attn_implementation(self.name)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface

        if self.name is None:
            return
        if self.model.config._attn_implementation == self.name:
            self.model.set_attn_implementation(self.previous)
        AttentionInterface._global_mapping.pop(self.name, None)
        AttentionMaskInterface._global_mapping.pop(self.name, None)
        self.name = None

    def delegate(self, module: nn.Module, *args, **kwargs):
        """Call the attention function that was active before this switch (sdpa, eager, an outer switch, ...)."""
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        return ALL_ATTENTION_FUNCTIONS.get_interface(self.previous, eager_for(module))(module, *args, **kwargs)


class Patch:
    """Base for context managers that add forward hooks and/or an :class:`AttentionSwitch` to a model.

    Subclasses implement :meth:`_install` (append hook handles to ``self._handles``, set ``self._switch``);
    ``__exit__`` always removes both, also when ``_install`` or the ``with`` body raises.
    """

    def __init__(self) -> None:
        self._handles: list = []
        self._switch: AttentionSwitch | None = None

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
        if self._switch is not None:
            self._switch.__exit__(None, None, None)
            self._switch = None
