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

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import ModelFileError, RangeError

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
    def W_dec(self) -> Any:  # noqa: N802 (the field's own name)
        return self.sae.W_dec

    @property
    def W_enc(self) -> Any:  # noqa: N802
        return self.sae.W_enc

    @property
    def metrics(self) -> dict[str, Any]:
        return dict(self.info.get("metrics") or {})

    def encode(self, x: Any) -> Any:
        return self.sae.encode(x)

    def decode(self, f: Any) -> Any:
        """Decoder output only: f @ W_dec + b_dec (no skip connection)."""
        return self.sae.decode(f)

    def skip(self, x: Any) -> Any:
        """The transcoder's linear skip term (zero for SAEs)."""
        w = getattr(self.sae, "W_skip", None)
        return x @ w.T if w is not None else 0 * x

    def reconstruct(self, x: Any) -> Any:
        return self.decode(self.encode(x)) + (self.skip(x) if self.is_transcoder else 0)

    def check_feature(self, feature: int) -> int:
        if not 0 <= int(feature) < self.d_sae:
            raise RangeError(f"feature {feature} is out of range: {self.name} has features 0..{self.d_sae - 1}")
        return int(feature)

    def check_model(self, model: Any) -> None:
        """Typed error unless this dictionary was trained on ``model`` (name and width)."""
        from workbench.errors import ModelFileError as Err

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


def load_dictionary(path: str | Path) -> Dictionary:
    """Load an SAE or transcoder directory (SAELens format + optional workbench.json)."""
    from sae_lens import SAE

    path = Path(path)
    if not path.is_dir() or not (path / "cfg.json").exists():
        raise ModelFileError(f"{str(path)!r} is not a dictionary directory (no cfg.json)")
    try:
        info = json.loads((path / "workbench.json").read_text()) if (path / "workbench.json").exists() else {}
    except ValueError as e:
        raise ModelFileError(f"{path}/workbench.json is not valid JSON: {e}") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # shipped weights are stored in float16 to halve their size; compute in float32
            sae = SAE.load_from_disk(str(path), device="cpu", dtype="float32")
    except Exception as exc:  # SAELens raises several types for bad configs or weights
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ModelFileError(f"cannot load dictionary from {str(path)!r}: {first}") from None
    sae.eval()
    for p in sae.parameters():
        p.requires_grad_(False)
    return Dictionary(sae, path, info)


def dictionaries_root() -> Path:
    from workbench.zoo import DATA_DIR

    return DATA_DIR / "saes"


def list_dictionaries(root: str | Path | None = None, model: str | None = None) -> list[Dictionary]:
    """Every loadable dictionary under ``root`` (default data/saes), sorted by layer then kind;
    damaged entries are reported as warnings and skipped."""
    root = Path(root) if root else dictionaries_root()
    out = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if not d.is_dir() or d.name.startswith("."):
            continue
        try:
            dic = load_dictionary(d)
        except ModelFileError as e:
            warnings.warn(f"skipping damaged dictionary: {e}", stacklevel=2)
            continue
        if model is None or Path(dic.model).name == Path(model).name:
            out.append(dic)
    return sorted(out, key=lambda d: (d.layer if d.layer is not None else -1, d.kind, d.name))
