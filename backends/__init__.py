"""One package per framework (``torch``, ``jax``, ``tensorflow``, ``keras``), each implementing the backend
contract of :mod:`cnnbench.backend`. The core finds them by module path through :mod:`cnnbench.registry`
and never imports this package; each backend imports the core, never another backend's trainers.
"""
