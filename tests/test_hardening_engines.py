"""Issue 41, classes 4, 7 and 14 where they live in the engines (so the notebook API gets them too): DLA and
greedy generation on the attention-only toy, vision models refused by text engines, hooks without a vector
per token refused for dictionaries, a batch .npy refused as an image."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import MethodError, RangeError, WorkbenchError

TOY = "ioi-attn-1l2h"
P = "N1 and N2 then N2"


@pytest.fixture(scope="module")
def toy():
    import workbench as wb

    return wb.load(TOY)


def test_dla_on_an_attention_only_model(toy):
    from attribution.dla import direct_logit_attribution

    res = direct_logit_attribution(toy, P, target="N1", foil="N2")
    assert res.components == ["embed", "pos_embed", "L0.attn"]  # no MLP, no resid_mid
    assert res.accumulated == ["L0.pre", "final"]
    assert abs(res.residual_error) < 1e-3 * max(1.0, abs(res.logit_diff))


def test_greedy_generation_of_a_toy_to_its_context(toy):
    import torch

    ids = toy.greedy(toy.to_tokens("N1 and"), 3)  # the toy's whole context of 5 (an internal error before)
    assert len(ids) == 3
    tokens = toy.to_tokens("N1 and")
    for i in ids:  # each step is the argmax of a full recomputation
        with torch.no_grad():
            assert int(toy.logits(tokens)[0, -1].argmax()) == i
        tokens = torch.cat([tokens, torch.tensor([[i]])], 1)


def test_text_engines_refuse_a_vision_model():
    from core.models.zoo import check_text_model

    with pytest.raises(MethodError, match="vision model"):
        check_text_model("vit-synth", "probe")
    assert check_text_model(TOY, "probe").name == TOY


@pytest.mark.parametrize("hook", ["blocks.0.attn.hook_pattern", "blocks.3.attn.hook_attn_scores"])
def test_dictionaries_need_a_vector_per_token(hook):
    from attribution.sae.cache import check_token_hook

    with pytest.raises(RangeError, match="one vector per token"):
        check_token_hook(hook)
    check_token_hook("blocks.0.attn.hook_z")


@pytest.mark.parametrize("shape", [(2, 3, 8, 8), (1, 3, 8, 8), (3,)])
def test_an_image_file_holds_one_image(tmp_path, shape):
    from attribution.vit.images import read_image

    f = tmp_path / "x.npy"
    np.save(f, np.full(shape, 0.5, dtype=np.float32))
    with pytest.raises(WorkbenchError, match="shape"):
        read_image(f)


def test_prompt_files_refuse_nan_fields():
    from core.errors import PromptError
    from core.prompt_files import parse_prompts

    good = '{"prompt": "a", "target": "b"}'
    assert parse_prompts(good + "\n", "p.jsonl")[0]["target"] == "b"
    for bad in ('{"prompt": "a", "target": "b", "w": NaN}', '{"prompt": "a", "target": "b", "w": -Infinity}'):
        with pytest.raises(PromptError, match=r"p.jsonl:2: .*not a finite number"):
            parse_prompts(good + "\n" + bad + "\n", "p.jsonl")


def test_dataset_labels_are_strings(tmp_path):
    import json

    from attribution.probes.activations import load_dataset
    from core.errors import DatasetError

    f = tmp_path / "d.jsonl"
    f.write_text("".join(json.dumps({"text": f"t{i}", "label": i % 2}) + "\n" for i in range(8)))
    with pytest.raises(DatasetError, match="label"):
        load_dataset(f)


@pytest.mark.parametrize("info, words", [({"kind": "bogus", "hook": "h"}, "bogus"), (None, "does not say its hook")])
def test_a_dictionary_names_a_known_kind_and_its_hook(tmp_path, info, words):
    import json

    from attribution.sae.dictionary import check_dictionary_dir
    from core.errors import ModelFileError

    (tmp_path / "cfg.json").write_text(json.dumps({"d_in": 4, "d_sae": 8, "metadata": {}}))
    if info is not None:
        (tmp_path / "workbench.json").write_text(json.dumps(info))
    with pytest.raises(ModelFileError, match=words):
        check_dictionary_dir(tmp_path)
    (tmp_path / "cfg.json").write_text(json.dumps({"d_in": 4, "d_sae": 8, "metadata": {"hook_name": "h"}}))
    (tmp_path / "workbench.json").write_text(json.dumps({"kind": "topk"}))
    check_dictionary_dir(tmp_path)  # SAELens' own metadata names the hook: enough
