"""SOAR Lab's Optuna sweeper for Hydra (found by Hydra's plugin discovery under hydra_plugins)."""
