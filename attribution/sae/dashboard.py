"""Feature dashboards, Neuronpedia-style, precomputed and stored beside their dictionary.

For every unit of a dictionary (SAE feature, transcoder feature, or MLP neuron; see units.py) over
held-out text (the English corpus' held-out split, position 0 of every window left out: it is the
attention sink and no dictionary here is trained on it):

- density (fraction of tokens where it fires, activation > 0), max and mean-when-firing activation,
  and a histogram of its non-zero activations (30 bins from 0 to its max);
- the top activating contexts, and a sample across activation quantiles (a uniform reservoir of its
  firing tokens cut into four rank bands), each with the unit's activation on every token around;
- logit effects: the tokens its decoder direction pushes up and down through the final norm's
  weight and the unembedding (direct effect: W_dec[f] * w_ln @ W_U);
- a short automatic label: the most frequent token(s) it fires on in its top contexts, then its
  top logit token, e.g. ``' John' → ' Mary'``;
- a token index for search by exact token: per vocabulary token, the units that fire on it, with
  their maximum activation over its occurrences.

Everything is computed in one streaming pass (several dictionaries share one model forward) and
saved as one ``dashboards.safetensors`` (tensors, plus the JSON part in the header's metadata),
written atomically, so the app opens any feature in milliseconds once the file is loaded.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attribution.sae.cache import model_texts, stop_layer
from attribution.sae.explanation_store import read_explanations
from attribution.sae.units import check_model_fits
from core.checks import Fields, parse_json, t_finite
from core.corpus import english_texts
from core.errors import DatasetError, ModelFileError, PromptError, RangeError, TokenError
from core.models.tokens import SymbolTokenizer

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float, Int

    from core.models.hooked import HookedModel

FILE = "dashboards.safetensors"
VERSION = 1
N_TOP = 10  # top activating contexts
N_BANDS, PER_BAND = 4, 3  # quantile sample: four rank bands of the firing tokens, three contexts each
RESERVOIR = 64  # firing tokens sampled uniformly per unit, the pool of the quantile sample
BEFORE, AFTER = 15, 4  # context tokens around the activating one
HIST_BINS = 30
PER_TOKEN = 32  # units kept per token occurrence for the token index (every active one for TopK k <= 32)
TOKEN_KEEP = 32  # units kept per vocabulary token in the index
N_LOGITS = 10
DENSE_LIMIT = 256_000_000  # bytes of float16 activations kept dense (neurons); above, a sparse top-K per token


@dataclass
class Dashboards:
    """The stored dashboards of one dictionary: ``tensors`` (see ``build``) and ``meta`` (JSON)."""

    tensors: dict[str, Any]
    meta: dict[str, Any]
    explanations: list[dict[str, Any]] | None = None  # explanations.json.gz's features, when built

    @property
    def n_units(self) -> int:
        return int(self.tensors["density"].shape[0])

    @property
    def labels(self) -> list[str]:
        return self.meta["labels"]

    def explanation(self, unit: int) -> dict[str, Any] | None:
        """The unit's explanation (text, short, score, rule; explanations.py), None when none is built."""
        return self.explanations[unit] if self.explanations is not None else None

    def describe(self, unit: int, short: bool = False, width: int | None = None) -> str:
        """What to call a unit: its explanation (short form in tight places) and simulation score, else
        its automatic token label. width cuts the words, never the score (a cut "sim 0.80" read "sim 0")."""
        e = self.explanation(unit)
        text = self.labels[unit] if e is None else e["short"] if short else e["text"]
        if width is not None and len(text) > width:
            text = text[: max(1, width - 1)] + "…"
        score = f" · sim {e['score']:.2f}" if e is not None and e.get("score") is not None else ""
        return text + score

    def check(self, unit: int) -> int:
        if not 0 <= int(unit) < self.n_units:
            what = "neuron" if self.meta.get("kind") == "neurons" else "feature"
            raise RangeError(
                f"{what} {unit} out of range: {self.meta['name']} has {self.n_units} (valid 0..{self.n_units - 1})"
            )
        return int(unit)

    def token(self, i: int) -> str:
        return self.meta["vocab"].get(str(int(i)), f"<{int(i)}>")

    # -- one unit ------------------------------------------------------------------------------------
    def card(self, unit: int) -> dict[str, Any]:
        """Everything the dashboard of one unit shows, as plain JSON-able values."""
        f = self.check(unit)
        t = self.tensors
        peak = float(t["max_act"][f])
        edges = [peak * i / HIST_BINS for i in range(HIST_BINS + 1)]
        windows, width = t["windows"], int(t["windows"].shape[1])
        contexts = []
        groups = self.meta["context_groups"]
        for c, group in enumerate(groups):
            tok = int(t["ctx_token"][f, c])
            if tok < 0:
                continue
            w, p = divmod(tok, width - 1)
            p += 1  # positions 1.. of each window are counted; 0 is the sink
            lo, hi = max(0, p - BEFORE), min(width, p + AFTER + 1)
            ids = windows[w, lo:hi].tolist()
            acts = t["ctx_acts"][f, c, lo - (p - BEFORE) : hi - (p - BEFORE)].float().tolist()
            contexts.append({
                "group": group,
                "activation": float(t["ctx_act"][f, c]),
                "tokens": [self.token(i) for i in ids],
                "acts": acts,
                "center": p - lo,
                "sink": lo == 0,  # the first token shown is position 0 (never scored)
            })
        e = self.explanation(f) or {}
        return {
            "feature": f,
            "label": self.labels[f],
            "explanation": e.get("text"),
            "explanation_short": e.get("short"),
            "score": e.get("score"),
            "density": float(t["density"][f]),
            "max_activation": peak,
            "mean_activation": float(t["mean_act"][f]),
            "histogram": {"edges": edges, "counts": t["hist"][f].tolist()},
            "top_logits": [(self.token(i), float(v)) for i, v in zip(t["logit_top_ids"][f].tolist(),
                                                                     t["logit_top_vals"][f].tolist(), strict=True)],
            "bottom_logits": [(self.token(i), float(v)) for i, v in zip(t["logit_bot_ids"][f].tolist(),
                                                                        t["logit_bot_vals"][f].tolist(), strict=True)],
            "contexts": contexts,
        }

    # -- search --------------------------------------------------------------------------------------
    def token_ids(self, token: str) -> list[int]:
        """Vocabulary ids whose text is exactly ``token`` among the tokens the index saw."""
        seen = set(self.tensors["tok_ids"].tolist())
        return [int(i) for i, s in self.meta["vocab"].items() if s == token and int(i) in seen]

    def search_token(self, token: str, limit: int = 50) -> list[dict[str, Any]]:
        """Units that fire on the exact token ``token``, strongest first: max activation over its
        occurrences in the held-out text. TokenError when the token never occurs there."""
        if not token:
            raise TokenError("the token to search is empty")
        ids = self.token_ids(token)
        if not ids:
            raise TokenError(
                f"token {token!r} does not occur in the {self.meta['n_tokens']} held-out tokens of these "
                "dashboards (exact match, leading space included)"
            )
        t = self.tensors
        best: dict[int, float] = {}
        row_of = {int(v): i for i, v in enumerate(t["tok_ids"].tolist())}
        for i in ids:
            r = row_of[i]
            lo, hi = int(t["tok_ptr"][r]), int(t["tok_ptr"][r + 1])
            for f, v in zip(t["tok_feat"][lo:hi].tolist(), t["tok_val"][lo:hi].float().tolist(), strict=True):
                best[f] = max(best.get(f, 0.0), v)
        order = sorted(best.items(), key=lambda kv: -kv[1])[:limit]
        return [{"feature": f, "label": self.labels[f], **self.explained(f), "max_activation": v} for f, v in order]

    def explained(self, f: int) -> dict[str, Any]:
        """The explanation and simulation score columns of a unit's row (empty without explanations)."""
        e = self.explanation(f)
        return {} if e is None else {"explanation": e["text"], "score": e.get("score")}

    def search_label(self, text: str, limit: int = 200) -> list[dict[str, Any]]:
        """Units whose label or explanation contains ``text`` (case-insensitive), densest first."""
        q = text.strip().lower()
        if not q:
            return []
        dens = self.tensors["density"].tolist()
        hits = [f for f, lab in enumerate(self.labels)
                if q in lab.lower() or q in (self.explanation(f) or {}).get("text", "").lower()]
        hits.sort(key=lambda f: -dens[f])
        return [self.row(f) for f in hits[:limit]]

    def row(self, f: int) -> dict[str, Any]:
        t = self.tensors
        return {"feature": f, "label": self.labels[f], **self.explained(f), "density": float(t["density"][f]),
                "max_activation": float(t["max_act"][f])}

    # -- storage -------------------------------------------------------------------------------------
    def save(self, directory: Path) -> Path:
        """Write ``directory/dashboards.safetensors`` atomically (temporary file, then rename)."""
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".dashboards-", suffix=".tmp", dir=directory)
        os.close(fd)
        try:
            save_file({k: v.contiguous() for k, v in self.tensors.items()}, tmp,
                      metadata={"dashboards": json.dumps(self.meta)})
            os.replace(tmp, directory / FILE)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return directory / FILE

    @classmethod
    def load(cls, directory: str | Path) -> Dashboards:
        from safetensors import safe_open

        path = Path(directory) / FILE
        if not path.exists() and not path.is_symlink():
            raise ModelFileError(
                f"no dashboards at {path}: build them with `workbench sae dashboards --sae {Path(directory)}`"
            )
        if path.is_symlink() or not path.is_file():
            raise ModelFileError(f"dashboards {path} is a symlink or not a file; refusing to read it")
        try:
            with safe_open(str(path), framework="pt") as fh:
                text = (fh.metadata() or {}).get("dashboards")
                tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 - safe_open has no iterator
        except Exception as exc:  # truncated or foreign file
            raise ModelFileError(f"cannot read dashboards {path}: {str(exc).splitlines()[0]}") from None
        if text is None:
            raise ModelFileError(f"dashboards {path} are damaged: the file has no dashboards header")

        meta = parse_json(text, f"dashboards {path} header", ModelFileError)
        if not isinstance(meta, dict) or meta.get("version") != VERSION:
            version = meta.get("version") if isinstance(meta, dict) else None
            raise ModelFileError(f"dashboards {path} have version {version}; rebuild them")
        check_dashboards(tensors, meta, f"dashboards {path}")
        # a separate file: dashboards built before explanations existed open unchanged
        return cls(tensors, meta, read_explanations(directory, int(tensors["density"].shape[0]),
                                                    meta.get("weights_sha256")))


