"""Published dictionaries by name: SAELens' pretrained-release registry (``pretrained_saes.yaml``), read as
``pretrained:RELEASE/SAE_ID`` (an id may hold ``*`` to take several, e.g. every layer of Gemma Scope 2's
transcoders for gemma-3-270m: ``pretrained:gemma-scope-2-270m-pt-transcoders-all/layer_*_width_16k_l0_small_affine``).

Where the weights come from, in order:

1. the workbench's own converted copy, ``~/.cache/workbench/pretrained/<release>/<id>/`` (SAELens' save format plus
   workbench.json: `sae list --root` lists it, `--saes` reads it with no model and no network);
2. a local folder laid out as the release's repository, ``$WORKBENCH_SAE_RELEASES/<repo_id>/<path of the id>/``,
   holding SAELens' saved format (cfg.json + sae_weights.safetensors, what ``SAE.save_model`` writes);
3. the hub, through SAELens' own ``SAE.from_pretrained`` (into the Hugging Face cache), after one bounded look-up
   (core.models.hub.lookup): unreachable is one line.

Converting: SAELens names a transcoder's input ``blocks.L.hook_mlp_in``; Gemma Scope 2 trained it on the
pre-feedforward norm's *output* (``hf_hook_name`` ``...pre_feedforward_layernorm.output``), which is the
workbench's ``blocks.L.ln2.hook_normalized`` times the norm's weight. The weight is folded into the encoder (and
the skip term), so the dictionary reads ``ln2.hook_normalized`` as the workbench's own transcoders do, and the
feature graph, the replacement model and the dashboards take it unchanged. Folding needs the model once.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attribution.sae.dictionary import load_dictionary, pretrained_root
from core.errors import ModelFileError, RangeError

if TYPE_CHECKING:
    from attribution.sae.dictionary import Dictionary

PREFIX = "pretrained:"
MIRROR_ENV = "WORKBENCH_SAE_RELEASES"
# SAELens' hook names whose activation the workbench reads at another hook (the weight folded in; see above)
NORM_OUTPUT = re.compile(r"pre_feedforward_layernorm\.output$|\.ln2\.hook_out$")


def parse_ref(ref: str) -> tuple[str, str]:
    """``[pretrained:]RELEASE/SAE_ID`` -> (release, id pattern); the id may itself hold slashes."""
    text = ref[len(PREFIX):] if ref.startswith(PREFIX) else ref
    release, _, sae_id = text.strip().partition("/")
    if not release or not sae_id:
        raise RangeError(f"{ref!r}: a pretrained dictionary is pretrained:RELEASE/SAE_ID (SAELens' release and id, "
                         "e.g. pretrained:gemma-scope-2-270m-pt-transcoders-all/layer_3_width_16k_l0_small_affine)")
    return release, sae_id


def registry() -> dict[str, Any]:
    from sae_lens.loading.pretrained_saes_directory import get_pretrained_saes_directory

    return get_pretrained_saes_directory()


def release_info(release: str) -> Any:
    """SAELens' lookup entry of ``release`` (repo_id, model, saes_map, ...), or one line naming near ones."""
    known = registry()
    if release not in known:
        near = difflib.get_close_matches(release, list(known), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(near)}?" if near else " (SAELens' pretrained_saes.yaml lists them)"
        raise RangeError(f"no pretrained release {release!r} in SAELens' registry{hint}")
    return known[release]


def sae_ids(release: str, pattern: str) -> list[str]:
    """The release's ids matching ``pattern`` (``*`` wildcards), in layer order."""
    ids = list(release_info(release).saes_map)
    hits = [i for i in ids if fnmatch.fnmatchcase(i, pattern)]
    if not hits:
        near = difflib.get_close_matches(pattern, ids, n=2, cutoff=0.5) or ids[:2]
        raise RangeError(f"release {release!r} has no id {pattern!r} (e.g. {', '.join(near)}; {len(ids)} ids)")
    return sorted(hits, key=lambda i: (_layer_of(i) if _layer_of(i) is not None else -1, i))


def _layer_of(text: str) -> int | None:
    m = re.search(r"(?:layer_|blocks\.|layer)(\d+)", text)
    return int(m.group(1)) if m else None


def local_dir(release: str, sae_id: str) -> Path:
    """The converted copy's folder (an id's slashes become '__': one folder per id)."""
    return pretrained_root() / release / sae_id.replace("/", "__")


def _mirror_folder(info: Any, sae_id: str) -> Path | None:
    root = os.environ.get(MIRROR_ENV, "").strip()
    if not root:
        return None
    folder = Path(root).expanduser() / info.repo_id / info.saes_map[sae_id]
    return folder if (folder / "cfg.json").is_file() and (folder / "sae_weights.safetensors").is_file() else None


def _from_mirror(folder: Path) -> Any:
    """A converter for SAE.from_pretrained that reads the local folder (SAELens' own disk loader), so the
    release's registry entry (config overrides, normalisation) is applied exactly as for a download."""
    from sae_lens.loading.pretrained_sae_loaders import sae_lens_disk_loader

    def load(repo_id: str, folder_name: str, device: str = "cpu", force_download: bool = False,  # noqa: ARG001
             cfg_overrides: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any], None]:
        cfg, state = sae_lens_disk_loader(folder, device=device, cfg_overrides=cfg_overrides)
        return cfg, state, None

    return load


