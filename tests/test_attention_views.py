"""wb.attention's AttentionResult and the coloured-token views of a token attribution, on the toy IOI model
(one layer, two heads) and on hand-made patterns."""

from __future__ import annotations

import html

import pytest
import torch

import workbench as wb
from attribution.attention import AttentionResult, token_labels
from attribution.colored_tokens import ColoredTokens, color, html_view
from core.errors import RangeError, WorkbenchError

TOY = "ioi-attn-1l2h"
P = "N3 and N7 then N7"


@pytest.fixture(scope="module")
def m():
    return wb.load(TOY)


@pytest.fixture(scope="module")
def att(m):
    return wb.attention(m, P)


def three_layers() -> AttentionResult:
    """A 3-layer, 2-head causal pattern on 4 tokens (rows sum to 1), with repeated tokens."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 2, 4, 4, generator=g).masked_fill(torch.ones(4, 4).triu(1).bool(), -torch.inf)
    return AttentionResult(model="hand", tokens=["a", "b", "a", "c"], layers=[0, 1, 2],
                           pattern=logits.softmax(-1), prompt="a b a c")


def test_pattern_is_the_models_own(m, att):
    enc = m.encode(P)
    _, cache = m.run_with_cache(enc.tokens)
    expected = cache["blocks.0.attn.hook_pattern"][0]
    n = len(enc.str_tokens)
    assert att.axes == ("layer", "head", "query", "key") and att.tokens == enc.str_tokens
    assert tuple(att.pattern.shape) == (1, 2, n, n) and att.layers == [0]
    assert torch.allclose(att.pattern, expected.float())
    assert torch.allclose(att.pattern.sum(-1), torch.ones(1, 2, n), atol=1e-5)
    assert float(att.pattern.triu(1).abs().max()) == 0.0  # causal: no weight on later keys
    assert torch.equal(att.head(0, 1), att.pattern[0, 1])


def test_top_heads_and_table(att):
    top = att.top_heads(query=-1, key=0, k=5)
    weights = [t["weight"] for t in top]
    assert len(top) == 2 and weights == sorted(weights, reverse=True)
    assert weights[0] == pytest.approx(float(att.pattern[0, top[0]["head"], -1, 0]))
    n = len(att.tokens)
    table = att.table()
    assert len(table) == 2 * n * (n + 1) // 2  # the causal cells of both heads
    assert set(table.columns) >= {"layer", "head", "query", "query_str", "key", "key_str", "weight"}
    assert len(att.table(layer=0, head=1)) == n * (n + 1) // 2
    with pytest.raises(RangeError, match="out of range"):
        att.top_heads(query=n, key=0)
    with pytest.raises(RangeError, match="head 2"):
        att.head(0, 2)
    with pytest.raises(RangeError, match="layer 3"):
        att.table(layer=3)


def test_layers_subset_and_bad_input(m):
    with pytest.raises(RangeError, match="layer 1 out of range"):
        wb.attention(m, P, layers=[1])
    with pytest.raises(RangeError, match="empty"):
        wb.attention(m, P, layers=[])
    with pytest.raises(wb.WorkbenchError) as info:
        wb.attention(m, P, layers="0")
    assert "layers" in str(info.value)
    assert wb.attention(m, P, layers=[0]).layers == [0]


def test_grid_has_a_layer_picker_and_one_head_draws_large():
    res = three_layers()
    fig = res.plot(layer=1)
    assert len(fig.data) == 3 * 2  # every layer's heads, one layer visible at a time
    assert [t.visible for t in fig.data] == [False, False, True, True, False, False]
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["L0", "L1", "L2"]
    assert buttons[2].args[0]["visible"] == [False] * 4 + [True] * 2
    assert fig.layout.updatemenus[0].active == 1
    one = res.plot(layer=2, head=1)
    assert len(one.data) == 1
    labels = token_labels(res.tokens)
    assert list(one.data[0].x) == labels and len(set(labels)) == 4  # repeated tokens stay apart
    assert torch.allclose(torch.tensor(one.data[0].z), res.head(2, 1), atol=1e-4)
    assert "L2H1" in one.layout.title.text
    with pytest.raises(WorkbenchError, match="layer"):
        res.plot(head=1)
    part = res.select([2, 1])
    assert part.layers == [2, 1] and torch.equal(part.head(2, 1), res.head(2, 1))
    assert len(part.plot(layer=2).data) == 4
    # skip_first: the colour scale tops at the largest weight off the sink column
    sk = res.plot(layer=2, head=1, skip_first=True)
    assert sk.data[0].zmax == pytest.approx(float(res.head(2, 1)[:, 1:].max()), abs=1e-6)


def test_save_and_read_back(att, tmp_path):
    from core.store import RunStore

    store = RunStore(tmp_path / "runs")
    run = att.save(store)
    assert run.kind == "attention"
    back = AttentionResult.from_json(run.result(), run.tensors()["pattern"])
    assert back.tokens == att.tokens and back.layers == att.layers
    assert torch.equal(back.pattern, att.pattern)
    with pytest.raises(WorkbenchError, match="pattern"):
        AttentionResult(model="x", tokens=["a"], layers=[0], pattern=torch.ones(1, 1, 2, 2))


def test_colored_tokens_scale_colour_and_escape():
    tokens = ["<b>", " x", "y&z", "\n"]
    scores = [10.0, 2.0, -1.0, 0.0]
    page = html_view(tokens, scores)
    assert "<b>" not in page  # the token is text, never markup
    assert "&lt;b&gt;" in page and "y&amp;z" in page and "\\n" in page
    assert color(0.0, 1.0) == "rgb(255,255,255)"
    assert color(1.0, 1.0) == "rgb(33,102,172)" and color(-5.0, 1.0) == "rgb(178,24,43)"  # saturates
    full = ColoredTokens(tokens, scores)
    skip = ColoredTokens(tokens, scores, skip_first=True)
    # position 1 is half the scale with position 0 in it, the full colour without it
    assert color(2.0, 10.0) in full.html and color(2.0, 2.0) in skip.html
    assert full._repr_html_() == full.html
    fig = skip.figure(per_line=3)
    z = fig.data[0].z
    assert len(z) == 2 and z[0][1] == pytest.approx(1.0) and z[1][0] == pytest.approx(0.0)
    assert z[0][0] == 1.0  # clipped: the sink saturates, its hover keeps the raw score
    assert "+10" in fig.data[0].customdata[0][0]


def test_attribution_draws_coloured_tokens(m):
    res = wb.attribute(m, P, target="N3", foil="N7")
    ct = res.colored_tokens()
    assert ct.tokens == res.tokens and ct.scores == pytest.approx(res.scores.tolist())
    assert html.escape("dpa attribution of 'N3' − 'N7'") in res.html()
    best = int(res.scores.abs().argmax())
    assert color(float(res.scores[best]), float(res.scores.abs().max())) in res.html()
    assert len(res.plot_tokens().data) == 1
    heads = wb.attribute(m, P, target="N3", foil="N7", level="head")
    with pytest.raises(WorkbenchError, match="token-level"):
        heads.colored_tokens()


def test_progress_bars_show_only_when_asked_or_in_a_notebook(capsys):
    from core.progress import Bar, in_notebook

    assert not in_notebook()
    with Bar("quiet", total=3) as bar:  # outside a kernel: nothing drawn
        bar.step()
    with Bar("patching heads", show=True) as bar:
        bar.to(2, 4)
        bar.to(4, 4)
    err = capsys.readouterr().err
    assert "quiet" not in err and "patching heads" in err and "4/4" in err
