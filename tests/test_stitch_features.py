"""The stand-in's frozen vision features (:func:`stitch.vision_features`): running only the DINOv2 layers up to the
selected hidden state gives the features of the whole tower bit for bit, and leaves the tower whole."""

from __future__ import annotations

import pytest
import torch

from sinklib.models import stitch


def _dinov2_llava(feature_layer: int):
    """A tiny LLaVA with a 4-layer DINOv2 tower, as the stand-in is stitched (CLS dropped)."""
    from transformers import Dinov2Config, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    torch.manual_seed(0)
    vision = Dinov2Config(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48,
                          patch_size=8, image_size=32, layerscale_value=1.0)
    text = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_id=63, vision_feature_layer=feature_layer,
                         vision_feature_select_strategy="default", projector_hidden_act="gelu")
    return LlavaForConditionalGeneration(config).eval()


@pytest.mark.parametrize("feature_layer", [-2, -1, 2])
def test_vision_features_run_only_the_layers_they_read(feature_layer):
    model = _dinov2_llava(feature_layer)
    pixels = torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    tower = model.model.vision_tower
    layers = list(tower.encoder.layer)
    with torch.no_grad():
        whole = torch.cat([tower(pixels[i:i + 2], output_hidden_states=True).hidden_states[feature_layer][:, 1:]
                           for i in range(0, 5, 2)])
    ran = []
    hooks = [layer.register_forward_hook(lambda m, a, o, i=i: ran.append(i)) for i, layer in enumerate(layers)]
    ours = stitch.vision_features(model, pixels, batch_size=2)
    for h in hooks:
        h.remove()
    assert torch.equal(ours, whole) and ours.shape == (5, 16, 32)
    assert max(ran) == feature_layer % 5 - 1  # the layers after the selected output did not run
    assert list(tower.encoder.layer) == layers  # the tower is whole again
