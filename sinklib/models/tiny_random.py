"""Tiny randomly initialised models of every family sinklib reads, built from configs (no downloads, < 1 s each).

They exist so that capture, the statistics and the interventions can be checked against a direct computation on the
real transformers / timm classes: ``build(name)`` returns ``(model, inputs)`` with ``model(**inputs)`` ready to run.
Sizes are deliberately odd (a vision tower deeper than the LM, more experts than top-k) so that a wrong guess fails.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

VOCAB = 96


def _ids(batch: int = 2, seq: int = 11, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, VOCAB - 8, (batch, seq), generator=torch.Generator().manual_seed(seed))


def _pixels(batch: int = 2, size: int = 32, seed: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _text(**extra) -> dict:
    return dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
                pad_token_id=0, **extra)


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(**_text())), {"input_ids": _ids()}


def gemma3():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(**_text(sliding_window=4, layer_types=["sliding_attention", "full_attention"]))
    return Gemma3ForCausalLM(config), {"input_ids": _ids()}


def gpt_oss():
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(**_text(num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
                                  layer_types=["sliding_attention", "full_attention"]))
    return GptOssForCausalLM(config), {"input_ids": _ids()}


def mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    return MixtralForCausalLM(MixtralConfig(**_text(num_local_experts=4, num_experts_per_tok=2))), {"input_ids": _ids()}


def olmoe():
    from transformers import OlmoeConfig, OlmoeForCausalLM

    return OlmoeForCausalLM(OlmoeConfig(**_text(num_experts=6, num_experts_per_tok=2))), {"input_ids": _ids()}


def qwen2_moe():
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    config = Qwen2MoeConfig(**_text(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                                    shared_expert_intermediate_size=40, norm_topk_prob=True))
    return Qwen2MoeForCausalLM(config), {"input_ids": _ids()}


def _vit_config(cls, **extra):
    return cls(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, patch_size=8,
               image_size=32, **extra)


def dinov2():
    from transformers import Dinov2Config, Dinov2Model

    return Dinov2Model(_vit_config(Dinov2Config, layerscale_value=1.0)), {"pixel_values": _pixels()}


def dinov2_registers():
    from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    config = _vit_config(Dinov2WithRegistersConfig, layerscale_value=1.0, num_register_tokens=4)
    return Dinov2WithRegistersModel(config), {"pixel_values": _pixels()}


def vit():
    from transformers import ViTConfig, ViTModel

    return ViTModel(_vit_config(ViTConfig), add_pooling_layer=False), {"pixel_values": _pixels()}


def clip_vision():
    from transformers import CLIPVisionConfig, CLIPVisionModel

    return CLIPVisionModel(_vit_config(CLIPVisionConfig)), {"pixel_values": _pixels()}


def timm_vit():
    from timm.models.vision_transformer import VisionTransformer

    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, mlp_ratio=1.5,
                              reg_tokens=2, num_classes=0)
    return model, {"x": _pixels()}


def llava():
    """LLaVA: a 3-layer CLIP vision tower (longer than the 2-layer LM) -> projector -> Llama; 16 image tokens."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
                              patch_size=8, image_size=32)
    image_token = VOCAB - 1
    config = LlavaConfig(vision_config=vision, text_config=LlamaConfig(**_text()), image_token_id=image_token,
                         vision_feature_layer=-1, vision_feature_select_strategy="default", projector_hidden_act="gelu")
    ids = _ids(seq=6)
    ids = torch.cat([ids[:, :1], torch.full((2, 16), image_token), ids[:, 1:]], dim=1)  # BOS-like, image, text
    return LlavaForConditionalGeneration(config), {"input_ids": ids, "pixel_values": _pixels()}


def qwen2_vl():
    """Qwen2-VL: a 3-block vision tower (packed patches, merged 2x2) -> Qwen2 LM with M-RoPE; 4 image tokens."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    image_token, start, end = VOCAB - 1, VOCAB - 2, VOCAB - 3
    config = Qwen2VLConfig(
        text_config=dict(_text(), rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]},
                         model_type="qwen2_vl_text"),
        vision_config=dict(depth=3, embed_dim=16, hidden_size=32, num_heads=2, mlp_ratio=2, patch_size=4,
                           spatial_merge_size=2, temporal_patch_size=2, in_channels=3),
        image_token_id=image_token, vision_start_token_id=start, vision_end_token_id=end,
    )
    ids = _ids(seq=5)
    image = torch.tensor([[start] + [image_token] * 4 + [end]]).expand(2, -1)
    ids = torch.cat([ids[:, :2], image, ids[:, 2:]], dim=1)
    grid = torch.tensor([[1, 4, 4]] * 2)  # per image: (t, h, w) patches -> 16 patches, 4 tokens after merging
    pixels = torch.randn(2 * 16, 3 * 2 * 4 * 4, generator=torch.Generator().manual_seed(3))
    inputs = {"input_ids": ids, "pixel_values": pixels, "image_grid_thw": grid,
              "mm_token_type_ids": (ids == image_token).int()}  # 1 = image token (M-RoPE positions)
    return Qwen2VLForConditionalGeneration(config), inputs


def byte_lm(config_cls, model_cls, **fields):
    """A tiny causal LM over the byte tokenizer's 258 ids, for code paths that need real text (GPU-profile families)."""
    config = config_cls(vocab_size=258, bos_token_id=256, eos_token_id=257, pad_token_id=257, **fields)
    return model_cls(config), {"input_ids": _ids()}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return byte_lm(GPT2Config, GPT2LMHeadModel, n_embd=32, n_layer=2, n_head=4, n_positions=2048)


