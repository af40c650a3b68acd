"""Regenerate the tiny MiniCPM-SALA checkpoint: tokenizer, config, weights, remote code
(`scripts/build_tiny_model.py`; the pipeline installs the shipped bytes instead, soarlab.tiny.embedded).

Deterministic for a given spec (spec.yaml) and machine only: float32 training on a CPU gives other
weights on another instruction set or thread count, which is why the result is shipped. The tokenizer is a byte-level BPE trained on
the embedded corpus (real text), with MiniCPM's special tokens and a ChatML chat template
that honours `enable_thinking`. The weights are trained for a few hundred CPU steps on
chat-formatted answers of the embedded correctness set, so the model answers it the way the
accuracy stage asks, and quantization error shows up as lost accuracy, as on the real model.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from soarlab.atomic import atomic_dir
from soarlab.corpus import CORPUS_PATH
from soarlab.tiny.embedded import CHECKPOINT_DIR

SPEC_PATH = Path(__file__).parent / "spec.yaml"
REMOTE_CODE = ("configuration_minicpm_sala.py", "modeling_minicpm_sala.py")  # kept in the checkpoint folder
# Same layout as the real vocabulary: 0 unk, 1 bos, 2 eos; the chat end token is the second EOS.
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
REAL_SCHEMA_DEFAULTS = {  # fields of openbmb/MiniCPM-SALA's config.json the tiny model keeps as they are
    "architectures": ["MiniCPMSALAForCausalLM"],
    "model_type": "minicpm_sala",
    "auto_map": {
        "AutoConfig": "configuration_minicpm_sala.MiniCPMSALAConfig",
        "AutoModel": "modeling_minicpm_sala.MiniCPMSALAModel",
        "AutoModelForCausalLM": "modeling_minicpm_sala.MiniCPMSALAForCausalLM",
    },
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_use_output_gate": True,
    "attn_use_rope": False,
    "hidden_act": "silu",
    "lightning_scale": "1/sqrt(d)",
    "lightning_use_rope": True,
    "qk_norm": True,
    "use_output_gate": True,
    "use_output_norm": True,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "scale_emb": 12,
    "scale_depth": 1.4,
    "initializer_range": 0.1,
    "tie_word_embeddings": False,
    "dtype": "bfloat16",
}


def train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS_PATH.read_text().split("\n\n"), trainer=trainer)
    # Like the real tokenizer, encode() adds BOS by default (bench counts it: RULES.md 2).
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="<|im_end|>",
        unk_token="<unk>",
        pad_token="</s>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
    )


def _training_pairs(tokenizer, qa_rows: Sequence[dict]) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) of each chat-formatted question with its answer as the accuracy stage asks it."""
    pairs = []
    for row in qa_rows:
        gold = row["gold"]
        answer = f"ANSWER: {gold}" if row.get("task") == "mcq" else ", ".join(gold if isinstance(gold, list) else [gold])
        messages = [{"role": "user", "content": row["question"]}]
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=True)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(f"<think>\n</think>\n{answer}<|im_end|>", add_special_tokens=False)["input_ids"]
        pairs.append((prompt_ids + answer_ids, len(prompt_ids)))
    return pairs


class DraftSpec(BaseModel):
    """spec.yaml's `draft`: the speculative-decoding draft's shape and how it is distilled."""
    model_config = ConfigDict(extra="forbid", strict=True)
    seed: int
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    prompts: int = Field(gt=0)
    prompt_tokens: list[int] = Field(min_length=2, max_length=2)
    continuation_tokens: int = Field(gt=0)
    train_steps: int = Field(ge=0)
    lr: float = Field(gt=0)
    batch: int = Field(gt=0)


class OutlierSpec(BaseModel):
    """spec.yaml's `outlier`: one hidden channel the sparse layers' attention reads at `scale` times its size."""
    model_config = ConfigDict(extra="forbid", strict=True)
    channel: int = Field(ge=0)
    scale: int = Field(gt=0)

    @field_validator("scale")
    @classmethod
    def _power_of_two(cls, scale: int) -> int:
        if scale & (scale - 1):
            raise ValueError(f"outlier.scale {scale} is not a power of two: bfloat16 would round the weights it scales")
        return scale


