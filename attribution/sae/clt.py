"""Cross-layer transcoders (CLT; Ameisen et al. 2025, circuit-tracer's ``CrossLayerTranscoder``): at every layer
``l`` an encoder reads the MLP's input (``blocks.l.ln2.hook_normalized``), and its features write to the MLP output
of layer ``l`` and of every later layer. The MLP output at layer ``t`` is estimated as

    sum over l <= t of  f_l @ W_dec[l][:, t - l]  +  b_dec[t]  +  x_t @ W_skip[t]^T

(the skip term is ours, as in the per-layer sets: a linear map of the MLP's input, fitted first by least squares, so
features model what is nonlinear). A feature that a later MLP merely carries forward is one feature here, where a
per-layer set needs one at each layer.

On disk (``~/.cache/workbench/clts/<name>/``, built by ``workbench sae build-clt``, never in the repository),
circuit-tracer's layout: ``W_enc_{l}.safetensors`` holding ``W_enc_{l}`` [features, d_model] (its orientation),
``b_enc_{l}``, ``b_dec_{l}`` and ``threshold_{l}`` (JumpReLU, one value per feature), and ``W_dec_{l}.safetensors``
holding ``W_dec_{l}`` [features, n_layers - l, d_model]; ours besides: ``W_skip_{l}.safetensors`` and
``workbench.json`` (model, hooks, training, per-layer quality). circuit-tracer's ``load_clt`` reads the directory
(without the skip terms, which it has no file for). Weights are stored in float16 and computed in float32.

Where dictionaries are taken, ``clt:NAME`` gives one ``Dictionary`` per layer (``layer_dictionaries``): each encodes
as its layer's encoder and decodes into its own layer; ``writes_into`` gives the cross-layer decoders, which the
replacement model (circuits/replacement.py) and feature ablations use.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from core.checks import read_json, read_tensors
from core.errors import ModelFileError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

    from attribution.sae.dictionary import Dictionary

PREFIX = "clt:"
INFO = "workbench.json"
KIND = "clt"


def clts_root() -> Path:
    base = Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "workbench"))
    return base / "clts"


def input_hook(layer: int) -> str:
    return f"blocks.{layer}.ln2.hook_normalized"


def output_hook(layer: int) -> str:
    return f"blocks.{layer}.hook_mlp_out"


@dataclass
class CrossLayerTranscoder:
    """A loaded CLT in raw units (float32). W_enc [L, d, F] (our orientation: x @ W_enc[l]), W_dec[l] [F, L - l, d]."""

    path: Path
    info: dict[str, Any]
    W_enc: Float[torch.Tensor, "layer d_model feature"]  # noqa: N815 (the field's own names)
    b_enc: Float[torch.Tensor, "layer feature"]
    threshold: Float[torch.Tensor, "layer feature"]
    W_dec: list[Float[torch.Tensor, "feature later d_model"]]  # noqa: N815
    b_dec: Float[torch.Tensor, "layer d_model"]
    W_skip: Float[torch.Tensor, "layer d_out d_in"] | None = None  # noqa: N815
    _views: dict[int, Any] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def n_layers(self) -> int:
        return int(self.W_enc.shape[0])

    @property
    def d_model(self) -> int:
        return int(self.W_enc.shape[1])

    @property
    def width(self) -> int:
        return int(self.W_enc.shape[2])

    def pre(self, layer: int, x: Float[torch.Tensor, "*batch d_model"]) -> Float[torch.Tensor, "*batch feature"]:
        return x.float() @ self.W_enc[layer] + self.b_enc[layer]

    def encode(self, layer: int, x: Float[torch.Tensor, "*batch d_model"]) -> Float[torch.Tensor, "*batch feature"]:
        """JumpReLU: the pre-activation where it is above its feature's threshold, else 0."""
        p = self.pre(layer, x)
        return p * (p > self.threshold[layer]).to(p.dtype)

    def writes_into(self, source: int, target: int) -> Float[torch.Tensor, "feature d_model"]:
        """The decoder from layer ``source``'s features into layer ``target``'s MLP output (source <= target)."""
        return self.W_dec[source][:, target - source]

    def skip(self, layer: int, x: Float[torch.Tensor, "*batch d_model"]) -> Float[torch.Tensor, "*batch d_model"]:
        return x.float() @ self.W_skip[layer].T if self.W_skip is not None else 0 * x.float()

    def reconstruct_all(self, xs: Float[torch.Tensor, "batch layer d_model"]
                        ) -> Float[torch.Tensor, "batch layer d_model"]:
        """Every layer's MLP-output estimate from every layer's MLP input (features, cross-layer writes, skip)."""
        out = self.b_dec[None].expand(xs.shape[0], -1, -1).clone()
        for s in range(self.n_layers):
            f = self.encode(s, xs[:, s])
            out[:, s:] += sparse_decode(f, self.W_dec[s].reshape(self.width, -1)).view(len(xs), -1, self.d_model)
            if self.W_skip is not None:
                out[:, s] += self.skip(s, xs[:, s])
        return out

    def layer_dictionary(self, layer: int) -> Dictionary:
        """Layer ``layer`` as a Dictionary (its encoder; its decoder into its own layer; its skip term), carrying
        the CLT (``dic.sae.clt``) for the cross-layer writes."""
        from attribution.sae.dictionary import Dictionary

        if layer not in self._views:
            m = (self.info.get("metrics") or {}).get(str(layer)) or {}
            info = {"model": self.info.get("model"), "hook": input_hook(layer), "hook_out": output_hook(layer),
                    "kind": KIND, "layer": layer, "width": self.width, "metrics": m, "clt": self.name}
            self._views[layer] = Dictionary(_LayerWeights(self, layer), self.path / f"L{layer}", info)
        return self._views[layer]

    def layer_dictionaries(self) -> list[Dictionary]:
        return [self.layer_dictionary(x) for x in range(self.n_layers)]