TENSOR_RANKS = {"density": 1, "max_act": 1, "mean_act": 1, "count": 1, "hist": 2, "ctx_token": 2, "ctx_act": 2,
                "ctx_acts": 3, "logit_top_ids": 2, "logit_top_vals": 2, "logit_bot_ids": 2, "logit_bot_vals": 2,
                "windows": 2, "tok_ids": 1, "tok_ptr": 1, "tok_feat": 1, "tok_val": 1}


def check_dashboards(tensors: dict[str, Any], meta: dict[str, Any], what: str) -> None:
    """Dashboards read back from a file, checked before any is shown (ModelFileError naming the damage): every
    tensor present with its rank, one row per unit, finite values, indices (contexts, tokens, features) within
    what they index, and a header whose labels, vocabulary and context groups have the right types."""
    def bad(why: str) -> ModelFileError:
        return ModelFileError(f"{what} are damaged: {why}; rebuild them")

    for name, rank in TENSOR_RANKS.items():
        if name not in tensors:
            raise bad(f"no tensor {name!r}")
        if tensors[name].dim() != rank:
            raise bad(f"tensor {name!r} has shape {list(tensors[name].shape)}")
        if not t_finite(tensors[name]):
            raise bad(f"tensor {name!r} holds NaN or Infinity")
    n = int(tensors["density"].shape[0])
    for name in ("max_act", "mean_act", "count", "hist", "ctx_token", "ctx_act", "ctx_acts", "logit_top_ids",
                 "logit_top_vals", "logit_bot_ids", "logit_bot_vals"):
        if int(tensors[name].shape[0]) != n:
            raise bad(f"tensor {name!r} has {int(tensors[name].shape[0])} rows, not one per unit ({n})")
    f = Fields(meta, f"{what} header", ModelFileError)
    f.text("name")
    labels = f.items("labels", str)
    groups = f.items("context_groups", str)
    f.integer("n_tokens", lo=0)
    vocab = f.mapping("vocab")
    if len(labels) != n:
        raise bad(f"{len(labels)} labels for {n} units")
    if not all(isinstance(k, str) and k.isdigit() and isinstance(v, str) for k, v in vocab.items()):
        raise bad("its vocabulary is not a map of token ids to text")
    windows = tensors["windows"]
    if int(tensors["ctx_token"].shape[1]) != len(groups) or windows.shape[1] < 2:
        raise bad("its contexts do not match its context groups")
    ctx, feat, ptr = tensors["ctx_token"], tensors["tok_feat"], tensors["tok_ptr"]
    if ctx.numel() and int(ctx.max()) >= int(windows.shape[0]) * (int(windows.shape[1]) - 1):
        raise bad("a context points outside its windows")
    if feat.numel() and (int(feat.min()) < 0 or int(feat.max()) >= n):
        raise bad("its token index names a unit it does not have")
    if (int(ptr.shape[0]) != int(tensors["tok_ids"].shape[0]) + 1 or (ptr.numel() and int(ptr[0]) != 0)
            or bool((ptr[1:] < ptr[:-1]).any()) or int(ptr[-1]) > int(feat.shape[0])
            or int(tensors["tok_val"].shape[0]) != int(feat.shape[0])):
        raise bad("its token index is inconsistent")


