"""A small Llama target and its speculative-decoding draft, trained on the GPU host (docs/PERFORMANCE.md,
"Speculative decoding on a GPU"): a draft with random weights is never accepted, so both are trained.

- the target: models.SMALL's shape (hidden 1024, 2 layers, the embedded model's tokenizer), trained as a
  language model on the embedded corpus;
- the draft: a Llama of hidden 256 and 1 layer with the same tokenizer, distilled from the target's own
  greedy continuations of corpus prompts (what the speed method asks it), so it proposes what the target says.

    python scripts/gpu/spec_models.py TARGET_DIR DRAFT_DIR      # about a minute on one GPU
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from models import SEED, SMALL  # noqa: E402

DEVICE = "cuda"  # the rehearsal on a CPU sets "cpu"
DRAFT = {**SMALL, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 1, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 64, "mixer_types": ["minicpm4"]}


def _train(model, batches, steps: int, lr: float) -> None:
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for step in range(steps):
        ids = batches(step)
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"{type(model).__name__} hidden {model.config.hidden_size}: step {step} loss {loss.item():.3f}", flush=True)
    model.eval()


def _save(model, cfg: dict, tok, d: Path) -> None:
    import torch

    d.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(d)
    (d / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")  # SMALL's fields as models.py writes them
    tok.save_pretrained(d)
    (d / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": cfg["eos_token_id"], "pad_token_id": 2, "do_sample": False}) + "\n")


def write_trained_pair(target_dir: Path, draft_dir: Path, window: int = 128, batch: int = 32,
                       target_steps: int = 600, draft_steps: int = 800) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from soarlab.corpus import CORPUS_PATH
    from soarlab.tiny.build import train_tokenizer

    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    tok = train_tokenizer(SMALL["vocab_size"])
    corpus = torch.tensor(tok(CORPUS_PATH.read_text(), add_special_tokens=False)["input_ids"], device=DEVICE)

    def corpus_batch(_step: int):
        starts = [rng.randrange(len(corpus) - window) for _ in range(batch)]
        return torch.stack([corpus[s:s + window] for s in starts])

    fields = lambda cfg: {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "mixer_types", "dtype")}  # noqa: E731
    target = LlamaForCausalLM(LlamaConfig(**fields(SMALL))).to(DEVICE)
    _train(target, corpus_batch, steps=target_steps, lr=1e-3)
    # The draft learns the target's greedy continuations of corpus prompts, as the speed method asks them.
    prompts = torch.stack([corpus[s:s + 32] for s in (rng.randrange(len(corpus) - 32) for _ in range(256))])
    with torch.no_grad():
        continued = target.generate(prompts, max_new_tokens=96, min_new_tokens=96, do_sample=False, pad_token_id=2)
    draft = LlamaForCausalLM(LlamaConfig(**fields(DRAFT))).to(DEVICE)
    _train(draft, lambda step: continued[torch.randint(len(continued), (batch,), device=DEVICE)], steps=draft_steps, lr=2e-3)
    _save(target, SMALL, tok, target_dir)
    _save(draft, DRAFT, tok, draft_dir)


if __name__ == "__main__":
    write_trained_pair(Path(sys.argv[1]), Path(sys.argv[2]))
