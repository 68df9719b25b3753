"""Shared fixtures: tiny random HF models (Llama-style and GPT-2-style) and the real smollm2."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from jaxtyping import install_import_hook

# The engine contract fails loudly in tests: every function and dataclass of these modules checks its
# annotated argument and return types, tensor shapes included (jaxtyping dims such as "batch pos d_model"
# must agree within a call), with beartype. Installed before any test imports them.
CHECKED_MODULES = ("core.models.hooked", "core.metric", "circuits.counterfactual",
                   "attribution.baselines.integrated_gradients")
install_import_hook(CHECKED_MODULES, "beartype.beartype")

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _smollm2_tokenizer_dir() -> Path:
    from core.models.llm import prepare_smollm2

    return prepare_smollm2()


@pytest.fixture(autouse=True)
def _isolated_runs(tmp_path_factory, monkeypatch):
    """Every test writes runs to its own store, never the user's."""
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path_factory.mktemp("runs")))


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one torch thread is fastest; on a loaded machine extra threads spin (100x slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _save_tiny(path: Path, config, gain_noise: float = 0.0) -> Path:
    """A random model of ``config`` with smollm2's tokenizer; ``gain_noise`` > 0 also makes every 1-D weight (norm
    gains, biases) random, so that a norm multiplying by 1 + w cannot hide a missing 1 behind a zero w."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    if gain_noise:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 1:
                    p.add_(gain_noise * torch.randn_like(p))
    model.save_pretrained(path)
    for name in TOKENIZER_FILES:
        shutil.copy(_smollm2_tokenizer_dir() / name, path / name)
    return path


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    """A 2-layer random Llama (GQA: 4 heads over 2 kv-heads) with smollm2's tokenizer."""
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=49152, max_position_embeddings=128,
                      tie_word_embeddings=False, rope_theta=10000.0, bos_token_id=1, eos_token_id=2)
    cfg.architectures = ["LlamaForCausalLM"]
    return _save_tiny(tmp_path_factory.mktemp("tiny-llama"), cfg)


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory) -> Path:
    """A 2-layer random GPT-2 (GELU, LayerNorm, learned positions) with smollm2's tokenizer."""
    from transformers import GPT2Config

    cfg = GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=49152, n_positions=128)
    cfg.architectures = ["GPT2LMHeadModel"]
    return _save_tiny(tmp_path_factory.mktemp("tiny-gpt2"), cfg)


@pytest.fixture(scope="session")
def tiny_llama(tiny_llama_dir):
    import workbench as wb

    return wb.load(str(tiny_llama_dir))


@pytest.fixture(scope="session")
def tiny_gpt2(tiny_gpt2_dir):
    import workbench as wb

    return wb.load(str(tiny_gpt2_dir))


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M (cached safetensors; about 2 s to load)."""
    import workbench as wb

    return wb.load("smollm2-135m")


@pytest.fixture(scope="session")
def vit_dir(tmp_path_factory) -> str:
    """A random 2-layer ViT checkpoint in the zoo's format for the synthetic set (32 px, 4 classes): the
    Vision page, vit-eval and its jobs care about plumbing, not accuracy."""
    import torch

    from core.models.vit import HookedViT, ViTConfig, save_checkpoint

    torch.manual_seed(0)
    model = HookedViT(ViTConfig(d_model=16, n_layers=2, n_heads=2, d_mlp=32, n_classes=4,
                                class_names=["plus", "ring", "triangle", "x"]))
    path = tmp_path_factory.mktemp("vit") / "tiny-vit"
    save_checkpoint(model, path, {"name": "tiny-vit", "kind": "vit", "params": 1,
                                  "loader": "core.models.vit:load_checkpoint"})
    return str(path)


# -- two xdist workers (./dev test with WORKBENCH_TEST_WORKERS=2) ------------------------------------------------
# Files whose tests wait on wall-clock deadlines (a browser, a Streamlit server, Ray, signals, a fresh venv) run one
# after another on one worker, so two of them never share the two cores; every other file goes whole to one worker
# (as --dist loadfile does, which keeps module fixtures on one worker).
TIMED_FILES = ("test_app_browser", "test_jobs", "test_hardening_ray", "test_hardening_store2", "test_wheel",
               "test_notebooks")


def timed_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: "timed" for the timed files, its file otherwise."""
    path = nodeid.split("::", 1)[0]
    return "timed" if Path(path).stem.startswith(TIMED_FILES) else path


def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile with the timed files as one unit (xdist's loadgroup marks do not reach pytest 9's node
    ids, so the grouping is done in the scheduler, by xdist's own hook)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TimedTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return timed_unit(nodeid)

    return TimedTogether(config, log)


if os.environ.get("PYTEST_XDIST_WORKER"):
    # two workers on two cores: torch's second thread in each only spins against the other worker
    import torch

    torch.set_num_threads(1)


# -- the slow suite (./dev test --slow) ----------------------------------------------------------------------------
# Tests marked slow_suite (the README's long lines, the tour notebook, the wheel in a venv of its own) are too long
# for CI's 15 minutes; they run only under --slow, and --slow runs only them (the rest is what CI runs).
def pytest_configure(config):
    config.addinivalue_line("markers", "slow_suite: too long for CI; run only by ./dev test --slow")


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="run only the slow suite (tests marked slow_suite), which CI leaves out")


def pytest_collection_modifyitems(config, items):
    slow = config.getoption("--slow")
    chosen = [item for item in items if (item.get_closest_marker("slow_suite") is not None) == slow]
    if len(chosen) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in chosen])
        items[:] = chosen
