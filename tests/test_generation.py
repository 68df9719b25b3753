"""Generation through core.models.decode (the lean forward, or TransformerLens' KV-cache loop; the faster thread
count): the same
tokens as TransformerLens' own generate, hooks still steer, the thread choice, and prompt strings wherever
TransformerLens takes them (HookedModel and the module underneath), with the model's BOS rule."""

from __future__ import annotations

import pytest
import torch

from core.errors import PromptError
from core.models.decode import RECHECK_EVERY, ThreadChooser

PROMPT = "the cat sat on a mat and the dog ran to"


def _tl_generate(model, tokens, n: int) -> list[int]:
    """The path generation took before core.models.decode: TransformerLens' generate, greedy, KV cache."""
    eos = model.tokenizer.eos_token_id
    with torch.no_grad():
        out = model.tl.generate(tokens, max_new_tokens=n, do_sample=False, use_past_kv_cache=True,
                                stop_at_eos=True, eos_token_id=eos, verbose=False, return_type="tokens")
    new = [int(i) for i in out[0, tokens.shape[1]:]]
    return new[: new.index(eos) + 1] if eos in new else new


def test_greedy_equals_transformer_lens_generate(tiny_llama, tiny_gpt2, one_thread):
    for model in (tiny_llama, tiny_gpt2):
        tokens = model.to_tokens(PROMPT)
        assert model.greedy(tokens, 12) == _tl_generate(model, tokens, 12)


