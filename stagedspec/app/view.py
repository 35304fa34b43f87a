"""Which level wrote which token: an answer coloured by the level that proposed each token.

Two renderings of the same thing, the per-token provenance that ``decoding.py`` records
(``SequenceResult.provenance``: a draft level's name, or ``"target"`` for the token the
target wrote itself: its correction after a rejection, or its bonus token after a fully
accepted draft):

- ``StreamView``: the terminal stream ``python -m stagedspec.generate`` prints as rounds
  commit (it is the decoder's ``on_round`` callback), with a legend first and, on request,
  one line per round (accepted/drafted per level, why the round stopped, target positions
  wasted). ANSI colours only on a terminal without ``NO_COLOR`` (https://no-color.org);
  otherwise plain text, no escape codes.
- ``html_page``: the same view as one self-contained HTML page (inline CSS, no script) for
  a few answers of a job; hovering a token shows its round, its depth in the round and
  what the target did with it. The runner logs it as the artifact ``view.html``.

The colours follow the hierarchy, lowest level first (``PALETTE``/``HTML_PALETTE``); the
target's own tokens have a style of their own (bold underlined). Stdlib only.
"""

from __future__ import annotations

import html
import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, TextIO
from collections.abc import Callable, Iterable, Mapping

from stagedspec.metrics.round_stats import RoundStats
from stagedspec.metrics.run_schema import TARGET

Decode = Callable[[list[int]], str]

PALETTE = ("36", "32", "33", "35", "34", "96", "92", "93")
"""ANSI foreground colours of the draft levels, lowest level first: cyan, green, yellow,
magenta, blue, then their bright variants."""
TARGET_STYLE = "1;4"
"""The target's own tokens: bold underlined, in the terminal's own colour."""
HTML_PALETTE = ("#b2ebf2", "#c8e6c9", "#fff59d", "#e1bee7", "#bbdefb", "#ffccbc", "#d7ccc8", "#f0f4c3")
"""Background colours of the draft levels on the page (a background shows spaces too)."""
HTML_TARGET = "#ffffff"
RESET = "\x1b[0m"


def wants_color(out: TextIO) -> bool:
    """Colour only on a terminal, and never with ``NO_COLOR`` set (non-empty, as the
    convention says) or ``TERM=dumb``."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


class TextPieces:
    """Each new token's text, decoded incrementally: a token that ends inside a UTF-8
    character (byte-fallback pieces) shows nothing until the character is complete,
    then the completing token carries it. Decodes a short window, the token(s) since the
    last complete piece, twice per token (text-generation-inference's method), so a long
    answer costs no more per token than a short one; a window that starts at the answer's
    first token keeps the tokenizer's start-of-text handling (a dropped leading space)."""

    def __init__(self, decode: Decode) -> None:
        self.decode = decode
        self.ids: list[int] = []
        self.prefix = self.read = 0

    def add(self, token: int) -> str:
        self.ids.append(int(token))
        before = self.decode(self.ids[self.prefix : self.read])
        now = self.decode(self.ids[self.prefix :])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.ids)
            return now[len(before) :]
        return ""

    def rest(self) -> str:
        """What is still held at the end (an incomplete character, shown replaced)."""
        if self.read == len(self.ids):
            return ""
        before = self.decode(self.ids[self.prefix : self.read])
        now = self.decode(self.ids[self.prefix :])
        self.prefix = self.read = len(self.ids)
        return now[len(before) :]


# ------------------------------------------------------------------------ one round


def target_role(stats: RoundStats) -> str:
    """What the target's own token of a round is: its correction of a rejected draft, its
    bonus after a draft accepted to the end, or the plain next token (no draft)."""
    if stats.tree_nodes == 0:
        return "next token (no draft)"
    return "correction" if stats.rejected else "bonus"


def stop_reason(stats: RoundStats, finished: str = "") -> str:
    """Why the round ended, in a few words."""
    if stats.emitted < stats.accepted_depth + 1:  # the target's token, maybe drafts too, cut off
        return "cut: EOS" if finished == "eos" else "cut: max_new_tokens"
    if stats.tree_nodes == 0:
        why = "no draft"
    elif stats.rejected:
        why = f"rejected at depth {stats.accepted_depth + 1}"
    else:
        why = "all accepted + bonus"
    return why + {"eos": ", EOS", "length": ", max_new_tokens"}.get(finished, "")


