"""The house drawn from its imports (issue 26): layers point one way and no module reaches into another's private
names. Read from the source with ``ast`` (lazy imports inside functions count too), so nothing is imported here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workbench", "circuits", "attribution", "app", "scripts")
# top layer: what a user drives; it may import anything below it
TOP = ("app", "scripts", "workbench.commands", "workbench.jobs", "workbench.cli")
FACADE = "workbench"  # workbench/__init__.py: the notebook facade, above the engines it reaches lazily


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources() -> dict[str, tuple[Path, ast.Module]]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = (path, ast.parse(path.read_text(), str(path)))
    return found


def resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(module: str, path: Path, tree: ast.Module) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import statement, lazy ones included."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = resolve(module, path, node)
            out += [(target, alias.name, node.lineno) for alias in node.names]
    return out


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer(module: str) -> str:
    if any(within(module, top) for top in TOP) or module == FACADE:
        return "top"
    return module.split(".")[0]  # circuits, attribution, or workbench (the core)


RANK = {"top": 3, "circuits": 2, "attribution": 1, "workbench": 0}


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def test_layers_point_down_only():
    """app, commands and jobs -> circuits -> attribution -> workbench core; never up, never sideways into the facade."""
    wrong = []
    for module, (path, tree) in sources().items():
        mine = layer(module)
        for target, name, line in imports(module, path, tree):
            root = target.split(".")[0]
            if root not in ("workbench", "circuits", "attribution", "app"):
                continue  # third-party and standard library
            if target == FACADE and name is not None and mine != "top":
                # `from workbench import X` reaches the facade unless X is a core module
                if not (ROOT / "workbench" / f"{name}.py").exists() and not (ROOT / "workbench" / name).is_dir():
                    wrong.append(f"{where(path, line)} {module} imports the facade's {name}")
                continue
            theirs = "top" if root == "app" else layer(target if name is None else target)
            if RANK[theirs] > RANK[mine]:
                wrong.append(f"{where(path, line)} {module} ({mine}) imports {target} ({theirs})")
    assert not wrong, "imports pointing up:\n" + "\n".join(wrong)


def imports_into(importer: str, imported: str) -> list[str]:
    """Where a module under ``importer`` imports one under ``imported`` (file:line)."""
    return [
        where(path, line)
        for module, (path, tree) in sources().items()
        if within(module, importer)
        for target, _, line in imports(module, path, tree)
        if within(target, imported)
    ]


def test_attribution_never_imports_circuits():
    assert not (found := imports_into("attribution", "circuits")), found


def test_no_private_name_crosses_a_module():
    """Neither imported (``from m import _x``) nor reached through a module (``m._x``)."""
    found = []
    for module, (path, tree) in sources().items():
        for target, name, line in imports(module, path, tree):
            if target.split(".")[0] not in PACKAGES or target == module:
                continue
            if name and name.startswith("_") and not name.startswith("__"):
                found.append(f"{where(path, line)} {module} imports {target}.{name}")
            elif name is None and any(part.startswith("_") and not part.startswith("__") for part in target.split(".")):
                found.append(f"{where(path, line)} {module} imports the private module {target}")
        for alias, target in module_aliases(module, path, tree).items():
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == alias
                        and node.attr.startswith("_") and not node.attr.startswith("__")):
                    found.append(f"{where(path, node.lineno)} {module} uses {target}.{node.attr}")
    assert not found, "private names used across modules:\n" + "\n".join(found)


def module_aliases(module: str, path: Path, tree: ast.Module) -> dict[str, str]:
    """Local names bound to another of the project's modules (``import app.common as C``, ``from x import mod``)."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name.split(".")[0] in PACKAGES:
                    bound[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            target = resolve(module, path, node)
            if target.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                as_file = ROOT / Path(*full.split("."))
                if as_file.with_suffix(".py").exists() or (as_file / "__init__.py").exists():
                    bound[alias.asname or alias.name] = full
    return {name: target for name, target in bound.items() if target != module}


def test_dpa_top_down_loop_is_written_once():
    """DPA's pass from the last layer down (and its attention step) is defined once, in attribution/dpa/steps.py;
    the engine, the pull-back and the edge scorer walk that one loop (issue 26). The ViT's DPA (its own model
    class, attribution/vit/methods/dpa.py) is not yet on it."""
    defined: dict[str, list[str]] = {"top_down": [], "undo_attention": [], "undo_mlp": []}
    callers = []
    for _, (path, tree) in sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in defined:
                defined[node.name].append(str(path.relative_to(ROOT)))
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "top_down":
                callers.append(str(path.relative_to(ROOT)))
    assert all(where == ["attribution/dpa/steps.py"] for where in defined.values()), defined
    assert {"attribution/dpa/engine.py", "attribution/dpa/pullback.py", "circuits/edges/dpa.py"} <= set(callers)
    for walker in ("attribution/dpa/engine.py", "attribution/dpa/pullback.py", "circuits/edges/dpa.py"):
        assert "reversed(range(" not in (ROOT / walker).read_text(), walker


def test_circuit_tools_know_nothing_of_the_zoo():
    """circuits/tools/ works on any hooked model; the zoo (circuits/toy/) builds on it, never the other way."""
    assert not (found := imports_into("circuits.tools", "circuits.toy")), found


def test_model_layer_has_its_own_room():
    """workbench/models/ holds the model wrappers and stands on nothing of the workbench but errors and paths; the
    store, facade, commands and jobs stay out of it, and no model module is left loose in the workbench root."""
    allowed = ("workbench.models", "workbench.errors", "workbench.paths", "workbench.callable_package")
    wrong = []
    for module, (path, tree) in sources().items():
        if not within(module, "workbench.models"):
            continue
        for target, _name, line in imports(module, path, tree):
            if target.split(".")[0] == "workbench" and not any(within(target, ok) for ok in allowed):
                wrong.append(f"{where(path, line)} {module} imports {target}")
    assert not wrong, "\n".join(wrong)
    loose = {p.stem for p in (ROOT / "workbench").glob("*.py")} & {"hooked", "backends", "remote", "hub", "zoo", "llm"}
    assert not loose, f"model modules outside workbench/models/: {sorted(loose)}"
