"""Greedy and sampled decoding for HookedModel, with the thread count each step is fastest at.

Why not TransformerLens' ``generate`` as it stands: a decode step is about 200 small matrix-vector
products (smollm2-135m), each a parallel region that waits for its slowest thread. On a machine whose
cores are shared (two cores, several busy processes), a thread that is descheduled holds every region
up: measured on smollm2-135m at load 5-7, 2 threads took 0.6-3.5 s a token where 1 thread took
60-270 ms; on an idle machine 2 threads are the faster. So when every core but one is taken by other
work (``busy``), the whole generation runs at one thread; otherwise the loop times its steps
and keeps the faster of the process's thread count and one thread, trying the other again now and
then (a step tried at the slower count costs one slow step; under load one such step cost 2 s).

The loop is TransformerLens' own (HookedTransformer.generate 3.9, greedy and batch 1): the same calls
with the same arguments (embedding of the whole sequence each step, the attention mask, the KV cache),
so the tokens are its tokens and every hook fires as it would (tests/test_generation.py holds them
equal). ``torch.set_num_threads`` is process-wide: other threads of the process (the app's) run at
the chosen count while a generation is under way; the count is restored at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# after this many steps at the chosen count, one step at the other count checks the choice still holds
RECHECK_EVERY = 16


def busy() -> bool:
    """Whether other work leaves this process less than two idle cores' worth: at this instant every core
    but one runs another task (/proc/loadavg's runnable count, less this one), or over the last minute the
    load average exceeded the cores by one. The instant count keeps a generation's own recent load (a
    dedicated machine generating for a minute) from reading as someone else's."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        fields = Path("/proc/loadavg").read_text().split()
        load, others_now = float(fields[0]), int(fields[3].split("/")[0]) - 1
    except (OSError, ValueError, IndexError):
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average on this system
            return False
        others_now = load
    return others_now >= cores - 1 or load >= cores + 1


class ThreadChooser:
    """Picks, step by step, the thread count (the process's or 1) whose last step was the faster."""

    def __init__(self, threads: int | None = None) -> None:
        self.saved = torch.get_num_threads()
        self.options = sorted({self.saved if threads is None else int(threads), 1}, reverse=True)
        self.seconds: dict[int, float] = {}
        self.step = 0
        self.current = self.options[0]

    def next_count(self) -> int:
        """The count to run the next step at: each option once, then the faster, with a recheck."""
        untried = [n for n in self.options if n not in self.seconds]
        if untried:
            choice = untried[0]
        else:
            best = min(self.seconds, key=self.seconds.__getitem__)
            other = [n for n in self.options if n != best]
            choice = other[0] if other and self.step % RECHECK_EVERY == RECHECK_EVERY - 1 else best
        self.step += 1
        self.current = choice
        if torch.get_num_threads() != choice:
            torch.set_num_threads(choice)
        return choice

    def record(self, seconds: float) -> None:
        self.seconds[self.current] = seconds

    def restore(self) -> None:
        if torch.get_num_threads() != self.saved:
            torch.set_num_threads(self.saved)


def timed_steps(chooser: ThreadChooser | None) -> Callable[[Callable[[], Any]], Any]:
    """Runs one decode step under the chooser's thread count and records its time (plain call without)."""

    def run(step: Callable[[], Any]) -> Any:
        if chooser is None:
            return step()
        chooser.next_count()
        started = time.perf_counter()
        out = step()
        chooser.record(time.perf_counter() - started)
        return out

    return run


def decode(tl: Any, tokens: torch.Tensor, max_new_tokens: int, eos: int | None = None,
           temperature: float | None = None, adapt_threads: bool = True) -> list[int]:
    """New token ids after ``tokens`` [1, pos] from a HookedTransformer with a tokenizer, with the KV cache:
    greedy when ``temperature`` is None, else sampled (TransformerLens' sample_logits). Stops after
    ``eos``. The first pass runs the whole prompt; each later one the newest position. ``adapt_threads``:
    one thread throughout on a busy machine, else the faster count step by step (the module docstring)."""
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache
    from transformer_lens.utilities import get_attention_mask, sample_logits

    cfg = tl.cfg
    saved = torch.get_num_threads()
    adapt = adapt_threads and saved > 1
    one_thread = adapt and busy()
    if one_thread:
        torch.set_num_threads(1)
    chooser = ThreadChooser() if adapt and not one_thread else None
    step = timed_steps(chooser)
    device = tokens.device
    mask0 = None
    if tl.tokenizer is not None:
        mask0 = get_attention_mask(tl.tokenizer, tokens, cfg.default_prepend_bos)
    cache = TransformerLensKeyValueCache.init_cache(cfg, cfg.device, tokens.shape[0])
    embeds = tl.embed(tokens)
    new: list[int] = []
    seen = tokens
    tl.eval()
    try:
        with torch.inference_mode():
            for index in range(max_new_tokens):
                mask = None
                if mask0 is not None:
                    mask = mask0.to(device) if not new else torch.cat(
                        [mask0.to(device), torch.ones(1, len(new), dtype=mask0.dtype, device=device)], dim=1)

                def forward(index: int = index, mask: Any = mask, embeds: torch.Tensor = embeds) -> torch.Tensor:
                    residual, shortformer = tl.get_residual(embeds, tl.get_pos_offset(cache, 1),
                                                            return_shortformer_pos_embed=True, device=device,
                                                            attention_mask=mask)
                    return tl.forward(residual[:, -1:] if index > 0 else residual, return_type="logits",
                                      past_kv_cache=cache, start_at_layer=0, shortformer_pos_embed=shortformer,
                                      attention_mask=mask)[:, -1, :]

                # the prompt pass is not a decode step: it runs at the process's count, untimed
                final = step(forward) if index > 0 else forward()
                if temperature is None:
                    nxt = final.argmax(-1)
                else:
                    nxt = sample_logits(final, temperature=temperature, tokens=seen)
                nxt = nxt.to(device)
                new.append(int(nxt[0]))
                if eos is not None and new[-1] == eos:
                    break
                seen = torch.cat([seen, nxt.view(1, 1)], dim=1)
                embeds = torch.hstack([embeds, tl.embed(nxt.unsqueeze(-1))])
    finally:
        if torch.get_num_threads() != saved:
            torch.set_num_threads(saved)
    return new
