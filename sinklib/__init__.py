"""sinklib: the reproducible companion to the research on attention sinks.

``sinklib.explore(lm, text)`` opens the attention explorer (:mod:`sinklib.teaching.explore`); everything else lives in
the subpackages named after the survey's dimensions and architectures.
"""


def explore(lm, inputs, **kwargs):
    """The attention explorer: see :func:`sinklib.teaching.explore.explore` (imported on first use)."""
    from sinklib.teaching.explore import explore as _explore

    return _explore(lm, inputs, **kwargs)
