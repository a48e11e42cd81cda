"""The project's shape: which part may import which, and what the wheel installs."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every import statement in ``path``, at any depth (lazy ones too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def test_env_core_imports_nothing_from_the_vector_package() -> None:
    """Everything in ``llmgym/`` outside ``llmgym/vector/`` sits below the vector env."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "llmgym").rglob("*.py"))
        if "vector" not in path.relative_to(ROOT / "llmgym").parts[:1]
        for line, module in _imported_modules(path)
        if module == "llmgym.vector" or module.startswith("llmgym.vector.")
    ]
    assert not offenders, "the env core must not import llmgym.vector:\n" + "\n".join(offenders)


def test_import_llmgym_and_make_leave_the_vector_package_unloaded() -> None:
    """``import llmgym`` and ``gym.make`` of a registered id, in a fresh interpreter."""
    script = (
        "import sys\n"
        "import gymnasium as gym\n"
        "import llmgym\n"
        "assert 'llmgym.vector' not in sys.modules, 'import llmgym loaded llmgym.vector'\n"
        "env = gym.make('llmgym/Sokoban-v0')\n"
        "env.reset(seed=0)\n"
        "env.step('<answer>Up</answer>')\n"
        "loaded = sorted(name for name in sys.modules if name.startswith('llmgym.vector'))\n"
        "assert not loaded, f'gym.make loaded {loaded}'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


def test_the_wheel_installs_llmgym_and_llmgym_train_only(tmp_path: Path) -> None:
    """No top-level ``benchmarks`` (or any other name) in the wheel: it would shadow a user's own folder.

    The build runs on a copy of the sources, so the checkout gets no ``build/`` or ``*.egg-info``.
    """
    source = tmp_path / "source"
    skip = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*cache*",
                                  ".hypothesis", "runs", "results")
    shutil.copytree(ROOT, source, ignore=skip)
    wheels = tmp_path / "wheels"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), "."],
        cwd=source, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = wheels.glob("llmgym-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top_level = {name.split("/", 1)[0] for name in names if "/" in name and ".dist-info/" not in name}
    assert top_level == {"llmgym", "llmgym_train"}, sorted(top_level)
    from llmgym_train.recipes import recipe_names

    assert {f"llmgym_train/recipes/{name}.yaml" for name in recipe_names()} <= set(names), "recipes ship in the wheel"
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as archive:
        scripts = archive.read(entry_points).decode()
    assert "llmgym-bench = llmgym_train.eval.leaderboard:main" in scripts, scripts


# ---------------------------------------------------------------------- size and inheritance
#: The project's own code, where the rules below hold.
CHECKED = ("llmgym", "llmgym_train", "benchmarks")
#: A function (signature and body, nested functions included) longer than this is split.
MAX_FUNCTION_LINES = 60
#: Classes in an inheritance chain of the project's own classes, the class included
#: (``SokobanEnv -> TextEnv`` is 2). Error classes form a catch hierarchy (``except SubEnvError``
#: catches ``WorkerDiedError``), not shared code, and may go one level deeper.
MAX_DEPTH = 2
MAX_ERROR_DEPTH = 3


def _sources() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), filename=str(path)))
            for folder in CHECKED for path in sorted((ROOT / folder).rglob("*.py"))]


def test_no_function_is_longer_than_60_lines() -> None:
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines; split them:\n" + "\n".join(long)


def _project_bases(tree: ast.Module, node: ast.ClassDef, project: set[str]) -> tuple[list[str], list[str]]:
    """``(project bases, other bases)`` of ``node`` by name; a name is the project's when the module
    defines it or imports it from one of :data:`CHECKED`."""
    local = {item.name for item in tree.body if isinstance(item, ast.ClassDef)}
    imported = {
        alias.asname or alias.name
        for item in ast.walk(tree)
        if isinstance(item, ast.ImportFrom) and (item.level > 0 or (item.module or "").split(".")[0] in CHECKED)
        for alias in item.names
    }
    own, other = [], []
    for base in node.bases:
        target = base.value if isinstance(base, ast.Subscript) else base
        name = target.id if isinstance(target, ast.Name) else ast.unparse(target)
        (own if isinstance(target, ast.Name) and name in (local | imported) and name in project else other).append(name)
    return own, other


def test_inheritance_is_at_most_two_levels_of_the_projects_own_classes() -> None:
    classes: dict[str, list[tuple[str, list[str], list[str]]]] = {}
    sources = _sources()
    project = {node.name for _, tree in sources for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    for path, tree in sources:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                own, other = _project_bases(tree, node, project)
                classes.setdefault(node.name, []).append((f"{path.relative_to(ROOT)}:{node.lineno}", own, other))

    def chain(name: str, seen: tuple[str, ...] = ()) -> tuple[int, bool]:
        """(classes in the longest project chain from ``name``, whether it is an error class)."""
        if name not in classes or name in seen:
            return 0, False
        depth, error = 1, False
        for _, own, other in classes[name]:
            error = error or any(base.endswith(("Error", "Exception", "Warning")) for base in other)
            for base in own:
                base_depth, base_error = chain(base, (*seen, name))
                depth, error = max(depth, base_depth + 1), error or base_error
        return depth, error

    deep = []
    for name, definitions in sorted(classes.items()):
        depth, error = chain(name)
        if depth > (MAX_ERROR_DEPTH if error else MAX_DEPTH):
            deep.extend(f"{where} {name}: {depth} levels" for where, _, _ in definitions)
    assert not deep, "inheritance deeper than allowed; compose instead:\n" + "\n".join(deep)
