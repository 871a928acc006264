"""NSGA-II (pymoo) over moplace genomes: the searcher (`searcher`) and its structure-aware
variation operators (`operators`). Importing it imports pymoo."""

from .searcher import Nsga2Searcher

__all__ = ["Nsga2Searcher"]
