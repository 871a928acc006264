"""The search frame: `Problem` (graph + cluster + objectives + limits), the searcher contract
(`searcher`) and its entry-point plugins (`plugins`), the driver (`driver.search`: budget,
Pareto archive, callbacks, checkpoints), hypervolume, and exact fronts of tiny problems.

It never imports a searcher: searchers are found by name at run time.
"""
