"""Sweeps: many searches over problems and searcher settings, as one Optuna study.

A sweep file (TOML, `moplace.sweep.spec`) declares what varies (graph, cluster or the
parameters of a generated cluster, memory limit, batch size of a zoo model, searcher, its
settings, budget, seed), the sampler, what a trial returns and how many trials. `study.py`
keeps the study in Optuna storage (a SQLite file ``STEM.optuna.db`` in the working directory
unless ``--storage`` names another file or a database server), hands its trials to worker
processes, here or on other machines, and retries a trial whose worker died (Optuna's
heartbeat). `trial.py` runs one trial: it builds the problem and the searcher from the
trial's parameters and runs the search, logged as a child of the sweep's MLflow run
(`tracking.py`). Optuna and MLflow are imported only when a sweep runs.
"""