def has_dashboards(directory: str | Path | None) -> bool:
    return directory is not None and (Path(directory) / FILE).exists()


# -- building ----------------------------------------------------------------------------------------
def held_out_windows(model: HookedModel, n_tokens: int, ctx: int = 128, texts: list | None = None) -> Any:
    """[n_windows, L] token ids: full windows of held-out text (the English corpus' held-out split for
    LLMs, the model's own held-out inputs for word-level toy models), enough for ``n_tokens`` scored
    tokens (positions 1..L-1 of each window)."""
    import torch

    ctx = min(ctx, int(model.arch.n_ctx))
    if texts is None:
        if isinstance(model.tokenizer, SymbolTokenizer):
            texts = model_texts(model, None, n_tokens, ctx, held_out=True)
        else:
            texts = english_texts("heldout")
    rows: list[list[int]] = []
    got = 0
    for text in texts:
        if isinstance(text, str):
            ids = _tokens(model, text, ctx) if text.strip() else []
        else:
            ids = [int(i) for i in text]
            ctx = min(ctx, len(ids)) if not rows else ctx  # toy sequences: their own length
        for s in range(0, len(ids) - ctx + 1, ctx):
            rows.append(ids[s : s + ctx])
            got += ctx - 1
            if got >= n_tokens:
                return torch.tensor(rows, dtype=torch.long)
    if not rows or ctx < 2:
        raise DatasetError("the held-out text gave no full context windows to build dashboards on")
    return torch.tensor(rows, dtype=torch.long)


