"""Reading a user's image safely: the pixel count is checked before anything is decoded, and the
pixels must be finite values in [0, 1] (or [0, 255], scaled) before a model sees them.

A PNG of a few hundred KB can declare 20000 x 20000 pixels (a decompression bomb: 1.2 GB once decoded).
PIL's ``Image.open`` reads only the header, so the declared size is known for free; anything above
``MAX_PIXELS`` is refused with one line (ImageError, a WorkbenchError: exit 2 in the CLI, an error
message in the app). ``.npy`` arrays are memory-mapped to read their shape the same way.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

from core.models.vit import ImageError
from core.text import one_line

# 4096 x 4096: far above any ViT input here (they are resized down), and 48 MB of RGB bytes at most.
MAX_PIXELS = 4096 * 4096
SUFFIXES = ("png", "jpg", "jpeg")  # what the app's uploader accepts


def _pil():
    from PIL import Image

    # PIL's own guard (a warning above the limit, an error above twice it) backs ours up.
    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    return Image


def open_image(source: str | Path | bytes, name: str | None = None, max_pixels: int = MAX_PIXELS):
    """A decoded PIL image, or ImageError: unreadable, or more than ``max_pixels`` (checked from the
    header, before decoding)."""
    Image = _pil()
    label = name or (str(source) if not isinstance(source, bytes) else "the upload")
    try:
        with warnings.catch_warnings():  # above the limit is our one-line error, not PIL's warning
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
    except Image.DecompressionBombError as exc:  # PIL's own check fires first above 2 x its limit
        import re

        found = re.search(r"\((\d+) pixels\)", str(exc))
        size = f"{int(found.group(1)):,} pixels" if found else "too many pixels"
        raise ImageError(f"image {label!r} is {size}; the limit is {max_pixels:,} pixels: resize it first") \
            from None
    except (OSError, ValueError) as exc:
        raise ImageError(f"cannot read {label!r} as an image: {one_line(exc)}") from None
    w, h = img.size
    if w * h > max_pixels:
        img.close()
        raise ImageError(f"image {label!r} is {w} x {h} pixels ({w * h:,}); the limit is {max_pixels:,} "
                         "pixels: resize it first")
    if w * h == 0:
        raise ImageError(f"image {label!r} has no pixels ({w} x {h})")
    try:
        img.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ImageError(f"cannot decode {label!r}: {one_line(exc)}") from None
    return img


def check_pixels(arr: Any, label: str) -> Any:
    """A float array in [0, 1], or ImageError (NaN/Infinity, or values outside [0, 1])."""
    import numpy as np

    if arr.size == 0:
        raise ImageError(f"image {label!r} is empty (shape {tuple(arr.shape)})")
    if not np.isfinite(arr).all():
        raise ImageError(f"image {label!r} holds NaN or Infinity: pixel values must be finite")
    lo, hi = float(arr.min()), float(arr.max())
    if lo < 0.0 or hi > 1.0:
        raise ImageError(f"image {label!r} has values in [{lo:.4g}, {hi:.4g}]: pixels must lie in [0, 1] "
                         "(or [0, 255] for 8-bit data)")
    return arr


def read_image(path: str | Path, max_pixels: int = MAX_PIXELS):
    """An image file as a float tensor (C, H, W) in [0, 1]: PNG/JPEG (8-bit), or .npy (C,H,W or H,W,C) in
    [0, 1] or [0, 255]. ImageError for a missing, unreadable, oversized, non-finite or out-of-range image."""
    import numpy as np
    import torch

    p = Path(path)
    if not p.is_file():
        raise ImageError(f"image file {str(path)!r} does not exist")
    if p.suffix.lower() == ".npy":
        try:
            mm = np.load(p, mmap_mode="r", allow_pickle=False)  # the header only: shape and dtype
        except (OSError, ValueError, EOFError) as exc:
            raise ImageError(f"cannot read image {str(path)!r}: {one_line(exc)}") from None
        if mm.dtype.kind not in "biuf":
            raise ImageError(f"image {str(path)!r} has dtype {mm.dtype}: pixels must be numbers")
        if mm.size > 4 * max_pixels:
            raise ImageError(f"image {str(path)!r} has shape {tuple(mm.shape)} ({mm.size:,} values); the limit "
                             f"is {max_pixels:,} pixels")
        if mm.ndim not in (2, 3):  # a batch (N, C, H, W) is not one image: never explain its first silently
            raise ImageError(f"image {str(path)!r} has shape {tuple(mm.shape)}: give one image, (C, H, W), "
                             "(H, W, C) or (H, W)")
        arr = np.array(mm, dtype=np.float32)  # a copy: the memmap is read-only
        if arr.ndim == 3 and arr.shape[-1] in (1, 3, 4) and arr.shape[0] not in (1, 3, 4):
            arr = arr.transpose(2, 0, 1)  # HWC -> CHW
        if arr.size and np.isfinite(arr).all() and arr.max() > 1.0:
            arr = arr / 255.0
    else:
        img = open_image(p, str(path), max_pixels)
        arr = np.asarray(img).astype("float32") / 255.0
        arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
    check_pixels(arr, str(path))
    return torch.from_numpy(np.ascontiguousarray(arr))


def fit_image(image: Any, size: int, patch_size: int, label: str = "image") -> Any:
    """An RGB image (3, H, W) in [0, 1] resized to (1, 3, size, size) for a model with a fixed input (DINOv2:
    224 px; bilinear with antialiasing, aspect ratio not kept, so a region maps by scaling). ImageError for an
    image that is not RGB or is smaller than one patch on a side."""
    import torch

    if not isinstance(image, torch.Tensor) or image.ndim != 3:
        raise ImageError(f"{label} must be one (channel, height, width) image")
    c, h, w = image.shape
    if c != 3:
        raise ImageError(f"{label} has {c} channel(s); the model takes RGB images (3 channels): convert it first")
    if h < patch_size or w < patch_size:
        raise ImageError(f"{label} is {w} x {h} pixels, smaller than one {patch_size} x {patch_size} patch")
    x = image[None].float()
    if (h, w) != (size, size):
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False,
                                            antialias=True).clamp(0, 1)
    return x


def parse_region(text: str) -> tuple[int, int, int, int]:
    """'x0,y0,x1,y1' (pixels; x1, y1 exclusive) -> a box; ImageError when it is not four integers."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        box = tuple(int(p) for p in parts)
    except ValueError:
        box = ()
    if len(box) != 4:
        raise ImageError(f"region {text!r}: give four integers x0,y0,x1,y1 (pixels, x1 and y1 exclusive)")
    return box  # type: ignore[return-value]


