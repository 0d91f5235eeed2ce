"""13_vit, vision transformers: high-norm patches and CLS/patch sinks (vit_sinks), test-time registers (Jiang et
al.; registers) and the plots."""