def _batch_table(feats: torch.Tensor, order_key: torch.Tensor, payload: list[Any], n: int, F: int,
                 fills: list[float]) -> list[Any]:
    """Per unit, its ``n`` entries of smallest ``order_key`` (an int64 < 2**32) as [F, n] tables of each
    payload tensor (empty slots hold ``fills``). One sort of (unit << 32 | key)."""
    import torch

    order = torch.sort((feats.long() << 32) | order_key).indices
    f = feats[order]
    counts = torch.bincount(f, minlength=F)
    rank = torch.arange(len(f)) - (counts.cumsum(0) - counts)[f]
    keep = rank < n
    f, rank, order = f[keep], rank[keep], order[keep]
    out = []
    for p, fill in zip(payload, fills, strict=True):
        t = torch.full((F, n), fill, dtype=p.dtype)
        t[f, rank] = p[order]
        out.append(t)
    return out


def _tokens(model: HookedModel, text: str, ctx: int) -> list[int]:
    """A document's token ids (its first ~3 characters per context position of the model; a piece the
    tokenizer makes longer than the context is tokenized in window-sized pieces instead)."""
    text = text[: int(model.arch.n_ctx) * 3]
    try:
        return model.to_tokens(text)[0].tolist()
    except PromptError:
        ids: list[int] = []
        for s in range(0, len(text), ctx * 2):
            if text[s : s + ctx * 2].strip():
                ids += model.to_tokens(text[s : s + ctx * 2])[0].tolist()
        return ids


