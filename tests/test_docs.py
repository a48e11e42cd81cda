"""The documentation: a short README, a strict site build with link checks, pages seen in a real browser,
and figures that come from the results JSON only."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOTS = DOCS / "assets" / "screenshots"


def _gen_pages():
    spec = importlib.util.spec_from_file_location("gen_pages", DOCS / "gen_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _need(module: str, fix: str) -> None:
    """Skip without ``module`` on a developer's machine; fail in CI, where the docs extra is installed."""
    if importlib.util.find_spec(module) is None:
        if IN_CI:
            pytest.fail(f"{module} is missing in CI; {fix}")
        pytest.skip(f"{module} is not installed; {fix}")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _need("mkdocs", "install the docs extra: pip install -e '.[docs]' (scripts/setup.sh does)")
    _need("mkdocstrings_handlers.python", "install the docs extra: pip install -e '.[docs]'")
    folder = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-6000:]
    return folder


# ---------------------------------------------------------------------- README
def test_readme_is_a_front_door_of_at_most_250_lines():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"
    text = "\n".join(lines)
    assert "bash scripts/demo.sh" in text and "bash scripts/test.sh" in text
    assert re.search(r"!\[[^\]]*\]\(docs/assets/screenshots/[\w.-]+\.png\)", text)


def test_readme_headline_table_is_up_to_date_with_the_results_json():
    gen = _gen_pages()
    text = (ROOT / "README.md").read_text()
    start, end = text.index(gen.README_BEGIN), text.index(gen.README_END) + len(gen.README_END)
    assert text[start:end] == gen.readme_block(gen.leaderboard_document(), gen.before_split_document()), (
        "README.md's headline table is stale: run python docs/gen_pages.py --readme"
    )


def test_headline_shows_each_eval_set_version_apart_with_its_own_baselines():
    gen = _gen_pages()

    def row(agent: str, rate: float, version: int | None, trained_on: int | None = None) -> dict:
        extra = {} if version is None else {"eval_set_version": version, "eval_levels_trained_on": trained_on}
        return {"agent": agent, "env_id": "llmgym/FrozenLake-v1", "levels": 200,
                "summary": {"success_rate": rate}, **extra}

    # A better checkpoint a teacher shaped gets its own line: it does not hide the env-reward one.
    current = {"results": [{**row("checkpoint:runs/t", 0.8, 2, 0), "agent_settings": {"teacher": "solver"}},
                           {**row("checkpoint:runs/a", 0.7, 2, 0), "agent_settings": {"teacher": None}},
                           {**row("checkpoint:runs/b", 0.6, 2, 0), "agent_settings": {"teacher": None}},
                           row("random", 0.05, 2, 0),
                           row("random", 0.06, None)]}
    earlier = {"results": [row("checkpoint:runs/a", 0.9, None), row("base:runs/a", 0.0, None)]}
    lines = gen.headline_rows(current, earlier)
    assert [line[:7] for line in lines] == [
        ["`FrozenLake-v1`", "70.0%", "-", "-", "5.0%", "-", "200"],
        ["`FrozenLake-v1`", "80.0%", "-", "-", "5.0%", "-", "200"],
        ["`FrozenLake-v1`", "90.0%", "0.0%", "-", "6.0%", "-", "200"],
    ]
    assert [line[7:] for line in lines] == [["v2", "0", "the env's rewards"], ["v2", "0", "solver"],
                                            ["v1", "not recorded (before the split)", "not recorded"]]


def test_learning_rows_put_env_reward_and_teacher_recipes_side_by_side():
    gen = _gen_pages()

    def curve(env_id: str, preset: str, teacher: str | None, after: list[float], blind: float | None) -> dict:
        seeds = list(range(len(after)))
        baselines = {} if blind is None else {"blind_route": {"success": blind}}
        return {"env_id": env_id, "seeds": seeds, "preset": [preset] * len(seeds), "teacher": [teacher] * len(seeds),
                "eval_success_before": [0.1] * len(seeds), "eval_success_after": after,
                "minutes_budget": [60.0] * len(seeds), "eval_levels_trained_on": [0] * len(seeds),
                "eval_levels": {"count": 64}, "baselines": baselines}

    old = curve("llmgym/Sokoban-v1", "sokoban-v1", None, [0.5], 0.2)
    del old["teacher"]  # a JSON written before runs recorded their teacher
    lines = gen.learning_rows([
        curve("llmgym/Sokoban-v1", "sokoban-v1", "solver", [0.5, 0.25], 0.2),
        curve("llmgym/Math-Easy-v0", "math-easy-grpo", None, [0.4, 0.3, 0.2], None),
        old,
    ])
    assert lines[0] == ["`Sokoban-v1`", "`sokoban-v1`", "solver", "2", "10.0%", "37.5%", "50.0% / 25.0%", "20.0%",
                        "60", "64", "0"]
    assert lines[1][2:8] == ["the env's rewards", "3", "10.0%", "30.0%", "40.0% / 30.0% / 20.0%", "-"]
    assert lines[2][2] == "not recorded"


