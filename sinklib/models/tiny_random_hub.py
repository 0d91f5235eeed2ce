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

from sinklib.models import tiny_random

COMMIT = "0" * 40  # the snapshot every tiny repository resolves to
LLMS = ("sinklib-tiny/llama", "sinklib-tiny/gpt2")  # Llama (Llama-2, Mistral, Qwen2.5 paths), GPT-2
MOES = ("sinklib-tiny/olmoe", "sinklib-tiny/mixtral",  # 11_moe runs the first (as the gpu profile: OLMoE)
        "sinklib-tiny/deepseek-v2")
MLLMS = ("sinklib-tiny/llava",  # 12_mllm runs the first; MODEL= the others (as the gpu profile: SmolVLM, Qwen2-VL)
         "sinklib-tiny/idefics3", "sinklib-tiny/qwen2-vl")
VITS = ("sinklib-tiny/dinov2", "sinklib-tiny/dinov2-registers", "timm/sinklib-tiny-vit")
CLIP_NORM = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))  # OpenAI CLIP's mean, std
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
    """:func:`tiny_random.byte_lm`'s byte-vocabulary causal LM, with the byte tokenizer saved beside it."""
    from sinklib.models.bytetok import byte_tokenizer

    model, _ = tiny_random.byte_lm(config_cls, model_cls, **fields)
    return model, byte_tokenizer()


def _text_fields(**extra) -> dict:
    # head_dim 32: KV quantisation groups 32 channels, as real models' 64 / 128-wide heads allow
    return dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2,
                num_key_value_heads=1, head_dim=32, max_position_embeddings=4096, **extra)


def deepseek_v2():
    """A tiny random DeepSeek-V2 shaped like DeepSeek-V2-Lite: block 0 a dense MLP (``first_k_dense_replace=1``),
    blocks 1-2 6 routed experts (top-2) beside 2 shared ones; multi-head latent attention with no query LoRA, keys
    48 + 16 (RoPE) = 64 wide and values 32 wide, YaRN RoPE whose mscale makes the logit scale != 1/sqrt(64)."""
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    rope = dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=1024,
                mscale=0.707, mscale_all_dim=0.707, beta_fast=32, beta_slow=1)
    return _byte_causal_lm(DeepseekV2Config, DeepseekV2ForCausalLM, hidden_size=64, intermediate_size=96,
                           num_hidden_layers=3, num_attention_heads=2, max_position_embeddings=4096,
                           first_k_dense_replace=1, n_routed_experts=6, num_experts_per_tok=2, n_shared_experts=2,
                           moe_intermediate_size=32, kv_lora_rank=32, q_lora_rank=None, qk_nope_head_dim=48,
                           qk_rope_head_dim=16, v_head_dim=32, rope_parameters=rope)


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


def idefics3():
    """A tiny random Idefics3 (SmolVLM-Instruct's class) and a real ``Idefics3Processor``: its image processor
    enlarges a picture's longest edge to 64 px and splits it into 32 px tiles -- a square picture 2 x 2 crops, then
    the whole picture again as a global view -- each tile 8 x 8 patches of 4 px, pixel-shuffled (scale 2) into
    4 x 4 = 16 image tokens (SmolVLM-Instruct: 1536 px, 384 px tiles, 9 x 9 = 81 tokens each, 17 tiles = 1,377
    tokens for a square picture). ``pixel_values`` are (B, tiles, 3, 32, 32)."""
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
        Idefics3VisionConfig,
        LlamaConfig,
    )

    from sinklib.models.bytetok import byte_tokenizer

    tok = byte_tokenizer()
    tiles = [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]  # the processor's tile tags
    tok.add_special_tokens({"additional_special_tokens": [
        "<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>", *tiles]})
    template = ("{% for m in messages %}{{ m['role'] | capitalize }}:{% for c in m['content'] %}{% if c['type'] == "
                "'image' %}<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
                "{% if add_generation_prompt %}Assistant:{% endif %}")
    images = Idefics3ImageProcessor(size={"longest_edge": 2 * IMAGE_SIZE}, max_image_size={"longest_edge": IMAGE_SIZE})
    processor = Idefics3Processor(images, tokenizer=tok, image_seq_len=16, chat_template=template)
    vision = Idefics3VisionConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                                  image_size=IMAGE_SIZE, patch_size=4)
    text = LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                       pad_token_id=tok.pad_token_id, **_text_fields())
    config = Idefics3Config(vision_config=vision, text_config=text, scale_factor=2, pad_token_id=tok.pad_token_id,
                            image_token_id=tok.convert_tokens_to_ids("<image>"))
    return Idefics3ForConditionalGeneration(config), processor


