"""A dictionary: an SAE (reads and rewrites one hook) or a transcoder (reads the MLP's input,
writes the MLP's output), loaded from SAELens' on-disk format plus our workbench.json.

Everything that uses dictionaries (dashboards, steering, feature-level DPA, the feature graph, the
SAE page) goes through ``Dictionary``: ``encode`` gives feature activations, ``decode`` the
decoder's sum (no skip), ``reconstruct`` the dictionary's estimate of the activation at
``hook_out`` (the skip connection included for transcoders). Weights take raw activations: the
normalization scale used in training is folded into them (as SAELens does when it saves), and
recorded in workbench.json as ``activation_scale``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.checks import Fields, read_json, t_finite
from core.errors import ModelFileError, RangeError
from core.errors import ModelFileError as Err
from core.models.zoo import DATA_DIR

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

KINDS = ("topk", "batchtopk", "jumprelu", "l1", "transcoder")


@dataclass
class Dictionary:
    sae: Any  # the SAELens object (TopKSAE, JumpReLUSkipTranscoder, ...)
    path: Path
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def model(self) -> str:
        return str(self.info.get("model") or self.sae.cfg.metadata.model_name or "")

    @property
    def hook(self) -> str:
        return str(self.info.get("hook") or self.sae.cfg.metadata.hook_name or "")

    @property
    def hook_out(self) -> str:
        meta_out = getattr(self.sae.cfg.metadata, "hook_name_out", None)  # SAELens transcoders
        return str(self.info.get("hook_out") or meta_out or self.hook)

    @property
    def kind(self) -> str:
        return str(self.info.get("kind") or self.sae.cfg.architecture())

    @property
    def is_transcoder(self) -> bool:
        return self.hook_out != self.hook

    @property
    def layer(self) -> int | None:
        if "layer" in self.info:
            return int(self.info["layer"])
        parts = self.hook.split(".")
        return int(parts[1]) if len(parts) > 1 and parts[0] == "blocks" and parts[1].isdigit() else None

    @property
    def d_in(self) -> int:
        return int(self.sae.cfg.d_in)

    @property
    def d_sae(self) -> int:
        return int(self.sae.cfg.d_sae)

    @property
    def W_dec(self) -> Float[torch.Tensor, "feature d_out"]:  # noqa: N802 (the field's own name)
        return self.sae.W_dec

    @property
    def W_enc(self) -> Float[torch.Tensor, "d_in feature"]:  # noqa: N802
        return self.sae.W_enc

    @property
    def metrics(self) -> dict[str, Any]:
        return dict(self.info.get("metrics") or {})

    def encode(self, x: Float[torch.Tensor, "*batch d_in"]) -> Float[torch.Tensor, "*batch feature"]:
        return self.sae.encode(x)

    def decode(self, f: Float[torch.Tensor, "*batch feature"]) -> Float[torch.Tensor, "*batch d_out"]:
        """Decoder output only: f @ W_dec + b_dec (no skip connection)."""
        return self.sae.decode(f)

    def skip(self, x: Float[torch.Tensor, "*batch d_in"]) -> Float[torch.Tensor, "*batch d_out"]:
        """The transcoder's linear skip term (zero for SAEs)."""
        w = getattr(self.sae, "W_skip", None)
        return x @ w.T if w is not None else 0 * x

    def reconstruct(self, x: Float[torch.Tensor, "*batch d_in"]) -> Float[torch.Tensor, "*batch d_out"]:
        return self.decode(self.encode(x)) + (self.skip(x) if self.is_transcoder else 0)

    def check_feature(self, feature: int) -> int:
        if not 0 <= int(feature) < self.d_sae:
            raise RangeError(f"feature {feature} is out of range: {self.name} has features 0..{self.d_sae - 1}")
        return int(feature)

    def check_model(self, model: Any) -> None:
        """Typed error unless this dictionary was trained on ``model`` (name and width)."""
        name = getattr(model, "name", "")
        if self.model and name and Path(self.model).name != Path(name).name:
            raise Err(f"{self.name} was trained on {self.model}, not {name}")
        d_model = int(model.arch.d_model)
        if self.d_in != d_model and not self.hook.endswith(("hook_z", "hook_post", "hook_pre")):
            raise Err(f"{self.name} reads width {self.d_in}, but {name} has d_model {d_model}")
        model.check_hook(self.hook)
        if self.hook_out != self.hook:
            model.check_hook(self.hook_out)

    def summary(self) -> dict[str, Any]:
        m = self.metrics
        return {
            "path": str(self.path),
            "name": self.name,
            "model": self.model,
            "hook": self.hook,
            "hook_out": self.hook_out,
            "layer": self.layer,
            "kind": self.kind,
            "width": self.d_sae,
            **{k: m.get(k) for k in ("explained_variance", "explained_variance_no_top2", "l0",
                                     "dead_fraction", "ce_loss_delta")},
        }


# A dictionary's sizes come from its cfg.json: beyond these they are damage, refused before SAELens allocates.
MAX_D_IN, MAX_D_SAE, MAX_LAYER = 1 << 16, 1 << 22, 4096
FILES = ("cfg.json", "sae_weights.safetensors", "workbench.json")