class TinySpec(BaseModel):
    """spec.yaml: the checkpoint's shape and how it is trained."""
    model_config = ConfigDict(extra="forbid", strict=True)
    seed: int
    vocab_size: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    mixer_types: list[Literal["minicpm4", "lightning-attn"]]
    train_steps: int = Field(ge=0)
    lr: float = Field(gt=0)
    batch: int = Field(gt=0)
    outlier: OutlierSpec
    draft: DraftSpec


def load_spec(path: Path = SPEC_PATH, **changes) -> TinySpec:
    import yaml

    return TinySpec(**{**yaml.safe_load(path.read_text()), **changes})


def _train(model, pairs: list[tuple[list[int], int]], spec: TinySpec | DraftSpec, pad_id: int) -> None:
    """Teach the answers (loss on answer tokens only): a few hundred CPU steps memorize them."""
    import torch
    from tqdm import tqdm

    rng = random.Random(spec.seed)
    batch = spec.batch
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.0)
    model.train()
    for _ in tqdm(range(spec.train_steps), desc=f"training {type(model).__name__}", unit="step"):
        picked = [pairs[rng.randrange(len(pairs))] for _ in range(batch)]
        width = max(len(ids) for ids, _ in picked)
        ids = torch.full((batch, width), pad_id)
        labels = torch.full((batch, width), -100)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for i, (seq, prompt_len) in enumerate(picked):
            ids[i, : len(seq)] = torch.tensor(seq)
            labels[i, prompt_len : len(seq)] = torch.tensor(seq[prompt_len:])
            mask[i, : len(seq)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def add_outlier_channel(model, outlier: OutlierSpec) -> None:
    """Give each sparse layer's attention input one outlier channel, as real LLMs have, without changing what
    the model computes: the layer's input norm weight of `outlier.channel` is divided by `outlier.scale` and the
    same input column of q/k/v (and the unquantized o_gate, which reads the same input) multiplied by it. A
    power-of-two scale is exact in bfloat16. A 4-bit group holding that column then rounds its other weights
    coarsely, so fully 4-bit GPTQ loses answers while 8-bit q/k/v of these layers keep them (RULES.md 7)."""
    import torch

    with torch.no_grad():
        for mixer, layer in zip(model.config.mixer_types, model.model.layers):
            if mixer != "minicpm4":
                continue
            layer.input_layernorm.weight[outlier.channel] /= outlier.scale
            for name in ("q_proj", "k_proj", "v_proj", "o_gate"):
                getattr(layer.self_attn, name).weight[:, outlier.channel] *= outlier.scale


def tiny_config(spec: TinySpec, vocab_size: int, eos_ids: list[int]) -> dict:
    mixers = list(spec.mixer_types)
    return {
        **REAL_SCHEMA_DEFAULTS,
        "bos_token_id": 1,
        "eos_token_id": eos_ids,
        "pad_token_id": 2,
        "vocab_size": vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": len(mixers),
        "mixer_types": mixers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "lightning_nh": spec.num_attention_heads,
        "lightning_nkv": spec.num_attention_heads,
        "lightning_head_dim": spec.head_dim,
        "dim_model_base": spec.hidden_size // 4,
        "max_position_embeddings": 4096,
        "sparse_config": {"kernel_size": 32, "kernel_stride": 16, "block_size": 64, "topk": 64,
                          "init_blocks": 1, "window_size": 2048, "dense_len": 8192, "use_nope": False},
    }


def build_tiny_model(out_dir: str | Path, spec: TinySpec, qa_rows: Sequence[dict] = ()) -> Path:
    """Write the tiny checkpoint to `out_dir` (atomically) and return it."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    torch.manual_seed(spec.seed)
    tokenizer = train_tokenizer(spec.vocab_size)
    eos_ids = [tokenizer.convert_tokens_to_ids(t) for t in ("</s>", "<|im_end|>")]
    vocab = -(-len(tokenizer) // 64) * 64  # padded like real vocabularies
    config_dict = tiny_config(spec, vocab, eos_ids)
    with atomic_dir(out_dir) as tmp:
        for name in REMOTE_CODE:
            shutil.copyfile(CHECKPOINT_DIR / name, tmp / name)
        (tmp / "config.json").write_text(json.dumps(config_dict, indent=2) + "\n")
        model = AutoModelForCausalLM.from_config(
            _load_config(tmp), trust_remote_code=True, dtype=torch.float32
        )
        if spec.train_steps and qa_rows:
            _train(model, _training_pairs(tokenizer, qa_rows), spec, tokenizer.pad_token_id)
        add_outlier_channel(model, spec.outlier)
        model.to(torch.bfloat16).save_pretrained(tmp)
        # save_pretrained rewrites config.json from the class; keep the real schema (auto_map, fields) as written.
        (tmp / "config.json").write_text(json.dumps(config_dict, indent=2) + "\n")
        tokenizer.save_pretrained(tmp)
        GenerationConfig(bos_token_id=1, eos_token_id=eos_ids, pad_token_id=2, do_sample=False).save_pretrained(tmp)
    return Path(out_dir)


def _load_config(model_dir: Path):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_dir, trust_remote_code=True)


def _target_continuations(target_dir: Path, spec: DraftSpec, qa_rows: Sequence[dict]) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) pairs: the target's greedy continuations of corpus slices (what bench asks
    it, ignore_eos-style) and its answers to the correctness questions (what accuracy asks it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target_dir, trust_remote_code=True)
    target = AutoModelForCausalLM.from_pretrained(target_dir, trust_remote_code=True).eval()
    corpus = tokenizer(CORPUS_PATH.read_text(), add_special_tokens=False)["input_ids"]
    rng = random.Random(spec.seed)
    prompts = []
    for _ in range(spec.prompts):
        length = rng.randint(*spec.prompt_tokens)
        start = rng.randrange(len(corpus) - length)
        prompts.append(([tokenizer.bos_token_id] + corpus[start:start + length], spec.continuation_tokens, True))
    for row in qa_rows:
        text = tokenizer.apply_chat_template([{"role": "user", "content": row["question"]}], tokenize=False,
                                             add_generation_prompt=True, enable_thinking=True)
        prompts.append((tokenizer(text, add_special_tokens=False)["input_ids"], spec.continuation_tokens, False))
    pairs = []
    with torch.no_grad():
        for ids, n, exact in prompts:
            out = target.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n if exact else 0,
                                  do_sample=False, pad_token_id=tokenizer.pad_token_id)
            pairs.append((out[0].tolist(), len(ids)))
    return pairs


def build_tiny_draft(out_dir: str | Path, target_dir: Path, spec: DraftSpec, qa_rows: Sequence[dict] = ()) -> Path:
    """Write the draft (a small LlamaForCausalLM sharing the target's tokenizer) to `out_dir`, atomically."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(spec.seed)
    target_config = AutoConfig.from_pretrained(target_dir, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(target_dir, trust_remote_code=True)
    config = LlamaConfig(
        vocab_size=target_config.vocab_size, hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers, num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads, max_position_embeddings=target_config.max_position_embeddings,
        bos_token_id=target_config.bos_token_id, eos_token_id=target_config.eos_token_id,
        pad_token_id=target_config.pad_token_id, tie_word_embeddings=False,
    )
    pairs = _target_continuations(Path(target_dir), spec, qa_rows)
    with atomic_dir(out_dir) as tmp:
        draft = LlamaForCausalLM(config)
        if spec.train_steps:
            _train(draft, [(ids, 1) for ids, _ in pairs], spec, tokenizer.pad_token_id)
        draft.to(torch.bfloat16).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                         pad_token_id=config.pad_token_id, do_sample=False).save_pretrained(tmp)
    return Path(out_dir)