def qwen2_vl():
    """A tiny random Qwen2-VL and a real ``Qwen2VLProcessor``: patches of 4 px, 2 x 2 of them merged into one image
    token (Qwen2-VL-7B: 14 px, 2 x 2), M-RoPE over (time, row, column) in sections [4, 6, 6] of the 32-wide heads.
    Its image processor keeps Qwen2-VL's defaults in tokens: min_pixels = 4 tokens (an 8 x 8 digit: 2 x 2 tokens
    unless the notebook asks for more), max_pixels = 1,280 tokens."""
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    from sinklib.models.bytetok import byte_tokenizer

    tok = byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": [
        "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<|im_start|>", "<|im_end|>"]})
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}{% if c['type'] == "
                "'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}"
                "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    token = 4 * 2  # px per image token: patch x merge
    sizes = dict(patch_size=4, merge_size=2, temporal_patch_size=2, min_pixels=4 * token ** 2,
                 max_pixels=1280 * token ** 2)
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**sizes), tokenizer=tok,
                                 video_processor=Qwen2VLVideoProcessor(**sizes), chat_template=template)
    ids = {field: tok.convert_tokens_to_ids(t) for field, t in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    text = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2,
                num_key_value_heads=1, max_position_embeddings=4096, bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                rope_parameters={"rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 10000.0})
    vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2, patch_size=4, spatial_merge_size=2,
                  temporal_patch_size=2)
    return Qwen2VLForConditionalGeneration(Qwen2VLConfig(text_config=text, vision_config=vision, **ids)), processor


def gpt_oss():
    """A tiny random gpt-oss: learned sink logits per head (``sinks``, drawn from N(1, 1): trained sinks are not near
    0 as the initialiser leaves them), layers alternating a 16-key sliding window and full attention, 4 experts
    (top-2). For the learned-sink kernel check (:mod:`sinklib.mitigation.learned_sinks`)."""
    from transformers import GptOssConfig, GptOssForCausalLM

    model, tokenizer = _byte_causal_lm(GptOssConfig, GptOssForCausalLM, hidden_size=64, intermediate_size=64,
                                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                       num_local_experts=4, num_experts_per_tok=2, sliding_window=16,
                                       max_position_embeddings=131072, layer_types=["sliding_attention",
                                                                                 "full_attention"])
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.copy_(1.0 + torch.randn(layer.self_attn.sinks.shape, generator=gen))
    return model, tokenizer


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
        "sinklib-tiny/deepseek-v2": deepseek_v2,
        "sinklib-tiny/gpt-oss": gpt_oss,
        "sinklib-tiny/llava": llava,
        "sinklib-tiny/idefics3": idefics3,
        "sinklib-tiny/qwen2-vl": qwen2_vl,
        "sinklib-tiny/dinov2": lambda: (Dinov2Model(Dinov2Config(**vit)), _vit_processor()),
        "sinklib-tiny/dinov2-registers": lambda: (
            Dinov2WithRegistersModel(Dinov2WithRegistersConfig(num_register_tokens=4, **vit)), _vit_processor()),
    }


def _vit_processor():
    """A DINOv2 repository's image processor (ImageNet mean and std), where the loader reads them from."""
    from transformers import BitImageProcessor

    return BitImageProcessor(size={"shortest_edge": IMAGE_SIZE}, crop_size=IMAGE_SIZE,
                             image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225])


def _write_timm(snap: Path) -> None:
    """A tiny timm ViT in timm's own hub format (config.json with architecture and model_args, safetensors)."""
    import timm
    from safetensors.torch import save_file

    args = dict(img_size=IMAGE_SIZE, patch_size=8, embed_dim=32, depth=3, num_heads=4, mlp_ratio=1.5, num_classes=0)
    model = timm.create_model("vit_small_patch16_224", pretrained=False, **args)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, snap / "model.safetensors")
    cfg = {"architecture": "vit_small_patch16_224", "num_classes": 0, "num_features": 32, "model_args": args,
           "pretrained_cfg": {"input_size": [3, IMAGE_SIZE, IMAGE_SIZE], "mean": list(CLIP_NORM[0]),
                              "std": list(CLIP_NORM[1]), "num_classes": 0}}  # not ImageNet's: the loader must read it
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


__all__ = ["LLMS", "MLLMS", "MOES", "VITS", "deepseek_v2", "gpt_oss", "idefics3", "llava", "qwen2_vl",
           "write_hub_cache"]