def scale_region(box: tuple[int, int, int, int], height: int, width: int, size: int) -> tuple[int, int, int, int]:
    """A box on the original (height, width) image -> the same box on the size x size model input; ImageError
    when the box is not inside the image or is empty."""
    x0, y0, x1, y1 = box
    if not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height):
        raise ImageError(f"region x0={x0}, y0={y0}, x1={x1}, y1={y1} is not inside the {width} x {height} image: "
                         f"need 0 <= x0 < x1 <= {width} and 0 <= y0 < y1 <= {height}")
    sx, sy = size / width, size / height
    nx0, ny0 = int(x0 * sx), int(y0 * sy)
    nx1, ny1 = max(nx0 + 1, min(size, round(x1 * sx))), max(ny0 + 1, min(size, round(y1 * sy)))
    return nx0, ny0, nx1, ny1


PHOTOS = ("astronaut", "cat", "coffee")  # real photographs bundled with scikit-image (skimage.data)


def photo(name: str) -> Any:
    """One of scikit-image's bundled photographs as a float tensor (3, H, W) in [0, 1] (no download)."""
    import numpy as np
    import torch

    if name not in PHOTOS:
        raise ImageError(f"unknown photograph {name!r}; bundled: {', '.join(PHOTOS)}")
    try:
        import skimage.data
    except ImportError:
        raise ImageError("scikit-image is not installed: run ./dev setup") from None
    arr = np.asarray(getattr(skimage.data, name)(), dtype=np.float32) / 255.0
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
