"""The leaderboard as one static HTML file: the table, a plot per env family, episodes to step through.

:func:`write_report` takes a leaderboard document (``leaderboard.json``, or several merged with
:func:`merge_documents`) and writes a single self-contained page: no server, no scripts or
pictures from elsewhere (frames are PNG data URIs drawn by :mod:`llmgym.render`, plots are
inline SVG).

Each env id lists its rows side by side, ordered by kind: trained checkpoints, the base model
(and other LLMs), classic RL, random, optimal. Under each row, its recorded episodes: every
turn's completion, reward and the env's next observation, with a picture of the state for the
grid games. Rows recorded with ``llmgym-bench --record-episodes N`` carry their turns; rows of
run folders carry their completions only, and are replayed from their levels. A replay whose
rewards or outcome differ from the record (the level or the env changed since) shows the record
alone, and says so.
"""

from __future__ import annotations

import base64
import functools
import html
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import llmgym
from llmgym.eval_sets import has_eval_set
from llmgym.render import png_bytes
from llmgym_train.eval.leaderboard import summary_cells
from llmgym_train.planner import eval_set_levels

#: Env families in page order: a title and the id prefixes (after ``llmgym/``) it holds.
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("FrozenLake", ("FrozenLake",)),
    ("Sokoban", ("Sokoban",)),
    ("Math", ("Math",)),
    ("Tool use", ("ToolUse",)),
    ("Multi-agent games", ("TicTacToe", "ConnectFour", "PrisonersDilemma")),
)
#: Agent kinds in column order, and their plot colours.
KINDS: dict[str, str] = {
    "trained": "#2b7bba",
    "base model": "#8e6bbf",
    "classic RL": "#e08a1e",
    "random": "#9a9a9a",
    "optimal": "#3a9a4a",
    "other": "#5f5f5f",
}
#: Recorded episodes shown per row.
EPISODES_PER_ROW = 3
#: Turns shown per episode (a random Sokoban agent plays a hundred).
MAX_TURNS_SHOWN = 40


def family_of(env_id: str) -> str:
    name = env_id.removeprefix("llmgym/")
    for title, prefixes in FAMILIES:
        if name.startswith(prefixes):
            return title
    return "Other"


def agent_kind(agent: str) -> str:
    """The agent spec's kind: a key of :data:`KINDS`."""
    if agent.startswith("checkpoint:"):
        return "trained"
    if agent.startswith(("base:", "vllm", "hf:", "openai:")):
        return "base model"
    if agent.startswith(("sb3-ppo", "jax-ppo")):
        return "classic RL"
    return agent if agent in ("random", "optimal") else "other"


def short_agent(agent: str, width: int = 40) -> str:
    """A label for plots: the spec's kind prefix kept, a long path cut to its last parts."""
    if len(agent) <= width:
        return agent
    prefix, _, rest = agent.partition(":") if agent.count(":") == 1 else ("", "", agent)
    parts = rest.rstrip("/").split("/")
    lead = f"{prefix}:..." if prefix else "..."
    for count in (2, 1):
        label = lead + "/" + "/".join(parts[-count:])
        if len(label) <= width:
            return label
    return lead + parts[-1][-(width - len(lead)) :]


