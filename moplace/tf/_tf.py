"""The one place the front end imports TensorFlow (after `moplace.tf` set its environment)."""

import tensorflow as tf

__all__ = ["tf"]
