"""11_moe, mixture-of-experts LLMs: sinks and routing (moe_sinks), super experts (Su et al.) and the plots."""
