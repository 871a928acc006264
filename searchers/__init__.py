"""Search algorithms that propose strategies (list scheduling, evolutionary, MCMC, RL).

Empty until the search core lands: searchers only propose strategies and learn from their
evaluations; the driver in `moplace` owns the budget, the archive and the logging.
"""
