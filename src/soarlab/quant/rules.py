"""Per-module quantization rules -> a plan (module -> bits or unquantized) -> GPTQModel's `dynamic`.

A rule selects modules by a regex over the module name (`match`, a full match, e.g.
`model\\.layers\\.\\d+\\.self_attn\\.[qkv]_proj`) and/or by the mixer kind of their layer
(`mixer`: `minicpm4` or `lightning-attn`, read from config.json `mixer_types`), and maps them to
`bits` (4 or 8) or to `keep` (stay bf16). The first rule that selects a module decides, as in
GPTQModel's and SGLang's `dynamic` (first match wins).

Modules matched by `quant.exclude` (default: o_gate, z_proj, embeddings, lm_head) are never
quantized; a rule that would quantize one is an error unless it says `override_exclude: true`.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from soarlab.domain import LAYER_RE
from soarlab.errors import SoarError
from soarlab.quant.definition import FUSED_GROUPS, LAYER_LINEARS
from soarlab.schema import QuantGroup, QuantRule

KEEP = "keep"


@dataclass
class Module:
    name: str                 # e.g. model.layers.0.self_attn.q_proj
    shape: tuple[int, ...]    # weight shape [out, in]
    layer: int | None         # decoder layer index, None for global modules
    leaf: str                 # path inside the layer (self_attn.q_proj) or the name itself
    mixer: str | None         # minicpm4 | lightning-attn | None


@dataclass
class Plan:
    base_bits: int
    bits: dict[str, int | None]                 # module -> bits, None = unquantized
    rule_hits: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    dynamic: dict[str, dict[str, Any]] = field(default_factory=dict)

    def quantized(self) -> dict[str, int]:
        return {n: b for n, b in self.bits.items() if b is not None}


def weight_shapes(model_dir: str | Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from the safetensors headers (no tensor data is read)."""
    from safetensors import safe_open

    model_dir = Path(model_dir)
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise SoarError(
            f"{model_dir} holds no *.safetensors weights",
            "point --input / paths.base_model at a complete model directory (run `dvc repro fetch-model`)",
        )
    shapes: dict[str, tuple[int, ...]] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                shapes[key] = tuple(f.get_slice(key).get_shape())
    return shapes


def read_config(model_dir: str | Path) -> dict:
    from soarlab.hub import read_model_config

    return read_model_config(model_dir)


def inventory(model_dir: str | Path) -> list[Module]:
    """Every 2-D weight (linear layers, embeddings, lm_head) of an unquantized checkpoint."""
    config = read_config(model_dir)
    mixers = list(config.get("mixer_types") or [])
    modules = []
    for key, shape in weight_shapes(model_dir).items():
        if not key.endswith(".weight") or len(shape) != 2:
            continue
        name = key[: -len(".weight")]
        m = LAYER_RE.match(name)
        layer = int(m.group(1)) if m else None
        leaf = m.group(2) if m else name
        mixer = mixers[layer] if m and layer < len(mixers) else None
        modules.append(Module(name, shape, layer, leaf, mixer))
    if not modules:
        raise SoarError(f"{model_dir} has no 2-D weights", "point at an unquantized bf16 checkpoint")
    return modules


