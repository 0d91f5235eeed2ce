"""Where every model comes from: the registry of names and :func:`~sinklib.models.load.load_model` (``load``), the
offline GGUF and ONNX conversions (``conversion``, ``onnx_vit``), the labelled stand-ins (``upcycle``: the MoE made
from SmolLM2; ``stitch``: the LLaVA-style model), tiny random models (``tiny``) and the tiny hub cache
(``tiny_hub``). Imports only :mod:`sinklib.core`."""
