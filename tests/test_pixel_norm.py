"""Each ViT gets the pixel mean and std it was trained with (issue 30, item 7: CLIP was fed ImageNet's)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sinklib.core import images
from sinklib.models import tiny_random_hub
from sinklib.models.load import load_model, pixel_norm


def test_to_pixels_normalises_with_the_given_mean_and_std_by_hand():
    image = np.zeros((2, 2, 3), dtype=np.uint8)
    image[..., 0], image[..., 1], image[..., 2] = 255, 0, 51  # red 1.0, green 0.0, blue 0.2
    mean, std = (0.5, 0.25, 0.1), (0.5, 0.25, 0.2)
    x = images.to_pixels(image, size=2, norm=(mean, std))  # (1, 3, 2, 2)
    assert torch.allclose(x[0, :, 0, 0], torch.tensor([(1.0 - 0.5) / 0.5, (0.0 - 0.25) / 0.25, (0.2 - 0.1) / 0.2]))
    assert np.allclose(images.display(x[0], (mean, std))[0, 0], [1.0, 0.0, 0.2], atol=1e-6)
    assert torch.equal(images.to_pixels(image, size=2), images.to_pixels(image, size=2, norm=images.IMAGENET))


def test_clip_reads_its_own_mean_and_std_from_its_image_processor(tmp_path):
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    model = CLIPVisionModel(CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, image_size=16, patch_size=8))
    model.save_pretrained(tmp_path)
    CLIPImageProcessor().save_pretrained(tmp_path)  # OpenAI CLIP's defaults
    mean, std = pixel_norm(str(tmp_path), model)
    assert mean == pytest.approx(tiny_random_hub.CLIP_NORM[0]) and std == pytest.approx(tiny_random_hub.CLIP_NORM[1])
    assert mean != pytest.approx(images.IMAGENET[0])


def test_hub_vits_carry_their_norm(tmp_path):
    """timm: its ``pretrained_cfg`` (the tiny hub's timm ViT says CLIP's); transformers DINOv2: its repository's
    image processor (ImageNet's); the offline DINOv2-S: ImageNet's. The GPU rehearsal loads them through the hub."""
    import timm

    tiny_random_hub.write_hub_cache(tmp_path)
    vit = timm.create_model("vit_small_patch16_224", pretrained=False, img_size=32, patch_size=8, embed_dim=32,
                            depth=1, num_heads=4, num_classes=0)
    vit.pretrained_cfg = {"mean": list(tiny_random_hub.CLIP_NORM[0]), "std": list(tiny_random_hub.CLIP_NORM[1])}
    assert pixel_norm("timm/sinklib-tiny-vit", vit) == tiny_random_hub.CLIP_NORM
    (snap,) = (tmp_path / "models--sinklib-tiny--dinov2" / "snapshots").iterdir()
    mean, std = pixel_norm(str(snap), torch.nn.Identity())
    assert mean == pytest.approx(images.IMAGENET[0]) and std == pytest.approx(images.IMAGENET[1])
    assert load_model("dinov2-s", device="cpu").pixel_norm == images.IMAGENET
