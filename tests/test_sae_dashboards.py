"""Feature dashboards, search, rendering and steering on tiny random models; the `sae list|dashboards|
features|steer` commands and their bad inputs (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli as cli

from attribution.sae.dashboard import BEFORE, Dashboards, build_dashboards
from attribution.sae.render import context_html, context_text, visible
from attribution.sae.units import neuron_dictionary, open_dictionary
from core.errors import ModelFileError, RangeError, TokenError
from core.models.tiny import save_tiny

HOOK = "blocks.1.hook_resid_post"
TEXTS = [
    "the movie was very good and the meal was great . the book was bad",
    "the show was dull . it was not good and the meal was awful",
    "a movie is a show and the book is very nice . the meal felt fine",
    "it really was quite good . the movie was so bad and not nice",
] * 6


def _sae_dir(root: Path, model: str, hook: str = HOOK, width: int = 24, seed: int = 0) -> Path:
    from attribution.sae.train import save_sae, training_sae

    torch.manual_seed(seed)
    sae = training_sae("topk", 16, width, k=4, model=model, hook=hook)
    return save_sae(sae, root, {"model": model, "hook": hook, "kind": "topk", "k": 4})


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("models") / "tiny-dash", name="tiny-dash")


@pytest.fixture(scope="module")
def sae_dir(tiny_dir, tmp_path_factory) -> Path:
    return _sae_dir(tmp_path_factory.mktemp("dict") / "tiny-sae", str(tiny_dir))


@pytest.fixture(scope="module")
def model(tiny_dir):
    import workbench as wb

    return wb.load(str(tiny_dir))


@pytest.fixture(scope="module")
def built(model, sae_dir, one_thread):
    d = open_dictionary(sae_dir)
    return d, build_dashboards(model, [d, neuron_dictionary(model, 0)], n_tokens=400, ctx=16,
                               texts=[model.to_tokens(t)[0].tolist() for t in TEXTS])


def test_dashboards_match_a_direct_encoding(model, built, tmp_path):
    d, (db, neurons) = built
    assert db.n_units == 24 and neurons.n_units == model.arch.d_mlp
    windows = db.tensors["windows"].long()
    _, cache = model.run_with_cache(windows, names_filter=[HOOK])
    fa = d.encode(cache[HOOK][:, 1:].reshape(-1, 16).float())  # position 0 left out
    assert db.meta["n_tokens"] == fa.shape[0]
    torch.testing.assert_close(db.tensors["density"], (fa > 0).float().mean(0))
    torch.testing.assert_close(db.tensors["max_act"], fa.max(0).values.clamp_min(0), atol=1e-5, rtol=1e-4)
    f = int(db.tensors["density"].argmax())
    card = Dashboards.load(db.save(tmp_path).parent).card(f)  # through the stored file
    assert sum(card["histogram"]["counts"]) == int((fa[:, f] > 0).sum())
    top = card["contexts"][0]
    assert top["group"] == "top" and top["activation"] == pytest.approx(float(fa[:, f].max()), rel=1e-3)
    assert top["acts"][top["center"]] == pytest.approx(top["activation"], rel=1e-2)
    assert len(top["tokens"]) == len(top["acts"]) and top["center"] <= BEFORE
    assert any(c["group"].startswith("quantile") for c in card["contexts"])
    # logit effects: the decoder direction through the final norm weight and W_U
    eff = (d.W_dec[f].float() * model.final_norm_weight().float()) @ model.W_U.float()
    assert card["top_logits"][0][0] == model.decode([int(eff.argmax())])
    assert card["label"].endswith(f"→ {card['top_logits'][0][0]!r}")


def test_search_by_token_is_the_max_over_its_occurrences(model, built):
    d, (db, _) = built
    windows = db.tensors["windows"].long()
    _, cache = model.run_with_cache(windows, names_filter=[HOOK])
    fa = d.encode(cache[HOOK][:, 1:].reshape(-1, 16).float())
    ids = windows[:, 1:].flatten()
    tok = model.token_id("meal")
    want = fa[ids == tok].max(0).values
    rows = db.search_token("meal")
    assert rows and [r["max_activation"] for r in rows] == sorted((r["max_activation"] for r in rows), reverse=True)
    for r in rows:
        assert r["max_activation"] == pytest.approx(float(want[r["feature"]]), rel=1e-2)
    assert {r["feature"] for r in rows} == set(torch.nonzero(want > 0).flatten().tolist())
    with pytest.raises(TokenError):
        db.search_token("zebra")
    assert all("meal" in r["label"] for r in db.search_label("MEAL"))
    with pytest.raises(RangeError):
        db.card(24)


def test_context_rendering_escapes_html_and_markdown_on_one_line():
    ctx = {"tokens": ["<script>", "alert(1)", "</script>", " *italic*", " _x_", "\n", "\n\n", "  ", " end"],
           "acts": [0.0, 0.5, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.1], "center": 4, "activation": 2.0}
    out = context_html(ctx)
    assert "<script>" not in out and "&lt;script&gt;" in out and "&lt;/script&gt;" in out
    assert "*italic*" in out and "_x_" in out and "<em>" not in out and "<i>" not in out
    assert "\n" not in out and out.count("↵") == 3 and "··" in out
    assert "white-space:pre" in out
    assert context_text(ctx) == "<script>alert(1)</script> *italic*[[ _x_]]↵↵↵·· end"
    assert visible("\t") == "⇥"


def _unit_towards(model, sae_dir: Path, token: str, unit: int = 3) -> object:
    """The dictionary with feature ``unit``'s decoder direction set to unembed to ``token``."""
    d = open_dictionary(sae_dir)
    w = model.W_U[:, model.token_id(token)].detach().float()
    d.sae.W_dec.data[unit] = w / w.norm()
    return d