class _Acc:
    """Streaming statistics of one dictionary's units over the scored tokens. Each chunk becomes a
    list of firing entries (token row, unit, activation); per-unit tables [F, slots] keep the top
    activations and a uniform reservoir (the smallest random keys) of firing tokens."""

    def __init__(self, d: Any, n_expected: int) -> None:
        import torch

        self.d = d
        self.F = int(d.W_dec.shape[0])
        F = self.F
        self.count = torch.zeros(F, dtype=torch.long)
        self.total = torch.zeros(F, dtype=torch.float64)
        self.amax = torch.zeros(F)
        self.top_v = torch.full((F, N_TOP), -float("inf"))
        self.top_i = torch.full((F, N_TOP), -1, dtype=torch.long)
        self.res_k = torch.full((F, RESERVOIR), float("inf"))
        self.res_i = torch.full((F, RESERVOIR), -1, dtype=torch.long)
        self.res_v = torch.zeros((F, RESERVOIR))
        self.dense = n_expected * F * 2 <= DENSE_LIMIT
        # every active unit of a TopK token (k <= 128), nearly all of a JumpReLU one (L0 about 64)
        self.keep_k = min(F, max(128, int((getattr(d, "info", None) or {}).get("k") or 0)))
        self.store: list[Any] = []  # dense [b, F] float16 chunks, or (values, indices) [b, keep_k]
        self.tok_entries: list[Any] = []  # (token id, unit) int32 pairs and their float16 activations
        self.gen = torch.Generator().manual_seed(0)
        self.n = 0

    @staticmethod
    def _merge(old: list[Any], new: list[Any], largest: bool) -> list[Any]:
        """Two [F, slots] tables (key first) merged: the best ``slots`` keys per unit."""
        cat = [torch_cat(o, x) for o, x in zip(old, new, strict=True)]
        pick = cat[0].topk(old[0].shape[1], dim=1, largest=largest).indices
        return [c.gather(1, pick) for c in cat]

    def update(self, fa: Float[torch.Tensor, "token feature"], token_ids: Int[torch.Tensor, " token"]) -> None:
        import torch

        b = fa.shape[0]
        if self.dense:
            self.store.append(fa.half())
            nz = (fa > 0).nonzero()
            r, feats = nz[:, 0], nz[:, 1]
            vals = fa[r, feats]
            tv = fa.topk(min(PER_TOKEN, self.F), dim=1)  # the token index keeps each token's strongest
            tm = tv.values > 0
            t_rows, t_feats, t_vals = tm.nonzero()[:, 0], tv.indices[tm], tv.values[tm]
        else:
            sv = fa.topk(self.keep_k, dim=1)
            self.store.append((sv.values.clamp_min(0).half(), sv.indices.int()))
            m = sv.values > 0
            r, feats, vals = m.nonzero()[:, 0], sv.indices[m], sv.values[m]
            t_rows, t_feats, t_vals = r, feats, vals
        rows = r + self.n
        vals = vals.float().contiguous()
        self.count += torch.bincount(feats, minlength=self.F)
        self.total.index_add_(0, feats, vals.double())
        self.amax = self.amax.scatter_reduce(0, feats, vals, "amax")
        # positive float32 bits order like the values: the largest activation gets the smallest key
        desc = 0x7FFFFFFF - vals.view(torch.int32).long()
        new = _batch_table(feats, desc, [vals, rows], N_TOP, self.F, [-float("inf"), -1])
        self.top_v, self.top_i = self._merge([self.top_v, self.top_i], new, largest=True)
        keys = torch.randint(0, 1 << 31, (len(feats),), generator=self.gen)
        new = _batch_table(feats, keys, [keys.float(), rows, vals], RESERVOIR, self.F, [float("inf"), -1, 0.0])
        self.res_k, self.res_i, self.res_v = self._merge([self.res_k, self.res_i, self.res_v], new, largest=False)
        self.tok_entries.append(torch.stack([token_ids[t_rows].int(), t_feats.int()], 1))
        self.tok_entries.append(t_vals.half())
        self.n += b

    # lookups of unit activations at given token rows, from the store
    def values_at(self, rows: Int[torch.Tensor, "feature context offset"],
                  feats: Int[torch.Tensor, "feature context offset"]) -> Float[torch.Tensor, "feature context offset"]:
        """Activation of unit feats[i] at token rows[i] (rows < 0 give 0)."""
        import torch

        ok = rows >= 0
        r = rows.clamp_min(0)
        if self.dense:
            full = torch.cat(self.store)
            out = full[r, feats].float()
        else:
            vals = torch.cat([s[0] for s in self.store])
            ids = torch.cat([s[1] for s in self.store])
            out = torch.zeros(rows.shape)
            for s in range(0, rows.numel(), 1 << 18):
                rr, ff = r.flatten()[s : s + (1 << 18)], feats.flatten()[s : s + (1 << 18)]
                hit = ids[rr] == ff[:, None].int()
                out.view(-1)[s : s + (1 << 18)] = (vals[rr].float() * hit).sum(1)
        return out * ok

    def histogram(self) -> Int[torch.Tensor, "feature bin"]:
        import torch

        counts = torch.zeros(self.F * HIST_BINS, dtype=torch.long)
        scale = HIST_BINS / self.amax.clamp_min(1e-12)
        for chunk in self.store:
            if self.dense:
                v = chunk.float()
                nz = (v > 0).nonzero()
                f, val = nz[:, 1], v[nz[:, 0], nz[:, 1]]
            else:
                v, ids = chunk[0].float(), chunk[1].long()
                m = v > 0
                f, val = ids[m], v[m]
            b = (val * scale[f]).long().clamp(0, HIST_BINS - 1)
            counts.index_add_(0, f * HIST_BINS + b, torch.ones_like(b))
        return counts.view(self.F, HIST_BINS).int()


