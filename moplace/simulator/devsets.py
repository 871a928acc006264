"""Sets of devices as rows of bitmask words: where the simulator's collectives are made, each
op's parts' devices, each bucket's ring and each collective's readers are such a row.

A row holds `WORD` devices a word (the 64th bit is the sign's): device ``d`` is bit
``d % WORD`` of word ``d // WORD``, and a cluster of ``n`` devices takes `words_for` ``(n)``
words, so every row of one task graph has the same width and two sets are equal when their
rows are. A cluster of up to 63 devices takes one word: the bitmasks the simulator used
before it could split ops past its 63rd device.
"""

from __future__ import annotations

import numpy as np

#: devices a word
WORD = 63


def words_for(n_devices: int) -> int:
    """The words a row takes for a cluster of ``n_devices``."""
    return max(1, -(-int(n_devices) // WORD))


def device_rows(ptr: np.ndarray, dev: np.ndarray, n_words: int) -> np.ndarray:
    """Per op (tasks ``ptr[i]:ptr[i + 1]``, at least one each), the row of its tasks'
    devices ``dev``: shape ``(ops, n_words)``."""
    starts = ptr[:-1]
    out = np.zeros((starts.size, n_words), np.int64)
    if starts.size == 0:
        return out
    d = dev[:ptr[-1]]
    if n_words == 1:  # up to 63 devices: one bitmask an op, as before there were words
        out[:, 0] = np.bitwise_or.reduceat(np.left_shift(np.int64(1), d), starts)
        return out
    bit = np.left_shift(np.int64(1), d % WORD)
    word = d // WORD
    for w in range(n_words):
        out[:, w] = np.bitwise_or.reduceat(np.where(word == w, bit, 0), starts)
    return out


def several(rows: np.ndarray) -> np.ndarray:
    """Per row: does it hold two devices or more?"""
    if rows.shape[1] == 1:
        m = rows[:, 0]
        return (m & (m - 1)) != 0
    some = rows != 0
    return ((rows & (rows - 1)) != 0).any(1) | (some.sum(1) > 1)


def same(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row: are the sets of ``x`` and ``y`` (rows alike in shape) equal?"""
    if x.shape[-1] == 1:
        return x[..., 0] == y[..., 0]
    return (x == y).all(-1)


def members(row) -> list[int]:
    """The devices of one row, ascending."""
    return [w * WORD + b for w, m in enumerate(np.asarray(row).tolist())
            for b in range(WORD) if m >> b & 1]


def distinct(rows: np.ndarray, tag=None) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``rows`` (with ``tag``, one integer per row, as a column after
    them: equal rows of other tags stay apart), and each row's index among them."""
    keyed = rows if tag is None else np.column_stack(
        [rows, np.broadcast_to(np.asarray(tag, np.int64), rows.shape[:1])])
    if keyed.shape[0] == 0:
        return keyed, np.zeros(0, np.int64)
    keys, inverse = np.unique(keyed, axis=0, return_inverse=True)
    return keys, inverse.ravel().astype(np.int64)


def membership(rows: np.ndarray, n_devices: int) -> np.ndarray:
    """``out[i, d]``: is device ``d`` in row ``i``? (bool, ``(rows, n_devices)``)"""
    d = np.arange(n_devices)
    return ((rows[:, d // WORD] >> (d % WORD)[None, :]) & 1).astype(bool)