def opt():
    from transformers import OPTConfig, OPTForCausalLM

    return byte_lm(OPTConfig, OPTForCausalLM, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    ffn_dim=48, word_embed_proj_dim=32, max_position_embeddings=2048)


def gpt_neox():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    return byte_lm(GPTNeoXConfig, GPTNeoXForCausalLM, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=48, max_position_embeddings=2048)


def byte_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    ids = ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id")  # the byte tokenizer's, set by byte_lm
    return byte_lm(LlamaConfig, LlamaForCausalLM, **{k: v for k, v in _text().items() if k not in ids})


BYTE_LMS = {"gpt2": gpt2, "opt": opt, "gpt_neox": gpt_neox, "byte_llama": byte_llama}


BUILDERS: dict[str, Callable[[], tuple[nn.Module, dict]]] = {
    "llama": llama, "gemma3": gemma3, "gpt_oss": gpt_oss, "mixtral": mixtral, "olmoe": olmoe, "qwen2_moe": qwen2_moe,
    "dinov2": dinov2, "dinov2_registers": dinov2_registers, "vit": vit, "clip_vision": clip_vision,
    "timm_vit": timm_vit, "llava": llava, "qwen2_vl": qwen2_vl,
}


def build(name: str, seed: int = 0, attn_implementation: str = "sdpa") -> tuple[nn.Module, dict]:
    """``(model, inputs)``: the tiny ``name`` model (eval mode, seeded) and inputs for ``model(**inputs)``."""
    torch.manual_seed(seed)
    model, inputs = BUILDERS[name]()
    if hasattr(model, "set_attn_implementation"):
        try:
            model.set_attn_implementation(attn_implementation)
        except ValueError:  # gpt-oss has no sdpa path (its learned sinks): eager
            model.set_attn_implementation("eager")
    with torch.no_grad():  # random init leaves some norms / layer scales at 0 or 1: perturb every parameter a bit
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model.eval(), inputs


def loaded(name: str, seed: int = 0):
    """``(LoadedModel, inputs)`` for a tiny model, so whole measurement recipes run on it: a byte-level LM of
    ``BYTE_LMS`` (the classes of Gu et al.'s families, with the byte tokenizer; inputs from it) or any ``BUILDERS``
    model (no tokenizer; the inputs :func:`build` gives)."""
    from sinklib.core.adapters import adapter_for
    from sinklib.core.loaded import LoadedModel, ModelSpec
    from sinklib.models.bytetok import byte_tokenizer

    if name in BYTE_LMS:
        torch.manual_seed(seed)
        model, inputs = BYTE_LMS[name]()
        model.set_attn_implementation("sdpa")
        model, tokenizer = model.eval(), byte_tokenizer()
    else:
        (model, inputs), tokenizer = build(name, seed), None
    family = adapter_for(model).family
    if hasattr(model, "config"):
        cfg = model.config.get_text_config() if family == "mllm" else model.config
    else:  # timm
        from types import SimpleNamespace

        cfg = SimpleNamespace(num_hidden_layers=len(model.blocks), num_attention_heads=model.blocks[0].attn.num_heads,
                              hidden_size=model.embed_dim)
    heads = cfg.num_attention_heads
    spec = ModelSpec(f"tiny-{name}", family, "config", f"tiny random {name}", "tiny random model")
    lm = LoadedModel(name=spec.name, spec=spec, model=model, tokenizer=tokenizer, device=torch.device("cpu"),
                     dtype=torch.float32, n_layers=cfg.num_hidden_layers, n_heads=heads,
                     n_kv_heads=getattr(cfg, "num_key_value_heads", None) or heads, hidden_size=cfg.hidden_size,
                     head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
                     vocab_size=getattr(cfg, "vocab_size", None),
                     adds_bos=tokenizer is not None)
    return lm, inputs
