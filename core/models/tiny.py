"""A tiny random word-level transformer for fast tests and demos of probes and SAEs.

``tiny_model()`` builds one in memory; ``save_tiny(dir)`` writes a zoo-loadable checkpoint
(config.json with a ``workbench`` section + model.safetensors) that ``workbench.load(dir)``
and every ``--model`` option accept. It stands on the ground alone (the model layer, core.checks for its files),
so the zoo loads it without reaching above core.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.checks import Fields, read_json, read_tensors
from core.errors import ModelFileError
from core.models.tokens import SymbolTokenizer

LOADER = "core.models.tiny:load"
DEFAULT_VOCAB = (
    ". the a movie meal book show was is felt good great fine nice bad awful poor dull "
    "very quite not and it really so"
).split()


def _cfg(vocab: list[str], layers: int, d_model: int, n_ctx: int, seed: int):
    from transformer_lens import HookedTransformerConfig

    return HookedTransformerConfig(
        n_layers=layers,
        d_model=d_model,
        n_ctx=n_ctx,
        d_head=d_model // 2,
        n_heads=2,
        d_mlp=4 * d_model,
        d_vocab=len(vocab),
        act_fn="gelu",
        normalization_type="LN",
        seed=seed,
        device="cpu",
    )


def tiny_model(
    vocab: list[str] | None = None,
    layers: int = 2,
    d_model: int = 16,
    n_ctx: int = 64,
    seed: int = 0,
    name: str = "tiny",
):
    """A random HookedModel over a whitespace vocabulary."""
    import torch

    from core.models.hooked import HookedModel, hooked_transformer

    vocab = list(vocab or DEFAULT_VOCAB)
    torch.manual_seed(seed)
    tl = hooked_transformer(_cfg(vocab, layers, d_model, n_ctx, seed)).eval()
    for p in tl.parameters():
        p.requires_grad_(False)
    return HookedModel(tl, SymbolTokenizer(vocab), name=name, kind="toy")


def save_tiny(
    out: str | Path,
    vocab: list[str] | None = None,
    layers: int = 2,
    d_model: int = 16,
    seed: int = 0,
    name: str = "tiny",
) -> Path:
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    vocab = list(vocab or DEFAULT_VOCAB)
    m = tiny_model(vocab, layers, d_model, seed=seed, name=name)
    state = {k: v.contiguous() for k, v in m.state_dict().items() if not k.endswith(("IGNORE", ".mask"))}
    save_file(state, str(out / "model.safetensors"))
    params = m.n_params()
    (out / "config.json").write_text(
        json.dumps(
            {
                "workbench": {
                    "name": name,
                    "kind": "toy",
                    "params": params,
                    "loader": LOADER,
                    "source": "random (core.models.tiny)",
                    "description": "tiny random test model",
                },
                "tiny": {"vocab": vocab, "layers": layers, "d_model": d_model, "seed": seed},
            }
        )
    )
    return out


def load(entry: Any, device: str = "cpu", **kwargs: Any):
    """Zoo loader of a saved tiny model; its config and weights are read as possibly damaged
    (core/checks.py): sizes bounded before the model is built, a sound safetensors file."""
    path = Path(entry.path)
    what = f"{path}/config.json"
    cfg = Fields(read_json(path / "config.json", what, ModelFileError), what, ModelFileError).fields("tiny")
    vocab = cfg.items("vocab", str, max_len=100_000)
    m = tiny_model(vocab, cfg.integer("layers", lo=1, hi=64), cfg.integer("d_model", lo=1, hi=4096),
                   seed=cfg.integer("seed", 0), name=entry.name)
    state = read_tensors(path / "model.safetensors", f"{path}/model.safetensors", ModelFileError)
    try:
        m.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise ModelFileError(f"{path}/model.safetensors does not fit its config: {str(exc).splitlines()[0]}"
                             ) from None
    return m
