"""The per-token provenance view: the terminal stream, the HTML page, and their hooks in
generate, the runner and the report; the MLflow experiment's name and kind."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from mlflow import MlflowClient

from stagedspec.app.generate_entry import generate_one
from stagedspec.app.plan import CONF_DIR
from stagedspec.app.view import StreamView, TextPieces, job_page, token_views, wants_color
from stagedspec.metrics.round_stats import RoundStats

REPO = Path(__file__).resolve().parents[2]
VOCAB = ["Hel", "lo", " wor", "ld", "!", "\n", "ok"]
LEVELS = ["ngram", "small"]


def _decode(ids: list[int]) -> str:
    return "".join(VOCAB[i] for i in ids)


ROUNDS = [  # (new ids, their origins, the round's stats, finished)
    (
        [0, 1, 2],
        ["ngram", "small", "target"],
        RoundStats(
            drafted={"ngram": 3, "small": 3},
            accepted={"ngram": 2, "small": 2},
            emitted=3,
            target_positions=4,
            accepted_depth=2,
            rejected=True,
            draft_depth=3,
            tree_nodes=3,
        ),
        "",
    ),
    (
        [3, 4],
        ["small", "target"],
        RoundStats(
            drafted={"ngram": 0, "small": 1},
            accepted={"ngram": 0, "small": 1},
            emitted=2,
            target_positions=2,
            accepted_depth=1,
            rejected=False,
            draft_depth=1,
            tree_nodes=1,
        ),
        "",
    ),
    (
        [5, 6],
        ["ngram", "small"],  # cut by max_new_tokens before the target's own token
        RoundStats(
            drafted={"ngram": 2, "small": 2},
            accepted={"ngram": 2, "small": 2},
            emitted=2,
            target_positions=3,
            accepted_depth=2,
            rejected=False,
            draft_depth=2,
            tree_nodes=2,
        ),
        "length",
    ),
]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _stream(out, **kw) -> str:
    view = StreamView(out=out, **kw)
    view.start(LEVELS, _decode)
    for new, origins, stats, finished in ROUNDS:
        view(0, new, origins, stats, finished)
        view(1, [6], ["target"], stats, "")  # another sequence of the batch: not shown
    view.finish()
    return out.getvalue()


def test_stream_colours_each_token_by_its_level(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    assert _stream(_Tty()) == (
        "tokens by level: \x1b[36mngram\x1b[0m \x1b[32msmall\x1b[0m \x1b[1;4mtarget\x1b[0m "
        "(the target's own: correction or bonus)\n"
        "\x1b[36mHel\x1b[0m\x1b[32mlo\x1b[0m\x1b[1;4m wor\x1b[0m"
        "\x1b[32mld\x1b[0m\x1b[1;4m!\x1b[0m"
        "\x1b[36m\n\x1b[0m\x1b[32mok\x1b[0m\n"
    )


def test_stream_is_plain_with_no_color_or_off_a_terminal(monkeypatch):
    monkeypatch.delenv("TERM", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    assert _stream(_Tty()) == "Hello world!\nok\n"
    assert not wants_color(_Tty())
    monkeypatch.delenv("NO_COLOR")
    assert wants_color(_Tty())
    assert _stream(io.StringIO()) == "Hello world!\nok\n"  # not a terminal


def test_stream_with_one_line_per_round(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert _stream(_Tty(), rounds=True).splitlines() == [
        "round: accepted/drafted per level, +tokens emitted, why it stopped; wasted/scored target positions "
        "| text (↵ = newline)",
        "   1 ngram 2/3 small 2/3 +3 rejected at depth 3; wasted 1/4 | Hello wor",
        "   2 ngram 0/0 small 1/1 +2 all accepted + bonus; wasted 0/2 | ld!",
        "   3 ngram 2/2 small 2/2 +2 cut: max_new_tokens; wasted 1/3 | ↵ok",
    ]


def test_pieces_of_a_character_split_across_tokens_join_up():
    def decode(ids):
        return bytes(ids).decode("utf-8", errors="replace")

    text = "né € 🙂 ok"
    ids = list(text.encode())
    pieces = TextPieces(decode)
    got = [pieces.add(t) for t in ids]
    assert "".join(got) + pieces.rest() == text
    assert got[1:3] == ["", "é"]  # é is two bytes: nothing, then the character
    cut = TextPieces(decode)  # an answer that stops inside a character
    assert "".join(cut.add(t) for t in ids[:3]) + cut.add(ids[3]) + "".join(
        cut.add(t) for t in ids[4:6]
    ) + cut.rest() == decode(ids[:6])


def test_pieces_keep_a_real_tokenizers_text(embedded_model):
    tok = embedded_model.tokenizer
    text = "def f(x):\n    return x  # naïve, €5 — ok?\n\n  Done."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    pieces = TextPieces(lambda xs: tok.decode(xs, skip_special_tokens=True))
    assert "".join(pieces.add(t) for t in ids) + pieces.rest() == tok.decode(ids, skip_special_tokens=True)


def _cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(
            config_name="generate", overrides=["experiment=tiny", "max_new_tokens=16", "warmup=true", *overrides]
        )


STAGED = [
    "drafter@levels.ngram=katz",
    "drafter@levels.small=truncated",
    "levels.small.model.layers=1",
    "levels.ngram.k=3",
]


@pytest.mark.parametrize(
    "overrides",
    [
        STAGED,  # staged chain, T = 0
        [*STAGED, "sampling=t07"],  # staged chain, T > 0
        ["levels.ngram=null", "tree=specinfer_221", "sampling=t07"],  # a tree, T > 0
        ["levels.ngram=null", "levels.small=null"],  # plain decoding
    ],
)
def test_streamed_answer_is_the_answer(overrides):
    plain, coloured = io.StringIO(), io.StringIO()
    out = generate_one(_cfg("prompt=hello hello hello", *overrides), StreamView(out=plain, color=False))
    assert plain.getvalue() == out["text"] + "\n"
    again = generate_one(_cfg("prompt=hello hello hello", *overrides), StreamView(out=coloured, color=True))
    assert again["result"].sequences[0].output_ids == out["result"].sequences[0].output_ids
    legend, body = coloured.getvalue().split("\n", 1)
    assert re.sub(r"\x1b\[[0-9;]*m", "", body) == out["text"] + "\n"
    # the tiny model's tokens are one ASCII character each: characters per colour = tokens per level
    level_of = {style: lv for style, lv in re.findall(r"\x1b\[([0-9;]+)m(\w+)\x1b\[0m", legend)}
    assert set(level_of.values()) == {*out["levels"], "target"}
    chars = [
        level_of[style] for style, text in re.findall(r"\x1b\[([0-9;]+)m(.*?)\x1b\[0m", body, flags=re.S) for _ in text
    ]
    assert chars == out["result"].sequences[0].provenance


# ---------------------------------------------------------------------------- HTML


class _Page(HTMLParser):
    """Token spans (class, data-level, title, text), the legend's class -> level and the
    stylesheet's class -> background colour."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: list[dict] = []
        self.legend: dict[str, str] = {}
        self.css = ""
        self._in: dict | None = None
        self._where: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self._where.append(a.get("class") or tag)
        if tag == "span":
            self._in = {**a, "text": ""}

    def handle_endtag(self, tag):
        where = self._where.pop()
        if tag == "span" and self._in is not None:
            if "data-level" in self._in:
                self.tokens.append(self._in)
            elif "legend" in self._where:
                self.legend[where] = self._in["text"]
            self._in = None

    def handle_data(self, data):
        if self._in is not None:
            self._in["text"] += data
        elif self._where and self._where[-1] == "style":
            self.css += data

    def colours(self) -> dict[str, str]:
        return {m[0]: m[1] for m in re.findall(r"\.(\w+)\{background:(#[0-9a-f]{6})", self.css)}


