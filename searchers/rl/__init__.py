"""Reinforcement-learning searchers (issue 14): the Hierarchical planner's grouper and placer
trained with REINFORCE, and Trinity's PPO with a multi-objective reward.

Built so far: `features` (what the policies see of a problem, computed once per problem) and
`structure` (Trinity's Node2vec structural embedding). The policies and the searchers come next;
nothing here is registered as a searcher yet.
"""
