"""Saving plotly figures for papers and for people without a network: ``save_figure(fig, path)``.

The format follows the file's suffix:

- ``.png``, ``.svg``, ``.pdf``: a static image drawn by kaleido 1.x, which drives a Chrome or Chromium
  installed on the machine (./dev installs Debian's ``chromium``). The browser is found once here
  (``BROWSER_PATH`` when the user set it, else ``chromium`` / ``google-chrome`` on the PATH) and handed to
  kaleido's browser driver through ``BROWSER_PATH``; MathJax (fetched from a CDN by default) is switched off,
  so an export never waits on the network. Several images share one browser (``save_figures``).
- ``.html``: the figure with ``include_plotlyjs="directory"``: the page loads ``plotly.min.js`` from beside
  it (written once per folder, 4.6 MB) instead of inlining it into every file (4.8 MB each) or loading it
  from a CDN (the app and user machines may be offline, so a CDN page would show nothing there).
- ``.json``: plotly's own JSON (``plotly.io.read_json`` reads it back).

Every file is written to a temporary name beside it and renamed into place, so a failed export leaves
nothing half-written. Bad input (an unknown suffix, a folder that does not exist or cannot be written, no
browser) is a ``FigureError`` naming what to do.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.errors import WorkbenchError
from core.options import check_output, output_problem

IMAGE_FORMATS = ("png", "svg", "pdf")
FORMATS = (*IMAGE_FORMATS, "html", "json")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
DEFAULT_SIZE = (900, 600)  # width, height in px for a figure that sets neither (plotly's default is 700 x 500)
SCALE = 2  # PNG pixels per layout pixel: sharp in a paper at column width


class FigureError(WorkbenchError):
    """A figure that cannot be saved: unknown format, unwritable path, no browser for static images."""


def figure_format(path: str | Path) -> str:
    """The format named by ``path``'s suffix (png, svg, pdf, html, json), or a FigureError."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise FigureError(f"cannot save a figure as {Path(path).name!r}: the file name must end in "
                          + ", ".join(f".{f}" for f in FORMATS))
    return suffix


def _target(path: str | Path) -> Path:
    """``path`` checked for writing (core.options.output_problem: its folder exists and is writable, it is
    no folder itself nor under /proc, /sys or /dev) with a figure's suffix."""
    figure_format(path)
    why = output_problem(path)
    if why is not None:
        raise FigureError(f"cannot save a figure to {str(path)!r}: it {why}")
    p = Path(path).expanduser()
    if p.exists() and not os.access(p, os.W_OK):
        raise FigureError(f"cannot save a figure to {str(p)!r}: the file is not writable")
    return p


def browser_path() -> str:
    """The Chrome/Chromium kaleido drives: ``BROWSER_PATH`` when set, else the first browser on the PATH.
    Sets ``BROWSER_PATH`` for kaleido's driver (choreographer) so both agree; a FigureError when none."""
    given = os.environ.get("BROWSER_PATH")
    if given:
        if not (Path(given).is_file() and os.access(given, os.X_OK)):
            raise FigureError(f"BROWSER_PATH={given!r} is not an executable browser: point it at chromium or "
                              "Chrome, or unset it")
        return given
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            os.environ["BROWSER_PATH"] = found
            return found
    raise FigureError("saving PNG, SVG or PDF needs Chrome or Chromium (kaleido draws with it): install it "
                      "(`apt-get install chromium`, or ./dev setup) or set BROWSER_PATH to its executable")


def _atomic_write(path: Path, data: bytes | str) -> None:
    """The store's writer: a temporary beside ``path``, then a rename; a full disk is one line."""
    from core.store import write_atomic  # lazy: --help imports this module, and not the run store (sqlite3)

    write_atomic(path, data, "the figure", FigureError)


def _size(fig: Any) -> tuple[int, int]:
    layout = fig.layout
    return int(layout.width or DEFAULT_SIZE[0]), int(layout.height or DEFAULT_SIZE[1])


def _images(fig: Any, formats: Sequence[str], scale: float = SCALE) -> list[bytes]:
    """The figure drawn once per format by one kaleido browser (a PNG at ``scale`` pixels per layout pixel)."""
    try:
        import kaleido
    except ImportError:  # pragma: no cover - kaleido is a pinned dependency
        raise FigureError("saving PNG, SVG or PDF needs kaleido (pip install kaleido==1.5.1)") from None
    browser_path()
    width, height = _size(fig)
    spec = fig.to_dict()
    started = len(formats) > 1 and not kaleido._global_server.is_running()
    if started:  # one browser for every format, not one each (each start costs about 2 s)
        kaleido.start_sync_server(mathjax=False, silence_warnings=True)
    try:
        out = []
        for fmt in formats:
            kw = {} if kaleido._global_server.is_running() else {"kopts": {"mathjax": False}}
            opts = {"format": fmt, "width": width, "height": height, "scale": scale if fmt == "png" else 1}
            try:
                out.append(kaleido.calc_fig_sync(spec, opts=opts, **kw))
            except Exception as exc:  # noqa: BLE001
                # under heavy load the page was once asked to draw before kaleido's own script had loaded
                # ("kaleido_scopes is not defined"); that one is a race, so it is tried once more
                if "kaleido_scopes" not in str(exc):
                    raise
                out.append(kaleido.calc_fig_sync(spec, opts=opts, **kw))
    except Exception as exc:  # noqa: BLE001 - the browser's own failures, said in one line
        raise FigureError(f"the browser could not draw the figure ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else 'no message'})") from None
    finally:
        if started:
            kaleido.stop_sync_server(silence_warnings=True)
    return out


def save_figures(fig: Any, paths: Sequence[str | Path], scale: float = SCALE) -> list[Path]:
    """Save ``fig`` to every path (format from each suffix; the static images drawn by one browser; a PNG at
    ``scale`` pixels per layout pixel)."""
    targets = [_target(p) for p in paths]
    formats = [figure_format(p) for p in targets]
    images = [i for i, f in enumerate(formats) if f in IMAGE_FORMATS]
    drawn = dict(zip(images, _images(fig, [formats[i] for i in images], scale), strict=True)) if images else {}
    for i, (path, fmt) in enumerate(zip(targets, formats, strict=True)):
        if fmt in IMAGE_FORMATS:
            _atomic_write(path, drawn[i])
        elif fmt == "json":
            _atomic_write(path, fig.to_json())
        else:
            html = fig.to_html(include_plotlyjs="directory", full_html=True)
            js = path.parent / "plotly.min.js"
            if not js.exists():  # what the page's <script src="plotly.min.js"> loads, once per folder
                from plotly.offline import get_plotlyjs

                _atomic_write(js, get_plotlyjs())
            _atomic_write(path, html)
    return targets


def save_figure(fig: Any, path: str | Path, scale: float = SCALE) -> Path:
    """Save ``fig`` as ``path`` (.png, .svg, .pdf, .html or .json, from the suffix); returns the path."""
    return save_figures(fig, [path], scale)[0]


def png_option() -> Any:
    """The drawing commands' ``--png PATH`` option (the suffix picks the format: .png, .svg, .pdf, .html)."""
    import typer

    return typer.Option(None, "--png", help="Also save the figure at PATH: .png (or .svg, .pdf, .html, .json by "
                        "the suffix), drawn as the notebook's .plot() draws it.")


def check_figure_path(path: str | Path | None, option: str = "--png") -> Path | None:
    """``--png``'s path checked before any work starts (the commands' one output check, then the suffix); None
    when not given."""
    if path is None:
        return None
    check_output(option, path)
    return _target(path)
