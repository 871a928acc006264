"""Scale-out: evaluating a search's batches somewhere other than this process.

An *evaluator* scores the strategies of a batch and yields their evaluations in the batch's
order (``stream(problem, strategies)``); `moplace.optimize.driver.search` takes one as
``evaluator=`` and otherwise evaluates one by one here. `DaskEvaluator` (`moplace.scale.dask`)
sends batches to a Dask distributed cluster. Dask is imported only when one is made.
"""

from __future__ import annotations


def make_evaluator(address: str | None, **options):
    """The evaluator for ``--dask ADDRESS`` (None: evaluate here, returns None)."""
    if not address:
        return None
    from .dask import DaskEvaluator

    return DaskEvaluator(address, **options)
