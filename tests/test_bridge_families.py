"""The bridge backend on OLMo-2 (norms only after each sublayer, which the bridge presents as norms before them):
the engines that read those norms (DPA, dpa_path, IFR, DLA, circuits) refuse in one BackendError line, where they
gave other numbers than TransformerLens' without refusing; the rest still give TransformerLens' numbers."""

from __future__ import annotations

import pytest
import torch
from test_backend_matrix import ENGINES, _tiny_with_random_gains, close

import workbench as wb
from core.errors import BackendError


@pytest.fixture(scope="module")
def olmo2(tmp_path_factory, one_thread):
    """(TransformerLens, bridge) over a tiny random OLMo-2 (4 heads, norm gains random)."""
    from transformers import Olmo2Config

    cfg = Olmo2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=4, vocab_size=49152, max_position_embeddings=128, tie_word_embeddings=False,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg.architectures = ["Olmo2ForCausalLM"]
    path = _tiny_with_random_gains(tmp_path_factory.mktemp("tiny-olmo2"), cfg)
    return wb.load(str(path)), wb.load(str(path), backend="bridge")


@pytest.mark.parametrize("engine", ["dpa/head", "dpa_path/token", "ifr/head", "dla", "circuit/eap"])
def test_norm_reading_engines_refuse_in_one_line(olmo2, engine):
    with pytest.raises(BackendError) as err:
        ENGINES[engine](olmo2[1])
    msg = str(err.value)
    assert "\n" not in msg and "the bridge backend" in msg and engine.split("/")[0] in msg, msg
    assert "norms after each sublayer" in msg, msg


@pytest.mark.parametrize("engine", ["gradient/head", "atp/qk", "lens", "patch (heads)"])
def test_the_rest_gives_transformer_lens_numbers(olmo2, engine):
    tl, bridge = olmo2
    close(torch.as_tensor(ENGINES[engine](bridge)).float(), torch.as_tensor(ENGINES[engine](tl)).float())