def test_greedy_equals_transformer_lens_at_two_threads(tiny_llama):
    """With more than one thread the chooser switches counts between steps: the tokens stay the same."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        tokens = tiny_llama.to_tokens(PROMPT)
        assert tiny_llama.greedy(tokens, 10) == _tl_generate(tiny_llama, tokens, 10)
        assert torch.get_num_threads() == 2  # restored after the loop
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("busy", [True, False])
def test_thread_counts_of_the_steps(tiny_llama, monkeypatch, busy):
    """A busy machine: every pass at one thread. Otherwise the prompt pass at the process's count, then a
    step at each count (the chooser); the count is restored afterwards."""
    import core.models.decode

    monkeypatch.setattr(core.models.decode, "busy", lambda: busy)
    seen: list[int] = []

    def count(act, hook):  # noqa: ARG001
        seen.append(torch.get_num_threads())

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with tiny_llama.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", count)]):
            tiny_llama.greedy(tiny_llama.to_tokens(PROMPT), 4)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen[:3] == ([1, 1, 1] if busy else [2, 2, 1])


def test_busy_reads_the_machine(monkeypatch):
    import os

    from core.models.decode import busy

    assert isinstance(busy(), bool)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(1024)), raising=False)
    assert busy() is False  # 1024 cores are never all taken


def test_sample_equals_transformer_lens_with_a_seed(tiny_llama, one_thread):
    tokens = tiny_llama.to_tokens(PROMPT)
    torch.manual_seed(3)
    ref = tiny_llama.tl.generate(tokens, max_new_tokens=8, temperature=1.0, verbose=False, use_past_kv_cache=True)
    torch.manual_seed(3)
    assert torch.equal(tiny_llama.sample(tokens, 8), ref)


def test_a_steering_hook_changes_the_output(tiny_llama, one_thread):
    tokens = tiny_llama.to_tokens(PROMPT)
    clean = tiny_llama.greedy(tokens, 8)
    push = tiny_llama.W_U[:, 500].detach() * 50.0  # pushes the residual towards token 500

    def steer(act, hook):  # noqa: ARG001
        return act + push

    with tiny_llama.hooks(fwd_hooks=[("blocks.1.hook_resid_post", steer)]):
        steered = tiny_llama.greedy(tokens, 8)
        one_token = tiny_llama.greedy(tiny_llama.to_tokens("the"), 4, kv_cache=False)
    assert steered != clean and steered[0] == 500
    assert one_token[0] == 500
    assert tiny_llama.greedy(tokens, 8) == clean  # the hook is gone after the block


def test_thread_chooser_keeps_the_faster_count_and_rechecks():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        chooser = ThreadChooser()
        seconds = {2: 0.5, 1: 0.1}  # one thread is the faster here (a busy machine)
        counts = []
        for _ in range(2 * RECHECK_EVERY):
            counts.append(chooser.next_count())
            chooser.record(seconds[chooser.current])
        assert counts[:2] == [2, 1]  # each once
        assert counts.count(2) == 3  # then the faster, with one recheck every RECHECK_EVERY steps
        chooser.restore()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


# -- prompt strings --------------------------------------------------------------------------------------

def test_strings_wherever_transformer_lens_takes_them(tiny_llama):
    m = tiny_llama
    text = "The capital of France is"
    tokens = m.to_tokens(text)
    assert torch.equal(m.tl.to_tokens(text), tokens)
    with torch.no_grad():
        ref = m(tokens)
        assert torch.equal(m(text), ref)
        assert torch.equal(m.tl(text), ref)
        logits, cache = m.run_with_cache(text, names_filter=["blocks.0.hook_resid_post"])
        tl_logits, _ = m.tl.run_with_cache(text)
    assert torch.equal(logits, ref) and torch.equal(tl_logits, ref)
    assert cache["blocks.0.hook_resid_post"].shape[:2] == tokens.shape
    assert torch.equal(m.logits(text), ref)
    assert m.to_str_tokens(text) == m.to_str_tokens(tokens) == m.tl.to_str_tokens(text)
    batch = m.to_tokens(["The cat sat", "The dog ran"])
    assert batch.shape[0] == 2 and torch.equal(batch[:1], m.to_tokens("The cat sat"))
    with pytest.raises(PromptError):
        m.to_tokens(["The cat", "The dog ran far away"])


def test_the_bos_rule_is_the_workbench_one_on_both_paths(tiny_llama_dir):
    """A model whose rule is to prepend BOS (Gemma's, here forced on a tokenizer that does not add it):
    TransformerLens' string paths add it too, once."""
    from core.models.backends import build_backend

    m = build_backend(tiny_llama_dir, "tiny-bos", prepend_bos=True)
    tokens = m.to_tokens("The capital")
    assert tokens[0, 0].item() == m.tokenizer.bos_token_id and tokens[0, 1].item() != m.tokenizer.bos_token_id
    assert torch.equal(m.tl.to_tokens("The capital"), tokens)
    assert m.to_str_tokens("The capital")[0] == m.tokenizer.bos_token


# -- the real model ---------------------------------------------------------------------------------------

@pytest.mark.real
@pytest.mark.slow
def test_real_greedy_and_tokens_equal_transformer_lens(smollm2):
    for text in ["The capital of France is", "When Mary and John went to the store, John gave a drink to"]:
        tokens = smollm2.to_tokens(text)
        assert torch.equal(smollm2.tl.to_tokens(text), tokens)
        assert smollm2.to_str_tokens(text)[:3] == smollm2.tl.to_str_tokens(text)[:3]
        assert smollm2.greedy(tokens, 8) == _tl_generate(smollm2, tokens, 8)
    assert smollm2.generate("The capital of France is", 1) == " Paris"
    with torch.no_grad():
        assert smollm2("The capital of France is")[0, -1].argmax().item() == smollm2.token_id(" Paris")


@pytest.mark.real
@pytest.mark.slow
def test_real_gemma_bos_rule_on_both_paths():
    """Gemma's tokenizer adds BOS: the workbench's ids and TransformerLens' string path both start with it, once."""
    from core.models.gemma import ready

    if not ready():
        pytest.skip("gemma3-270m is not converted here (workbench prepare --model gemma3-270m)")
    from core.models.zoo import load

    gemma = load("gemma3-270m")
    for text in ["The capital of France is", " hello  world"]:
        tokens = gemma.to_tokens(text)
        assert tokens[0, 0].item() == gemma.tokenizer.bos_token_id != tokens[0, 1].item()
        assert torch.equal(gemma.tl.to_tokens(text), tokens)
        assert gemma.to_str_tokens(text)[0] == gemma.tokenizer.bos_token
        assert gemma.greedy(tokens, 8) == _tl_generate(gemma, tokens, 8)


# -- the lean decode forward (core.models.decode.LeanDecoder) ------------------------------------------

LEAN_FAMILIES = ("qwen3", "gemma2", "gemma3")  # qk-norm; soft-caps and windows; post norms, local/global rotary


@pytest.fixture(scope="module")
def family_models(tmp_path_factory):
    from family_models import save_family

    import workbench as wb

    root = tmp_path_factory.mktemp("lean")
    return {f: wb.load(str(save_family(root / f, f, seed=i))) for i, f in enumerate(LEAN_FAMILIES + ("olmo2",))}


@pytest.mark.parametrize("family", LEAN_FAMILIES)
def test_lean_equals_transformer_lens_on_families(family_models, family, one_thread):
    """Past the sliding window (4 positions): the same greedy ids as TransformerLens' loop, and the logits of a
    cached step equal its forward of the whole sequence."""
    from family_models import IDS

    from core.models.decode import LeanDecoder, decode, lean_refusal

    tl = family_models[family].tl
    tokens = torch.tensor([IDS])
    assert lean_refusal(tl) is None
    lean = decode(tl, tokens, 12, adapt_threads=False)
    assert lean == decode(tl, tokens, 12, adapt_threads=False, lean=False)
    seq = torch.tensor([IDS + lean[:3]])
    with torch.inference_mode():
        decoder = LeanDecoder(tl, 1, seq.shape[1], seq.device)
        decoder.step(seq[:, :-1], 0)
        last = decoder.step(seq[:, -1:], seq.shape[1] - 1)
        ref = tl(seq)[:, -1]
    assert torch.allclose(last, ref, atol=1e-4, rtol=1e-4)


def test_lean_refuses_what_it_does_not_reproduce(family_models, tiny_gpt2, tiny_llama):
    from core.models.decode import lean_refusal

    assert "post-norm" in lean_refusal(family_models["olmo2"].tl)
    assert "positions" in lean_refusal(tiny_gpt2.tl)
    assert lean_refusal(tiny_llama.tl) is None
    assert lean_refusal(tiny_llama.tl, torch.tensor([[1, 1, 0]])) == "a prompt with padding"
    with tiny_llama.hooks(fwd_hooks=[("blocks.0.attn.hook_pattern", lambda act, hook: act)]):
        assert lean_refusal(tiny_llama.tl) == "a hook on blocks.0.attn.hook_pattern"


def test_lean_hooks_see_what_transformer_lens_hooks_see(tiny_llama, one_thread):
    """Every hook point the lean forward fires gets the tensors TransformerLens' loop gives it, call for call;
    a hook elsewhere (the pattern) sends the generation to that loop, and it still fires."""
    from core.models.decode import LEAN_HOOKS, decode

    tokens = tiny_llama.to_tokens(PROMPT)
    names = [name.format(l=layer) for layer in range(tiny_llama.arch.n_layers) for name in LEAN_HOOKS]

    def record(lean: bool) -> dict[str, list[torch.Tensor]]:
        seen: dict[str, list[torch.Tensor]] = {name: [] for name in names}
        hooks = [(name, lambda act, hook: seen[hook.name].append(act.clone())) for name in names]
        with tiny_llama.hooks(fwd_hooks=hooks):
            decode(tiny_llama.tl, tokens, 5, adapt_threads=False, lean=lean)
        return seen

    lean, ref = record(True), record(False)
    for name in names:
        assert len(lean[name]) == len(ref[name]) == 5, name
        for a, b in zip(lean[name], ref[name], strict=True):
            assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5), name
    patterns: list[int] = []
    with tiny_llama.hooks(fwd_hooks=[("blocks.0.attn.hook_pattern", lambda act, hook: patterns.append(1))]):
        greedy = tiny_llama.greedy(tokens, 4)
    assert len(patterns) == 4  # the prompt pass and three cached steps, in TransformerLens' loop
    assert greedy == _tl_generate(tiny_llama, tokens, 4)
