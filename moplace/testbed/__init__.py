"""The room both front ends' testbeds share: worker processes pinned to their cores and none
left behind (`procs`), what running a strategy for real gave (`result`), and whether a split
plan computes the one-device step (`equivalence`). Imports neither TensorFlow nor torch."""
