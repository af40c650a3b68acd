"""Deciding what to submit: leaderboard, noise-aware compare, calibration of local to official figures, gate."""
