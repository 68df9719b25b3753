"""The nnsight backend's weights and frozen pieces, every one read inside a trace: ``TracedWeights`` (a mixin of
core.models.remote.NNsightModel) reads the parameters the engines use in one trace of a one-token forward and
the rotary tables in a trace of the prompt's length, so the same code serves a model whose weights live on
NDIF; nothing here touches the module's parameters outside a trace (tests/test_nnsight_weights.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from core.models.hooked import NormSite


class TracedWeights:
    """Weights, norms, rotary tables and TransformerLens' ActivationCache for NNsightModel (it provides ``lm``,
    ``arch``, ``remote``, ``device``, ``_transport``, ``_check_remote``, ``_need_internals``, ``check_layer``)."""

    def _params(self) -> dict[str, Any]:
        """Every weight the engines read, from one trace of a one-token forward (``_read_params``): the same
        code reads a hosted model's weights on NDIF; nothing here touches the module's parameters outside a
        trace. Read once per model (``to`` reads them again)."""
        self._need_internals("the weights")
        if self._param_cache is None:
            self._param_cache = self._read_params()
        return self._param_cache

    def _norm_paths(self) -> dict[str, str]:
        """TransformerLens' name of each block norm -> the Hugging Face module's path in the block. OLMo-2's only
        norms follow the sublayers, and TransformerLens names them ln1 and ln2 (as its hooks do)."""
        if self.layout == "olmo2":
            return {"ln1": "post_attention_layernorm", "ln2": "post_feedforward_layernorm"}
        if self._gemma:
            return {"ln1": "input_layernorm", "ln2": "pre_feedforward_layernorm",
                    "ln1_post": "post_attention_layernorm", "ln2_post": "post_feedforward_layernorm"}
        return {"ln1": "input_layernorm", "ln2": "post_attention_layernorm"}

    def _param_paths(self) -> list[str]:
        """The module path (from the root) of every parameter the engines read: each module's ``weight`` and,
        where it has one, ``bias``."""
        paths = ["model.embed_tokens", "model.norm", "lm_head"]
        if self.layout == "phi3":  # fused q/k/v and gate/up projections
            parts = ["self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"]
        else:
            parts = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                     "mlp.up_proj", "mlp.down_proj"]
        parts += list(self._norm_paths().values())
        if self.arch.qk_norm != "none":
            parts += ["self_attn.q_norm", "self_attn.k_norm"]
        for l in range(self.arch.n_layers):
            paths += [f"model.layers.{l}.{part}" for part in parts]
        return paths

    def _read_params(self) -> dict[str, Any]:
        import nnsight
        import torch

        if self.remote:
            self._check_remote()
        paths = self._param_paths()
        ids = torch.zeros(1, 1, dtype=torch.long, device=self.device)
        with self._transport(), torch.no_grad(), self.lm.trace(ids, remote=self.remote):
            # made and saved inside the trace: a server returns the names the body binds and saves, not the
            # contents of a dict made before it
            got: dict[str, Any] = nnsight.save({})
            for path in paths:
                mod = self.lm
                for p in path.split("."):
                    mod = mod[int(p)] if p.isdigit() else getattr(mod, p)
                got[path + ".weight"] = mod.weight.detach().save()
                bias = getattr(mod, "bias", None)
                if bias is not None:
                    got[path + ".bias"] = bias.detach().save()
        return got

    def _param(self, key: str) -> Any:
        return self._params().get(key)

    def _norm_w(self, path: str) -> Any:
        """An RMSNorm's gain as TransformerLens holds it: Gemma's norms multiply by 1 + weight."""
        w = self._param(path + ".weight")
        return w + 1.0 if self._gemma else w

    def has_mlp(self, layer: int) -> bool:
        self.check_layer(layer)
        return True

    def n_experts(self, layer: int) -> int | None:
        return None

    def weights(self, layer: int, repeat_kv: bool = True) -> dict[str, Any]:
        """Layer weights in TransformerLens' layout (see HookedModel.weights), as a trace read them."""
        self.check_layer(layer)
        a = self.arch
        rep = a.n_heads // a.n_kv_heads if repeat_kv else 1
        b = f"model.layers.{layer}."

        def heads(weight: Any, bias: Any, n: int) -> tuple[Any, Any]:  # [n * d_head, d_model] -> [n, d_model, d_head]
            w = weight.T.reshape(a.d_model, n, a.d_head).permute(1, 0, 2)
            bias = None if bias is None else bias.reshape(n, a.d_head)
            return w.repeat_interleave(rep, 0) if n != a.n_heads else w, \
                (bias.repeat_interleave(rep, 0) if bias is not None and n != a.n_heads else bias)

        w: dict[str, Any] = {}
        if self.layout == "phi3":  # one fused projection: q, then k, then v rows
            q_end, k_end = a.n_heads * a.d_head, (a.n_heads + a.n_kv_heads) * a.d_head
            qkv = self._param(b + "self_attn.qkv_proj.weight")
            w["W_Q"], w["b_Q"] = heads(qkv[:q_end], None, a.n_heads)
            w["W_K"], w["b_K"] = heads(qkv[q_end:k_end], None, a.n_kv_heads)
            w["W_V"], w["b_V"] = heads(qkv[k_end:], None, a.n_kv_heads)
        else:
            for role, n in (("Q", a.n_heads), ("K", a.n_kv_heads), ("V", a.n_kv_heads)):
                part = f"{b}self_attn.{role.lower()}_proj"
                w[f"W_{role}"], w[f"b_{role}"] = heads(self._param(part + ".weight"), self._param(part + ".bias"), n)
        w["W_O"] = self._param(b + "self_attn.o_proj.weight").T.reshape(a.n_heads, a.d_head, a.d_model)
        w["b_O"] = self._param(b + "self_attn.o_proj.bias")
        norms = self._norm_paths()
        w["ln1.w"], w["ln1.b"] = self._norm_w(b + norms["ln1"]), None
        w["ln2.w"], w["ln2.b"] = self._norm_w(b + norms["ln2"]), None
        if self.layout == "phi3":  # one fused projection: the gate's rows, then the up projection's
            gate_up = self._param(b + "mlp.gate_up_proj.weight")
            w["W_gate"], w["W_in"] = gate_up[:a.d_mlp].T, gate_up[a.d_mlp:].T
        else:
            w["W_in"] = self._param(b + "mlp.up_proj.weight").T
            w["W_gate"] = self._param(b + "mlp.gate_proj.weight").T
        w["W_out"] = self._param(b + "mlp.down_proj.weight").T
        w["b_in"], w["b_out"] = self._param(b + "mlp.up_proj.bias"), self._param(b + "mlp.down_proj.bias")
        return w

    def norm_sites(self, layer: int) -> dict[str, NormSite | None]:
        self.check_layer(layer)
        b, h = f"model.layers.{layer}.", f"blocks.{layer}."
        norms = self._norm_paths()

        def site(name: str) -> NormSite | None:
            return NormSite(h + name + ".hook_scale", self._norm_w(b + norms[name]), None) if name in norms else None

        if self.arch.norm_placement == "post":  # OLMo-2: ln1 and ln2 follow the sublayers
            return {"attn_pre": None, "attn_post": site("ln1"), "mlp_pre": None, "mlp_post": site("ln2")}
        # Gemma's post-norms act on both sublayers' outputs, before the residual adds them
        return {"attn_pre": site("ln1"), "attn_post": site("ln1_post"), "mlp_pre": site("ln2"),
                "mlp_post": site("ln2_post")}

    def qk_norm_sites(self, layer: int) -> tuple[NormSite, NormSite] | None:
        """The q and k norms: Gemma 3's and Qwen 3's per head (their scales [batch * pos * head, 1]), OLMo-2's over
        the whole projection (scales [batch, pos, 1], gains [heads * d_head]); None elsewhere."""
        self.check_layer(layer)
        if self.arch.qk_norm == "none":
            return None
        b, h = f"model.layers.{layer}.self_attn.", f"blocks.{layer}.attn."
        return (NormSite(h + "q_norm.hook_scale", self._norm_w(b + "q_norm"), None),
                NormSite(h + "k_norm.hook_scale", self._norm_w(b + "k_norm"), None))

    def act_fn(self, layer: int) -> Any:
        """The MLP activation, from the config (a function: nothing of the module is read)."""
        from transformers.activations import ACT2FN

        self.check_layer(layer)
        return ACT2FN[self.arch.act_fn]

    def attn_scale(self, layer: int) -> float:
        """sqrt(d_head): Llama-style attention (llama, mistral, qwen2) scales by 1 / sqrt(head_dim); Gemma 2 and 3
        by 1 / sqrt(query_pre_attn_scalar) (config facts, no weight)."""
        self.check_layer(layer)
        self._need_internals("the attention scale")
        if self._gemma:
            return float(self.lm.config.query_pre_attn_scalar) ** 0.5
        return float(self.arch.d_head) ** 0.5

    def _layer_types(self) -> list[str]:
        """Each layer's attention kind (Gemma 2 and 3, Qwen 3: sliding or full; Gemma 3's each with its own rotary
        tables)."""
        types = getattr(self.lm.config, "layer_types", None) if self.layout in ("gemma2", "gemma3", "qwen3") else None
        if self.layout == "phi3" and getattr(self.lm.config, "sliding_window", None):  # one window on every layer
            types = ["sliding_attention"] * self.arch.n_layers
        return list(types) if types else ["full_attention"] * self.arch.n_layers

    def _window(self, layer: int) -> int | None:
        """The sliding window of a layer's attention (a key is seen while query - key < window), or None."""
        if self._layer_types()[layer] != "sliding_attention":
            return None
        return int(self.lm.config.sliding_window)

    def _layer_rope(self, tables: dict[str, Any] | None, layer: int) -> Any:
        """(cos, sin) of ``layer`` from ``_rope_tables``' answer (None stays None, as do hooks outside the blocks)."""
        if tables is None or not 0 <= layer < self.arch.n_layers:
            return None
        return tables[self._layer_types()[layer]]

    def _scores_of(self, layer: int, raw: dict, rope: Any, cast: bool = True) -> Any:
        """A layer's attention scores [batch, head, q, k] as TransformerLens' hook_attn_scores holds them, from its
        rotated queries and keys (their module values in ``raw``, read in the trace): divided by the attention
        scale, soft-capped where the model caps them (Gemma 2), -inf outside the causal (sliding) window; in float32
        unless ``cast``."""
        import torch

        q, k = (self._derive(raw[(layer, self._spec(h)[0], "output")], h, rope)
                for h in ("attn.hook_rot_q", "attn.hook_rot_k"))
        p = q.shape[1]
        k = k.repeat_interleave(q.shape[2] // k.shape[2], 2)
        scores = torch.einsum("bqhe,bkhe->bhqk", q.float(), k.float()) / self.attn_scale(layer)
        cap = self.arch.attn_softcap
        if cap:
            scores = cap * torch.tanh(scores / cap)
        seen = torch.ones(p, p, dtype=torch.bool, device=q.device).tril()
        window = self._window(layer)
        if window is not None:
            seen = seen & ~torch.ones(p, p, dtype=torch.bool, device=q.device).tril(-window)
        scores = scores.masked_fill(~seen, float("-inf"))
        return scores.to(q.dtype) if cast else scores

    def _pattern_of(self, layer: int, raw: dict, rope: Any) -> Any:
        """A layer's attention pattern [batch, head, q, k] from its scores (``_scores_of``): what the attention
        module returns as its weights when it runs eagerly. A server's model (NDIF's: its default attention
        kernel) returns none."""
        scores = self._scores_of(layer, raw, rope, cast=False)
        dtype = self._base(raw[(layer, self._spec("attn.hook_rot_q")[0], "output")], "attn.hook_rot_q").dtype
        return scores.softmax(-1).to(dtype)

    def _split_extra(self, layer: int) -> dict[str, Any]:
        """What split_attention needs beyond Llama's: q/k norm gains, attention scale, window and soft cap (Gemma 2
        and 3, Qwen 3), the norms' placement (OLMo-2), Phi-3's window where it has one."""
        if self.layout == "phi3":
            return {"window": self._window(layer)}
        if self.layout not in ("gemma2", "gemma3", "qwen3", "olmo2"):
            return {}
        sites = self.qk_norm_sites(layer)
        extra = {"qk_norm": None if sites is None else (sites[0].w, sites[1].w), "scale": self.attn_scale(layer),
                 "window": self._window(layer), "softcap": self.arch.attn_softcap}
        if self.layout == "olmo2":  # no norm before the attention; q/k norms over the whole projection
            extra.update(pre_norm=False, qk_full=True)
        return extra

    def _rope_tables(self, seq: int) -> dict[str, tuple[Any, Any]]:
        """{layer kind: (cos, sin) [seq, d_head]} from the model's own rotary embedding (its scaling included), as
        the first layer of each kind is given them, saved from a trace of placeholder ids of that length (once
        per length)."""
        import nnsight
        import torch

        self._need_internals("the rotary tables")
        if seq not in self._rope_cache:
            if self.remote:
                self._check_remote()
            firsts: dict[str, int] = {}
            for layer, kind in enumerate(self._layer_types()):
                firsts.setdefault(kind, layer)
            ids = torch.zeros(1, seq, dtype=torch.long, device=self.device)
            with self._transport(), torch.no_grad(), self.lm.trace(ids, remote=self.remote):
                got: dict[str, tuple[Any, Any]] = nnsight.save({})  # inside the trace: see _read_params
                for kind, layer in sorted(firsts.items(), key=lambda item: item[1]):  # in execution order
                    cos, sin = self.lm.model.layers[layer].inputs[1]["position_embeddings"]
                    got[kind] = (cos.save(), sin.save())
            self._rope_cache[seq] = {kind: (cos[0], sin[0]) for kind, (cos, sin) in got.items()}
        return self._rope_cache[seq]

    def rope(self, layer: int, seq_len: int):
        self.check_layer(layer)
        cos, sin = self._layer_rope(self._rope_tables(seq_len), layer)
        return cos, sin, False, int(cos.shape[-1])

    def _final_norm(self, x: Any) -> Any:
        """The final RMSNorm (as Llama computes it: in float32, then the weight; Gemma: the weight in float32,
        then the cast), with the traced weight."""
        import torch

        w = self.final_norm_weight()
        eps = float(getattr(self.lm.config, "rms_norm_eps", 1e-6))
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        if self._gemma:
            return (h * w.float()).to(x.dtype)
        return w * h.to(x.dtype)

    def final_logits(self, resid):
        return self.read_out(resid[:, -1])

    def read_out(self, resid):
        return self._final_norm(resid) @ self.W_U

    def forward_logits(self, resid):
        """The model's own logits of final residual vectors: with the soft cap where the model has one (Gemma 2)."""
        import torch

        logits = self.read_out(resid)
        cap = self.arch.logit_softcap
        return logits if not cap else cap * torch.tanh(logits / cap)

    @property
    def weight_dtype(self):
        return self._param("lm_head.weight").dtype

    @property
    def W_U(self):
        return self._param("lm_head.weight").T

    @property
    def b_U(self):
        return None

    @property
    def W_E(self):
        """The embedding as hook_embed reads it: Gemma scales it by sqrt(d_model) (a config fact, in the weight's
        precision, as Hugging Face and TransformerLens do)."""
        params = self._params()
        w = params["model.embed_tokens.weight"]
        if not self._gemma:
            return w
        if "W_E" not in params:  # once per read of the weights: a 262k-row product costs 0.2 s
            import torch

            params["W_E"] = w * torch.tensor(self.arch.d_model ** 0.5, dtype=w.dtype)
        return params["W_E"]

    @property
    def W_pos(self):
        return None

    def final_norm_weight(self):
        return self._norm_w("model.norm")

    def final_norm_bias(self):
        return None

    def head_writes(self, z, layer: int, heads_first: bool = False):
        import torch

        W_O = self.weights(layer)["W_O"]
        if not heads_first:
            return torch.einsum("bphd,hdm->bphm", z, W_O)
        return torch.einsum("bphd,hdm->hbpm", z, W_O)

    def state_dict(self) -> dict[str, Any]:
        """The weights the engines read, under the HF module's names, as a trace read them."""
        return {k: v for k, v in self._params().items() if k != "W_E"}

    def _activation_cache(self, saved: dict[str, Any]) -> Any:
        """TransformerLens' ActivationCache over the traced activations, its model a stand-in with the facts and
        weights (read inside a trace) its methods use: the config, each block's W_O and W_out, the final norm."""
        from transformer_lens import ActivationCache

        self._need_internals("an ActivationCache")
        a = self.arch
        cfg = SimpleNamespace(n_layers=a.n_layers, n_heads=a.n_heads, d_model=a.d_model, d_mlp=a.d_mlp,
                              d_head=a.d_head, normalization_type="RMS", attn_only=False, device=self.device,
                              positional_embedding_type="rotary", layers_block_type=None)
        blocks = []
        for layer in range(a.n_layers):
            w = self.weights(layer)
            blocks.append(SimpleNamespace(attn=SimpleNamespace(W_O=w["W_O"], b_O=w["b_O"]),
                                          mlp=SimpleNamespace(W_out=w["W_out"], b_out=w["b_out"])))
        stand_in = SimpleNamespace(cfg=cfg, blocks=blocks, ln_final=self._final_norm)
        return ActivationCache(saved, stand_in)
