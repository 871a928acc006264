"""What a problem is made of: the op graph, the cluster (and its presets), strategies, the
genome searchers vary, the baseline strategies and synthetic graphs.

Everything here is immutable data and the checks that keep it valid; it imports nothing of
moplace but the utilities (`moplace.errors`, `moplace.registry`, `moplace.arrays`).
"""
