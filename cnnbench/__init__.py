"""cnnbench: the same CNN, trained data-parallel under PyTorch, TensorFlow/Keras and JAX/Flax.

The core package imports no deep-learning framework at module level: frameworks live in
worker processes started by :mod:`cnnbench.run.launch`, one framework per process.
"""

__version__ = "0.1.0"
