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
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as archive:
        scripts = archive.read(entry_points).decode()
    assert "llmgym-bench = llmgym_train.eval.leaderboard:main" in scripts, scripts