def test_readme_states_figures_only_in_the_generated_table():
    text = (ROOT / "README.md").read_text()
    gen = _gen_pages()
    start, end = text.index(gen.README_BEGIN), text.index(gen.README_END) + len(gen.README_END)
    outside = text[:start] + text[end:]
    assert re.findall(r"\d+(?:\.\d+)?\s*%", outside) == [], "a percentage outside the generated table"
    table_rows = [line for line in outside.splitlines() if line.startswith("|") and re.search(r"\d", line)]
    assert table_rows == [], f"a table with figures outside the generated block: {table_rows}"


def test_quickstart_scripts_still_do_what_the_readme_says():
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    test = (ROOT / "scripts" / "test.sh").read_text()
    assert "bash scripts/setup.sh" in demo and "scripts/demo_train.py" in demo
    assert "bash scripts/setup.sh" in test and "-m pytest" in test


# ---------------------------------------------------------------------- figures come from JSON
def test_generated_pages_match_a_fresh_generation(site: Path, tmp_path: Path):
    """The build's generated parts (docs/generated/, written by the build's hook) equal a fresh generation."""
    built = {
        path.relative_to(DOCS / "generated"): path.read_bytes()
        for path in (DOCS / "generated").rglob("*")
        if path.is_file()
    }
    gen = _gen_pages()
    gen.GENERATED = tmp_path / "fresh"
    fresh = {path.relative_to(gen.GENERATED): path.read_bytes() for path in gen.generate(report=False)}
    assert {str(name) for name in built.keys() - fresh.keys()} == {"leaderboard.html", "leaderboard.png"}
    assert [name for name in fresh if built[name] != fresh[name]] == []
    for name, content in fresh.items():
        if name.suffix == ".md":
            assert content.startswith(b"<!-- generated by docs/gen_pages.py from "), name


def test_hand_written_pages_type_no_figures_into_tables():
    pages = [
        path for path in DOCS.rglob("*.md") if "generated" not in path.parts and path.name != "DESIGN.md"
    ]
    assert len(pages) >= 15
    for page in pages:
        for line in page.read_text().splitlines():
            # Code (`127.0.0.1`, `trl>=1.16`) names settings and versions, not results.
            figure = re.search(r"\d", re.sub(r"`[^`]*`", "", line))
            assert not (line.startswith("|") and figure), (
                f"{page.relative_to(ROOT)} types a figure into a table: {line}"
            )
    for page in (DOCS / "results").glob("*.md"):
        text = page.read_text()
        assert '--8<-- "docs/generated/' in text, f"{page.name} shows no generated figures"
        prose = "\n".join(line for line in text.splitlines() if not line.startswith("--8<--"))
        assert not re.search(r"\d", prose), f"{page.name} states a number by hand"


def test_every_number_in_a_generated_results_table_is_in_a_results_json():
    from llmgym_train.eval.report import row_cells, row_notes

    gen = _gen_pages()
    document = gen.leaderboard_document()
    figures = set()
    for row in document["results"]:
        for cell in [*row_cells(row)[3:], row_notes(row)]:
            figures.update(re.findall(r"\d+(?:\.\d+)?", cell))
    text = gen.leaderboard_table(gen.ordered_rows(document))
    for line in text.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")][3:]
        for number in re.findall(r"\d+(?:\.\d+)?", " ".join(cells)):
            assert number in figures


def test_generators_show_whatever_keys_a_results_json_holds(tmp_path: Path):
    """New keys (say ``eval_levels_trained_on``, ``teacher``) appear without a code change."""
    import json

    gen = _gen_pages()
    gen.RESULTS, gen.GENERATED = tmp_path / "results", tmp_path / "generated"
    gen.RESULTS.mkdir()
    curve = {
        "commit": "abc",
        "env_id": "llmgym/FrozenLake-v1",
        "seeds": [0, 1],
        "eval_success_after": [0.25, 0.5],
        "eval_levels_trained_on": [0, 0],
        "teacher": ["none", "solver"],
        "eval_success_after_mean": 0.375,
        "a_new_block": {"figure": 7.5},
    }
    (gen.RESULTS / "learning_curve_Test-v0.json").write_text(json.dumps(curve))
    page = gen.learning_curves()
    assert "`eval_levels_trained_on`" in page and "`teacher`" in page and "solver" in page
    assert "| 1 | 1 | 0.5 | 0 | solver |" in page
    assert "`eval_success_after_mean` | 0.375" in page and "`a_new_block.figure` | 7.5" in page
    row = {
        "agent": "checkpoint:runs/x",
        "env_id": "llmgym/FrozenLake-v1",
        "levels": 4,
        "eval_set_size": 200,
        "samples": 1,
        "summary": {
            "success_rate": 0.5,
            "success_ci95": [0.15, 0.85],
            "mean_return": 0.5,
            "mean_turns": 4.0,
            "invalid_action_rate": 0.0,
        },
        "agent_settings": {"teacher": "solver"},
        "provenance": {"eval_levels_trained_on": 0},
    }
    table = gen.leaderboard_table([row])
    assert "training |" in table.splitlines()[0] and "eval_levels_trained_on: 0; teacher: solver" in table