def test_steering_moves_the_output_towards_the_direction(model, sae_dir, one_thread):
    from attribution.sae.steer import ablate, steer

    d = _unit_towards(model, sae_dir, "awful")
    prompt = "the movie was very"
    up = steer(model, d, 3, prompt, alpha=40.0, target="awful", n_new=4)
    down = steer(model, d, 3, prompt, alpha=-40.0, target="awful", n_new=4)
    assert up.logit_change > 1.0 and up.prob_change > 0 and down.logit_change < -1.0
    assert up.top_steered[0][0] == "awful" and up.steered_text.split()[0] == "awful"
    assert up.clean_text == down.clean_text and len(up.clean_text.split()) == 4  # full continuations
    # clamping to its current value changes nothing; ablation reports the target's logit change
    same = steer(model, d, 3, prompt, value=up.clean_activation, target="awful", n_new=0)
    if up.clean_activation == 0:  # a feature silent at the last position: clamp and ablation agree
        assert abs(ablate(model, d, 3, prompt, target="awful", n_new=0).logit_change) < 5
    assert same.logit_change is not None
    with pytest.raises(RangeError):
        steer(model, d, 24, prompt, alpha=1.0)
    with pytest.raises(RangeError):
        steer(model, d, 3, prompt)  # neither alpha nor value


def test_steering_a_neuron_equals_raising_its_activation(model, one_thread):
    from attribution.sae.steer import steering_hooks

    n = neuron_dictionary(model, 0)
    tokens = model.to_tokens("the meal was good")

    def bump(act, hook):  # noqa: ARG001
        out = act.clone()
        out[:, 1:, 5] += 2.0
        return out

    with torch.no_grad():
        want = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.mlp.hook_post", bump)])
        with model.hooks(fwd_hooks=steering_hooks(n, 5, alpha=2.0)):
            got = model(tokens)
        with model.hooks(fwd_hooks=steering_hooks(n, 5, value=0.0)):
            ablated = model(tokens)

    def zero(act, hook):  # noqa: ARG001
        out = act.clone()
        out[:, 1:, 5] = 0.0
        return out

    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ablated, model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.mlp.hook_post", zero)]),
                               atol=1e-4, rtol=1e-4)


# -- commands -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dash_cli(sae_dir, tiny_dir):
    """The dictionary with its dashboards built through the CLI."""
    import contextlib
    import io
    import sys

    from workbench.cli import main

    argv = sys.argv
    sys.argv = ["workbench", "sae", "dashboards", "--sae", str(sae_dir), "--tokens", "300", "--ctx", "16", "--json"]
    buf, code = io.StringIO(), 0
    try:
        with contextlib.redirect_stdout(buf):
            main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = argv
    assert code in (0, None)
    return json.loads(buf.getvalue())


