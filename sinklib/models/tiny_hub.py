"""Tiny random models of the GPU profile's classes, written into a Hugging Face hub cache as if downloaded.

The ``tiny-gpu`` profile (:mod:`sinklib.pipeline.profiles`) names these ids, so ``make figures PROFILE=tiny-gpu``
(with ``HF_HUB_CACHE`` pointing at the cache) runs every notebook through the GPU profile's own code path -- a hub
id looked up offline in the cache, ``AutoConfig`` and family inference, ``from_pretrained``, ``AutoProcessor`` for
the MLLM, timm's ``hf-hub:`` loader, lists of several model classes, bfloat16 -- on CPU in seconds. The weights are
random: the test checks shapes, dtypes and device handling, not findings.

>>> write_hub_cache(tmp / "hub")     # then HF_HUB_CACHE=tmp/hub HF_HUB_OFFLINE=1
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from sinklib.models import tiny

COMMIT = "0" * 40  # the snapshot every tiny repository resolves to
LLMS = ("sinklib-tiny/llama", "sinklib-tiny/gpt2")  # Llama (Llama-2, Mistral, Qwen2.5 paths), GPT-2
MOES = ("sinklib-tiny/olmoe", "sinklib-tiny/mixtral")  # 11_moe runs the first (as the gpu profile: OLMoE)
MLLMS = ("sinklib-tiny/llava",)
VITS = ("sinklib-tiny/dinov2", "sinklib-tiny/dinov2-registers", "timm/sinklib-tiny-vit")
IMAGE_SIZE = 32  # the tiny vision towers' pixels (the notebooks resize to their own sizes; DINOv2 interpolates)


def _snapshot(cache: Path, repo_id: str) -> Path:
    """The folder files of ``repo_id`` go in, laid out as huggingface_hub's cache (refs/main -> snapshot)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True, exist_ok=True)
    return snap


def _byte_causal_lm(config_cls, model_cls, **fields):
    """:func:`tiny._byte_lm`'s byte-vocabulary causal LM, with the byte tokenizer saved beside it."""
    from sinklib.models.bytetok import byte_tokenizer

    model, _ = tiny._byte_lm(config_cls, model_cls, **fields)
    return model, byte_tokenizer()


def _text_fields(**extra) -> dict:
    # head_dim 32: KV quantisation groups 32 channels, as real models' 64 / 128-wide heads allow
    return dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2,
                num_key_value_heads=1, head_dim=32, max_position_embeddings=4096, **extra)


def llava():
    """A tiny random LLaVA and a real ``LlavaProcessor`` for it (byte tokenizer + ``<image>``, CLIP image processor at
    32 px, a chat template): 16 image tokens."""
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    from sinklib.models.bytetok import byte_tokenizer

    tok = byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    template = ("{% for m in messages %}{{ m['role'].upper() }}: {% for c in m['content'] %}{% if c['type'] == "
                "'image' %}<image>\n{% else %}{{ c['text'] }}{% endif %}{% endfor %} {% endfor %}"
                "{% if add_generation_prompt %}ASSISTANT:{% endif %}")
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE},
                                           crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
        tokenizer=tok, patch_size=8, vision_feature_select_strategy="default", chat_template=template,
        image_token="<image>", num_additional_image_tokens=1)
    vision = CLIPVisionConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                              patch_size=8, image_size=IMAGE_SIZE)
    text = LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                       pad_token_id=tok.pad_token_id, **_text_fields())
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_id=tok.convert_tokens_to_ids("<image>"),
                         vision_feature_layer=-1, vision_feature_select_strategy="default")
    return LlavaForConditionalGeneration(config), processor


def _builders() -> dict:
    from transformers import (
        Dinov2Config,
        Dinov2Model,
        Dinov2WithRegistersConfig,
        Dinov2WithRegistersModel,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        MixtralConfig,
        MixtralForCausalLM,
        OlmoeConfig,
        OlmoeForCausalLM,
    )

    vit = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48, patch_size=8,
               image_size=IMAGE_SIZE, layerscale_value=1.0)
    return {
        "sinklib-tiny/llama": lambda: _byte_causal_lm(LlamaConfig, LlamaForCausalLM, **_text_fields()),
        "sinklib-tiny/gpt2": lambda: _byte_causal_lm(GPT2Config, GPT2LMHeadModel, n_embd=64, n_layer=3, n_head=2,
                                                     n_positions=4096),
        "sinklib-tiny/mixtral": lambda: _byte_causal_lm(MixtralConfig, MixtralForCausalLM,
                                                        **_text_fields(num_local_experts=4, num_experts_per_tok=2)),
        "sinklib-tiny/olmoe": lambda: _byte_causal_lm(OlmoeConfig, OlmoeForCausalLM,
                                                      **_text_fields(num_experts=6, num_experts_per_tok=2)),
        "sinklib-tiny/llava": llava,
        "sinklib-tiny/dinov2": lambda: (Dinov2Model(Dinov2Config(**vit)), None),
        "sinklib-tiny/dinov2-registers": lambda: (
            Dinov2WithRegistersModel(Dinov2WithRegistersConfig(num_register_tokens=4, **vit)), None),
    }


def _write_timm(snap: Path) -> None:
    """A tiny timm ViT in timm's own hub format (config.json with architecture and model_args, safetensors)."""
    import timm
    from safetensors.torch import save_file

    args = dict(img_size=IMAGE_SIZE, patch_size=8, embed_dim=32, depth=3, num_heads=4, mlp_ratio=1.5, num_classes=0)
    model = timm.create_model("vit_small_patch16_224", pretrained=False, **args)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, snap / "model.safetensors")
    cfg = {"architecture": "vit_small_patch16_224", "num_classes": 0, "num_features": 32, "model_args": args,
           "pretrained_cfg": {"input_size": [3, IMAGE_SIZE, IMAGE_SIZE], "mean": [0.485, 0.456, 0.406],
                              "std": [0.229, 0.224, 0.225], "num_classes": 0}}
    (snap / "config.json").write_text(json.dumps(cfg))


def write_hub_cache(cache_dir: str | Path, seed: int = 0) -> list[str]:
    """Write every tiny repository into ``cache_dir`` (a hub cache: point ``HF_HUB_CACHE`` at it); return the ids."""
    cache = Path(cache_dir)
    for repo_id, build in _builders().items():
        torch.manual_seed(seed)
        model, companion = build()
        with torch.no_grad():  # random init leaves norms at 1 and biases at 0: perturb every parameter a little
            for p in model.parameters():
                p.add_(0.02 * torch.randn_like(p))
        snap = _snapshot(cache, repo_id)
        model.save_pretrained(snap)
        if companion is not None:  # a tokenizer or a processor
            companion.save_pretrained(snap)
    torch.manual_seed(seed)
    _write_timm(_snapshot(cache, "timm/sinklib-tiny-vit"))
    return [*_builders(), "timm/sinklib-tiny-vit"]


__all__ = ["LLMS", "MLLMS", "MOES", "VITS", "llava", "write_hub_cache"]
