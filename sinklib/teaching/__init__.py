"""The teaching track: checks for the exercise notebooks (:mod:`sinklib.teaching.check`) and an attention explorer.

A folder for what a course needs and research does not: the exercises in ``notebooks/exercises/`` call
``check.<task>(your_function)`` and get a pass or the first thing that is wrong on a hand-built case.
"""

from sinklib.teaching import check

__all__ = ["check"]