def round_summary(levels: list[str], stats: RoundStats, finished: str = "") -> str:
    """ "[small] ngram 2/2 small 3/4 +4 rejected at depth 4 wasted 2/6": the level whose draft
    the target verified (with more than one level: a router's decision), per level (lowest first)
    the tokens the level above kept of those it drafted, the tokens emitted, why the round
    stopped, and the target positions whose result was thrown away."""
    per = " ".join(f"{lv} {stats.accepted.get(lv, 0)}/{stats.drafted.get(lv, 0)}" for lv in levels)
    routed = f"[{stats.drafter}] " if stats.drafter and len(levels) > 1 else ""  # which level drafted for the target
    return (
        f"{routed}{per + ' ' if per else ''}+{stats.emitted} {stop_reason(stats, finished)}; "
        f"wasted {stats.wasted_target_positions}/{stats.target_positions}"
    )


# ------------------------------------------------------------------------ terminal


class StreamView:
    """The answer on a terminal as rounds commit, each token in its level's colour.

    Use as ``SpeculativeDecoder.generate(..., on_round=view)`` after ``view.start(levels,
    decode)``, then ``view.finish()``. ``rounds=True``: one line per round, its summary
    (``round_summary``) then its text (newlines shown as ↵). ``color=None``: colour when
    ``out`` is a terminal and ``NO_COLOR`` is unset. Only sequence ``seq`` is shown."""

    def __init__(
        self, out: TextIO | None = None, color: bool | None = None, rounds: bool = False, seq: int = 0
    ) -> None:
        self.out = out if out is not None else sys.stdout
        self.color = wants_color(self.out) if color is None else color
        self.rounds = rounds
        self.seq = seq
        self.styles: dict[str, str] = {}
        self.levels: list[str] = []
        self.pieces: TextPieces | None = None
        self.n_rounds = 0
        self.last = TARGET

    def start(self, levels: list[str], decode: Decode) -> None:
        """Print the legend (and the round line's key) for a hierarchy, lowest level first."""
        self.levels = list(levels)
        self.styles = {lv: PALETTE[i % len(PALETTE)] for i, lv in enumerate(self.levels)}
        self.styles[TARGET] = TARGET_STYLE
        self.pieces = TextPieces(decode)
        self.n_rounds = 0
        lines = []
        if self.color:
            names = " ".join(self._paint(lv, lv) for lv in self.levels)
            lines.append(
                f"tokens by level: {names + ' ' if names else ''}{self._paint(TARGET, TARGET)} "
                "(the target's own: correction or bonus)"
            )
        if self.rounds:
            lines.append(
                "round: accepted/drafted per level, +tokens emitted, why it stopped; "
                "wasted/scored target positions | text (↵ = newline)"
            )
        if lines:
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()

    def __call__(self, i: int, new: list[int], origins: list[str], stats: RoundStats, finished: str = "") -> None:
        if i != self.seq:
            return
        assert self.pieces is not None, "call start() first"
        self.n_rounds += 1
        text = self._render([(self.pieces.add(t), o) for t, o in zip(new, origins)])
        self.last = origins[-1] if origins else self.last
        if self.rounds:
            head = f"{self.n_rounds:4d} {round_summary(self.levels, stats, finished)} | "
            self.out.write(head + text.replace("\r", "").replace("\n", "↵") + "\n")
        else:
            self.out.write(text)
        self.out.flush()

    def finish(self) -> None:
        """Flush anything held and end the line."""
        if self.pieces is not None:
            rest = self.pieces.rest()
            if rest:
                self.out.write(self._render([(rest, self.last)]) + ("\n" if self.rounds else ""))
        if not self.rounds:
            self.out.write("\n")
        self.out.flush()

    def _render(self, pieces: list[tuple[str, str]]) -> str:
        """Consecutive pieces of one level as one coloured run."""
        out, run, level = [], "", None
        for text, origin in pieces:
            if origin != level and run:
                out.append(self._paint(run, level))
                run = ""
            run, level = run + text, origin
        if run:
            out.append(self._paint(run, level))
        return "".join(out)

    def _paint(self, text: str, level: str | None) -> str:
        text = text.replace("\x1b", "␛")  # a model's escape byte must not drive the terminal
        if not self.color:
            return text
        return f"\x1b[{self.styles.get(level or '', TARGET_STYLE)}m{text}{RESET}"


# ---------------------------------------------------------------------------- HTML


@dataclass
class TokenView:
    """One output token as the page shows it."""

    text: str
    level: str
    round: int
    """1-based round in which it was emitted."""
    depth: int
    """1-based position among the round's emitted tokens (= draft depth for a draft token)."""
    note: str
    """What the target did with it, and the round's summary (the hover text)."""