def check_dictionary_dir(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(cfg.json, workbench.json) of a dictionary directory, read as possibly damaged (core/checks.py):
    ModelFileError (one line) for a missing directory, a symlink, a config that is not an object, a width or
    layer that is not a whole number in bounds, a model/hook that is not a string, non-finite metrics."""
    path = Path(path)
    if path.is_symlink():
        raise ModelFileError(f"{str(path)!r} is a symlink; refusing to read a dictionary through it")
    if not path.is_dir() or not (path / "cfg.json").exists():
        raise ModelFileError(f"{str(path)!r} is not a dictionary directory (no cfg.json)")
    for name in FILES:
        if (path / name).is_symlink():
            raise ModelFileError(f"{path}/{name} is a symlink; refusing to read it")
    cfg = Fields(read_json(path / "cfg.json", f"{path}/cfg.json", ModelFileError), f"{path}/cfg.json",
                 ModelFileError)
    cfg.integer("d_in", lo=1, hi=MAX_D_IN)
    cfg.integer("d_sae", lo=1, hi=MAX_D_SAE)
    cfg.integer("d_out", None, lo=1, hi=MAX_D_IN)
    cfg.integer("k", None, lo=1, hi=MAX_D_SAE)
    meta = cfg.fields("metadata", {})
    for key in ("model_name", "hook_name", "hook_name_out"):
        meta.text(key, None)
    info = {}
    if (path / "workbench.json").exists():
        info = read_json(path / "workbench.json", f"{path}/workbench.json", ModelFileError)
    f = Fields(info, f"{path}/workbench.json", ModelFileError)
    for key in ("model", "hook", "hook_out", "kind"):
        f.text(key, None)
    if info.get("kind") is not None and info["kind"] not in KINDS:  # never read as some other kind silently
        raise ModelFileError(f"{path}/workbench.json names kind {info['kind']!r}; known: {', '.join(KINDS)}")
    if not info.get("hook") and not meta.data.get("hook_name"):  # where it reads and writes: nothing says
        raise ModelFileError(f"dictionary {str(path)!r} does not say its hook: no workbench.json and no "
                             "hook_name in cfg.json's metadata")
    f.integer("layer", None, lo=0, hi=MAX_LAYER)
    f.integer("width", None, lo=1, hi=MAX_D_SAE)
    metrics = f.fields("metrics", {})
    for key, value in metrics.data.items():
        if value is not None and not isinstance(value, str):
            metrics.number(key)
    return cfg.data, info


def load_dictionary(path: str | Path) -> Dictionary:
    """Load an SAE or transcoder directory (SAELens format + optional workbench.json), checked when opened:
    its files (check_dictionary_dir), then its weights (shapes against cfg.json, every value finite)."""
    from sae_lens import SAE

    path = Path(path)
    cfg, info = check_dictionary_dir(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # shipped weights are stored in float16 to halve their size; compute in float32
            sae = SAE.load_from_disk(str(path), device="cpu", dtype="float32")
    except Exception as exc:  # SAELens raises several types for bad configs or weights
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ModelFileError(f"cannot load dictionary from {str(path)!r}: {first}") from None
    sae.eval()
    for name, p in sae.named_parameters():
        p.requires_grad_(False)
        if not t_finite(p):
            raise ModelFileError(f"dictionary {str(path)!r} is damaged: its weight {name} holds NaN or Infinity")
    d_in, d_sae, d_out = cfg["d_in"], cfg["d_sae"], cfg.get("d_out") or cfg["d_in"]
    if tuple(sae.W_enc.shape) != (d_in, d_sae) or tuple(sae.W_dec.shape) != (d_sae, d_out):
        raise ModelFileError(f"dictionary {str(path)!r} is damaged: weights {list(sae.W_enc.shape)} / "
                             f"{list(sae.W_dec.shape)} do not match cfg.json (d_in {d_in}, d_sae {d_sae})")
    return Dictionary(sae, path, info)


def dictionaries_root() -> Path:
    return DATA_DIR / "saes"


def pretrained_root() -> Path:
    """Where published dictionaries are kept once converted: <cache>/pretrained/<release>/<id>/."""
    import os

    base = Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "workbench"))
    return base / "pretrained"


def list_dictionaries(root: str | Path | None = None, model: str | None = None) -> list[Dictionary]:
    """Every loadable dictionary under ``root`` (default data/saes and the converted pretrained ones), sorted by
    layer then kind;
    damaged entries are reported as warnings and skipped."""
    if root:  # a folder the user named must be one
        root = Path(root)
        if not root.is_dir():
            what = "a file" if root.exists() else "missing"
            raise ModelFileError(f"dictionary folder {str(root)!r} is {what}: give a directory of dictionaries")
    if root:
        folders = sorted(Path(root).iterdir())
    else:  # the shipped ones, then pretrained ones converted into the user's cache (attribution/sae/pretrained.py)
        base, extra = dictionaries_root(), pretrained_root()
        folders = sorted(base.iterdir()) if base.is_dir() else []
        folders += sorted(d for r in (sorted(extra.iterdir()) if extra.is_dir() else []) if r.is_dir()
                          for d in r.iterdir())
    out = []
    for d in folders:
        if d.name.startswith(".") or not (d.is_dir() or d.is_symlink()):
            continue
        try:
            dic = load_dictionary(d)
        except ModelFileError as e:
            warnings.warn(f"skipping damaged dictionary: {e}", stacklevel=2)
            continue
        if model is None or Path(dic.model).name == Path(model).name:
            out.append(dic)
    return sorted(out, key=lambda d: (d.layer if d.layer is not None else -1, d.kind, d.name))
