"""The embedded default model: a tiny MiniCPM-SALA-shaped checkpoint built locally, offline."""

from soarlab.tiny.build import build_tiny_model

__all__ = ["build_tiny_model"]