def merge_documents(documents: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One leaderboard from several; a later row replaces an earlier one of the same (agent, env)."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    first: dict[str, Any] = {}
    for document in documents:
        first = first or document
        for row in document.get("results", []):
            merged[(row["agent"], row["env_id"])] = row
    return {**first, "results": list(merged.values())}


def ordered_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows by family, env id, agent kind, then best success first."""
    families = [title for title, _ in FAMILIES] + ["Other"]
    kinds = list(KINDS)

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return (
            families.index(family_of(row["env_id"])),
            row["env_id"],
            kinds.index(agent_kind(row["agent"])),
            -row["summary"]["success_rate"],
            row["agent"],
        )

    return sorted(document.get("results", []), key=key)


def row_cells(row: dict[str, Any]) -> list[str]:
    """The table's cells of one row (see :data:`TABLE_HEADER`)."""
    summary = row["summary"]
    levels = str(row["levels"])
    if row["levels"] != row.get("eval_set_size", row["levels"]):
        levels += f"/{row['eval_set_size']}"
    if row.get("samples", 1) > 1:
        levels += f" x{row['samples']}"
    return [row["env_id"].removeprefix("llmgym/"), row["agent"], agent_kind(row["agent"]), levels,
            *summary_cells(summary)]


TABLE_HEADER = [
    "env",
    "agent",
    "kind",
    "levels",
    "success % (95% CI)",
    "return",
    "turns",
    "invalid %",
    "tokens/ep",
]
#: What a trained row says of its training, where it says it (in the row, its settings or provenance).
NOTE_KEYS = ("eval_levels_trained_on", "teacher")


def row_notes(row: dict[str, Any]) -> str:
    """``key: value`` of the row's :data:`NOTE_KEYS`, as far as the row records them ("" when none)."""
    notes = []
    for key in NOTE_KEYS:
        for place in (row, row.get("agent_settings") or {}, row.get("provenance") or {}):
            if isinstance(place, dict) and key in place:
                notes.append(f"{key}: {'none' if place[key] is None else place[key]}")
                break
    return "; ".join(notes)


def table_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of a leaderboard table; a ``training`` column when a row records :data:`NOTE_KEYS`."""
    noted = any(row_notes(row) for row in rows)
    header = TABLE_HEADER + (["training"] if noted else [])
    return header, [row_cells(row) + ([row_notes(row) or "-"] if noted else []) for row in rows]


# ---------------------------------------------------------------------- plots
def family_chart(rows: Sequence[dict[str, Any]]) -> str:
    """Horizontal bars of success rate with Wilson 95% whiskers, one group per env id, as inline SVG."""
    label_width, bar_width, bar_height, gap = 330, 300, 16, 12
    lines: list[str] = []
    y = 8
    env_id = None
    for row in rows:
        if row["env_id"] != env_id:
            env_id = row["env_id"]
            y += gap
            lines.append(
                f'<text x="4" y="{y + 4}" class="env">{html.escape(env_id.removeprefix("llmgym/"))}</text>'
            )
            y += 8
        rate = row["summary"]["success_rate"]
        low, high = row["summary"]["success_ci95"]
        color = KINDS[agent_kind(row["agent"])]
        agent = short_agent(row["agent"], 48)
        lines += [
            f'<text x="{label_width - 6}" y="{y + 12}" text-anchor="end">{html.escape(agent)}</text>',
            f'<rect x="{label_width}" y="{y + 2}" width="{bar_width * rate:.1f}" height="{bar_height - 4}" '
            f'fill="{color}"/>',
            f'<line x1="{label_width + bar_width * low:.1f}" x2="{label_width + bar_width * high:.1f}" '
            f'y1="{y + bar_height / 2}" y2="{y + bar_height / 2}" stroke="#222"/>',
            f'<text x="{label_width + bar_width + 6}" y="{y + 12}">{100 * rate:.1f}%</text>',
        ]
        y += bar_height
    height = y + 24
    axis = [
        f'<line x1="{label_width + bar_width * tick / 100}" x2="{label_width + bar_width * tick / 100}" '
        f'y1="8" '
        f'y2="{y}" stroke="#ddd"/><text x="{label_width + bar_width * tick / 100}" y="{y + 16}" '
        f'text-anchor="middle">{tick}</text>'
        for tick in (0, 25, 50, 75, 100)
    ]
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_width + bar_width + 60}" height="{height}" '
        f'role="img" aria-label="success rate % with 95% interval">' + "".join(axis + lines) + "</svg>"
    )


# ---------------------------------------------------------------------- episodes
def _level_of(env_id: str, episode: dict[str, Any]) -> Any:
    if episode.get("level") is not None:
        return episode["level"]
    if not has_eval_set(env_id):
        return None
    levels = eval_set_levels(env_id)
    index = episode.get("level_index", -1)
    return (levels[index].options or {}).get("level") if 0 <= index < len(levels) else None


def _make_env(row: dict[str, Any], render_mode: str) -> gym.Env[Any, Any]:
    options = dict((row.get("agent_settings") or {}).get("env_options") or {})
    if row.get("max_turns"):
        options["max_turns"] = row["max_turns"]
    return gym.make(row["env_id"], render_mode=render_mode, **options)


def _frame(env: gym.Env[Any, Any]) -> str:
    picture = env.render()
    return _data_uri(picture.tobytes(), picture.shape)


@functools.lru_cache(maxsize=4096)
def _data_uri(pixels: bytes, shape: tuple[int, ...]) -> str:
    """A picture as a PNG data URI, encoded once per distinct picture (random agents repeat many)."""
    picture = np.frombuffer(pixels, np.uint8).reshape(shape)
    return "data:image/png;base64," + base64.b64encode(png_bytes(picture)).decode("ascii")


def replay(row: dict[str, Any], episode: dict[str, Any]) -> dict[str, Any]:
    """The episode's turns for the report: ``{"turns": [...], "frames": [...] or None, "note": str}``.

    Turn ``i`` holds the completion, the reward and the observation after it; frame 0 is the
    start, frame ``i`` the state after turn ``i``.
    """
    actions = episode.get("actions") or []
    recorded = {
        "turns": [
            {"completion": action, "reward": reward, "observation": observation}
            for action, reward, observation in zip(
                actions,
                episode.get("rewards") or [None] * len(actions),
                (episode.get("observations") or [None] * (len(actions) + 1))[1:],
                strict=False,
            )
        ],
        "start": (episode.get("observations") or [None])[0],
        "frames": None,
        "note": "",
    }
    env_id = row["env_id"]
    spec = gym.spec(env_id)
    supports_pictures = "rgb_array" in _render_modes(env_id)
    needs_text = episode.get("observations") is None and not env_id.removeprefix("llmgym/").startswith(
        "ToolUse"
    )
    if not (supports_pictures or needs_text) or spec is None:
        return recorded
    level = _level_of(env_id, episode)
    try:
        env = _make_env(row, "rgb_array" if supports_pictures else "ansi")
        observation, _ = env.reset(
            seed=episode.get("env_seed"), options=None if level is None else {"level": level}
        )
        frames = [_frame(env)] if supports_pictures else None
        turns, success, total = [], False, 0.0
        for action in actions[:MAX_TURNS_SHOWN]:
            observation, reward, terminated, truncated, info = env.step(action)
            turns.append({"completion": action, "reward": float(reward), "observation": observation})
            total += float(reward)
            success = bool(info["success"])
            if frames is not None:
                frames.append(_frame(env))
            if terminated or truncated:
                break
        env.close()
    except Exception as error:  # a report must still be written: show the record and say why
        return {**recorded, "note": f"Not replayed ({type(error).__name__}: {error})."}
    if not _replay_matches(episode, turns, success, total, len(actions)):
        return {
            **recorded,
            "note": "The replay differs from the record (its level or env changed since): the record alone.",
        }
    start = recorded["start"] or _start_text(row, episode, level)
    return {"turns": turns, "start": start, "frames": frames, "note": ""}


def _start_text(row: dict[str, Any], episode: dict[str, Any], level: Any) -> str | None:
    try:
        env = _make_env(row, "ansi")
        observation, _ = env.reset(
            seed=episode.get("env_seed"), options=None if level is None else {"level": level}
        )
        env.close()
        return observation
    except Exception:
        return None


def _replay_matches(
    episode: dict[str, Any], turns: list[dict[str, Any]], success: bool, total: float, played: int
) -> bool:
    recorded_rewards = episode.get("rewards")
    if recorded_rewards is not None:
        shown = min(len(recorded_rewards), MAX_TURNS_SHOWN)
        return [round(turn["reward"], 6) for turn in turns] == [round(r, 6) for r in recorded_rewards[:shown]]
    if played > MAX_TURNS_SHOWN:
        return len(turns) == MAX_TURNS_SHOWN
    return (
        len(turns) == episode.get("turns", len(turns))
        and success == bool(episode.get("success"))
        and math.isclose(total, float(episode.get("episode_return", total)), abs_tol=1e-6)
    )


def _render_modes(env_id: str) -> list[str]:
    env = gym.make(env_id)
    modes = list(env.unwrapped.metadata.get("render_modes", []))
    env.close()
    return modes


#: Agents whose episodes a seed reproduces exactly: rows of them can be re-played for the report.
REPRODUCIBLE_AGENTS = ("random", "optimal")


def reenact_episodes(document: dict[str, Any], count: int = EPISODES_PER_ROW) -> int:
    """Give rows of :data:`REPRODUCIBLE_AGENTS` that kept no turns their first ``count`` episodes again.

    Each row's first levels are played again with the row's agent, seeds, samples and turn
    limit, recording every turn; the episodes are kept only when every one matches the row's
    record (level, seed, success, turns, return), so the report never shows an episode the
    row did not play. Rows are changed in memory (``reenacted`` is set on them); returns how
    many rows gained episodes.
    """
    from llmgym_train.eval.agents import AgentOptions, make_agent
    from llmgym_train.eval.leaderboard import LeaderboardConfig, play

    gained = 0
    for row in document.get("results", []):
        recorded = row.get("episodes") or []
        if row["agent"] not in REPRODUCIBLE_AGENTS or any(episode.get("actions") for episode in recorded):
            continue
        samples = int(row.get("samples", 1))
        levels_needed = max(1, -(-count // samples))
        config = LeaderboardConfig(
            agents=(row["agent"],),
            envs=(row["env_id"],),
            limit=levels_needed,
            samples=samples,
            seed=int(row.get("seed", 0)),
            max_turns=row.get("max_turns"),
            options=AgentOptions(),
            progress=False,
            record_episodes=count,
        )
        agent = make_agent(row["agent"], config.options)
        try:
            agent.prepare(row["env_id"])
            played = play(agent, row["env_id"], eval_set_levels(row["env_id"], levels_needed), config)
        except Exception:  # a row that cannot be played here (say, no sandbox) keeps its record alone
            continue
        finally:
            agent.close()
        played = played[:count]
        if len(recorded) < len(played) or not all(
            _same_outcome(again, before) for again, before in zip(played, recorded, strict=False)
        ):
            continue
        for index, episode in enumerate(played):
            recorded[index] = {
                **recorded[index],
                "actions": episode.actions,
                "rewards": episode.rewards,
                "observations": episode.observations,
            }
        row["reenacted"] = True
        gained += 1
    return gained


def _same_outcome(again: Any, before: dict[str, Any]) -> bool:
    return (
        again.level_index == before.get("level_index")
        and again.env_seed == before.get("env_seed")
        and again.success == bool(before.get("success"))
        and again.turns == before.get("turns")
        and math.isclose(again.episode_return, float(before.get("episode_return", 0.0)), abs_tol=1e-6)
    )


# ---------------------------------------------------------------------- page
_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1100px;color:#222;padding:0 1em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:2px 6px}
th{background:#f2f2f2}td:nth-child(n+4){text-align:right}svg text{font-size:11px;font-family:sans-serif}
svg text.env{font-weight:bold}.kind{display:inline-block;width:.8em;height:.8em;margin:0 .3em 0 .8em}
details{margin:.3em 0 .3em 1em}.episode{border:1px solid #ddd;padding:.5em;margin:.5em 0}
.step pre{white-space:pre-wrap;background:#f7f7f7;padding:.4em;max-height:16em;overflow:auto;font-size:.85em}
.step img{image-rendering:pixelated;max-width:320px;border:1px solid #ccc}.note{color:#a33}
"""
_SCRIPT = """
function show(id, delta){const e=document.getElementById(id);const steps=e.querySelectorAll('.step');
let i=Number(e.dataset.at)+delta;i=Math.max(0,Math.min(steps.length-1,i));e.dataset.at=i;
steps.forEach((s,k)=>{s.hidden=k!==i});e.querySelector('.at').textContent=(i)+' / '+(steps.length-1);}
"""


def _episode_html(anchor: str, row: dict[str, Any], episode: dict[str, Any]) -> str:
    played = replay(row, episode)
    frames = played["frames"]
    steps = []
    start = played.get("start")
    first = [f"<b>start</b> (level {episode.get('level_index')})"]
    if frames:
        first.append(f'<br><img alt="start of the episode" src="{frames[0]}">')
    if start:
        first.append(f"<pre>{html.escape(start)}</pre>")
    steps.append("".join(first))
    for number, turn in enumerate(played["turns"], start=1):
        parts = [f"<b>turn {number}</b>"]
        if turn["reward"] is not None:
            parts.append(f" reward {turn['reward']:g}")
        parts.append(f"<pre>{html.escape(str(turn['completion']))}</pre>")
        if frames and number < len(frames):
            parts.append(f'<img alt="state after turn {number}" src="{frames[number]}">')
        if turn["observation"]:
            parts.append(f"<pre>{html.escape(turn['observation'])}</pre>")
        steps.append("".join(parts))
    body = "".join(
        f'<div class="step"{"" if index == 0 else " hidden"}>{step}</div>' for index, step in enumerate(steps)
    )
    outcome = "success" if episode.get("success") else "no success"
    note = f'<p class="note">{html.escape(played["note"])}</p>' if played["note"] else ""
    cut = (
        f"<p>First {MAX_TURNS_SHOWN} of {len(episode.get('actions') or [])} turns.</p>"
        if len(episode.get("actions") or []) > MAX_TURNS_SHOWN
        else ""
    )
    return (
        f'<div class="episode" id="{anchor}" data-at="0"><p>Level {episode.get("level_index")}: {outcome}, '
        f"return {episode.get('episode_return', 0):g}, {episode.get('turns')} turns. "
        f"<button onclick=\"show('{anchor}',-1)\">previous</button> "
        f'<span class="at">0 / {len(steps) - 1}</span> '
        f"<button onclick=\"show('{anchor}',1)\">next</button></p>{note}{cut}{body}</div>"
    )


def _row_episodes(index: int, row: dict[str, Any]) -> str:
    recorded = [episode for episode in row.get("episodes", []) if episode.get("actions")][:EPISODES_PER_ROW]
    title = f"{html.escape(row['env_id'].removeprefix('llmgym/'))}: {html.escape(row['agent'])}"
    if not recorded:
        return (
            f"<details><summary>{title}: no recorded episodes</summary>"
            "<p>This row kept no turns; rerun it with "
            "<code>llmgym-bench --record-episodes 3</code> to step through its episodes here.</p></details>"
        )
    if row.get("reenacted"):
        title += " (played again from the row's seeds; outcomes checked against its record)"
    episodes = "".join(
        _episode_html(f"row{index}-ep{number}", row, episode) for number, episode in enumerate(recorded)
    )
    return f"<details><summary>{title}: {len(recorded)} episodes</summary>{episodes}</details>"


def report_html(document: dict[str, Any], title: str = "llmgym leaderboard") -> str:
    """The whole report as one HTML string."""
    rows = ordered_rows(document)
    families: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        families.setdefault(family_of(row["env_id"]), []).append(row)
    legend = "".join(
        f'<span class="kind" style="background:{color}"></span>{kind}' for kind, color in KINDS.items()
    )
    sections = []
    index = 0
    for family, family_rows in families.items():
        names, cells = table_rows(family_rows)
        header = "".join(f"<th>{html.escape(name)}</th>" for name in names)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in cells
        )
        episodes = []
        for row in family_rows:
            episodes.append(_row_episodes(index, row))
            index += 1
        anchor = family.lower().replace(" ", "-")
        sections.append(
            f'<h2 id="{anchor}">{html.escape(family)}</h2>{family_chart(family_rows)}'
            f"<table><tr>{header}</tr>{body}</table><h3>Episodes</h3>{''.join(episodes)}"
        )
    commits = sorted({str(row.get("provenance", document).get("commit", "unknown"))[:10] for row in rows})
    contents = " | ".join(
        f'<a href="#{family.lower().replace(" ", "-")}">{html.escape(family)}</a>' for family in families
    )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_STYLE}</style><script>{_SCRIPT}</script></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{contents}</p><p>Success rate on each id's frozen eval levels, with Wilson 95% intervals. "
        f"Kinds: {legend}</p>"
        + "".join(sections)
        + f"<p>Commits: {', '.join(html.escape(commit) for commit in commits)}. Written by "
        "<code>llmgym_train.eval.report</code> from the leaderboard JSON "
        f"(llmgym {html.escape(llmgym.__version__)}).</p>"
        "</body></html>\n"
    )


def write_report(document: dict[str, Any], path: Path, title: str = "llmgym leaderboard") -> Path:
    """Write :func:`report_html` of ``document`` to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_html(document, title))
    return path
