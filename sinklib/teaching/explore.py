"""An attention explorer for a classroom: pick a layer and a head, see where the attention goes.

>>> import sinklib
>>> sinklib.explore(lm, "In the beginning God created the heavens and the earth.")   # a text model
>>> sinklib.explore(vit, images.to_pixels([photo.image], norm=vit.pixel_norm))                          # a ViT: patch grids

Three panels for the chosen layer l and head h:
(a) the attention map A^{l,h} (query rows, key columns, log colour), tokens along both axes -- for a ViT the CLS
    query's attention over the patch grid;
(b) alpha per key, m_j = 1/(#queries that see j) sum_t A[t, j] (Gu et al.'s alpha_j for every key; the first
    token's bar is alpha_0) -- for a ViT as a patch grid over the image, CLS and registers in the title;
(c) the norm of each token's hidden state after layer l (massive activations show as one tall bar).

In JupyterLab with ipywidgets it is interactive (sliders for layer and head redraw the figure). Where widgets cannot
be shown -- papermill, a script, ``SINKLIB_HEADLESS=1`` (what ``make figures`` sets for its kernels), or without
ipywidgets -- it draws one static figure for the requested layer and head (default: the layer and head with the
largest alpha_0, the strongest sink) and says how to get the interactive view.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from sinklib.core import metrics
from sinklib.core.errors import InputError


@dataclass
class ExplorerData:
    """Everything the explorer draws, computed once: attention (L, H, T, T), hidden-state norms (L, T)."""

    labels: list[str]  # one per position: text tokens, or "CLS", "reg0", "(r,c)" patches
    attentions: torch.Tensor  # (L, H, T, T) probabilities
    norms: torch.Tensor  # (L, T) ||h_t|| after each layer
    grid: tuple[int, int] | None = None  # ViT patch grid (rows, cols)
    first_patch: int = 0  # index of the first patch token (after CLS and registers)
    image: np.ndarray | None = None  # (H, W, 3) in [0, 1], ViT only

    @property
    def n_layers(self) -> int:
        return self.attentions.shape[0]

    @property
    def n_heads(self) -> int:
        return self.attentions.shape[1]

    def key_mass(self, layer: int, head: int) -> torch.Tensor:
        """m_j = sum_t A[t, j] / (number of queries with a non-zero row that can see j): (T,). Causal models:
        queries t >= j; bidirectional (ViT): all T."""
        A = self.attentions[layer, head].float()  # (T, T)
        if self.grid is None:  # a causal language model: metrics.sink_mass divides by T - j
            return metrics.sink_mass(A)
        return A.sum(dim=0) / A.shape[-1]

    def strongest(self) -> tuple[int, int]:
        """(layer, head) with the largest alpha_0."""
        a0 = torch.stack([torch.stack([self.key_mass(layer, h)[0] for h in range(self.n_heads)])
                          for layer in range(self.n_layers)])  # (L, H)
        i = int(a0.argmax())
        return i // self.n_heads, i % self.n_heads


def explorer_ids(lm, inputs) -> torch.Tensor:
    """The one sequence the explorer shows, (T,): text tokenized by ``lm``'s tokenizer, or token ids (T,) or (1, T)
    checked at the door (:func:`sinklib.core.data.as_token_ids`: integer, within the vocabulary). Refused in one
    line: empty text, no token, and a batch of several sequences -- the explorer shows one sequence at a time, and
    joining a (2, 5) batch into one 10-token sequence would show attention across two texts that never saw each
    other."""
    from sinklib.core.data import as_token_ids

    if isinstance(inputs, str):
        if not inputs.strip():
            raise InputError("explore needs at least one token of text; got an empty string")
        return lm.tokenizer(inputs, return_tensors="pt").input_ids[0]
    if isinstance(inputs, torch.Tensor) and inputs.numel() == 0 and inputs.ndim <= 2:
        raise InputError(f"explore needs at least one token of text; got ids shaped {tuple(inputs.shape)}")
    ids = as_token_ids(inputs, lm.vocab_size, "explore")
    if ids.shape[0] != 1:
        raise InputError(f"explore shows one sequence at a time; got a batch of {ids.shape[0]} sequences "
                         f"{tuple(ids.shape)}: pass ids[0]")
    return ids[0]


@torch.inference_mode()
def explorer_data(lm, inputs, max_tokens: int = 64) -> ExplorerData:
    """Run ``lm`` once on ``inputs`` -- text (str) or token ids of one sequence for a language model
    (:func:`explorer_ids`), pixels (1, 3, H, W) or one image for a ViT (finite: :func:`sinklib.core.images.
    check_pixels`) -- and keep every layer's attention and hidden-state norms. Text longer than ``max_tokens`` is cut (a T x T map
    beyond that is unreadable); ViT images keep every patch."""
    from sinklib.core.capture import Capture

    if lm.family == "vit":
        from sinklib.architectures.vit.vit_sinks import grid_of, vit_forward
        from sinklib.core import images

        pixels = inputs if isinstance(inputs, torch.Tensor) else images.to_pixels([inputs], norm=lm.pixel_norm)
        images.check_pixels(pixels, "explore")
        if pixels.shape[0] != 1:
            raise InputError(f"explore shows one image at a time, pixels shaped (1, 3, H, W); got a batch of "
                             f"{pixels.shape[0]}: pass pixels[:1]")
        with Capture(lm, attentions=True, hidden_states=True) as cap:
            vit_forward(lm, pixels.to(lm.device))
        A = cap.stack("attentions")[:, 0]  # (L, H, T, T)
        h = cap.stack("hidden_states")[:, 0]  # (L, T, d)
        rows, cols = grid_of(lm, pixels.shape[-1])
        first = A.shape[-1] - rows * cols
        labels = ["CLS", *[f"reg{i}" for i in range(first - 1)],
                  *[f"({r},{c})" for r in range(rows) for c in range(cols)]]
        return ExplorerData(labels, A, h.float().norm(dim=-1), (rows, cols), first, images.display(pixels[0].cpu(), lm.pixel_norm))
    ids = explorer_ids(lm, inputs)[:max_tokens]
    with Capture(lm, attentions=True, hidden_states=True) as cap:
        lm.model(ids[None].to(lm.device), use_cache=False)
    labels = [lm.tokenizer.decode([int(i)]) for i in ids] if lm.tokenizer is not None else [str(int(i)) for i in ids]
    return ExplorerData(labels, cap.stack("attentions")[:, 0], cap.stack("hidden_states")[:, 0].float().norm(dim=-1))


class Explorer:
    """The figure and its update rule; :meth:`show` adds sliders when widgets can be displayed.

    ``update(layer, head)`` rewrites the three panels' data in place (the attention image, the alpha bars or grid,
    the norm bars), so a slider callback costs no recomputation of the model."""

    def __init__(self, data: ExplorerData, layer: int | None = None, head: int | None = None):
        import matplotlib.pyplot as plt
        from matplotlib.colors import LogNorm

        self.data = data
        strong = data.strongest()
        self.layer = strong[0] if layer is None else layer
        self.head = strong[1] if head is None else head
        self._check(self.layer, self.head)
        T = len(data.labels)
        self.fig, self.axes = plt.subplots(1, 3, figsize=(13, 4.2), layout="constrained")
        ax_map, ax_alpha, ax_norm = self.axes
        vit = data.grid is not None
        if vit:
            self.map_image = ax_map.imshow(np.zeros(data.grid), cmap="magma")
            ax_map.set_title("CLS query's attention over the patches")
            ax_alpha.imshow(data.image, extent=(0, data.grid[1], data.grid[0], 0))
            self.alpha_image = ax_alpha.imshow(np.zeros(data.grid), cmap="viridis", alpha=0.6,
                                               extent=(0, data.grid[1], data.grid[0], 0))
            self.norm_image = ax_norm.imshow(np.zeros(data.grid), cmap="cividis")
            for ax in self.axes:
                ax.set_xticks([]), ax.set_yticks([])
            self.fig.colorbar(self.alpha_image, ax=ax_alpha, shrink=0.8, label="alpha per patch")
            self.fig.colorbar(self.norm_image, ax=ax_norm, shrink=0.8, label="||h|| per patch")
        else:
            self.map_image = ax_map.imshow(np.full((T, T), 1e-4), cmap="magma", norm=LogNorm(1e-4, 1.0))
            ticks = range(T) if T <= 32 else range(0, T, max(1, T // 16))
            for axis in (ax_map.set_xticks, ax_map.set_yticks):
                axis(list(ticks), [data.labels[i] for i in ticks], fontsize=6)
            ax_map.tick_params(axis="x", rotation=90)
            ax_map.set_xlabel("key"), ax_map.set_ylabel("query")
            self.fig.colorbar(self.map_image, ax=ax_map, shrink=0.8, label="attention (log)")
            self.alpha_bars = ax_alpha.bar(range(T), np.zeros(T), color=["C3"] + ["C0"] * (T - 1))
            self.norm_bars = ax_norm.bar(range(T), np.zeros(T), color="C2")
            ax_alpha.set_ylim(0, 1.0), ax_alpha.set_ylabel("alpha_j (mean attention received)")
            ax_norm.set_ylabel("||h_t|| after the layer")
            for ax in (ax_alpha, ax_norm):
                ax.set_xlabel("position (first token in red)" if ax is ax_alpha else "position")
        self.update(self.layer, self.head)

    def _check(self, layer: int, head: int) -> None:
        if not (0 <= layer < self.data.n_layers and 0 <= head < self.data.n_heads):
            raise InputError(f"layer {layer} / head {head} outside the model's {self.data.n_layers} layers x "
                             f"{self.data.n_heads} heads; pick a layer 0..{self.data.n_layers - 1} and a head "
                             f"0..{self.data.n_heads - 1}")

    def update(self, layer: int, head: int) -> None:
        """Show layer ``layer``, head ``head``: new data on the existing artists."""
        self._check(layer, head)
        self.layer, self.head = layer, head
        d = self.data
        A = d.attentions[layer, head].float()
        mass = d.key_mass(layer, head)
        norms = d.norms[layer]
        ax_map, ax_alpha, ax_norm = self.axes
        if d.grid is not None:
            patches = slice(d.first_patch, None)
            self.map_image.set_data(A[0, patches].reshape(d.grid).numpy())
            self.map_image.autoscale()
            self.alpha_image.set_data(mass[patches].reshape(d.grid).numpy())
            self.alpha_image.autoscale()
            self.norm_image.set_data(norms[patches].reshape(d.grid).numpy())
            self.norm_image.autoscale()
            extra = ", ".join(f"{d.labels[i]} {float(mass[i]):.2f}" for i in range(d.first_patch))
            ax_alpha.set_title(f"alpha per patch over the image ({extra})", fontsize=9)
            ax_norm.set_title(f"hidden-state norm per patch (CLS {float(norms[0]):.0f})", fontsize=9)
        else:
            self.map_image.set_data(A.clamp_min(1e-4).numpy())
            for bar, v in zip(self.alpha_bars, mass.tolist()):
                bar.set_height(v)
            for bar, v in zip(self.norm_bars, norms.tolist()):
                bar.set_height(v)
            ax_norm.set_ylim(0, float(norms.max()) * 1.1 or 1.0)
            ax_map.set_title("attention map", fontsize=10)
            ax_alpha.set_title(f"alpha per key (first token: {float(mass[0]):.2f})", fontsize=10)
            ax_norm.set_title(f"hidden-state norm (largest: position {int(norms.argmax())})", fontsize=10)
        self.fig.suptitle(f"layer {layer}, head {head}")
        self.fig.canvas.draw_idle()

    def arrays(self) -> dict[str, np.ndarray]:
        """What the panels show now (for tests and for students who want the numbers)."""
        if self.data.grid is not None:
            return {"map": np.asarray(self.map_image.get_array()), "alpha": np.asarray(self.alpha_image.get_array()),
                    "norm": np.asarray(self.norm_image.get_array())}
        return {"map": np.asarray(self.map_image.get_array()),
                "alpha": np.array([b.get_height() for b in self.alpha_bars]),
                "norm": np.array([b.get_height() for b in self.norm_bars])}

    def png(self, dpi: int = 90) -> bytes:
        """The figure as it is now, as PNG bytes."""
        import io

        buf = io.BytesIO()
        self.fig.savefig(buf, format="png", dpi=dpi)
        return buf.getvalue()

    def widget(self):
        """Sliders for layer and head above an image widget showing the figure; moving one calls :meth:`update`.

        The figure travels as the image widget's state (PNG bytes), not as output captured into an ``Output``
        widget, so it shows whatever matplotlib backend the kernel runs and cannot land outside the widget."""
        import ipywidgets as w

        layer = w.IntSlider(self.layer, 0, self.data.n_layers - 1, description="layer", continuous_update=False)
        head = w.IntSlider(self.head, 0, self.data.n_heads - 1, description="head", continuous_update=False)
        picture = w.Image(value=self.png(), format="png", layout=w.Layout(max_width="100%"))

        def redraw(_=None):
            self.update(layer.value, head.value)
            picture.value = self.png()

        layer.observe(redraw, names="value")
        head.observe(redraw, names="value")
        box = w.VBox([w.HBox([layer, head]), picture])
        box.sliders = (layer, head)
        box.picture = picture
        return box


def widgets_available() -> bool:
    """ipywidgets importable, running in an IPython kernel, and not headless (``SINKLIB_HEADLESS``, set by
    ``make figures`` for its papermill kernels)."""
    if os.environ.get("SINKLIB_HEADLESS"):
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def explore(lm, inputs, layer: int | None = None, head: int | None = None, interactive: bool | None = None,
            max_tokens: int = 64) -> Explorer:
    """Show the explorer for ``lm`` on ``inputs`` (text or ids; one image for a ViT). ``interactive``: None = sliders
    when :func:`widgets_available`, else one static figure for ``layer`` / ``head`` (default: the strongest sink).
    Returns the :class:`Explorer` (``.fig``, ``.update(layer, head)``, ``.arrays()``)."""
    ex = Explorer(explorer_data(lm, inputs, max_tokens), layer, head)
    show_widgets = widgets_available() if interactive is None else interactive
    try:
        from IPython.display import display
    except ImportError:  # a plain script: the caller saves ex.fig
        return ex
    if show_widgets:
        import matplotlib.pyplot as plt

        plt.close(ex.fig)  # shown inside the widget's output area only
        display(ex.widget())
    else:
        print(f"explorer (static: layer {ex.layer}, head {ex.head}; in JupyterLab with ipywidgets the layer and head "
              "are sliders)")
    return ex
