"""Where a dictionary sits in DPA's residual picture, and the per-prompt tables feature-level DPA scores.

A residual SAE at ``blocks.L.hook_resid_{pre,mid,post}`` reads and rewrites one residual point: its
features are scored against DPA's target vector at that point, and as a target its encoder direction
starts a top-down pass there. A transcoder reads ``blocks.L.ln2.hook_normalized`` (the MLP's input, the
residual stream at ``resid_mid`` divided by its frozen norm scale) and writes ``blocks.L.hook_mlp_out``,
which adds into ``resid_post`` and so sees the target vector there.

``Sources`` holds, for one dictionary on one prompt, every additive piece of its hook_out activation:
feature contributions (activation x decoder direction), the error (true activation minus
reconstruction), the decoder bias and the transcoder's skip term, so any target vector scores them all
with one dot product per position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float, Int

from attribution.dpa.linear import norm_back
from attribution.dpa.steps import Point, rank
from attribution.sae.clt import PREFIX as CLT
from attribution.sae.clt import load_clt_layers
from attribution.sae.dictionary import Dictionary, dictionaries_root, load_dictionary
from attribution.sae.pretrained import PREFIX as PRETRAINED
from attribution.sae.pretrained import load_pretrained
from attribution.sae.sets import load_set
from core.errors import MethodError

if TYPE_CHECKING:
    from attribution.sae.dictionary import Dictionary
    from core.models.hooked import HookedModel

RESID = re.compile(r"^blocks\.(\d+)\.hook_resid_(pre|mid|post)$")
TC_IN = re.compile(r"^blocks\.(\d+)\.ln2\.hook_normalized$")
TC_OUT = re.compile(r"^blocks\.(\d+)\.hook_mlp_out$")


@dataclass(frozen=True)
class Placement:
    """write: the residual point the hook_out activation adds into; read: where the encoder's input sits.
    mlp: the MLP layer a transcoder replaces (None for an SAE). tag: the node-id prefix (L12, L12T)."""

    write: Point
    read: Point
    mlp: int | None
    tag: str

    @property
    def order(self) -> tuple[int, int]:
        """Depth order: a transcoder writing at resid_post L sits below a residual SAE there (the SAE's
        reconstruction of resid_post L includes the MLP's output)."""
        return (rank(self.write), 0 if self.mlp is not None else 1)


def placement(d: Dictionary) -> Placement:
    """The dictionary's place, or MethodError naming the hooks feature-level DPA supports."""
    m = RESID.match(d.hook)
    if m and d.hook_out == d.hook:
        layer, where = int(m.group(1)), m.group(2)
        point = (layer - 1, "post") if where == "pre" else (layer, where)
        return Placement(point, point, None, f"L{layer}" if where == "post" else f"L{layer}{where}")
    m_in, m_out = TC_IN.match(d.hook), TC_OUT.match(d.hook_out)
    if m_in and m_out and m_in.group(1) == m_out.group(1):
        layer = int(m_in.group(1))
        return Placement((layer, "post"), (layer, "mid"), layer, f"L{layer}T")
    raise MethodError(
        f"{d.name}: feature-level DPA reads SAEs on blocks.L.hook_resid_pre|mid|post and transcoders from "
        f"blocks.L.ln2.hook_normalized to blocks.L.hook_mlp_out (got {d.hook} -> {d.hook_out})")


def check_dictionaries(model: HookedModel, dicts: list[Dictionary], cross_layer: bool = False) -> list[Placement]:
    """Each dictionary fits the model (name, width, hooks) and has a place; no two share a place. A cross-layer
    transcoder's layers only where ``cross_layer`` (the replacement-model graph): DPA's feature scores split each
    dictionary's own output, and a CLT layer's features also write into every later MLP."""
    if not dicts:
        raise MethodError("give at least one dictionary (--saes PATH[,PATH...])")
    places = []
    for d in dicts:
        if not cross_layer and getattr(d.sae, "clt", None) is not None:
            raise MethodError(f"{d.info.get('clt')} is a cross-layer transcoder: its features write into every later "
                              "MLP, which DPA's feature scores do not follow; use the gradient graph "
                              "(feature-graph --method gradient)")
        d.check_model(model)
        if d.d_in != int(model.arch.d_model):
            raise MethodError(f"{d.name} reads width {d.d_in}, but {model.name} has d_model {model.arch.d_model}")
        places.append(placement(d))
    tags = [p.tag for p in places]
    for tag in set(tags):
        if tags.count(tag) > 1:
            raise MethodError(f"two dictionaries sit at the same place ({tag}); give one per hook")
    return places


def directions(d: Dictionary, features: Int[torch.Tensor, " n"], chunk: int = 256) -> Float[torch.Tensor, "n d_model"]:
    """Decoder directions in the hook_out space [n, d_model]: decode(e_f) - decode(0) (decode is affine;
    this folds in any activation scale the dictionary applies)."""
    zero = d.decode(torch.zeros(1, d.d_sae)).float()
    out = []
    for start in range(0, len(features), chunk):
        ids = features[start:start + chunk]
        eye = torch.zeros(len(ids), d.d_sae)
        eye[torch.arange(len(ids)), ids] = 1.0
        out.append(d.decode(eye).float() - zero)
    return torch.cat(out) if out else torch.zeros(0, zero.shape[-1])


def encoder_directions(d: Dictionary, x: Float[torch.Tensor, "pos d_in"], positions: Int[torch.Tensor, " n"],
                       features: Int[torch.Tensor, " n"]) -> Float[torch.Tensor, "n d_in"]:
    """d act_f / d input at each (position, feature) [n, d_in]: the direction whose dot product with the
    input moves the active feature (TopK and ReLU encoders are affine around an active feature)."""
    if len(features) == 0:
        return torch.zeros(0, x.shape[-1])
    with torch.enable_grad():
        rows = x[positions.to(x.device)].detach().clone().requires_grad_(True)
        acts = d.encode(rows)
        acts[torch.arange(len(features)), features].sum().backward()
    return rows.grad.detach().float()


@dataclass
class Sources:
    """One dictionary's additive pieces on one prompt. Features are the active (position, feature) pairs."""

    positions: Int[torch.Tensor, " active"]
    features: Int[torch.Tensor, " active"]
    acts: Float[torch.Tensor, " active"]
    contrib: Float[torch.Tensor, "active d_model"]  # act x decoder direction
    error: Float[torch.Tensor, "pos d_model"]  # true hook_out activation - reconstruction
    bias: Float[torch.Tensor, "pos d_model"]  # the decoder bias (zero where features are not scored)
    skip: Float[torch.Tensor, "pos d_model"]  # the transcoder's skip term (zero for SAEs)
    x_out: Float[torch.Tensor, "pos d_model"]  # the true hook_out activation
    x_in: Float[torch.Tensor, "pos d_in"]  # the encoder's input (on the dictionary's device)

    def feature_scores(self, t: Float[torch.Tensor, "batch pos d_model"]) -> Float[torch.Tensor, "batch active"]:
        """act x (direction . t[position]) for a batch of targets t [batch, pos, d_model] -> [batch, n]."""
        return (t[:, self.positions, :] * self.contrib).sum(-1)

    @staticmethod
    def per_position(v: Float[torch.Tensor, "pos d_model"],
                     t: Float[torch.Tensor, "batch pos d_model"]) -> Float[torch.Tensor, "batch pos"]:
        """v [pos, d_model] . t [batch, pos, d_model] -> [batch, pos]."""
        return (t * v).sum(-1)


def sources(d: Dictionary, cache: dict[str, Any], keep_first: bool = False) -> Sources:
    """The additive pieces of ``d``'s hook_out activation on the cached prompt (batch 1).

    keep_first=False leaves position 0 unscored (the attention sink, which no dictionary here is trained
    on): its whole activation is the error there."""
    home = cache[d.hook_out].device  # the model's device; the dictionary may sit elsewhere (CPU)
    x_in = cache[d.hook][0].float().to(d.sae.W_dec.device)
    x_out = cache[d.hook_out][0].float().to(x_in.device)
    with torch.no_grad():
        acts = d.encode(x_in).float()
        decoded = d.decode(acts).float()
        recon = d.reconstruct(x_in).float()
        zero = d.decode(torch.zeros(1, d.d_sae)).float()[0]
    first = 0 if keep_first else 1
    scored = torch.zeros(x_out.shape[0], 1, device=x_in.device)
    scored[first:] = 1.0
    acts[:first] = 0.0
    pos, feat = torch.nonzero(acts, as_tuple=True)
    vals = acts[pos, feat]
    uniq, inverse = torch.unique(feat, return_inverse=True)
    with torch.no_grad():
        dirs = directions(d, uniq)
    return Sources(positions=pos.to(home), features=feat, acts=vals.to(home),
                   contrib=(dirs[inverse] * vals[:, None]).to(home), error=(x_out - recon * scored).to(home),
                   bias=(zero * scored).to(home), skip=((recon - decoded) * scored).to(home), x_out=x_out.to(home),
                   x_in=x_in)


def read_target(model: HookedModel, place: Placement, cache: dict[str, Any], enc_dirs: Float[torch.Tensor, "n d_in"],
                positions: Int[torch.Tensor, " n"], seq: int) -> Float[torch.Tensor, "n pos d_model"]:
    """Targets [n, pos, d_model] at ``place.read`` for features with encoder directions [n, d_in] at
    ``positions``: a transcoder's input is the residual stream over its frozen ln2 scale."""
    home = cache["hook_embed"].device
    enc_dirs, positions = enc_dirs.to(home), positions.to(home)
    t = enc_dirs.new_zeros(len(positions), seq, enc_dirs.shape[-1])
    t[torch.arange(len(positions)), positions] = enc_dirs
    if place.mlp is None:
        return t
    scale = cache.get(f"blocks.{place.mlp}.ln2.hook_scale")
    t, _ = norm_back(t, scale, None, None, model.arch.norm == "layernorm")
    return t


def load_dictionaries(spec: str | list[Any], model: Any = None) -> list[Dictionary]:
    """Dictionaries from "PATH,PATH" (or a list of paths, names under data/saes, ``set:NAME`` for every layer of a
    dictionary set, ``clt:NAME`` for every layer of a cross-layer transcoder, ``pretrained:RELEASE/ID`` from
    SAELens' registry, or Dictionary objects). ``model``: needed only to convert a pretrained dictionary the first
    time (attribution/sae/pretrained.py)."""
    from pathlib import Path

    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    if not items or any(isinstance(s, str) and not s for s in items):
        raise MethodError(f"--saes takes dictionary paths separated by commas (got {spec!r})")
    out = []
    for item in items:
        if isinstance(item, Dictionary):
            out.append(item)
            continue
        if isinstance(item, str) and item.startswith("set:"):  # a transcoder set (workbench sae build-set)

            out += load_set(item[4:])
            continue
        if isinstance(item, str) and item.startswith(CLT):  # a cross-layer transcoder (workbench sae build-clt)
            out += load_clt_layers(item)
            continue
        if isinstance(item, str) and item.startswith(PRETRAINED):
            out += load_pretrained(item, model)
            continue
        path = Path(item)
        if not path.exists() and not path.is_absolute() and (dictionaries_root() / path).is_dir():
            path = dictionaries_root() / path  # a bare name under data/saes
        out.append(load_dictionary(path))
    seen = [str(d.path.resolve()) for d in out]
    if len(set(seen)) < len(seen):
        raise MethodError("the same dictionary is given twice")
    return out
