"""TensorFlow front end: trace a Keras training step, profile it, apply strategies for real.

Only these modules import TensorFlow; `import moplace` never does. oneDNN graph rewrites fuse
and rename nodes, and then measured times no longer match the traced graph's node names, so
they are switched off here, before any module of this package can import TensorFlow (this has
no effect if the calling program imported TensorFlow first; profiling then refuses to run).
"""

import os

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
