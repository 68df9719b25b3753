"""Circuit tools on the real smollm2-135m (grouped-query attention, RMSNorm, SwiGLU)."""

import pytest
import torch

pytestmark = pytest.mark.real

CLEAN = "When Mary and John went to the store, John gave a drink to"
# the names swapped everywhere: the answer becomes " John"
CORRUPT = "When John and Mary went to the store, Mary gave a drink to"


@pytest.fixture(scope="module")
def llm():
    import workbench as wb

    return wb.load("smollm2-135m")


def test_patching_name_token_flips_answer(llm):
    from circuits.tools import patching

    tokens = llm.to_tokens(CLEAN)
    strs = llm.to_str_tokens(tokens)
    s2 = max(i for i, s in enumerate(strs) if s == " John")  # the repeated name in the second clause
    res = patching.patch_residual(llm, CLEAN, CORRUPT, " Mary", " John", layers=[0, 15, 29])
    assert res.clean > 0 > res.corrupted  # the model answers Mary, and John on the corrupted prompt
    # swapping only the second-clause name at the input flips the answer to " John"
    assert res.patched[0, s2] < 0 and res.effect[0, s2] > 0.5
    # by the last layer the answer has moved to the final position
    assert res.effect[2, -1] > 0.5 and abs(res.effect[2, s2]) < 0.2
    patched = llm.tl.run_with_hooks(
        tokens,
        fwd_hooks=[
            (
                "blocks.0.hook_resid_pre",
                lambda x, hook: torch.cat(
                    [x[:, :s2], llm.tl.W_E[llm.token_id(" Mary")][None, None], x[:, s2 + 1 :]], 1
                ),
            )
        ],
    )
    assert llm.decode([int(patched[0, -1].argmax())]) == " John"


@pytest.mark.slow
def test_tools_run_on_gqa_model(llm):
    from circuits.tools import composition, dla, patching, patterns, spectra

    d = dla.direct_logit_attribution(llm, CLEAN, " Mary", " John")
    assert d.residual_error == pytest.approx(0, abs=1e-2) and d.head_scores.shape == (30, 9)
    assert len(d.components) == 1 + 30 * 2
    heads = patching.patch_heads(llm, CLEAN, CORRUPT, " Mary", " John")
    assert heads.effect.shape == (30, 9)
    comp = composition.composition_scores(llm, "k", layers=[0, 1])
    assert comp.scores.shape == (2, 9, 2, 9) and (comp.scores[0, :, 1] > 0).all()
    tab = spectra.weight_spectra(llm)
    assert len(tab) == 30 * (2 * 9 + 1)
    ent = patterns.attention_entropy(llm, CLEAN)
    assert ent.scores.shape == (30, 9)
    pp = patching.path_patch(
        llm, CLEAN, CORRUPT, " Mary", " John", sender=(0, 0), receivers=[(5, 4)], via="k"
    )
    assert isinstance(pp["effect"], float)
