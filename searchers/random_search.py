"""Random search: uniformly random genomes, the floor every searcher must beat."""

from __future__ import annotations


from moplace.errors import MoplaceError
from moplace.searcher import Searcher
from moplace.strategy import Strategy


class RandomSearcher(Searcher):
    """Batches of strategies drawn uniformly over the genome (devices, split options and
    priorities); ``splits=False`` keeps every op whole."""

    name = "random"

    def __init__(self, batch_size: int = 32, splits: bool = True):
        if int(batch_size) < 1:
            raise MoplaceError(f"batch_size must be at least 1, got {batch_size}")
        self.batch_size, self.splits = int(batch_size), bool(splits)

    def ask(self) -> list[Strategy]:
        space = self.problem.genome
        g = space.n_groups
        x = space.sample(self.batch_size, self.rng)
        if not self.splits:
            x[:, g:2 * g] = 0
        return [space.decode(row) for row in x]

    def settings(self) -> dict:
        return {"batch_size": self.batch_size, "splits": self.splits}
