"""``workbench dla``: direct logit attribution per component, per head and along the accumulated residual."""

from __future__ import annotations

from typing import Any

import typer

from core.figures import png_option
from core.options import positive_int, token_text
from workbench.commands.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    FOIL_OPTION,
    JSON_OPTION,
    MODEL_ARGUMENT,
    POSITION_OPTION,
    PROMPT_ARGUMENT,
    SAVE_OPTION,
    check_prompt,
    finish,
    result_console,
)


def register(app: typer.Typer) -> None:
    app.command("dla", help="Direct logit attribution of target (minus foil) at a position: per component "
                "(embed, L{l}.attn, L{l}.mlp), per head, and the accumulated residual stream per layer.")(dla)


def dla(
    model: str = MODEL_ARGUMENT,
    prompt: str = PROMPT_ARGUMENT,
    target: str = typer.Option(None, "--target", help="Target token, leading space included; required unless "
                               "--position is before the last token (then: the prompt's next token).",
                               callback=token_text),
    foil: str = FOIL_OPTION,
    position: int = POSITION_OPTION,
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    save: bool = SAVE_OPTION,
    top: int = typer.Option(10, "--top", help="Heads shown in the human-readable output.", callback=positive_int),
    png: str = png_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Direct logit attribution of the target (minus foil) logit."""
    from core.errors import TokenError
    from workbench.commands.common import check_device

    check_prompt(prompt, png)  # a bad --png or an empty prompt fails before any work
    if target is None and position is None:
        raise TokenError("give --target (or --position N before the last token to explain the prompt's next token)")
    from core.models.zoo import check_text_model

    check_text_model(model, "dla")  # an unknown or vision model: refused before anything loads
    import workbench as wb
    from attribution import encode_at
    from attribution.dla import direct_logit_attribution

    m = wb.load(model, device=check_device(device), dtype=dtype)
    if target is None and encode_at(m, prompt, None, foil, position).target is None:
        raise TokenError(f"position {position} is the prompt's last token: give --target")
    res = direct_logit_attribution(m, prompt, target=target, foil=foil, position=position)

    def human(r: dict[str, Any]) -> None:
        import torch

        c = result_console()
        c.print(f"dla · target {r['target']!r}" + (f" vs {r['foil']!r}" if r["foil"] else "")
                + f" at {r['position']}:{r['tokens'][r['position']]!r} · logit diff {r['logit_diff']:.3f}"
                + f" (offset {r['offset']:.3g})")
        print("component      contribution")
        for name, v in zip(r["components"], r["component_scores"], strict=True):
            print(f"{name:14} {v:+.4f}")
        heads = torch.tensor(r["head_scores"])
        best = heads.flatten().abs().topk(min(top, heads.numel())).indices.tolist()
        def listing(title: str, items: list[str]) -> None:
            """Items packed into lines of the terminal's width (80 columns too), never split inside one."""
            line = title
            for k, item in enumerate(items):
                piece = item + ("," if k < len(items) - 1 else "")
                if len(line) + 1 + len(piece) > max(40, c.width) and line.strip():
                    print(line)
                    line = " "
                line += " " + piece
            print(line)

        listing("top heads:", [f"L{i // heads.shape[1]}H{i % heads.shape[1]} {heads.flatten()[i]:+.3f}"
                               for i in best])
        listing("accumulated:", [f"{n} {v:+.2f}" for n, v in zip(r["accumulated"], r["accumulated_scores"],
                                                                  strict=True)])

    finish(res.to_json(), as_json, human, res, save=save, png=png)