def torch_cat(a: Any, b: Any) -> Any:
    import torch

    return torch.cat([a, b], dim=1)


def _quantile_picks(acc: _Acc) -> tuple[Any, Any]:
    """[N_BANDS * PER_BAND, F] token rows and activations: PER_BAND evenly spaced picks in each of
    N_BANDS rank bands of the reservoir (lowest band first)."""
    import torch

    res_v, res_i = acc.res_v.T, acc.res_i.T  # [RESERVOIR, F]
    order = res_v.masked_fill(res_i < 0, float("inf")).argsort(0)  # ascending, empty slots last
    vals, rows = res_v.gather(0, order), res_i.gather(0, order)
    n = (res_i >= 0).sum(0)  # [F] filled slots
    picks = []
    for band in range(N_BANDS):
        for j in range(PER_BAND):
            q = (band + (j + 0.5) / PER_BAND) / N_BANDS  # position inside the firing distribution
            picks.append((q * n.float()).floor().long().clamp(max=(n - 1).clamp_min(0)))
    at = torch.stack(picks)  # [C, F]
    r, v = rows.gather(0, at), vals.gather(0, at)
    r[:, n == 0] = -1
    # fewer firing tokens than picks: drop repeats within a unit so no context shows twice
    for c in range(1, at.shape[0]):
        r[c][(at[c] == at[:c]).any(0)] = -1
    return r, v


def _logit_effects(model: HookedModel, d: Any, k: int = N_LOGITS) -> tuple[Any, Any, Any, Any]:
    """Top and bottom ``k`` tokens of each decoder direction through the final norm weight and W_U."""
    import torch

    W_U = model.W_U.detach().bfloat16()
    w_ln = model.final_norm_weight()
    out = [[], [], [], []]
    with torch.no_grad():
        for s in range(0, d.W_dec.shape[0], 256):
            dirs = d.W_dec[s : s + 256].detach().float()
            if dirs.shape[1] != W_U.shape[0]:  # a dictionary at a hook that is not the residual width
                z = torch.zeros(dirs.shape[0], k)
                for o, val in zip(out, (z.long(), z, z.long(), z), strict=True):
                    o.append(val)
                continue
            if w_ln is not None:
                dirs = dirs * w_ln.detach().float()
            eff = (dirs.bfloat16() @ W_U).float()  # bfloat16: 3x faster on CPU, ranks the same tokens
            top, bot = eff.topk(k, dim=1), eff.topk(k, dim=1, largest=False)
            for o, val in zip(out, (top.indices, top.values, bot.indices, bot.values), strict=True):
                o.append(val)
    return tuple(torch.cat(o) for o in out)