def token_views(
    ids: list[int],
    provenance: list[str],
    rounds: Iterable[RoundStats | Mapping[str, Any]],
    decode: Decode,
    levels: list[str],
    finished: str = "",
) -> list[TokenView]:
    """The tokens of one answer with their round and depth, from the sequence's provenance
    and its per-round record (``RoundStats`` or their dicts, as in outputs.jsonl)."""
    pieces = TextPieces(decode)
    out: list[TokenView] = []
    rounds = [r if isinstance(r, RoundStats) else RoundStats(**r) for r in rounds]
    pos = 0
    for n, r in enumerate(rounds, 1):
        last = n == len(rounds)
        summary = f"round {n}: {round_summary(levels, r, finished if last else '')}"
        for d in range(1, r.emitted + 1):
            level = provenance[pos]
            if level == TARGET:
                what = f"the target's own token ({target_role(r)})"
            else:
                what = f"drafted by {level}, accepted by the target"
            out.append(
                TokenView(pieces.add(ids[pos]), level, n, d, f"round {n}, depth {d} of {r.emitted}: {what}\n{summary}")
            )
            pos += 1
    if pos != len(ids):
        raise ValueError(f"the rounds emitted {pos} tokens but the answer has {len(ids)}")
    if out:
        out[-1].text += pieces.rest()
    return out


@dataclass
class AnswerView:
    """One answer on the page: a heading, the prompt it answers, its tokens."""

    title: str
    prompt: str
    tokens: list[TokenView]


def _css(levels: list[str]) -> str:
    rules = [
        "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#222}",
        "pre{white-space:pre-wrap;word-wrap:break-word;font-size:14px;line-height:1.6;border:1px solid #ddd;"
        "padding:.8em;border-radius:4px;background:#fafafa}",
        "pre span{border-radius:2px}",
        ".prompt{color:#555;white-space:pre-wrap;border-left:3px solid #ccc;padding-left:.8em;max-height:8em;"
        "overflow:auto}",
        ".legend span{padding:.1em .5em;margin-right:.4em;border:1px solid #ccc}",
        ".counts{color:#555;font-size:90%}",
    ]
    for i, lv in enumerate(levels):
        rules.append(f".lv{i}{{background:{HTML_PALETTE[i % len(HTML_PALETTE)]}}}")
    rules.append(f".tg{{background:{HTML_TARGET};font-weight:bold;text-decoration:underline}}")
    return "\n".join(rules)


def html_page(title: str, levels: list[str], answers: list[AnswerView], intro: str = "") -> str:
    """One self-contained page: legend, then each answer with its tokens coloured by level
    (``<span class=... data-level=... title=...>``)."""
    cls = {lv: f"lv{i}" for i, lv in enumerate(levels)}
    cls[TARGET] = "tg"
    e = html.escape
    legend = " ".join(f'<span class="{cls[lv]}">{e(lv)}</span>' for lv in levels)
    legend += (
        f' <span class="tg">{TARGET}</span> the target\'s own token (its correction after a rejection, '
        "or its bonus after a fully accepted draft)"
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title>",
        f"<style>\n{_css(levels)}\n</style></head><body>",
        f"<h1>{e(title)}</h1>",
        f"<p>{e(intro)}</p>" if intro else "",
        f'<p class="legend">Tokens by the level that proposed them, lowest level first: {legend}. '
        "Hover a token for its round, its depth in the round and what the target did.</p>",
    ]
    for a in answers:
        counts = Counter(t.level for t in a.tokens)
        n_rounds = max((t.round for t in a.tokens), default=0)
        count_text = ", ".join(f"{lv} {counts[lv]}" for lv in [*levels, TARGET] if counts[lv])
        spans = "".join(
            f'<span class="{cls.get(t.level, "tg")}" data-level="{e(t.level)}" title="{e(t.note)}">{e(t.text)}</span>'
            for t in a.tokens
        )
        parts += [
            f"<h2>{e(a.title)}</h2>",
            f'<div class="prompt">{e(a.prompt)}</div>' if a.prompt else "",
            f'<p class="counts">{len(a.tokens)} tokens in {n_rounds} rounds '
            f"({len(a.tokens) / n_rounds if n_rounds else 0:.2f} per target call): {count_text}</p>",
            f"<pre>{spans}</pre>",
        ]
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p) + "\n"


def job_page(
    method: str,
    levels: list[str],
    records: list[dict],
    decode: Decode,
    questions: Mapping[Any, list[str]] | None = None,
    limit: int = 4,
) -> str:
    """The page of a job: its first ``limit`` answers (records of outputs.jsonl)."""
    answers = []
    for r in records[:limit]:
        turns = (questions or {}).get(r["question_id"]) or []
        prompt = turns[r["turn"] - 1] if 0 < r["turn"] <= len(turns) else ""
        tokens = token_views(
            r["output_ids"], r["provenance"], r["rounds"], decode, levels, r.get("finished_reason", "")
        )
        answers.append(AnswerView(f"{r['question_id']} ({r['category']}), turn {r['turn']}", prompt, tokens))
    shown = f"the first {len(answers)} of {len(records)} answers" if len(records) > len(answers) else "every answer"
    return html_page(
        f"{method}: which level wrote which token", levels, answers, intro=f"{shown.capitalize()} of this job."
    )
