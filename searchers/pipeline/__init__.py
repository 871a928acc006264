"""The pipeline partitioner: PipeDream's dynamic program over contiguous, replicated stages,
run as micro-batched pipelines (GPipe, 1F1B); a searcher and a seed source."""

from .searcher import PipelineSearcher

__all__ = ["PipelineSearcher"]