def _token_index(acc: _Acc) -> dict[str, Any]:
    """CSR over vocabulary ids: for each id, up to TOKEN_KEEP units by max activation on it."""
    import torch

    pairs = torch.cat(acc.tok_entries[0::2]).long()
    vals = torch.cat(acc.tok_entries[1::2]).float()
    key = pairs[:, 0] * acc.F + pairs[:, 1]
    uniq, inv = key.unique(return_inverse=True)
    best = torch.zeros(uniq.shape[0]).scatter_reduce(0, inv, vals, "amax", include_self=False)
    tok, feat = uniq // acc.F, uniq % acc.F
    order = torch.argsort(tok * 1e9 - best.double(), stable=True) if len(tok) else tok  # by token, strongest first
    tok, feat, best = tok[order], feat[order], best[order]
    ids, counts = tok.unique_consecutive(return_counts=True)
    starts = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)[:-1]])
    rank = torch.arange(len(tok)) - starts.repeat_interleave(counts)
    keep = rank < TOKEN_KEEP
    counts = counts.clamp(max=TOKEN_KEEP)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    small = torch.int16 if acc.F <= 32767 else torch.int32  # half the index's size for usual widths
    return {"tok_ids": ids.int(), "tok_ptr": ptr.int(), "tok_feat": feat[keep].to(small), "tok_val": best[keep].half()}


