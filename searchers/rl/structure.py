"""Trinity's structural op embedding: Node2vec, biased random walks plus a skip-gram.

Walks run on the graph with its edges undirected (structure, not data flow), Node2vec's
second-order bias: from ``t`` to ``v``, the next op ``x`` is weighted 1/p when it returns to
``t``, 1 when ``x`` neighbours ``t`` and 1/q otherwise (p = q = 1 is DeepWalk). Every walk
steps at once, vectorized with numpy, by rejection sampling (a uniform neighbour accepted with
probability weight / largest weight), so a 10,000-op graph walks in well under a second.

The skip-gram is gensim's ``Word2Vec`` (sg=1, negative sampling): a maintained, compiled
implementation we would otherwise write and tune ourselves; the ``node2vec`` package walks in
pure Python (minutes on 10,000 ops) and wraps the same gensim call. One worker thread and a
fixed string hash make the embedding the same for the same seed in every process.
"""

from __future__ import annotations

import zlib

import numpy as np

from moplace.errors import MoplaceError


def random_walks(graph, *, walks_per_op: int = 10, length: int = 20, p: float = 1.0,
                 q: float = 1.0, seed: int = 0) -> np.ndarray:
    """Node2vec walks over ``graph`` with edges undirected: [walks_per_op * n, length] op
    indices, each walk starting at its op (rows ``k * n + i`` start at op ``i``); a walk that
    reaches an op without neighbours stays there."""
    if walks_per_op < 1 or length < 1 or p <= 0 or q <= 0:
        raise ValueError("walks_per_op and length must be at least 1, p and q positive")
    a = graph.arrays
    n = len(graph.ops)
    rng = np.random.default_rng(seed)
    src = np.concatenate([a.src, a.dst])
    dst = np.concatenate([a.dst, a.src])
    keys = np.unique(src * n + dst)  # undirected adjacency as sorted keys u * n + v
    src, dst = keys // n, keys % n
    ptr = np.searchsorted(src, np.arange(n + 1))
    degree = np.diff(ptr)
    walks = np.empty((walks_per_op * n, length), np.int64)
    walks[:, 0] = np.tile(np.arange(n), walks_per_op)
    if keys.size == 0:  # no edges: every walk stays where it starts
        walks[:] = walks[:, :1]
        return walks
    top = max(1.0 / p, 1.0, 1.0 / q)

    def step(cur: np.ndarray) -> np.ndarray:
        pick = ptr[cur] + (rng.random(cur.size) * np.maximum(degree[cur], 1)).astype(np.int64)
        return np.where(degree[cur] > 0, dst[np.minimum(pick, dst.size - 1)], cur)

    walks[:, 1] = step(walks[:, 0])
    for k in range(2, length):
        prev, cur = walks[:, k - 2], walks[:, k - 1]
        out = np.empty_like(cur)
        todo = np.arange(cur.size)
        while todo.size:
            x = step(cur[todo])
            t = prev[todo]
            key = t * n + x
            near = keys[np.minimum(np.searchsorted(keys, key), keys.size - 1)] == key
            weight = np.where(x == t, 1.0 / p, np.where(near, 1.0, 1.0 / q))
            stuck = degree[cur[todo]] == 0
            ok = stuck | (rng.random(x.size) * top < weight)
            out[todo[ok]] = x[ok]
            todo = todo[~ok]
        walks[:, k] = out
    return walks


def _stable_hash(text: str) -> int:
    """gensim seeds each word's initial vector from hash(word + seed); Python's string hash
    changes between processes, this one does not."""
    return zlib.crc32(text.encode())


def structural_embedding(graph, *, dim: int = 16, walks_per_op: int = 10, length: int = 20,
                         window: int = 5, p: float = 1.0, q: float = 1.0, epochs: int = 1,
                         seed: int = 0) -> np.ndarray:
    """[n, dim] float32 Node2vec embedding of ``graph``'s ops (see the module docstring)."""
    try:
        from gensim.models import Word2Vec
    except ImportError:
        raise MoplaceError("the RL searchers' structural embedding needs gensim: "
                           "pip install 'moplace[tf]'") from None

    n = len(graph.ops)
    if n == 0:
        return np.zeros((0, dim), np.float32)
    walks = random_walks(graph, walks_per_op=walks_per_op, length=length, p=p, q=q, seed=seed)
    sentences = [[str(i) for i in row] for row in walks.tolist()]
    model = Word2Vec(sentences, vector_size=dim, window=window, min_count=0, sg=1, negative=5,
                     workers=1, seed=seed, epochs=epochs, hashfxn=_stable_hash)
    out = np.stack([model.wv[str(i)] for i in range(n)]).astype(np.float32)
    out.flags.writeable = False
    return out
