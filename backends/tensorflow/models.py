"""The TensorFlow backend's networks: the Keras 3 functional models of :mod:`backends.keras.models`.

TensorFlow's own model API is Keras, so one definition serves both backends: the ``tensorflow`` backend
trains these models under ``tf.distribute`` with its own step (:mod:`backends.tensorflow.train`), the
``keras`` backend with ``model.fit`` on any engine. Imported inside the trainers only (it imports Keras).
"""

from __future__ import annotations

from backends.keras.models import build_model, get_neutral_weights, set_neutral_weights

__all__ = ["build_model", "get_neutral_weights", "set_neutral_weights"]
