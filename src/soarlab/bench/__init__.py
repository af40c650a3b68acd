"""The speed benchmark: the official method of RULES.md 2 with an asyncio client that is never the bottleneck.

- `requests.py`: speed-set rows -> timed requests (shuffle, output lengths, short rows dropped)
- `client.py`: the streaming HTTP clients, one class per API (SGLang native /generate, OpenAI /v1/completions)
- `runner.py`: warm-up, cache flush (`engines.Server.flush_cache`), levels, repeats, validity
- `metrics.py`: the metric table (each figure once, with unit and definition), diagnostics, flat keys
- `results.py`: typed level reports; comparing two of them against their run-to-run spread
- `report.py`: reports/bench/<level>.json, per-request JSONL, metrics.json, the plot, the printout
- `loopback.py`: a local streaming server (tests, scripts/bench/bench_client.py)
- `preflight.py`: before a level: is a server there, its API and model, the speed set as requests (`soarlab bench`)
"""
