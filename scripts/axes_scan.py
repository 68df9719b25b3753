"""Count tensor annotations that name their axes (jaxtyping) against bare ``torch.Tensor`` ones.

    python scripts/axes_scan.py [--list] [--check] [ROOT ...]   (roots default to core attribution circuits)

--list also lists the annotations marked mixed; --check exits 1 while any bare one is left.

Looks at public functions (parameters and return) and public class fields. An annotation is "named" when every
Tensor in it sits in a jaxtyping dtype (Float[torch.Tensor, "..."], Int[...], ...), "bare" when any does not
(``tuple[Float[...], torch.Tensor]`` is bare). A bare annotation whose source lines carry the comment
``# mixed shapes`` is counted as mixed (the values really differ in shape, e.g. a state_dict), not as bare.
Functions defined inside another function and methods of private classes are no public API: they are counted
apart as "inner" (names starting with "_" are left out either way).
The nnsight transport modules hold no tensor annotation (their values are trace proxies, typed Any).
"""
from __future__ import annotations

import ast
import pathlib
import sys

ROOTS = ("core", "attribution", "circuits")
DTYPES = ("Float[", "Int[", "Bool[", "Shaped[", "Num[", "Real[", "Integer[", "Inexact[", "UInt[", "Complex[")
MIXED = "# mixed shapes"


def _tensors(node: ast.expr) -> tuple[int, int]:
    """(named, bare) tensor mentions in an annotation: Tensor as the array of a jaxtyping dtype is named,
    any other Tensor (alone, or beside a named one in a tuple, dict or union) is bare."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        try:
            return _tensors(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return 0, 0
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).split(".")[-1] + "[" in DTYPES:
        return 1, 0
    if isinstance(node, (ast.Name, ast.Attribute)) and ast.unparse(node).split(".")[-1] == "Tensor":
        return 0, 1
    named = bare = 0
    for child in ast.iter_child_nodes(node):
        n, b = _tensors(child)
        named, bare = named + n, bare + b
    return named, bare


def kind(node: ast.expr, lines: list[str]) -> str | None:
    """'named', 'bare', 'mixed' or None (no tensor in the annotation). One bare tensor makes it bare."""
    named, bare = _tensors(node)
    if not bare:
        return "named" if named else None
    span = lines[node.lineno - 1: (node.end_lineno or node.lineno)]
    return "mixed" if any(MIXED in line for line in span) else "bare"


def annotations(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, ast.expr]]:
    a = fn.args
    out = [(arg.arg, arg.annotation) for arg in a.posonlyargs + a.args + a.kwonlyargs if arg.annotation]
    out += [("*" + arg.arg, arg.annotation) for arg in (a.vararg, a.kwarg) if arg and arg.annotation]
    return out + ([("return", fn.returns)] if fn.returns else [])


def scan(path: pathlib.Path, rel: pathlib.Path) -> list[tuple[str, str, str]]:
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
                            where = f"{rel}:{ann.lineno} {child.name}({name}: {ast.unparse(ann)})"
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
                                found.append(("public", k, f"{rel}:{st.lineno} {child.name}.{st.target.id}: "
                                                           f"{ast.unparse(st.annotation)}"))
                visit(child, private)
            else:
                visit(child, inner)

    visit(ast.parse("\n".join(lines)), False)
    return found


def main(argv: list[str]) -> int:
    show, check = "--list" in argv, "--check" in argv
    roots = [a for a in argv if not a.startswith("--")] or list(ROOTS)
    repo = pathlib.Path(__file__).resolve().parent.parent
    rows = []
    for root in roots:
        for p in sorted((repo / root).rglob("*.py")):
            rows += scan(p, p.relative_to(repo))
    for scope in ("public", "inner"):
        counts = {k: sum(1 for s, kk, _ in rows if s == scope and kk == k) for k in ("named", "bare", "mixed")}
        print(f"{scope}: named {counts['named']} bare {counts['bare']} mixed {counts['mixed']}")
    for scope, k, where in rows:
        if k == "bare" or (show and k == "mixed"):
            print(f"  {scope} {k}: {where}")
    return 1 if check and any(k == "bare" for _, k, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