def test_dashboards_features_and_list_commands(dash_cli, sae_dir, monkeypatch, capsys):
    row = dash_cli["dashboards"][0]
    assert row["units"] == 24 and Path(row["path"]) == sae_dir / "dashboards.safetensors"
    code, out, err = cli(monkeypatch, capsys, "sae", "features", "--sae", str(sae_dir), "--feature", "2", "--json")
    assert code == 0, err
    card = json.loads(out)
    assert card["feature"] == 2 and {"label", "density", "histogram", "contexts", "top_logits"} <= set(card)
    code, out, err = cli(monkeypatch, capsys, "sae", "features", "--sae", str(sae_dir), "--token", "the", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert rows and set(rows[0]) == {"feature", "label", "max_activation"}
    code, out, err = cli(monkeypatch, capsys, "sae", "list", "--root", str(sae_dir.parent), "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert len(listed) == 1 and listed[0]["dashboards"] is True
    assert {"path", "model", "hook", "layer", "kind", "explained_variance", "explained_variance_no_top2", "l0",
            "dead_fraction", "ce_loss_delta"} <= set(listed[0])
    # without --json the result is on stdout (`| grep`, `> file`) and stderr holds no result
    for args, needle in ((("features", "--sae", str(sae_dir), "--feature", "2"), "feature 2"),
                         (("features", "--sae", str(sae_dir), "--token", "the"), str(rows[0]["feature"])),
                         (("list", "--root", str(sae_dir.parent)), sae_dir.name)):
        code, out, err = cli(monkeypatch, capsys, "sae", *args)
        assert code == 0 and needle in out and err == "", (args, out, err)


def test_steer_command(sae_dir, monkeypatch, capsys):
    code, out, err = cli(monkeypatch, capsys, "sae", "steer", "--sae", str(sae_dir), "--feature", "1", "--alpha",
                         "5", "--prompt", "the movie was", "--target", "good", "--tokens", "3", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["mode"] == "add" and res["target"] == "good" and isinstance(res["logit_change"], float)
    assert len(res["clean_text"].split()) == 3
    code, out, err = cli(monkeypatch, capsys, "sae", "steer", "--sae", str(sae_dir), "--feature", "1", "--alpha",
                         "5", "--prompt", "the movie was", "--target", "good", "--tokens", "3")
    assert code == 0 and "steered:" in out and "target 'good'" in out and "steered" not in err, (out, err)


@pytest.fixture(scope="module")
def bad_dirs(tiny_dir, sae_dir, tmp_path_factory):
    """Dictionaries that must be refused: wrong hook, another model's width, damaged weights."""
    import shutil

    root = tmp_path_factory.mktemp("bad")
    nohook = _sae_dir(root / "nohook", str(tiny_dir), hook="blocks.7.hook_resid_post")
    other = root / "other"
    from attribution.sae.train import save_sae, training_sae

    save_sae(training_sae("topk", 24, 32, k=4, model=str(tiny_dir), hook=HOOK), other,
             {"model": str(tiny_dir), "hook": HOOK})
    broken = root / "broken"
    shutil.copytree(sae_dir, broken)
    weights = broken / "sae_weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    return {"nohook": nohook, "other": other, "broken": broken}


@pytest.mark.parametrize(
    "case,args,msg",
    [
        ("nohook", ["steer", "--feature", "0", "--alpha", "1", "--prompt", "the movie"], "does not exist"),
        ("other", ["steer", "--feature", "0", "--alpha", "1", "--prompt", "the movie"], "width"),
        ("broken", ["steer", "--feature", "0", "--alpha", "1", "--prompt", "the movie"], "cannot load"),
        ("broken", ["features", "--token", "the"], "cannot load"),
        ("good", ["steer", "--feature", "24", "--alpha", "1", "--prompt", "the movie"], "out of range"),
        ("good", ["features", "--feature", "24"], "out of range"),
        ("good", ["features", "--token", "zebra"], "does not occur"),
        ("good", ["steer", "--feature", "0", "--prompt", "the movie"], "exactly one"),
        ("nohook", ["dashboards", "--tokens", "100"], "does not exist"),
    ],
)
def test_bad_inputs_exit_2(bad_dirs, sae_dir, dash_cli, monkeypatch, capsys, case, args, msg):
    path = sae_dir if case == "good" else bad_dirs[case]
    code, out, err = cli(monkeypatch, capsys, "sae", args[0], "--sae", str(path), *args[1:])
    assert code == 2 and out == "" and msg in err and len(err.strip().splitlines()) == 1, err


def test_neuron_and_feature_range_errors_from_the_api(model):
    with pytest.raises(RangeError):
        neuron_dictionary(model, 9)
    with pytest.raises(ModelFileError):
        open_dictionary("/nonexistent/dictionary")


def test_dashboards_older_than_the_weights_are_flagged(dash_cli, sae_dir, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from attribution.sae.explore import open_dashboards

    copy = tmp_path / "copy"
    shutil.copytree(sae_dir, copy)
    assert open_dashboards(open_dictionary(copy)).meta["stale"] is False
    weights = copy / "sae_weights.safetensors"
    tensors = load_file(weights)
    tensors["W_dec"] = tensors["W_dec"] * 2
    save_file(tensors, weights)
    assert open_dashboards(open_dictionary(copy)).meta["stale"] is True
