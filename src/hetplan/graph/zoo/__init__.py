"""The model zoo: named models for the vision dataset presets and GPT/BERT language models.

Names (``hetplan models`` lists them):

* vision: ``resnet18``, ``resnet50``, ``resnet152``, ``vgg11``, ``vgg16``, ``mobilenetv2``,
  ``alexnet``, ``resnet-tiny``; dataset presets ``mnist``, ``cifar10``, ``imagenet``,
  ``highres`` (3x512x512).
* transformers: ``gpt2`` (= ``gpt2-small``), ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl``,
  ``gpt`` (= ``gpt-custom``: GPT-2 small shape, meant for options), ``gpt-tiny``,
  ``gpt-mini``, ``bert-base``, ``bert-large``, ``bert-tiny``.

Transformer shapes take options after a colon: ``NAME:key=value,...`` with keys ``layers``,
``hidden``, ``heads``, ``seq``, ``vocab``, e.g. ``gpt:layers=96,hidden=1024,heads=16,seq=512``
or ``gpt2-xl:seq=512``. Unset keys keep the named model's values.

Every zoo model's top level is an ``nn.Sequential`` of named children run strictly in order,
each consuming only the previous child's output (the runtime splits pipeline stages there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from hetplan.errors import ModelError
from hetplan.graph.built import BuiltModel
from hetplan.graph.zoo import alexnet, mobilenet, resnet, vgg
from hetplan.graph.zoo.bert import BERT_CONFIGS, Bert
from hetplan.graph.zoo.common import DATASETS, Dataset, vision_model
from hetplan.graph.zoo.gpt import GPT, GPT_CONFIGS, TransformerConfig


@dataclass(frozen=True)
class ZooEntry:
    name: str
    family: str
    description: str
    make: Callable[[str, str | None, dict[str, int]], BuiltModel]
    """``make(full_name, dataset, options)``."""
    default_dataset: str | None


def _vision(
    family: str, build: Callable[[Dataset], nn.Module], default: str = "imagenet"
) -> Callable[[str, str | None, dict[str, int]], BuiltModel]:
    def make(name: str, dataset: str | None, options: dict[str, int]) -> BuiltModel:
        if options:
            raise ModelError(f"model {name!r}: vision models take no options")
        return vision_model(name, family, dataset, build, default)

    return make


def _transformer(
    family: str, base: TransformerConfig
) -> Callable[[str, str | None, dict[str, int]], BuiltModel]:
    def make(name: str, dataset: str | None, options: dict[str, int]) -> BuiltModel:
        if dataset is not None:
            raise ModelError(
                f"model {name!r}: language models take no dataset (got {dataset!r}); "
                "set the sequence length with the seq= option"
            )
        try:
            cfg = dataclasses.replace(base, **options)
        except ValueError as err:
            raise ModelError(f"model {name!r}: {err}") from None
        lm = family == "gpt"
        return BuiltModel(
            name=name,
            family=family,
            dataset=None,
            factory=(lambda: GPT(cfg)) if lm else (lambda: Bert(cfg)),
            input_shape=(cfg.seq,),
            input_dtype=torch.long,
            input_high=cfg.vocab,
            task="lm" if lm else "classify",
            num_classes=cfg.vocab if lm else 2,
            target_shape=(cfg.seq,) if lm else (),
        )

    return make


def _entries() -> dict[str, ZooEntry]:
    vision = [
        ("resnet18", "resnet", "ResNet-18", resnet.resnet18, "imagenet"),
        ("resnet50", "resnet", "ResNet-50", resnet.resnet50, "imagenet"),
        ("resnet152", "resnet", "ResNet-152", resnet.resnet152, "imagenet"),
        (
            "resnet-tiny",
            "resnet",
            "2-block ResNet of width 8 (tests)",
            resnet.resnet_tiny,
            "cifar10",
        ),
        ("vgg11", "vgg", "VGG-11", vgg.vgg11, "imagenet"),
        ("vgg16", "vgg", "VGG-16", vgg.vgg16, "imagenet"),
        ("mobilenetv2", "mobilenet", "MobileNetV2", mobilenet.mobilenet_v2, "imagenet"),
        ("alexnet", "alexnet", "AlexNet (torchvision)", alexnet.alexnet, "imagenet"),
    ]
    out = {n: ZooEntry(n, fam, desc, _vision(fam, fn, ds), ds) for n, fam, desc, fn, ds in vision}
    for n, cfg in GPT_CONFIGS.items():
        desc = f"GPT L={cfg.layers} H={cfg.hidden} A={cfg.heads} T={cfg.seq} V={cfg.vocab}"
        out[n] = ZooEntry(n, "gpt", desc, _transformer("gpt", cfg), None)
    for n, cfg in BERT_CONFIGS.items():
        desc = f"BERT L={cfg.layers} H={cfg.hidden} A={cfg.heads} T={cfg.seq} V={cfg.vocab}"
        out[n] = ZooEntry(n, "bert", desc, _transformer("bert", cfg), None)
    return out


ZOO: dict[str, ZooEntry] = _entries()
ALIASES = {
    "gpt2-small": "gpt2",
    "gpt-custom": "gpt",
    "mobilenet_v2": "mobilenetv2",
    "mobilenet-v2": "mobilenetv2",
}
OPTION_KEYS = tuple(f.name for f in dataclasses.fields(TransformerConfig))


def parse_zoo_name(name: str) -> tuple[ZooEntry, dict[str, int]] | None:
    """``NAME`` or ``NAME:key=value,...`` -> (entry, options); None if NAME is not in the zoo."""
    base, _, rest = name.partition(":")
    entry = ZOO.get(ALIASES.get(base, base))
    if entry is None:
        return None
    options: dict[str, int] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key.strip() not in OPTION_KEYS or not value.strip().isdigit():
            raise ModelError(
                f"model {name!r}: bad option {item!r}; expected key=integer with key one of "
                f"{', '.join(OPTION_KEYS)}"
            )
        options[key.strip()] = int(value)
    return entry, options


def zoo_model(name: str, dataset: str | None) -> BuiltModel | None:
    """Resolve a zoo name (with options); None if the name is not a zoo name."""
    parsed = parse_zoo_name(name)
    if parsed is None:
        return None
    entry, options = parsed
    return entry.make(name, dataset, options)


__all__ = ["DATASETS", "ZOO", "ZooEntry", "parse_zoo_name", "zoo_model"]
