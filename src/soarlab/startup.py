"""What a SOAR Lab process does first: the `soarlab` command (every pipeline stage is one) and the CPU model
server's launcher.

Garbage collection at import. A stage imports lm-eval, torch, transformers or MLflow: hundreds of thousands
of objects that live as long as the process. CPython (3.11) runs a young collection every 700 new container
objects and, as they survive, older ones that walk the whole heap: 841, 77 and 6 of them while a process
imports lm-eval, transformers and MLflow, a fifth of that import's CPU time, to free 8,600 objects in all
against the 370,000 that stay. A young generation of 10,000 objects cuts them to 65, 5 and none
(docs/PERFORMANCE.md, "A pipeline run's own cost"). Cyclic garbage is still collected, a little later; the
process's peak memory was the same.
"""

from __future__ import annotations

import gc

# (young generation, then each older generation's collections per collection of the one below): the
# young threshold raised from CPython's 700; the other two are CPython's own.
GC_THRESHOLDS = (10_000, 10, 10)


def collect_less_at_import() -> None:
    gc.set_threshold(*GC_THRESHOLDS)
