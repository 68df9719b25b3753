"""Issue 48 item 6: every public engine tensor annotation names its axes (jaxtyping), or says why it cannot."""
import subprocess
import sys
from pathlib import Path

SCAN = Path(__file__).resolve().parent.parent / "scripts" / "axes_scan.py"


def test_no_bare_tensor_annotation_in_the_engines():
    out = subprocess.run([sys.executable, str(SCAN), "--check"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout  # lists each bare annotation: name its axes or mark it '# mixed shapes'
    assert "public: named" in out.stdout


def test_the_scan_finds_a_bare_tensor_and_honours_the_mixed_mark(tmp_path):
    pkg = tmp_path / "core"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "import torch\n"
        "def f(x: torch.Tensor) -> tuple[Float[torch.Tensor, 'a'], torch.Tensor]: ...\n"
        "def g(sd: dict[str, torch.Tensor]) -> None: ...  # mixed shapes\n"
        "def h(x: Float[torch.Tensor, 'a b']) -> None:\n"
        "    def inner(y: torch.Tensor) -> None: ...\n")
    sys.path.insert(0, str(SCAN.parent))
    try:
        import axes_scan
    finally:
        sys.path.remove(str(SCAN.parent))
    rows = axes_scan.scan(pkg / "m.py", Path("core/m.py"))
    kinds = [(scope, kind, where.split(" ", 1)[1]) for scope, kind, where in rows]
    assert ("public", "bare", "f(x: torch.Tensor)") in kinds
    assert ("public", "bare", "f(return: tuple[Float[torch.Tensor, 'a'], torch.Tensor])") in kinds
    assert ("public", "mixed", "g(sd: dict[str, torch.Tensor])") in kinds
    assert ("public", "named", "h(x: Float[torch.Tensor, 'a b'])") in kinds
    assert ("inner", "bare", "inner(y: torch.Tensor)") in kinds
