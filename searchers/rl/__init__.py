"""Reinforcement-learning searchers (issue 14): the Hierarchical planner's grouper and placer
trained with REINFORCE, and Trinity's PPO with a multi-objective reward.

Built so far: `features` (what the policies see of a problem, computed once per problem),
`structure` (Trinity's Node2vec structural embedding) and `policy` (the grouper and the LSTM
placer in Keras 3, sampled and scored in compiled TensorFlow functions). The searchers that train
them (REINFORCE, PPO) come next; nothing here is registered as a searcher yet.
"""
