"""12_mllm, multimodal LLMs: visual sink tokens (Kang et al.; visual_sinks), visual-attention redistribution
(visual_attention), where the image tokens lie on the picture and how many a digit becomes (image_layout) and the
plots."""
