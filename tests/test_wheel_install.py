"""The wheel, installed into a fresh virtual environment, runs its console scripts and plays a packaged level.

No editable install and no checkout on the path: the venv has no system site-packages, the
commands run from an empty folder with ``PYTHONPATH`` unset, and the wheel is installed with
``--no-deps`` beside gymnasium and numpy (and their own small dependencies). Each ``--help`` is
checked to come from the fresh venv's own entry-point script.

``llmgym-train`` and ``llmgym-bench`` import torch to build their configs; installing torch
(hundreds of MB) into every fresh venv would take minutes, so the test links torch and its
dependency closure, and nothing else, from the running interpreter's environment into the
fresh venv's site-packages. The editable install of llmgym there is not linked (it is not in
torch's closure), so the llmgym that answers is the wheel's.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What the env core and the console scripts' --help need, and nothing more.
RUNTIME = ["gymnasium==1.4.0", "numpy", "cloudpickle", "typing_extensions", "farama-notifications"]


def dependency_closure(name: str) -> dict[str, importlib.metadata.Distribution]:
    """``name``'s distribution and everything it requires (markers evaluated here, extras left out)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, importlib.metadata.Distribution] = {}
    pending = [name]
    while pending:
        key = canonicalize_name(pending.pop())
        if key in found:
            continue
        try:
            found[key] = distribution = importlib.metadata.distribution(key)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional requirement this environment does without
        for text in distribution.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return found


def link_distributions(names: list[str], site_packages: Path) -> list[str]:
    """Symlink the top-level files of ``names``' dependency closures into ``site_packages``."""
    linked = []
    for name in names:
        for distribution in dependency_closure(name).values():
            tops = {
                Path(str(file)).parts[0]
                for file in distribution.files or []
                if not str(file).startswith("..")
            }
            for top in tops:
                source = Path(str(distribution.locate_file(top)))
                target = site_packages / top
                if source.exists() and not target.exists() and not top.endswith(".pth"):
                    target.symlink_to(source)
                    linked.append(top)
    return linked


def run(command: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    environment = {
        key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_its_entry_points_and_a_packaged_eval_level(tmp_path: Path) -> None:
    source = tmp_path / "source"
    skip = shutil.ignore_patterns(
        ".git",
        ".venv",
        "build",
        "dist",
        "*.egg-info",
        "__pycache__",
        ".*cache*",
        ".hypothesis",
        "runs",
        "results",
        "benchmarks",
        "tests",
        "docs",
    )
    shutil.copytree(ROOT, source, ignore=skip)
    wheels = tmp_path / "wheels"
    built = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            ".",
        ],
        cwd=source,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheels.glob("llmgym-*.whl")

    venv = tmp_path / "fresh"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
            *RUNTIME,
        ],
        cwd=tmp_path,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    (site_packages,) = (venv / "lib").glob("python3*/site-packages")
    linked = link_distributions(["torch"], site_packages)
    assert "torch" in linked and not any(top.startswith(("llmgym", "__editable__")) for top in linked), linked

    empty = tmp_path / "elsewhere"
    empty.mkdir()
    for script, words in (("llmgym-serve", "OpenEnv"), ("llmgym-train", "usage"), ("llmgym-bench", "usage")):
        path = venv / "bin" / script
        assert path.is_file(), f"the wheel installed no {script} script"
        assert path.read_text().startswith(f"#!{python}"), path.read_text()[:200]
        helped = run([str(path), "--help"], cwd=empty, timeout=120)
        assert helped.returncode == 0, f"{script} --help failed:\n{helped.stdout}\n{helped.stderr}"
        assert words in helped.stdout, helped.stdout

    played = run(
        [
            str(python),
            "-c",
            (
                "import gymnasium as gym, llmgym\n"
                "from llmgym.eval_sets import load_eval_set\n"
                f"assert llmgym.__file__.startswith({str(venv)!r}), llmgym.__file__\n"
                "record = load_eval_set('llmgym/Sokoban-v0')[0]\n"
                "env = gym.make('llmgym/Sokoban-v0')\n"
                "observation, info = env.reset(options={'level': record['level']})\n"
                "assert info['optimal_steps'] == record['optimal_steps'], (info, record)\n"
                "for move in env.unwrapped.solution():\n"
                "    _, reward, terminated, truncated, info = env.step(f'<answer>{move}</answer>')\n"
                "assert terminated and info['success']\n"
                "print('solved', record['index'])\n"
            ),
        ],
        cwd=empty,
    )
    assert played.returncode == 0, played.stdout + played.stderr
    assert "solved 0" in played.stdout
