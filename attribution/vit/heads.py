"""Training the DINOv2 backbone's linear heads (scripts/train_dinov2_heads.py): class-token features in batches,
then a multinomial logistic regression folded into a LinearHead (core/models/vit_heads.py holds the heads and
attaches them to a backbone)."""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Float, Int

from attribution.vit.maps import Images
from core.models.vit import HookedViT
from core.models.vit_heads import LinearHead


def class_token_features(model: HookedViT, images: Images,
                         batch_size: int = 32) -> Float[torch.Tensor, "image d_model"]:
    """(image, d_model): the final-LayerNorm class token of a backbone, in batches, no gradients."""
    out = []
    with torch.no_grad():
        for lo in range(0, images.shape[0], batch_size):
            x = model.embed(model.check_images(images[lo:lo + batch_size]))
            for block in model.blocks:
                x = block(x)
            out.append(model.ln_final(x[:, 0]).cpu())
    return torch.cat(out)


def fit_linear_head(name: str, train: tuple[Float[torch.Tensor, "n_train d_model"], Int[torch.Tensor, " n_train"]],
                    val: tuple[Float[torch.Tensor, "n_val d_model"], Int[torch.Tensor, " n_val"]],
                    test: tuple[Float[torch.Tensor, "n_test d_model"], Int[torch.Tensor, " n_test"]],
                    classes: list[str], cs: tuple[float, ...] = (0.01, 0.1, 1.0, 10.0),
                    info: dict[str, Any] | None = None) -> LinearHead:
    """Multinomial logistic regression on standardised features (sklearn, lbfgs), C chosen on ``val`` (never
    on ``test``), the standardisation folded into the weights; accuracies recorded in ``info``."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    (xtr, ytr), (xva, yva), (xte, yte) = ((x.double().numpy(), y.numpy()) for x, y in (train, val, test))
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-6
    best = None
    for c in cs:
        clf = LogisticRegression(C=c, max_iter=3000).fit((xtr - mu) / sd, ytr)
        acc = float((clf.predict((xva - mu) / sd) == yva).mean())
        if best is None or acc > best[0]:
            best = (acc, c, clf)
    val_acc, c, clf = best
    w = clf.coef_ / sd  # (class, d): w . (x - mu) / sd + b = (w / sd) . x + (b - (w / sd) . mu)
    b = clf.intercept_ - w @ mu
    def acc(x, y):
        return float((np.argmax(x @ w.T + b, 1) == y).mean())

    head = LinearHead(name, torch.tensor(w, dtype=torch.float32), torch.tensor(b, dtype=torch.float32), classes)
    head.info = {**(info or {}), "C": c, "train_accuracy": acc(xtr, ytr), "val_accuracy": val_acc,
                 "test_accuracy": acc(xte, yte), "n_train": len(ytr), "n_val": len(yva), "n_test": len(yte)}
    return head
