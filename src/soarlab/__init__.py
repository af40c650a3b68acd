"""SOAR Lab: a reproducible optimization lab for serving MiniCPM-SALA with SGLang."""

__version__ = "0.1.0"
