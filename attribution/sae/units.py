"""Units that dashboards, search and steering treat alike: dictionary features and MLP neurons.

A *unit source* has the interface of ``attribution.sae.dictionary.Dictionary``: ``name``, ``model``,
``kind``, ``layer``, ``hook`` (what ``encode`` reads), ``hook_out`` (where the decoder writes),
``encode(x) -> [.., n_units]``, ``decode(f) -> [.., d_model]``, ``W_dec [n_units, d_model]``.

An MLP neuron is such a unit with no dictionary around it: its activation is
``blocks.L.mlp.hook_post[..., i]`` (encode is the identity) and its decoder direction is row ``i`` of
the layer's ``W_out``, written at ``blocks.L.hook_mlp_out``. Neuron dashboards live under
``data/neurons/<model>-L<layer>/``, beside nothing, since neurons have no dictionary directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attribution.sae.cache import stop_layer
from attribution.sae.dictionary import dictionaries_root, load_dictionary
from core.errors import RangeError
from core.models.zoo import DATA_DIR

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

    from core.models.hooked import HookedModel


def neurons_root() -> Path:
    return DATA_DIR / "neurons"


@dataclass
class NeuronDictionary:
    """The MLP neurons of one layer, shaped like a dictionary (identity encoder, decoder W_out)."""

    model: str
    layer: int
    W_out: Float[torch.Tensor, "d_mlp d_model"]
    path: Path | None = None
    info: dict[str, Any] = field(default_factory=dict)
    kind: str = "neurons"
    sae: Any = None

    @property
    def name(self) -> str:
        return f"{Path(self.model).name}-L{self.layer}-neurons"

    @property
    def hook(self) -> str:
        return f"blocks.{self.layer}.mlp.hook_post"

    @property
    def hook_out(self) -> str:
        return f"blocks.{self.layer}.hook_mlp_out"

    @property
    def W_dec(self) -> Float[torch.Tensor, "d_mlp d_model"]:
        return self.W_out

    @property
    def d_sae(self) -> int:
        return int(self.W_out.shape[0])

    def encode(self, x: Float[torch.Tensor, "*batch d_mlp"]) -> Float[torch.Tensor, "*batch d_mlp"]:
        return x.float()

    def decode(self, f: Float[torch.Tensor, "*batch d_mlp"]) -> Float[torch.Tensor, "*batch d_model"]:
        return f.float() @ self.W_out.float()

    def reconstruct(self, x: Float[torch.Tensor, "*batch d_mlp"]) -> Float[torch.Tensor, "*batch d_model"]:
        return self.decode(x)


def neuron_dictionary(model: HookedModel, layer: int, model_name: str | None = None) -> NeuronDictionary:
    """The neurons of ``layer`` of a loaded model (RangeError for a layer or model without an MLP)."""
    model.check_layer(layer)
    if not model.arch.d_mlp or not model.has_mlp(layer):
        raise RangeError(f"{model.name} has no MLP neurons at layer {layer}")
    w_out = model.weights(layer)["W_out"]
    if w_out is None or w_out.dim() != 2:
        raise RangeError(f"{model.name}'s layer {layer} MLP has no single W_out (mixture of experts?)")
    name = model_name or model.name
    d = NeuronDictionary(name, layer, w_out.detach())
    d.path = neurons_root() / d.name
    return d


def open_dictionary(path: str | Path) -> Any:
    """A dictionary directory as a Dictionary, or ModelFileError (missing, damaged, not one)."""
    return load_dictionary(path)


def resolve(spec: str, model: HookedModel | None = None) -> Any:
    """A unit source from its spec: a dictionary directory, the name of one under data/saes, or
    ``neurons:LAYER`` (the MLP neurons of ``model``'s layer; the model must be given)."""
    spec = str(spec).strip()
    if spec.startswith("neurons:"):
        layer = spec.split(":", 1)[1]
        if not layer.lstrip("-").isdigit():
            raise RangeError(f"neurons:LAYER needs a layer number, got {spec!r}")
        if model is None:
            raise RangeError("neurons:LAYER needs a model (--model)")
        return neuron_dictionary(model, int(layer))
    path = Path(spec)
    if not path.exists() and (dictionaries_root() / spec).is_dir():
        path = dictionaries_root() / spec
    return open_dictionary(path)


def n_units(d: Any) -> int:
    return int(d.W_dec.shape[0])


def check_unit(d: Any, unit: int) -> int:
    """RangeError unless ``unit`` is a feature (or neuron) id of ``d``."""
    n = n_units(d)
    if not 0 <= int(unit) < n:
        what = "neuron" if d.kind == "neurons" else "feature"
        raise RangeError(f"{what} {unit} out of range: {d.name} has {n} (valid 0..{n - 1})")
    return int(unit)


def hook_widths(model: HookedModel, hooks: list[str]) -> dict[str, int]:
    """The last-axis width of each hook (heads flattened), from a one-token forward."""
    import torch

    for hook in hooks:
        model.check_hook(hook)

    stops = [stop_layer(h) for h in hooks]
    stop = {"stop_at_layer": max(stops)} if None not in stops and model.can_stop_at_layer else {}
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.zeros((1, 2), dtype=torch.long, device=model.device),
                                        names_filter=list(hooks), **stop)
    return {h: int(cache[h][0, 0].numel()) for h in hooks}


def check_model_fits(dictionaries: Any, model: HookedModel) -> None:
    """Each dictionary (one, or a list) reads and writes hooks of ``model`` with matching widths
    (RangeError otherwise: a hook that does not exist, or a dictionary of another model)."""
    ds = dictionaries if isinstance(dictionaries, list | tuple) else [dictionaries]
    widths = hook_widths(model, list(dict.fromkeys(h for d in ds for h in (d.hook, d.hook_out))))
    for d in ds:
        if hasattr(d, "check_model"):  # a dictionary says which model it was trained on
            d.check_model(model)
        _check_widths(d, model, widths)


def _check_widths(d: Any, model: HookedModel, widths: dict[str, int]) -> None:
    out = int(d.W_dec.shape[1])
    if out != widths[d.hook_out]:
        raise RangeError(
            f"{d.name} writes vectors of width {out} but {d.hook_out} of {model.name} has width "
            f"{widths[d.hook_out]}: it belongs to another model or hook"
        )
    w_enc = getattr(d, "W_enc", None)
    if w_enc is not None and int(w_enc.shape[0]) != widths[d.hook]:
        raise RangeError(
            f"{d.name} reads vectors of width {int(w_enc.shape[0])} but {d.hook} of {model.name} has width "
            f"{widths[d.hook]}: it does not match this model"
        )
