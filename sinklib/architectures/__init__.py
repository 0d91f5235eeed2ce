"""The architecture notebooks, one folder each: ``llm`` (10_llm), ``moe`` (11_moe), ``mllm`` (12_mllm), ``vit``
(13_vit) -- each notebook's measurements, claim rules and plots. (Where a model's blocks, attention and experts are
is :mod:`sinklib.core.adapters`.)"""
