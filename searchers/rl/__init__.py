"""Reinforcement-learning searchers (issue 14): the Hierarchical planner's grouper and placer
trained with REINFORCE (`hierarchical`), and Trinity's PPO with a multi-objective reward and
weight-conditioned policy (`trinity`), on the shared `agent`.

`features` (what the policies see of a problem), `structure` (Node2vec), `actions` (decisions
to strategies), `rewards` and `store` (policy files) are numpy; `policy` (Keras 3) is imported
when a search starts, so listing or making these searchers does not load TensorFlow.
"""
