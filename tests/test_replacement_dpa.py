"""DPA on the replacement model (issue 53, item 3), on a tiny random model with a transcoder at every layer.

With the replacement model's own linearisation (attention's value path at weight 1, no query/key paths) DPA's
top-down passes must give the gradient graph's edges exactly: the norms are frozen in both, and a transcoder's
skip term carries the target on to the stream below it. Before the fix the skip's share was held as a constant
that no node carried, so DPA's edges into the logits differed from the exact ones by the skip's influence.
The feature-graph command picks the gradient method on a replacement model by itself."""

from __future__ import annotations

import pytest
import torch

from attribution.sae.sets import SetSpec, build_set, load_set
from core.models.tiny import tiny_model

SPEC = dict(layers=[0, 1, 2], width=32, k=4, tokens=2000, heldout_tokens=500, batch_size=128, shard_tokens=500,
            eval_windows=4, ctx=24)
EXACT = dict(w_q=0.0, w_k=0.0, w_v=1.0)  # frozen attention patterns: the replacement model's linearisation


def _texts(n: int, seed: int = 0):
    return torch.randint(0, 10, (n, 24), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module")
def model():
    return tiny_model(layers=3, d_model=16, n_ctx=32)


@pytest.fixture(scope="module")
def dicts(model, tmp_path_factory):
    root = tmp_path_factory.mktemp("sets") / "tiny-set"
    build_set(model, SetSpec(model=model.name, **SPEC), root=root,
              texts={"train": _texts(200), "heldout": _texts(60, 1)})
    return load_set(str(root))


PROMPT = _texts(1, 5)[0][:12]


def _into(g, dst: str = "logits") -> dict[str, float]:
    return {e.source: float(e.score) for e in g.edges if e.target == dst}


def _graph(model, dicts, method, **kw):
    from circuits.feature_graph import feature_graph

    return feature_graph(model, PROMPT, dicts, target=3, foil=4, method=method, per_layer=4, max_nodes=10**5,
                         max_edges=10**6, **kw)


def test_skip_terms_are_live(dicts):
    assert all(float(d.sae.W_skip.abs().sum()) > 0 for d in dicts)  # else the comparison below is vacuous


def test_dpa_with_frozen_attention_equals_the_gradient_graph(model, dicts):
    grad = _into(_graph(model, dicts, "gradient"))
    dpa = _into(_graph(model, dicts, "dpa", **EXACT))
    # the embeddings are left out: the tiny model has learned positions, which DPA's embedding node holds and
    # the replacement model keeps as a constant (smollm2 and gemma3 use RoPE: no such term)
    inner = [k for k in grad if not k.startswith("emb")]
    assert {k for k in inner if "err" in k} <= dpa.keys() and len(inner) >= 20
    for k in inner:
        assert dpa[k] == pytest.approx(grad[k], abs=1e-5, rel=1e-4), k
    # the feature passes agree too (a feature target's edges from the layers below it)
    g, d = _graph(model, dicts, "gradient"), _graph(model, dicts, "dpa", **EXACT)
    tops = {e.target for e in g.edges if e.target.startswith("L2T.f")} & {e.target for e in d.edges}
    assert tops
    for t in tops:
        gi, di = _into(g, t), _into(d, t)
        for k in gi:
            if not k.startswith("emb") and k in di:
                assert di[k] == pytest.approx(gi[k], abs=1e-5, rel=1e-4), (t, k)


def test_the_skip_held_constant_loses_its_share(model, dicts):
    grad = _into(_graph(model, dicts, "gradient"))
    old = _into(_graph(model, dicts, "dpa", live_skip=False, **EXACT))
    # what lies below a transcoder reaches the logits through its skip term too: held constant, the lower
    # layers' error nodes lose that share (the top layer's, with nothing above it, keep theirs)
    low = [k for k in grad if k.startswith(("L0T.err", "L1T.err"))]
    assert max(abs(old[k] - grad[k]) for k in low) > 1e-2
    top = [k for k in grad if k.startswith("L2T.err")]
    assert all(old[k] == pytest.approx(grad[k], abs=1e-5) for k in top)


def test_dpa_default_weights_differ_and_are_recorded(model, dicts):
    g = _graph(model, dicts, "dpa")
    assert g.params["live_skip"] is True and g.params["w_v"] == 0.5
    grad = _into(_graph(model, dicts, "gradient"))
    dpa = _into(g)
    assert max(abs(dpa[k] - grad[k]) for k in grad if k in dpa) > 1e-3  # a different linearisation


def test_auto_method_picks_gradient_on_a_replacement_model(dicts):
    from attribution.sae.dictionary import load_dictionary
    from circuits.feature_graph import choose_method
    from core.models.zoo import DATA_DIR

    assert choose_method("auto", dicts) == "gradient"
    assert choose_method("auto", dicts, {"w_v": "1"}) == "dpa"  # DPA parameters ask for DPA
    assert choose_method("dpa", dicts) == "dpa"
    resid = DATA_DIR / "saes" / "smollm2-135m-L6-resid-topk2304"
    if resid.is_dir():
        assert choose_method("auto", [*dicts, load_dictionary(resid)]) == "dpa"
