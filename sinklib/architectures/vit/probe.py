"""Darcet et al.'s Table 1 probe: features of the CLS token, the highest-norm and the median-norm patch of each
image, and a linear probe of the label from each, over several train / test splits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sinklib.architectures.vit.vit_sinks import outlier_mask, vit_forward
from sinklib.core.capture import Capture
from sinklib.core.loaded import LoadedModel


@torch.inference_mode()
def token_features(lm: LoadedModel, pixels: torch.Tensor,
                   batch_size: int = 32) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Final-layer features for a linear probe (Darcet et al., Table 1): the CLS token, the highest-norm patch and
    the median-norm patch of each image, from the last block's output; and whether each image's highest-norm patch
    is an outlier there (:func:`outlier_mask` among the image's patches) -- the probe tests outlier tokens only where
    it is. (B, 3, S, S) -> ({name: (B, d)}, (B,) bool)."""
    n_prefix = lm.adapter.n_prefix
    last = len(lm.adapter.layers) - 1
    out: dict[str, list[torch.Tensor]] = {"CLS": [], "highest-norm patch": [], "median-norm patch": []}
    is_outlier: list[torch.Tensor] = []
    for start in range(0, len(pixels), batch_size):
        with Capture(lm, hidden_states=True, layers=[last]) as cap:
            vit_forward(lm, pixels[start:start + batch_size])
        h = cap.get("hidden_states", last).float()  # (B, T, d)
        patches = h[:, n_prefix:]
        norms = patches.norm(dim=-1)  # (B, P)
        order = norms.argsort(dim=-1)  # ascending
        rows = torch.arange(len(h))
        is_outlier.append(outlier_mask(norms)[rows, order[:, -1]].cpu())
        out["CLS"].append(h[:, 0])
        out["highest-norm patch"].append(patches[rows, order[:, -1]])
        out["median-norm patch"].append(patches[rows, order[:, order.shape[1] // 2]])
    return {k: torch.cat(v).cpu() for k, v in out.items()}, torch.cat(is_outlier)


def linear_probe(features: dict[str, torch.Tensor], labels: np.ndarray, train_fraction: float = 0.6,
                 seed: int = 0) -> dict[str, float]:
    """Held-out accuracy of a logistic-regression probe per feature set (one seeded split, standardised features)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    order = np.random.default_rng(seed).permutation(len(labels))
    cut = int(train_fraction * len(labels))
    train, test = order[:cut], order[cut:]
    accuracy = {}
    for name, x in features.items():
        x = x.numpy()
        probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=0.1))
        probe.fit(x[train], labels[train])
        accuracy[name] = float(probe.score(x[test], labels[test]))
    return accuracy


def probe_over_splits(features: dict[str, torch.Tensor], labels: np.ndarray, seeds: Sequence[int],
                      train_fraction: float = 0.6) -> list[dict[str, float]]:
    """:func:`linear_probe` once per train / test split (one split per seed, the run's seed first): the draws of
    ``darcet2023.outliers_hold_global_information``."""
    return [linear_probe(features, labels, train_fraction, seed) for seed in seeds]
