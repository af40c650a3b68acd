"""MLflow tracking: one run per pipeline execution, built from the files the stages wrote.

Stages never talk to MLflow; the `track` stage reads params.yaml and reports/ and logs one run
(pipeline_run.py), which the MLflow UI shows as run_page.py lays it out. The sweep and the decide
commands open the same store (store.py). Nothing here imports `soarlab.decide` or `soarlab.sweep`:
they use tracking, never the reverse.

  store.py        the tracking URI, the experiment, a client
  stage_times.py  when each stage ran (each `soarlab stage` appends; track reads the pipeline's span)
  params.py       what a run logs as params, its whole config read back from the artifact, its name
  runs_view.py    the score metrics' names and the runs table's saved view that shows them
  tags.py         the tags of a run: git, DVC experiment, model, sweep trial; the reproduction recipe
  run_page.py     datasets, the logged checkpoint, metric series, the digest of a run's inputs
  pipeline_run.py log one pipeline run; find a run with the same inputs
  durations.py    the per-level durations of recorded runs (the reference stage's best)
  runs.py         pipeline runs read back, as the decide commands and the predictions read them
"""
