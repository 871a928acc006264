"""Random search: uniformly random genomes, the floor every searcher must beat."""

from __future__ import annotations

from moplace.core.strategy import Strategy
from moplace.errors import MoplaceError
from moplace.optimize.searcher import Searcher


class RandomSearcher(Searcher):
    """Uniformly random strategies over the genome: the floor every searcher must beat.

    Each ask draws a batch of genomes uniformly (devices, split options and priorities).

    Settings:
        batch_size: strategies drawn per ask.
        splits: draw split options too; false keeps every op whole.
    """

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
