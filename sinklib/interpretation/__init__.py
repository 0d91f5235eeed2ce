"""02_interpretation, why sinks form: the structural-origin chain, massive activations, interventions that move or
make a sink."""
