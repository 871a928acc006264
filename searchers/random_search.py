"""Random search: uniformly random genomes, the floor every searcher must beat."""

from __future__ import annotations

from dataclasses import dataclass

from moplace.core.strategy import Strategy
from moplace.optimize.searcher import Searcher
from moplace.optimize.settings import Settings, setting


@dataclass(frozen=True)
class RandomSettings(Settings):
    batch_size: int = setting(32, "strategies drawn per ask", low=1)
    splits: bool = setting(True, "draw split options too; false keeps every op whole")


class RandomSearcher(Searcher):
    """Uniformly random strategies over the genome: the floor every searcher must beat.

    Each ask draws a batch of genomes uniformly (devices, split options and priorities).
    """

    name = "random"
    Settings = RandomSettings

    def ask(self) -> list[Strategy]:
        space = self.problem.genome
        g = space.n_groups
        x = space.sample(self.config.batch_size, self.rng)
        if not self.config.splits:
            x[:, g:2 * g] = 0
        return [space.decode(row) for row in x]