# ---------------------------------------------------------------------- the site
def test_site_builds_strict_with_every_page_and_no_broken_link(site: Path):
    for page in (
        "index.html",
        "envs/frozen_lake/index.html",
        "envs/sokoban/index.html",
        "envs/math/index.html",
        "envs/tool_use/index.html",
        "envs/multiagent/index.html",
        "guides/training/index.html",
        "guides/custom_env/index.html",
        "results/leaderboard/index.html",
        "reference/llmgym/index.html",
        "DESIGN/index.html",
        "generated/leaderboard.html",
        "generated/pictures/sokoban.png",
    ):
        assert (site / page).is_file(), page
    spec = importlib.util.spec_from_file_location("hooks", DOCS / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    assert hooks.broken_links(site) == []


def test_link_checker_sees_a_broken_picture_and_link(tmp_path: Path):
    spec = importlib.util.spec_from_file_location("hooks", DOCS / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "index.html").write_text(
        '<a href="../">up</a><a href="#top">top</a><img src="data:image/png;base64,x">'
        '<img src="missing.png"><a href="../b/">b</a><a href="https://x.org/">x</a>'
    )
    (tmp_path / "index.html").write_text('<a href="a/">a</a>')
    assert hooks.broken_links(tmp_path) == ["a/index.html: missing.png", "a/index.html: ../b/"]


def test_pages_open_in_a_real_browser_with_every_picture_loaded(site: Path):
    _need("playwright", "install the docs extra: pip install -e '.[docs]' (scripts/setup.sh does)")
    if CHROMIUM is None:
        message = "chromium is missing; install it (Debian: apt-get install chromium; scripts/setup.sh does)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    pages = {
        "home.png": "index.html",
        "env_sokoban.png": "envs/sokoban/index.html",
        "leaderboard_report.png": "generated/leaderboard.html",
    }
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        for shot, path in pages.items():
            page.goto((site / path).as_uri())
            page.wait_for_load_state("load")
            images = page.eval_on_selector_all(
                "img", "els => els.map(e => [e.currentSrc.slice(0, 80), e.complete, e.naturalWidth])"
            )
            assert images, f"{path} shows no picture"
            broken = [image for image in images if not image[1] or image[2] == 0]
            assert broken == [], f"broken pictures on {path}: {broken}"
            page.screenshot(path=str(SCREENSHOTS / shot))
            if path.startswith("generated/leaderboard"):
                page.locator("details:has(.episode) > summary").first.click()  # the first row with episodes
                episode = page.locator(".episode").first
                episode.locator("button", has_text="next").click()
                assert episode.locator(".at").inner_text().startswith("1 /")
                frames = episode.locator("img").evaluate_all("els => els.map(e => e.naturalWidth)")
                assert frames and min(frames) > 0
                episode.scroll_into_view_if_needed()
                page.screenshot(path=str(SCREENSHOTS / "leaderboard_episode.png"))
        browser.close()
    for shot in [*pages, "leaderboard_episode.png"]:
        assert (SCREENSHOTS / shot).stat().st_size > 10_000


def test_the_runnable_snippets_run(tmp_path: Path):
    """The first Python snippet of the README, of the guides that promise one, and of the video section."""
    _need("imageio_ffmpeg", "install the docs extra: pip install -e '.[docs]'")
    sources = [
        ROOT / "README.md",
        DOCS / "guides" / "custom_env.md",
        DOCS / "guides" / "vector_env.md",
        DOCS / "envs" / "frozen_lake.md",
    ]
    fence = "`" * 3
    snippets = [
        re.search(fence + r"python\n(.*?)" + fence, path.read_text(), re.S).group(1) for path in sources
    ]
    runner = (
        "import sys\nfor code in sys.argv[1:]:\n"
        "    exec(compile(code, 'snippet', 'exec'), {'__name__': '__main__'})\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", runner, *snippets],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "episode.mp4").stat().st_size > 1000
