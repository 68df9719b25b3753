"""PatchMap: the one result type every ViT method returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float, Int, Shaped

AXES = ("image", "row", "col")

# The tensors ViT methods and metrics pass around, named once
Images = Float[torch.Tensor, "image channel height width"]  # pixels in [0, 1]
Targets = Int[torch.Tensor, " image"]  # the class explained, per image
Maps = Float[torch.Tensor, "image patch"]  # patch maps, patches row-major (PatchMap.flat)
Masks = Shaped[torch.Tensor, "image height width"]  # the object's pixels (bool, or 0/1 numbers)
Logits = Float[torch.Tensor, "image class"]
PerImage = Float[torch.Tensor, " image"]
Patterns = Float[torch.Tensor, "image head token token"]  # one layer's attention (token: CLS, patches)
Resid = Float[torch.Tensor, "image token d_model"]  # the residual stream, or a target on it


@dataclass
class PatchMap:
    """Scores over the patch grid: ``scores`` has axes (image, row, col); higher = more relevant.

    ``targets`` (image) are the classes explained; ``seconds`` is the wall time of the method on
    the whole batch (not counting the target-choosing forward pass).
    """

    scores: Float[torch.Tensor, "image row col"]
    method: str
    targets: Targets
    params: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    patch_size: int = 1
    axes: tuple[str, ...] = AXES

    @property
    def grid(self) -> int:
        return int(self.scores.shape[-1])

    @property
    def flat(self) -> Maps:
        """(image, patch), patches row-major."""
        return self.scores.reshape(self.scores.shape[0], -1)

    def upsample(self, size: int | None = None, mode: str = "nearest") -> Float[torch.Tensor, "image height width"]:
        """(image, height, width) at pixel resolution (nearest keeps each patch's value on its pixels)."""
        size = size or self.grid * self.patch_size
        kw = {} if mode == "nearest" else {"align_corners": False}
        return torch.nn.functional.interpolate(self.scores[:, None].float(), size=(size, size),
                                               mode=mode, **kw)[:, 0]

    def normalised(self) -> Float[torch.Tensor, "image row col"]:
        """Each map scaled to [0, 1] (constant maps become 0)."""
        s = self.flat
        lo, hi = s.min(1, keepdim=True).values, s.max(1, keepdim=True).values
        return ((s - lo) / (hi - lo).clamp_min(1e-12)).reshape(self.scores.shape)

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "axes": list(self.axes), "scores": self.scores.tolist(),
                "targets": self.targets.tolist(), "params": self.params, "seconds": self.seconds}

    def table(self):
        import pandas as pd

        b, g, _ = self.scores.shape
        idx = torch.cartesian_prod(torch.arange(b), torch.arange(g), torch.arange(g))
        return pd.DataFrame({"image": idx[:, 0].numpy(), "row": idx[:, 1].numpy(), "col": idx[:, 2].numpy(),
                             "score": self.scores.reshape(-1).detach().cpu().numpy()})

    def plot(self, images: Images | None = None, index: int = 0, opacity: float = 0.5):
        """The image (if given) with this map overlaid, as a plotly figure."""
        return overlay_figure(images, {self.method: self}, [index])


def overlay_figure(images: Images | None, maps: dict[str, PatchMap], indices: list[int], masks: Masks | None = None,
                   opacity: float = 0.55, panel_px: int = 150,
                   colorbar: bool = False, image_panel: bool = True):
    """A grid of images (rows) x methods (columns): each map, normalised, over its image. ``panel_px``
    sizes each panel; ``colorbar`` adds the shared 0-1 scale; ``image_panel`` (with images) draws the plain
    image first; the object mask's outline (when given) is
    drawn on every panel as a white line on a black halo, visible on the image and on the Inferno map."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = list(maps)
    panel = images is not None and image_panel
    cols = len(names) + (1 if panel else 0)
    titles = []
    for i in indices:
        titles += ([f"image {i}"] if panel else []) + names
    fig = make_subplots(rows=len(indices), cols=cols, subplot_titles=titles,
                        horizontal_spacing=0.01 if not colorbar else 0.015, vertical_spacing=0.04)

    def outline(i: int, r: int, c: int) -> None:
        if masks is None:
            return
        m = masks[i].float().cpu().numpy()
        for colour, width in (("black", 4.5), ("white", 2.0)):  # a white line on a black halo: visible anywhere
            # with coloring "lines" plotly colours a contour from its colorscale (line.color is ignored: the
            # default scale drew the outline dark blue), so the scale is the one colour
            fig.add_trace(go.Contour(z=m, showscale=False, contours={"start": 0.5, "end": 0.5, "coloring": "lines"},
                                     colorscale=[[0, colour], [1, colour]], line={"color": colour, "width": width},
                                     hoverinfo="skip"), row=r, col=c)

    for r, i in enumerate(indices, start=1):
        c0 = 1
        if panel:
            rgb = (images[i].permute(1, 2, 0).clamp(0, 1) * 255).byte().cpu().numpy()
            fig.add_trace(go.Image(z=rgb), row=r, col=1)
            outline(i, r, 1)
            c0 = 2
        for k, name in enumerate(names):
            pm = maps[name]
            norm = PatchMap(pm.normalised(), pm.method, pm.targets, patch_size=pm.patch_size).upsample()[i]
            if images is not None:
                rgb = (images[i].permute(1, 2, 0).clamp(0, 1) * 255).byte().cpu().numpy()
                fig.add_trace(go.Image(z=rgb), row=r, col=c0 + k)
            last = colorbar and r == 1 and k == len(names) - 1
            fig.add_trace(go.Heatmap(z=norm.cpu().numpy(), colorscale="Inferno", opacity=opacity,
                                     showscale=last, zmin=0, zmax=1,
                                     colorbar={"title": "score (normalised)", "len": 0.9} if last else None,
                                     hovertemplate=f"{name}<br>x %{{x}} y %{{y}}<br>%{{z:.2f}}<extra></extra>"),
                          row=r, col=c0 + k)
            outline(i, r, c0 + k)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.update_layout(height=(panel_px + 30) * len(indices) + 40,
                      width=panel_px * cols + 40 + (90 if colorbar else 0),
                      margin=dict(l=5, r=5, t=30, b=5))
    return fig
