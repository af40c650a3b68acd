"""`soarlab sweep`: Hydra multirun over the pipeline, each trial a DVC experiment (see trial.py).

`${soarlab.parallel_trials:}` (one trial per GPU, one without a GPU) sizes the local launcher; it is
registered here so that every process that composes or runs a sweep's config knows it.
"""

from omegaconf import OmegaConf

from soarlab.sweep.gpu_lease import parallel_trials

OmegaConf.register_new_resolver("soarlab.parallel_trials", parallel_trials, replace=True)
