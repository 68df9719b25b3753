"""Count tensor annotations that name their axes (jaxtyping) against bare ``torch.Tensor`` ones.

    python scripts/axes_scan.py [--list] [ROOT ...]      (roots default to core attribution circuits)

Looks at public functions (parameters and return) and public class fields. An annotation is "named" when it
uses a jaxtyping dtype (Float[...], Int[...], ...), "bare" when it mentions Tensor without one. A bare annotation
whose source lines carry the comment ``# mixed shapes`` is counted as mixed (the values really differ in shape,
e.g. a state_dict) and not as bare. Functions defined inside another function and methods of private classes
are no public API: they are counted apart as "inner" (names starting with "_" are left out either way).
Skips the NNsight/remote backends (issue 48 item 6 leaves them to another change).
"""
from __future__ import annotations

import ast
import pathlib
import sys

ROOTS = ("core", "attribution", "circuits")
SKIP = ("core/models/remote.py", "core/models/nnsight_")
DTYPES = ("Float[", "Int[", "Bool[", "Shaped[", "Num[", "Real[", "Integer[", "Inexact[", "UInt[", "Complex[")
MIXED = "# mixed shapes"


def kind(node: ast.expr, lines: list[str]) -> str | None:
    """'named', 'bare', 'mixed' or None (no tensor in the annotation)."""
    text = ast.unparse(node)
    if any(d in text for d in DTYPES):
        return "named"
    if "Tensor" not in text:
        return None
    span = lines[node.lineno - 1: (node.end_lineno or node.lineno)]
    return "mixed" if any(MIXED in line for line in span) else "bare"


def annotations(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, ast.expr]]:
    a = fn.args
    out = [(arg.arg, arg.annotation) for arg in a.posonlyargs + a.args + a.kwonlyargs if arg.annotation]
    out += [("*" + arg.arg, arg.annotation) for arg in (a.vararg, a.kwarg) if arg and arg.annotation]
    return out + ([("return", fn.returns)] if fn.returns else [])


def scan(path: pathlib.Path) -> list[tuple[str, str, str]]:
    """(scope, kind, where) for every tensor annotation of a file; scope is 'public' or 'inner'."""
    lines = path.read_text().splitlines()
    found: list[tuple[str, str, str]] = []

    def visit(node: ast.AST, inner: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not child.name.startswith("_"):
                    for name, ann in annotations(child):
                        k = kind(ann, lines)
                        if k:
                            where = f"{path}:{ann.lineno} {child.name}({name}: {ast.unparse(ann)})"
                            found.append(("inner" if inner else "public", k, where))
                visit(child, True)
            elif isinstance(child, ast.ClassDef):
                private = inner or child.name.startswith("_")
                if not private:
                    for st in child.body:
                        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) \
                                and not st.target.id.startswith("_"):
                            k = kind(st.annotation, lines)
                            if k:
                                found.append(("public", k, f"{path}:{st.lineno} {child.name}.{st.target.id}: "
                                                           f"{ast.unparse(st.annotation)}"))
                visit(child, private)
            else:
                visit(child, inner)

    visit(ast.parse("\n".join(lines)), False)
    return found


def main(argv: list[str]) -> int:
    show = "--list" in argv
    roots = [a for a in argv if not a.startswith("--")] or list(ROOTS)
    rows = []
    for root in roots:
        for p in sorted(pathlib.Path(root).rglob("*.py")):
            if not any(str(p).startswith(s) for s in SKIP):
                rows += scan(p)
    for scope in ("public", "inner"):
        counts = {k: sum(1 for s, kk, _ in rows if s == scope and kk == k) for k in ("named", "bare", "mixed")}
        print(f"{scope}: named {counts['named']} bare {counts['bare']} mixed {counts['mixed']}")
    for scope, k, where in rows:
        if k == "bare" or (show and k == "mixed"):
            print(f"  {scope} {k}: {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