class _LayerWeights:
    """One layer of a CLT behind the attributes Dictionary reads from a SAELens object."""

    def __init__(self, clt: CrossLayerTranscoder, layer: int) -> None:
        self.clt, self.layer = clt, layer
        self.W_enc, self.b_enc = clt.W_enc[layer], clt.b_enc[layer]
        self.W_dec, self.b_dec = clt.writes_into(layer, layer), clt.b_dec[layer]
        self.W_skip = clt.W_skip[layer] if clt.W_skip is not None else None
        self.threshold = clt.threshold[layer]
        meta = SimpleNamespace(model_name=clt.info.get("model"), hook_name=input_hook(layer),
                               hook_name_out=output_hook(layer))
        self.cfg = SimpleNamespace(d_in=clt.d_model, d_sae=clt.width, metadata=meta, architecture=lambda: KIND)

    def encode(self, x):
        return self.clt.encode(self.layer, x)

    def decode(self, f):
        return f.float() @ self.W_dec + self.b_dec


def sparse_decode(f: Float[torch.Tensor, "batch feature"], w: Float[torch.Tensor, "feature out"]
                  ) -> Float[torch.Tensor, "batch out"]:
    """f @ w touching only the active features' rows (embedding_bag over each row's nonzeros): a CLT's decoder from
    an early layer is [features, 30 x d_model] wide, and ~32 of its 576+ rows are active per token."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    row, feat = torch.nonzero(f, as_tuple=True)
    offsets = torch.searchsorted(row, torch.arange(f.shape[0], device=f.device))
    return F.embedding_bag(feat, w, offsets, mode="sum", per_sample_weights=f[row, feat])


def cross_layer(d: Any) -> CrossLayerTranscoder | None:
    """The CLT a dictionary is a layer of, or None for an ordinary dictionary."""
    return getattr(getattr(d, "sae", None), "clt", None)


def save_clt(path: Path, weights: dict[str, Any], info: dict[str, Any], half: bool = True) -> None:
    """Write the directory (circuit-tracer's file layout plus W_skip_{l} and workbench.json) into ``path``."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    n_layers = weights["W_enc"].shape[0]

    def cast(t):
        t = t.detach().float().contiguous()
        return t.half() if half else t

    for layer in range(n_layers):
        save_file({f"W_enc_{layer}": cast(weights["W_enc"][layer].T), f"b_enc_{layer}": cast(weights["b_enc"][layer]),
                   f"b_dec_{layer}": cast(weights["b_dec"][layer]),
                   f"threshold_{layer}": cast(weights["threshold"][layer])}, str(path / f"W_enc_{layer}.safetensors"))
        save_file({f"W_dec_{layer}": cast(weights["W_dec"][layer])}, str(path / f"W_dec_{layer}.safetensors"))
        if weights.get("W_skip") is not None:
            save_file({f"W_skip_{layer}": cast(weights["W_skip"][layer])}, str(path / f"W_skip_{layer}.safetensors"))
    (path / INFO).write_text(json.dumps({**info, "kind": KIND, "n_layers": n_layers,
                                         "weights_dtype": "float16" if half else "float32"}, indent=1,
                                        default=str) + "\n")


def load_clt(path: str | Path) -> CrossLayerTranscoder:
    """A CLT directory, checked as possibly damaged: one ModelFileError line naming the file for a missing or
    truncated file, a tensor of the wrong shape, a NaN or Infinity."""
    import torch

    path = Path(path)
    if path.is_symlink() or not (path / INFO).is_file():
        raise ModelFileError(f"{str(path)!r} is not a cross-layer transcoder (no {INFO})")
    info = read_json(path / INFO, f"{path}/{INFO}", ModelFileError)
    if not isinstance(info, dict) or info.get("kind") != KIND or not isinstance(info.get("n_layers"), int):
        raise ModelFileError(f"{path}/{INFO} does not describe a cross-layer transcoder (kind {KIND!r}, n_layers)")
    n = int(info["n_layers"])
    if not 1 <= n <= 4096:
        raise ModelFileError(f"{path}/{INFO}: n_layers {n} is out of range")
    enc, dec, skip = [], [], []
    for layer in range(n):
        e = read_tensors(path / f"W_enc_{layer}.safetensors", f"{path.name}/W_enc_{layer}.safetensors",
                         ModelFileError, finite=True)
        d = read_tensors(path / f"W_dec_{layer}.safetensors", f"{path.name}/W_dec_{layer}.safetensors",
                         ModelFileError, finite=True)
        keys = {f"W_enc_{layer}", f"b_enc_{layer}", f"b_dec_{layer}", f"threshold_{layer}"}
        if not keys <= set(e) or f"W_dec_{layer}" not in d:
            raise ModelFileError(f"{path.name}, layer {layer}: missing tensors (want {sorted(keys)} and W_dec_{layer})")
        enc.append(e)
        dec.append(d[f"W_dec_{layer}"].float())
        sk = path / f"W_skip_{layer}.safetensors"
        if sk.exists():
            skip.append(read_tensors(sk, f"{path.name}/{sk.name}", ModelFileError, finite=True)[f"W_skip_{layer}"]
                        .float())
    if skip and len(skip) != n:
        raise ModelFileError(f"{path.name}: W_skip files for {len(skip)} of {n} layers")
    width, d_model = enc[0]["W_enc_0"].shape
    for layer, (e, w) in enumerate(zip(enc, dec, strict=True)):
        shapes = {f"W_enc_{layer}": (width, d_model), f"b_enc_{layer}": (width,), f"b_dec_{layer}": (d_model,),
                  f"threshold_{layer}": (width,)}
        bad = [k for k, s in shapes.items() if tuple(e[k].shape) != s]
        bad_skip = bool(skip) and tuple(skip[layer].shape) != (d_model, d_model)
        if bad or tuple(w.shape) != (width, n - layer, d_model) or bad_skip:
            raise ModelFileError(f"{path.name}, layer {layer}: tensor shapes do not match a CLT of {n} layers, "
                                 f"{width} features, d_model {d_model} ({', '.join(bad) or 'W_dec or W_skip'})")
    return CrossLayerTranscoder(
        path=path, info=info,
        W_enc=torch.stack([e[f"W_enc_{x}"].float().T for x, e in enumerate(enc)]),
        b_enc=torch.stack([e[f"b_enc_{x}"].float() for x, e in enumerate(enc)]),
        threshold=torch.stack([e[f"threshold_{x}"].float() for x, e in enumerate(enc)]),
        W_dec=dec, b_dec=torch.stack([e[f"b_dec_{x}"].float() for x, e in enumerate(enc)]),
        W_skip=torch.stack(skip) if skip else None)


def resolve_clt(name: str) -> Path:
    """A CLT by name (under clts_root()) or by its directory; one line listing the built ones otherwise."""
    path = Path(name).expanduser()
    if not (path / INFO).is_file():
        path = clts_root() / name
    if not name or not (path / INFO).is_file():
        root = clts_root()
        have = sorted(p.name for p in root.iterdir() if (p / INFO).is_file()) if root.is_dir() else []
        raise ModelFileError(f"no cross-layer transcoder {name!r} (built: {', '.join(have) or 'none'}; build one "
                             "with `workbench sae build-clt`)")
    return path


def load_clt_layers(ref: str) -> list[Dictionary]:
    """``clt:NAME`` -> one Dictionary per layer."""
    name = ref[len(PREFIX):] if ref.startswith(PREFIX) else ref
    return load_clt(resolve_clt(name)).layer_dictionaries()
