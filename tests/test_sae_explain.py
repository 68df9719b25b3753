"""Feature explanations (attribution/sae/explain.py, explanations.py): the simulator and its correlation
score on hand-built cases, the explainer choosing the first-names category on a synthetic dashboard,
dashboards without (or with damaged) explanations still opening, and `workbench sae explain`'s bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

from attribution.sae.dashboard import N_TOP, Dashboards
from attribution.sae.explain import Text, informative_weights, pearson, render, score_rule, simulate
from attribution.sae.explanation_store import load_explanations, read_explanations, save_explanations
from attribution.sae.explanations import explain_units
from core.errors import ModelFileError

VOCAB = [" the", " dog", " ran", " to", " park", ",", ".", " and", " big", " Mr", " John", " Mary", " Thomas",
         " Anna", " Peter", " Lisa", "ing", " house"]
TEXT_OF = dict(enumerate(VOCAB))
NAMES = [10, 11, 12, 13, 14, 15]


def windows(n: int, L: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, len(VOCAB), size=(n, L))


def test_a_rule_that_is_the_feature_scores_one_and_a_random_rule_about_zero():
    ids = windows(60)
    text = Text.of(ids, TEXT_OF)
    acts = np.where(np.isin(ids, [1, 2]), 3.0, 0.0)  # fires exactly on " dog" and " ran"
    rule = {"token": {"kind": "tokens", "ids": [1, 2]}, "level": 3.0}
    assert simulate(rule, text)[0].tolist() == acts[0].tolist()
    order = np.random.default_rng(1).permutation(len(ids))
    assert score_rule(rule, text, acts, order) == pytest.approx(1.0)
    noise = np.random.default_rng(2).exponential(size=ids.shape) * (np.random.default_rng(3).random(ids.shape) < .2)
    assert abs(score_rule(rule, text, noise, order)) < 0.1  # a rule unrelated to the activations
    assert pearson(np.zeros(5), np.arange(5.0)) == 0.0 and pearson(np.arange(5.0), np.ones(5)) is None


def test_context_rules_follow_the_tokens_before():
    ids = np.array([[9, 10, 0, 9, 11, 5]])  # Mr John the Mr Mary ,
    text = Text.of(ids, TEXT_OF)
    after_mr = {"token": {"kind": "category", "key": "first_names"}, "context": {"kind": "after_tokens", "ids": [9]}}
    assert simulate(after_mr, text)[0].tolist() == [0, 1, 0, 0, 1, 0]
    long, short = render(after_mr, TEXT_OF, [10, 11], "")
    assert long == "first names (John, Mary) right after “Mr”" and short.startswith("first names")


def synthetic_dashboard(n_units: int = 3) -> Dashboards:
    """A dashboard whose unit 0 fires on names (its top contexts show only John and Mary), unit 1 on " dog",
    unit 2 never."""
    L = 16
    win = torch.tensor(windows(8, L, seed=5))
    flat = win[:, 1:].flatten()
    ctx = torch.full((n_units, N_TOP + 12), -1, dtype=torch.int32)
    for f, want in ((0, [10, 11]), (1, [1])):
        rows = [i for i, t in enumerate(flat.tolist()) if t in want][:N_TOP]
        ctx[f, : len(rows)] = torch.tensor(rows, dtype=torch.int32)
    tensors = {"windows": win.int(), "ctx_token": ctx, "count": torch.tensor([5, 5, 0]),
               "density": torch.tensor([.1, .1, 0.]), "tok_ids": torch.zeros(0, dtype=torch.int32),
               "tok_ptr": torch.zeros(1, dtype=torch.int32), "tok_feat": torch.zeros(0, dtype=torch.int16),
               "tok_val": torch.zeros(0), "logit_top_ids": torch.tensor([[10, 11, 12, 13, 0], [1] * 5, [0] * 5]),
               "logit_top_vals": torch.tensor([[1.0] * 5, [0.5] * 5, [0.0] * 5])}
    return Dashboards(tensors, {"name": "synthetic", "vocab": {str(i): s for i, s in TEXT_OF.items()}})


def test_the_explainer_names_the_first_names_category():
    db = synthetic_dashboard()
    ids = windows(64, seed=7)
    acts = np.zeros((*ids.shape, 3), dtype=np.float16)
    acts[..., 0] = np.isin(ids, NAMES) * 4.0  # every name, not only the two the dashboard showed
    acts[..., 1] = (ids == 1) * 2.0
    data = explain_units(db, ids, acts, TEXT_OF)
    names, dog, dead = data["features"]
    assert names["rule"]["token"] == {"kind": "category", "key": "first_names"}
    assert names["text"].startswith("first names (") and "promotes first names" in names["text"]
    assert {"John", "Mary"} <= set(names["text"].split("(")[1].split(")")[0].split(", "))  # its dashboard's names
    assert names["score"] == pytest.approx(1.0) and names["short"] == "first names"
    assert dog["rule"]["token"] == {"kind": "tokens", "ids": [1]} and dog["score"] == pytest.approx(1.0)
    assert dead["short"] == "dead" and dead["score"] is None
    assert data["summary"]["median_score"] == pytest.approx(1.0)
    # on a prompt, the name unit is explained where a name stands; the " dog" token list is halved everywhere
    w = informative_weights(data["features"], [1, 10, 2], TEXT_OF)
    assert w[:, 0].tolist() == [0.5, 1.0, 0.5] and w[:, 1].tolist() == [0.5, 0.25, 0.25]


@pytest.fixture(scope="module")
def stored(tmp_path_factory, one_thread):
    """Dashboards of a random dictionary on a tiny word-level model, stored as before explanations existed."""
    import workbench as wb
    from attribution.sae.dashboard import build_dashboards
    from attribution.sae.train import save_sae, training_sae
    from attribution.sae.units import open_dictionary
    from core.models.tiny import save_tiny

    root = tmp_path_factory.mktemp("explain")
    model_dir = save_tiny(root / "tiny-explain", name="tiny-explain")
    hook = "blocks.0.hook_resid_post"
    torch.manual_seed(0)
    path = save_sae(training_sae("topk", 16, 12, k=4, model=str(model_dir), hook=hook), root / "sae",
                    {"model": str(model_dir), "hook": hook, "kind": "topk", "k": 4})
    m = wb.load(str(model_dir))
    texts = ["the movie was very good and the meal was great . the book was bad"] * 8
    db = build_dashboards(m, [open_dictionary(path)], n_tokens=200, ctx=16,
                          texts=[m.to_tokens(t)[0].tolist() for t in texts])[0]
    db.meta["weights_sha256"] = "these weights"  # what explore.build records
    db.save(path)
    return path


def test_old_dashboards_open_without_explanations_and_damaged_ones_are_ignored(stored):
    db = Dashboards.load(stored)
    assert db.explanations is None and db.describe(3) == db.labels[3] and db.card(3)["score"] is None
    feats = [{"text": f"unit {f} explained", "short": f"u{f}", "score": 0.5, "rule": None}
             for f in range(db.n_units)]
    path = save_explanations(stored, {"version": 1, "features": feats})
    db = Dashboards.load(stored)
    assert db.describe(3) == "unit 3 explained · sim 0.50" and db.describe(3, short=True) == "u3 · sim 0.50"
    assert db.card(3)["explanation"] == "unit 3 explained" and db.search_label("unit 3 expl")[0]["feature"] == 3
    with pytest.raises(ModelFileError, match=f"cover {db.n_units} units, not 99"):
        load_explanations(stored, 99)
    save_explanations(stored, {"version": 1, "features": feats, "weights_sha256": "other"})
    with pytest.warns(UserWarning, match="built for other weights"):
        assert Dashboards.load(stored).explanations is None
    path.write_bytes(b"not gzip")
    with pytest.warns(UserWarning, match="cannot read explanations"):
        assert Dashboards.load(stored).explanations is None  # the dashboards stay usable
    path.unlink()
    assert load_explanations(stored) is None and read_explanations(stored, db.n_units) is None


def test_explain_command_needs_dashboards(monkeypatch, capsys, tmp_path):
    code, _, err = cli(monkeypatch, capsys, "sae", "explain", "--sae", str(tmp_path), "--model", "x")
    assert_bad(code, err)


def test_render_only_rewords_stored_rules(stored, monkeypatch, capsys):
    db = Dashboards.load(stored)
    feats = [{"text": "old wording", "short": "old", "score": 0.25, "explain_score": 0.5,
              "rule": {"token": {"kind": "category", "key": "articles"}, "level": 1.0}} for _ in range(db.n_units)]
    save_explanations(stored, {"version": 1, "features": feats})
    code, out, err = cli(monkeypatch, capsys, "sae", "explain", "--sae", str(stored), "--render-only", "--json")
    assert code == 0, err
    again = load_explanations(stored, db.n_units)["features"]
    assert again[0]["text"].split(";")[0] == "articles (the, a, an)" and again[0]["short"] == "articles"
    assert again[0]["score"] == 0.25  # the score is kept


def test_a_cut_description_keeps_its_score():
    import torch

    from attribution.sae.dashboard import Dashboards

    db = Dashboards({"density": torch.zeros(2)}, {"labels": ["' the' → 'x'", "' a'"]},
                    [{"text": "the tokens “the” right after prepositions", "short": "“the” right after prepositions",
                      "score": 0.7993}, None])
    assert db.describe(0, short=True, width=12) == "“the” right… · sim 0.80"
    assert db.describe(0) == "the tokens “the” right after prepositions · sim 0.80"
    assert db.describe(1, width=40) == "' a'"  # no explanation: the token label, no score
