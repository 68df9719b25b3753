"""The tuned lens (Belrose et al. 2023): an affine translator per layer before the logit lens's readout.

Row l of the residual stack (the embedding, then blocks 0..L-2's outputs) is translated to
h + h @ W[l] + b[l], then read through the final norm and unembedding. W and b start at zero (the logit
lens); the last row, the final residual, is the model's own output and has no translator. Weights live in
``data/lenses/<model>/tuned.safetensors`` with ``tuned.json`` (the training config and per-layer KL);
``attribution/lens/train.py`` builds them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.checks import Fields, read_json, read_tensors, t_finite
from core.errors import ModelFileError
from core.models.zoo import DATA_DIR

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

    from core.models.hooked import HookedModel


def lens_dir(model_name: str) -> Path:
    """Where a model's tuned lens lives: data/lenses/<name> for a zoo model, <directory>/lens beside a model
    loaded from a local directory."""
    if "/" in model_name or "\\" in model_name:
        return Path(model_name) / "lens"
    return DATA_DIR / "lenses" / model_name


@dataclass
class TunedLens:
    """Translators for rows 0..L-1 of a residual stack of L + 1 rows (L = n_layers).

    weight: [L, d_model, d_model] (the translator is I + weight), bias: [L, d_model].
    """

    model: str
    weight: Float[torch.Tensor, "layer d_model d_model"]
    bias: Float[torch.Tensor, "layer d_model"]
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def identity(cls, model: HookedModel) -> TunedLens:
        """Translators at identity: reads exactly like the logit lens."""
        import torch

        a = model.arch
        return cls(model.name, torch.zeros(a.n_layers, a.d_model, a.d_model), torch.zeros(a.n_layers, a.d_model))

    def translate(self, resid: Float[torch.Tensor, "layer *batch d_model"]
                  ) -> Float[torch.Tensor, "layer *batch d_model"]:
        """Each row through its translator (the last row unchanged)."""
        import torch

        n = self.weight.shape[0]
        if resid.shape[0] != n + 1 or resid.shape[-1] != self.weight.shape[-1]:
            raise ModelFileError(f"tuned lens for {self.model} has {n} translators of width {self.weight.shape[-1]}; "
                                 f"the residual stack has {resid.shape[0]} rows of width {resid.shape[-1]}")
        w, b = self.weight.to(resid), self.bias.to(resid)
        shape = resid.shape
        flat = resid[:n].reshape(n, -1, shape[-1])
        moved = flat + torch.bmm(flat, w) + b[:, None]
        return torch.cat([moved.reshape(n, *shape[1:]), resid[n:]])

    def save(self, directory: str | Path, half: bool = True, int8: bool = True) -> Path:
        """tuned.safetensors and tuned.json (model, config), written atomically. ``int8`` stores the
        translators' weight as int8 with one float scale per row (9.5 MiB for smollm2 instead of 19 in
        float16: shipped weights stay under 10 MiB); the bias is float16 when ``half``."""
        import os
        import tempfile

        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        dtype = "int8" if int8 else "float16" if half else "float32"
        tensors = {"weight": self.weight.detach().contiguous(), "bias": self.bias.detach().contiguous()}
        if half:
            tensors = {k: v.half() for k, v in tensors.items()}
        if int8:
            tensors.update(_quantize(self.weight.detach().float()))
            del tensors["weight"]
        for name, write in (("tuned.safetensors", lambda p: save_file(tensors, p)),
                            ("tuned.json", lambda p: Path(p).write_text(json.dumps(
                                {"model": self.model, "dtype": dtype, **self.config}, indent=1) + "\n"))):
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
            os.close(fd)
            write(tmp)
            os.chmod(tmp, 0o644)  # mkstemp makes it private; these are shipped data files
            os.replace(tmp, directory / name)
        return directory / "tuned.safetensors"

    @classmethod
    def load(cls, directory: str | Path) -> TunedLens:
        """A tuned lens read back as possibly damaged (core/checks.py): ModelFileError for a symlink, a
        truncated, zeroed or garbage file, a missing tensor, shapes that do not fit, NaN or Infinity, or a
        tuned.json that is not an object naming its model."""
        directory = Path(directory)
        what = f"the tuned lens in {directory}"
        if directory.is_symlink():
            raise ModelFileError(f"{what} is behind a symlink; refusing to read it")
        tensors = read_tensors(directory / "tuned.safetensors", f"{what} (tuned.safetensors)", ModelFileError,
                               finite=True)
        meta = Fields(read_json(directory / "tuned.json", f"{what} (tuned.json)", ModelFileError),
                      f"{what} (tuned.json)", ModelFileError)
        model = meta.text("model", directory.name)
        meta.text("dtype", None, ("int8", "float16", "float32"))
        quantized = "weight_int8" in tensors
        need = ("weight_int8", "weight_scale", "bias") if quantized else ("weight", "bias")
        missing = [k for k in need if k not in tensors]
        if missing:
            raise ModelFileError(f"{what} is damaged: no tensor {missing[0]!r}")
        w = tensors["weight_int8"] if quantized else tensors["weight"]
        bias = tensors["bias"]
        if (w.dim() != 3 or w.shape[1] != w.shape[2] or tuple(bias.shape) != tuple(w.shape[:2])
                or (quantized and tuple(tensors["weight_scale"].shape) != (*w.shape[:2], 1))):
            raise ModelFileError(f"{what} is damaged: weight {list(w.shape)} and bias {list(bias.shape)} do "
                                 "not fit together")
        weight = w.float() * tensors["weight_scale"].float() if quantized else w.float()
        if not t_finite(weight):
            raise ModelFileError(f"{what} is damaged: its translators are not finite")
        config = {k: v for k, v in meta.data.items() if k not in ("model", "dtype")}
        return cls(model, weight, bias.float(), config)

    @classmethod
    def for_model(cls, model: HookedModel) -> TunedLens:
        """The shipped tuned lens of this model (ModelFileError when there is none or it does not fit)."""
        directory = lens_dir(model.name)
        if not (directory / "tuned.safetensors").exists() and not (directory / "tuned.safetensors").is_symlink():
            trained = sorted(p.parent.name for p in lens_dir("_").parent.glob("*/tuned.safetensors"))
            raise ModelFileError(f"no tuned lens for {model.name} (trained: {', '.join(trained) or 'none'}); "
                                 f"use --kind logit, or train one with `workbench lens-train {model.name}`")
        lens = _cached(directory)
        a = model.arch
        if tuple(lens.weight.shape) != (a.n_layers, a.d_model, a.d_model):
            raise ModelFileError(f"the tuned lens in {directory} has shape {list(lens.weight.shape)}, "
                                 f"not [{a.n_layers}, {a.d_model}, {a.d_model}] as {model.name} needs")
        return lens


def _quantize(weight: Any) -> dict[str, Any]:
    """Symmetric int8 with one scale per (layer, input row): weight ~ weight_int8 * weight_scale."""
    import torch

    scale = weight.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / 127
    q = torch.round(weight / scale).clamp(-127, 127).to(torch.int8)
    return {"weight_int8": q.contiguous(), "weight_scale": scale.float().contiguous()}


_CACHE: dict[tuple[str, float, int], TunedLens] = {}


def _cached(directory: Path) -> TunedLens:
    try:
        stat = (directory / "tuned.safetensors").stat()
        key = (str(directory), stat.st_mtime, stat.st_size)
    except OSError as exc:
        raise ModelFileError(f"cannot read the tuned lens in {directory}: {exc.strerror or exc}") from None
    if key not in _CACHE:
        _CACHE[key] = TunedLens.load(directory)
    return _CACHE[key]


def readout(model: HookedModel, resid: Float[torch.Tensor, "layer *batch d_model"],
            lens: TunedLens | None = None) -> Float[torch.Tensor, "layer *batch vocab"]:
    """Logits of a residual stack through the tuned lens (the model's shipped one unless ``lens`` is given)."""
    import torch

    lens = lens or TunedLens.for_model(model)
    with torch.no_grad():
        return model.read_out(lens.translate(resid))