def fetch_sae(release: str, sae_id: str) -> tuple[Any, str]:
    """SAELens' SAE object for (release, id) from the local mirror or the hub, and where it came from."""
    import warnings

    from sae_lens import SAE

    from core.models import hub

    info = release_info(release)
    folder = _mirror_folder(info, sae_id)
    if folder is None:
        here = f"not converted in {local_dir(release, sae_id)}"
        mirror = os.environ.get(MIRROR_ENV)
        here += f", not in {mirror}/{info.repo_id}" if mirror else f" (nor a local copy: set {MIRROR_ENV})"
        if hub.offline():
            raise ModelFileError(f"pretrained {release}/{sae_id}: {here}, and HF_HUB_OFFLINE is set")
        try:
            hub.lookup(info.repo_id)
        except Exception as exc:  # unreachable, missing or gated: one line either way
            raise ModelFileError(f"pretrained {release}/{sae_id}: {here}, and the hub cannot be reached for "
                                 f"{info.repo_id} ({hub.first_line(exc)})") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sae = SAE.from_pretrained(release, sae_id, device="cpu",
                                      converter=_from_mirror(folder) if folder is not None else None)
    except Exception as exc:  # SAELens and the hub raise many types: damaged files, network, shapes
        raise ModelFileError(f"cannot load pretrained {release}/{sae_id}: {hub.first_line(exc)}") from None
    return sae, str(folder) if folder is not None else f"hub {info.repo_id}"


def _workbench_hooks(sae: Any) -> tuple[str, str, bool]:
    """(hook, hook_out, fold the ln2 weight?) in the workbench's hook names for SAELens' metadata."""
    meta = sae.cfg.metadata
    hook = str(meta.hook_name or "")
    hook_out = str(getattr(meta, "hook_name_out", None) or hook)
    hf_in = str(getattr(meta, "hf_hook_name", None) or "")
    m = re.match(r"^blocks\.(\d+)\.hook_mlp_in$", hook)
    if m and re.match(r"^blocks\.(\d+)\.hook_mlp_out$", hook_out):
        # Gemma Scope 2's transcoders read the normed MLP input (the norm's output, its weight applied)
        if NORM_OUTPUT.search(hf_in) or not hf_in:
            return f"blocks.{m.group(1)}.ln2.hook_normalized", hook_out, True
    return hook, hook_out, False


def convert(sae: Any, release: str, sae_id: str, model: Any, source: str) -> Path:
    """Save ``sae`` as a workbench dictionary (folded to the workbench's hooks) into local_dir; its path."""
    import torch

    from attribution.sae.train_shards import finish, write_info

    info = release_info(release)
    hook, hook_out, fold = _workbench_hooks(sae)
    if model is None and fold:
        raise ModelFileError(f"pretrained {release}/{sae_id} reads the ln2 norm's output: converting it folds the "
                             "model's norm weight in, so give the model (--model) the first time")
    layer = _layer_of(hook)
    if model is not None:
        want = str(info.model).split("/")[-1].replace("-", "").lower()
        have = str(model.name).split("/")[-1].replace("-", "").lower()
        if want != have:
            raise RangeError(f"pretrained {release} was trained on {info.model}, not {model.name}")
        model.check_hook(hook)
        model.check_hook(hook_out)
    with torch.no_grad():
        if fold:
            if getattr(sae.cfg, "apply_b_dec_to_input", False):
                raise ModelFileError(f"pretrained {release}/{sae_id} subtracts its decoder bias from its input; "
                                     "folding the norm weight into it is not supported")
            site = model.norm_sites(layer)["mlp_pre"]
            gamma = site.w.detach().float().to(sae.W_enc.device)
            sae.W_enc.mul_(gamma[:, None])
            if getattr(sae, "W_skip", None) is not None:
                sae.W_skip.mul_(gamma[None, :])
        sae.cfg.metadata.hook_name = hook
        if hasattr(sae.cfg.metadata, "hook_name_out"):
            sae.cfg.metadata.hook_name_out = hook_out
        sae.cfg.metadata.model_name = str(model.name) if model is not None else str(info.model)
    kind = "transcoder" if hook_out != hook else _kind(sae)
    meta = {"model": str(model.name) if model is not None else str(info.model), "hook": hook, "hook_out": hook_out,
            "kind": kind, "width": int(sae.cfg.d_sae), "source": {"release": release, "sae_id": sae_id,
                                                                     "repo_id": info.repo_id, "from": source,
                                                                     "norm_weight_folded": fold}}
    if layer is not None:
        meta["layer"] = layer
    target = local_dir(release, sae_id)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        sae.save_model(str(tmp))  # SAELens' own format: cfg.json + sae_weights.safetensors
        write_info(tmp, meta)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return finish(tmp, target)  # atomically: a half-written copy is never read as converted


def _kind(sae: Any) -> str:
    arch = str(sae.cfg.architecture())
    return {"jumprelu": "jumprelu", "topk": "topk", "batchtopk": "batchtopk", "standard": "l1"}.get(arch, "jumprelu")


def load_pretrained(ref: str, model: Any = None) -> list[Dictionary]:
    """The dictionaries ``ref`` names (``pretrained:RELEASE/ID``, ``*`` for several), converted once into the
    user's cache and read from there afterwards (no model, no network)."""
    release, pattern = parse_ref(ref)
    out = []
    for sae_id in sae_ids(release, pattern):
        path = local_dir(release, sae_id)
        if not (path / "workbench.json").is_file():
            sae, source = fetch_sae(release, sae_id)
            path = convert(sae, release, sae_id, model, source)
        out.append(load_dictionary(path))
    return out