def _parse(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    p.close()
    return p


def test_page_of_hand_built_rounds():
    ids = [i for new, _, _, _ in ROUNDS for i in new]
    prov = [o for _, origins, _, _ in ROUNDS for o in origins]
    record = {
        "question_id": 1,
        "category": "c",
        "turn": 1,
        "output_ids": ids,
        "provenance": prov,
        "rounds": [s.__dict__ for _, _, s, _ in ROUNDS],
        "finished_reason": "length",
    }
    page = _parse(job_page("ngram>small>target", LEVELS, [record], _decode, {1: ["Say <hello>"]}))
    assert [t["text"] for t in page.tokens] == ["Hel", "lo", " wor", "ld", "!", "\n", "ok"]
    assert [t["data-level"] for t in page.tokens] == prov
    assert page.tokens[2]["title"].startswith("round 1, depth 3 of 3: the target's own token (correction)")
    assert page.tokens[4]["title"].startswith("round 2, depth 2 of 2: the target's own token (bonus)")
    assert page.tokens[3]["title"].startswith("round 2, depth 1 of 2: drafted by small, accepted by the target")
    assert "round 3: ngram 2/2 small 2/2 +2 cut: max_new_tokens" in page.tokens[6]["title"]
    assert page.legend == {"lv0": "ngram", "lv1": "small", "tg": "target"}
    with pytest.raises(ValueError, match="emitted 7 tokens but the answer has 8"):
        token_views([*ids, 0], [*prov, "target"], record["rounds"], _decode, LEVELS)


@pytest.fixture
def questions(tmp_path) -> Path:
    p = tmp_path / "q.jsonl"
    rows = [
        {"question_id": 7, "category": "writing", "turns": ["Write a haiku about the sea.", "Now rhyme."]},
        {"question_id": 9, "category": "qa", "turns": ["What is the capital of France?"]},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_job_logs_a_page_whose_colours_count_its_provenance(tmp_path, questions, monkeypatch):
    """A tiny job in process: its view.html artifact, parsed back, colours as many tokens
    of each level as the job's provenance holds; the report links it; the experiment
    opens as model training."""
    from analysis.report import build_report
    from stagedspec.app import run_entry as run
    from stagedspec.app.tracking import PARENT_ENV, Tracker

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    parent = Tracker(uri, "tiny").parent_run("sweep-1", "a sweep", {})
    monkeypatch.setenv(PARENT_ENV, parent)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "experiment=tiny",
                "data=spec_bench",
                f"data.path={questions}",
                f"tracking.uri={uri}",
                "sampling=t07",
            ],
        )
        run.execute(cfg, out_dir=tmp_path / "job")
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("tiny")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI's model-training kind
    (r,) = client.search_runs([exp.experiment_id], filter_string="tags.`stagedspec.role` = 'child'")
    page = _parse(Path(client.download_artifacts(r.info.run_id, "view.html", str(tmp_path))).read_text("utf-8"))
    records = [json.loads(x) for x in (tmp_path / "job" / "outputs.jsonl").read_text().splitlines()]
    mine = [x for x in records if x["method"] == "ngram>small>target"]
    assert len(mine) == 3 and len(page.tokens) == sum(len(x["output_ids"]) for x in mine)
    colour_of = page.colours()
    level_of_colour = {colour_of[c]: lv for c, lv in page.legend.items() if c in colour_of}
    assert set(level_of_colour.values()) == {"ngram", "small", "target"}  # a colour of its own each
    prov = Counter(p for x in mine for p in x["provenance"])
    assert len(prov) >= 2  # the check below is not vacuous
    assert Counter(level_of_colour[colour_of[t["class"]]] for t in page.tokens) == prov
    assert Counter(t["data-level"] for t in page.tokens) == prov
    assert "".join(t["text"] for t in page.tokens) == "".join(x["text"] for x in mine)

    build_report(uri, "tiny", tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    link = f"views/{r.info.run_id}.html"
    assert f"]({link})" in md and (tmp_path / "report" / link).read_text("utf-8").startswith("<!DOCTYPE html>")
    assert {a.path for a in client.list_artifacts(parent, "report/views")} == {f"report/{link}"}


def test_default_sweep_experiment_is_named_for_what_it_is():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        name = compose("config", overrides=["experiment=default"]).experiment_name
    assert name == "stagedspec-humaneval"
    assert f"experiment={name} " in (REPO / "experiments" / "sweep_default.sh").read_text()


def test_the_rounds_line_names_the_level_that_drafted_for_the_target():
    from stagedspec.app.view import round_summary

    r = RoundStats(drafted={"copy": 3}, accepted={"copy": 1}, emitted=2, target_positions=4, accepted_depth=1)
    r.rejected, r.draft_depth, r.tree_nodes, r.drafter = True, 3, 3, "copy"
    assert round_summary(["small", "copy"], r).startswith("[copy] small 0/0 copy 1/3 +2 ")
    assert round_summary(["copy"], r).startswith("copy 1/3 +2 ")  # one level: nothing was routed
