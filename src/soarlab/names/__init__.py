"""The names SOAR Lab's processes agree on, each defined once, so that a name changes in one place:
`mlflow_tags` (what a run carries: written by track, a sweep or a decide command, read back by the others)
and `environment` (the variables one process hands another: a sweep trial or `compare --rerun` to the stages
of its pipeline, DVC to a stage). Two modules, so that a new tag re-runs no stage that reads only variables
(evaluate)."""
