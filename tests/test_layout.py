"""The house drawn from its imports (issue 26): layers point one way and no module reaches into another's private
names. Read from the source with ``ast`` (lazy imports inside functions count too), so nothing is imported here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "attribution", "circuits", "workbench", "app", "scripts")
# The layers, from the ground up (ARCHITECTURE.md): each may import only its own and lower ones.
#   core         the ground: hooked model wrappers, the run store, errors, checks, options, paths, figures
#   attribution  engines on prompts and images
#   circuits     graphs: discovery, evaluation, feature and replacement graphs, the bench, exports
#   workbench    the notebook facade, the CLI and its commands, jobs
#   app          the Streamlit pages; scripts: benchmarks and builders
RANK = {"core": 0, "attribution": 1, "circuits": 2, "workbench": 3, "app": 4, "scripts": 5}


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


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def test_layers_point_down_only():
    """core -> attribution -> circuits -> workbench -> app -> scripts: an import never reaches a higher layer."""
    wrong = []
    for module, (path, tree) in sources().items():
        mine = RANK[module.split(".")[0]]
        for target, _name, line in imports(module, path, tree):
            theirs = RANK.get(target.split(".")[0])
            if theirs is not None and theirs > mine:
                wrong.append(f"{where(path, line)} {module} imports {target}")
    assert not wrong, "imports pointing up:\n" + "\n".join(wrong)


def file_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (lazy imports included). ``from pkg import name`` is an import
    of the submodule ``pkg.name`` where that is a module, else of ``pkg`` (its ``__init__``)."""
    found = sources()
    graph: dict[str, set[str]] = {m: set() for m in found}
    for module, (path, tree) in found.items():
        for target, name, _line in imports(module, path, tree):
            if name is not None and f"{target}.{name}" in found:
                target = f"{target}.{name}"
            while target not in found and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in found and target != module:
                graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def test_no_import_cycle_among_files():
    found = cycles(file_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_import_cycle_among_folders():
    """Inside each package, its rooms (each first-level folder, each top-level file) import one way: no two rooms
    import each other, so each package's rooms stack in layers too."""
    graph = file_graph()
    rooms: dict[str, set[str]] = {}

    def room(module: str) -> str:
        parts = module.split(".")
        # a room: a package's first-level folder, or one of its top-level files on its own
        return ".".join(parts[:2])

    for module, targets in graph.items():
        for target in targets:
            a, b = room(module), room(target)
            if a != b and a.split(".")[0] == b.split(".")[0]:
                rooms.setdefault(a, set()).add(b)
    for r in list(rooms):
        for t in rooms[r]:
            rooms.setdefault(t, set())
    found = cycles(rooms)
    assert not found, "folders that import each other:\n" + "\n".join(" <-> ".join(c) for c in found)


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
    """core/models/ holds the model wrappers and stands on nothing of the ground but errors, paths and checks (files
    read as possibly damaged: the toy checkpoints and the tiny test model), with text, which checks uses. Neither
    checks nor text imports anything of core.models, so no two rooms import each other (asserted below)."""
    allowed = ("core.models", "core.errors", "core.paths", "core.checks", "core.text")
    wrong = []
    for module, (path, tree) in sources().items():
        if not within(module, "core.models"):
            continue
        for target, _name, line in imports(module, path, tree):
            if target.split(".")[0] in PACKAGES and not any(within(target, ok) for ok in allowed):
                wrong.append(f"{where(path, line)} {module} imports {target}")
    assert not wrong, "\n".join(wrong)
    for module in ("core.checks", "core.text"):
        path, tree = sources()[module]
        assert not [t for t, _, _ in imports(module, path, tree) if within(t, "core.models")], module
    loose = {p.stem for p in (ROOT / "core").glob("*.py")} & {"hooked", "backends", "remote", "hub", "zoo", "llm"}
    assert not loose, f"model modules outside core/models/: {sorted(loose)}"


def test_no_name_needs_a_run_time_patch():
    """The facade's functions and the packages share no name (``wb.jobs``, ``wb.models`` are plain functions)."""
    import inspect

    import workbench as wb

    subpackages = {p.name for p in (ROOT / "workbench").iterdir() if (p / "__init__.py").exists()}
    subpackages |= {p.stem for p in (ROOT / "workbench").glob("*.py")}
    clash = sorted(n for n in wb.__all__ if n in subpackages)
    assert not clash, f"facade names that are also workbench modules: {clash}"
    assert inspect.isfunction(wb.jobs) and inspect.isfunction(wb.models)


# "package.module:function": code named by a string, imported later (the zoo's loaders, a job's code)
CODE_NAME = re.compile(r"^(?P<module>[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*):[A-Za-z_]\w*$")


def test_the_ground_names_no_code_above_it():
    """Imports are not the only way up: a "module:function" string in core/ imported later (``importlib``) must
    name core too. A dict's keys are exempt (the zoo's old loader names, each mapping to a target in core)."""
    wrong = []
    for module, (path, tree) in sources().items():
        if not within(module, "core"):
            continue
        keys = {id(k) for node in ast.walk(tree) if isinstance(node, ast.Dict) for k in node.keys if k is not None}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in keys:
                named = CODE_NAME.match(node.value)
                if named and RANK.get(named["module"].split(".")[0], 0) > 0:
                    wrong.append(f"{where(path, node.lineno)} {node.value}")
    assert not wrong, "core names code above it:\n" + "\n".join(wrong)
