"""The speed benchmark: the official method of RULES.md 2 with an asyncio client that is never the bottleneck.

- `requests.py`: speed-set rows -> timed requests (shuffle, output lengths, short rows dropped)
- `client.py`: the streaming HTTP client (SGLang native /generate and OpenAI /v1/completions)
- `runner.py`: warm-up, cache flush, levels, repeats, validity
- `metrics.py`: diagnostics as bench_serving defines them; repeats, spread, comparing two reports
- `report.py`: reports/bench/<level>.json, per-request JSONL, metrics.json, the plot
- `loopback.py`: a local streaming server (tests, scripts/bench_client.py)
- `cli.py`: `soarlab bench`
"""