def _label(centers: list[str], top_logit: str | None, fires: bool) -> str:
    """``'tok' → 'logit'``: the token(s) it fires on most in its top contexts, then its top logit."""
    if not fires:
        return "dead"
    counts = Counter(centers).most_common(2)
    if not counts:
        return "dead"
    shown = [counts[0][0]]
    if len(counts) > 1 and counts[1][1] >= max(2, counts[0][1] // 2):
        shown.append(counts[1][0])
    if counts[0][1] < 2 and len(centers) >= 4:
        shown = ["(various)"] if len(set(centers)) == len(centers) else shown
    text = "/".join(repr(s) if s != "(various)" else s for s in shown)
    return f"{text} → {top_logit!r}" if top_logit is not None else text


def _finish(acc: _Acc, model: HookedModel, windows: Any, meta: dict[str, Any], strings: dict[int, str]) -> Dashboards:
    import torch

    n, F = acc.n, acc.F
    width = int(windows.shape[1])
    top_rows = acc.top_i.T  # [N_TOP, F]
    q_rows, q_vals = _quantile_picks(acc)
    ctx_token = torch.cat([top_rows, q_rows]).T.contiguous()  # [F, C]
    ctx_act = torch.cat([acc.top_v.T.clamp_min(0), q_vals]).T.contiguous()
    # the unit's activation on every token around each context's activating token
    offsets = torch.arange(-BEFORE, AFTER + 1)
    pos = (ctx_token % (width - 1) + 1)[..., None] + offsets  # [F, C, W] positions in the window
    rows = ctx_token[..., None] + offsets
    ok = (ctx_token[..., None] >= 0) & (pos >= 1) & (pos < width) & (rows < n)
    rows = rows.masked_fill(~ok, -1)
    feats = torch.arange(F)[:, None, None].expand_as(rows)
    ctx_acts = acc.values_at(rows, feats).half()
    lt_i, lt_v, lb_i, lb_v = _logit_effects(model, acc.d)
    tok_index = _token_index(acc)
    density = acc.count.float() / max(n, 1)
    mean_act = (acc.total / acc.count.clamp_min(1)).float()
    # strings for every token id the dashboards can show
    used = torch.cat([windows.flatten(), lt_i.flatten(), lb_i.flatten()]).unique().tolist()
    for i in used:  # decoded once per build, shared by the dictionaries
        if i not in strings:
            strings[i] = model.decode([int(i)])
    vocab = {str(i): strings[i] for i in used}
    flat = windows[:, 1:].flatten()
    labels = []
    for f in range(F):
        centers = [vocab[str(int(flat[r]))] for r in top_rows[:, f].tolist() if r >= 0]
        top_logit = vocab.get(str(int(lt_i[f, 0]))) if float(lt_v[f].abs().sum()) > 0 else None
        labels.append(_label(centers, top_logit, bool(acc.count[f] > 0)))
    groups = ["top"] * N_TOP + [f"quantile band {b + 1} of {N_BANDS}" for b in range(N_BANDS) for _ in range(PER_BAND)]
    tensors = {
        "density": density, "max_act": acc.amax.float(), "mean_act": mean_act, "count": acc.count,
        "hist": acc.histogram(), "ctx_token": ctx_token.int(), "ctx_act": ctx_act.float(), "ctx_acts": ctx_acts,
        "logit_top_ids": lt_i.int(), "logit_top_vals": lt_v.float(), "logit_bot_ids": lb_i.int(),
        "logit_bot_vals": lb_v.float(), "windows": windows.int(), **tok_index,
    }
    meta = {**meta, "version": VERSION, "n_tokens": n, "labels": labels, "vocab": vocab,
            "context_groups": groups, "before": BEFORE, "after": AFTER}
    return Dashboards(tensors, meta)


def build_dashboards(
    model: HookedModel,
    dictionaries: list[Any],
    n_tokens: int = 65_536,
    ctx: int = 128,
    batch_size: int = 8,
    bf16: bool | None = None,
    texts: list | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[Dashboards]:
    """Dashboards of every unit of each dictionary (all at hooks of ``model``), from one forward pass
    over ``n_tokens`` held-out tokens (position 0 of each ``ctx``-token window excluded). ``bf16``
    runs the model forward under CPU bfloat16 autocast (default: on for models over 10M parameters,
    about 3x faster on CPU); the dictionaries always encode in float32."""
    import torch

    if n_tokens < 1:
        raise RangeError(f"--tokens must be at least 1, got {n_tokens}")
    check_model_fits(dictionaries, model)
    started = time.time()
    windows = held_out_windows(model, n_tokens, ctx, texts)
    n_expected = windows.shape[0] * (windows.shape[1] - 1)
    accs = [_Acc(d, n_expected) for d in dictionaries]
    hooks = sorted({d.hook for d in dictionaries})
    stops = [stop_layer(h) for h in hooks]  # the forward ends after the deepest block read
    stop = {"stop_at_layer": max(stops)} if None not in stops and model.can_stop_at_layer else {}
    if bf16 is None:
        bf16 = model.device.type == "cpu" and model.n_params() > 10_000_000
    with torch.no_grad():
        for s in range(0, windows.shape[0], batch_size):
            toks = windows[s : s + batch_size]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(bf16)):
                _, cache = model.run_with_cache(toks.to(model.device), names_filter=hooks, **stop)
            ids = toks[:, 1:].flatten()
            for acc in accs:
                a = cache[acc.d.hook]
                a = a.flatten(2) if a.dim() > 3 else a
                x = a[:, 1:].reshape(-1, a.shape[-1]).float().cpu()
                acc.update(acc.d.encode(x).float(), ids)
            if on_progress:
                on_progress(min((s + batch_size) * (windows.shape[1] - 1), n_expected), n_expected)
    forward_s = time.time() - started
    out: list[Dashboards] = []
    strings: dict[int, str] = {}
    for acc in accs:
        d = acc.d
        meta = {"name": d.name, "model": d.model, "kind": d.kind, "hook": d.hook, "hook_out": d.hook_out,
                "layer": d.layer, "ctx": int(windows.shape[1]), "skip_first": 1, "bf16": bool(bf16),
                "corpus": "English corpus, held-out split (core.corpus)" if texts is None else "given texts",
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        out.append(_finish(acc, model, windows, meta, strings))
        out[-1].meta["seconds"] = round(forward_s / len(accs) + 0.0, 1)
    return out


def dashboard_dir(d: Any) -> Path:
    """Where a dictionary's dashboards live: its own directory (neurons: data/neurons/<name>)."""
    if d.path is None:
        raise ModelFileError(f"{d.name} has no directory to store dashboards in")
    return Path(d.path)