def _compile(pattern: str, what: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise SoarError(f"{what}: bad regex {pattern!r} ({exc})", "fix the regular expression in conf/quant/") from None


def build_plan(modules: Iterable[Module], qcfg: QuantGroup) -> Plan:
    """Resolve `quant.bits`, `quant.exclude` and `quant.rules` against the model's modules."""
    modules = list(modules)
    base = qcfg.bits  # 4 or 8, what gptq_marlin serves (soarlab.schema)
    excludes = [_compile(p, "quant.exclude") for p in qcfg.exclude]

    def excluded(m: Module) -> bool:
        return any(p.fullmatch(m.name) for p in excludes)

    def default_bits(m: Module) -> int | None:
        if m.layer is None or m.leaf not in LAYER_LINEARS or excluded(m):
            return None
        return base

    plan = Plan(base_bits=base, bits={m.name: default_bits(m) for m in modules})
    decided: set[str] = set()
    for rule in qcfg.rules:
        _apply_rule(rule, modules, plan, decided, excluded)
    _check_fused_groups(plan, modules)
    _check_group_size(plan, modules, qcfg.group_size)
    plan.dynamic = to_dynamic(plan, modules)
    return plan


def _rule_hits(rule: QuantRule, modules: list[Module]) -> list[Module]:
    """The modules a rule selects (its keys and bits are typed by soarlab.schema.QuantRule)."""
    if rule.match is None and rule.mixer is None:
        raise SoarError(f"quant rule {rule.name!r} selects nothing", "give it `match` (a regex) and/or `mixer`")
    pattern = _compile(rule.match, f"quant rule {rule.name!r}") if rule.match else None
    mixer = rule.mixer
    return [m for m in modules
            if (pattern is None or pattern.fullmatch(m.name)) and (mixer is None or m.mixer == mixer)
            and (m.layer is not None or pattern is not None)]


def _apply_rule(rule: QuantRule, modules: list[Module], plan: Plan, decided: set[str], excluded) -> None:
    """Set the bits of the modules the rule selects that no earlier rule decided."""
    rname = rule.name
    hits = _rule_hits(rule, modules)
    plan.rule_hits[rname] = [m.name for m in hits]
    if not hits:
        msg = f"quant rule {rname!r} matches no module of this model (match={rule.match!r}, mixer={rule.mixer!r})"
        plan.warnings.append(msg)
        warnings.warn(msg, stacklevel=3)
        return
    bits = rule.bits
    for m in hits:
        if m.name in decided:
            continue  # an earlier rule decided it
        if bits == KEEP:
            plan.bits[m.name] = None
        else:
            if excluded(m) and not rule.override_exclude:
                raise SoarError(
                    f"quant rule {rname!r} would quantize {m.name}, which quant.exclude keeps unquantized",
                    "narrow the rule's regex/mixer, or set override_exclude: true on the rule if it is meant",
                )
            if m.layer is None or m.leaf not in LAYER_LINEARS:
                raise SoarError(f"quant rule {rname!r} would quantize {m.name}",
                                "only decoder-layer linear layers can be GPTQ-quantized; narrow the rule")
            plan.bits[m.name] = bits
        decided.add(m.name)


def _check_group_size(plan: Plan, modules: list[Module], group_size: int) -> None:
    for m in modules:
        if plan.bits[m.name] is not None and group_size > 0 and m.shape[1] % group_size:
            raise SoarError(
                f"{m.name} has {m.shape[1]} input features, not divisible by quant.group_size={group_size}",
                "use a group size that divides every quantized layer's input size (e.g. 128 or 64), or -1",
            )


def _check_fused_groups(plan: Plan, modules: list[Module]) -> None:
    by_layer: dict[int, dict[str, Module]] = {}
    for m in modules:
        if m.layer is not None:
            by_layer.setdefault(m.layer, {})[m.leaf] = m
    for layer, leaves in sorted(by_layer.items()):
        for fused, parts in FUSED_GROUPS.items():
            present = [p for p in parts if p in leaves]
            values = {plan.bits[leaves[p].name] for p in present}
            if len(values) > 1:
                detail = ", ".join(f"{p.split('.')[-1]}={plan.bits[leaves[p].name] or 'bf16'}" for p in present)
                raise SoarError(
                    f"layer {layer}: {detail} differ, but SGLang fuses them into one {fused.split('.')[-1]}",
                    "give all of " + "/".join(p.split(".")[-1] for p in parts) + " of a layer the same bits",
                )


def _alternation(items: Iterable[str]) -> str:
    items = list(items)
    return re.escape(items[0]) if len(items) == 1 else "(?:" + "|".join(re.escape(i) for i in items) + ")"


def _patterns(names: list[str], by_name: dict[str, Module]) -> list[str]:
    """Compact anchored regexes naming exactly `names`, plus SGLang's fused names where a whole group is in."""
    per_leaf: dict[str, set[int]] = {}
    out = []
    for n in names:
        m = by_name[n]
        if m.layer is None:
            out.append(re.escape(n) + "$")
        else:
            per_leaf.setdefault(m.leaf, set()).add(m.layer)
    for fused, parts in FUSED_GROUPS.items():  # a fused alias for layers where every present part is listed
        layers = set.intersection(*[per_leaf.get(p, set()) for p in parts]) if all(p in per_leaf for p in parts) else set()
        if layers:
            per_leaf.setdefault(fused, set()).update(layers)
    by_layers: dict[tuple[int, ...], list[str]] = {}
    for leaf, layers in per_leaf.items():
        by_layers.setdefault(tuple(sorted(layers)), []).append(leaf)
    for layers, leaves in sorted(by_layers.items()):
        out.append(r"model\.layers\." + _alternation(map(str, layers)) + r"\." + _alternation(sorted(leaves)) + "$")
    return out


def to_dynamic(plan: Plan, modules: list[Module]) -> dict[str, dict[str, Any]]:
    """GPTQModel `dynamic`: `-:regex` keeps modules unquantized, `+:regex` overrides bits.

    Both GPTQModel and SGLang/vLLM (`get_dynamic_override`) walk the keys in order with `re.match`
    and stop at the first hit, so negatives come first. Only layer linears GPTQModel would
    otherwise quantize need entries; embeddings and lm_head are never quantized (lm_head=false).
    """
    by_name = {m.name: m for m in modules}
    layer_linears = [m for m in modules if m.layer is not None and m.leaf in LAYER_LINEARS]
    dynamic: dict[str, dict[str, Any]] = {}
    negatives = [m.name for m in layer_linears if plan.bits[m.name] is None]
    if negatives:
        for pat in _patterns(negatives, by_name):
            dynamic["-:" + pat] = {}
    for bits in sorted({b for b in plan.bits.values() if b is not None and b != plan.base_bits}):
        names = [m.name for m in layer_linears if plan.bits[m.name] == bits]
        for pat in _patterns(names, by_name):
            dynamic["+:" + pat] = {"bits": bits}
    return dynamic
