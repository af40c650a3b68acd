"""What recorded runs predict of the official figures: a run's run-to-run noise (noise.py) and the
calibration of local to official figures on recorded submissions (calibration.py), over the runs
soarlab.tracking.runs reads back. The decide commands use it, and track logs each new run's predicted
official figures with it."""
