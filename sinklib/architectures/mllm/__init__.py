"""12_mllm, multimodal LLMs: visual sink tokens (Kang et al.; visual_sinks), visual-attention redistribution
(visual_attention) and the plots."""
