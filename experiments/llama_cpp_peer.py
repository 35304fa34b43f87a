"""llama.cpp as a peer (optional): its plain decoding and speculative modes on the same GGUF
files and the same prompt token ids as ours.

    python experiments/llama_cpp_peer.py --bin ~/llama.cpp/build/bin --split test --prompts 4 \
        --max-new-tokens 96 --threads 2 --json llama_cpp.json

Nothing here builds llama.cpp: point ``--bin`` at a build with ``llama-bench`` and
``llama-speculative-simple`` (README, "llama.cpp as a peer", gives the cmake line that runs on
these CPUs). The packaged GGUFs are assembled (checked chunk by chunk) into ``--work``. Each
prompt is our chat-template token ids, decoded back to text with its special tokens, which
llama.cpp tokenizes to the same ids.

Per prompt and mode, in turn: ``plain`` is ``llama-bench -p 0 -n N -d <prompt length>``
(token generation at the prompt's depth); every other mode is ``llama-speculative-simple
--spec-type <mode>`` at ``--temp`` (``draft-simple`` with the 0.5B as ``-md``, its
``--spec-draft-n-max`` and ``--spec-draft-p-min`` from the mode string
``draft-simple:16:0.75``; ``ngram-simple:N:M`` sets its lookup and draft n-gram sizes, 12 and 48
by default), ``--ignore-eos`` so every mode decodes N tokens, ``--seed`` per sample as
``peers.py`` seeds ours (``--repeats`` samples a prompt; llama.cpp's default seed is drawn at
random, so before 2026-12-07 13:00 UTC each T > 0 figure was one unseeded sample a prompt). The
rates are the programs' own (decode seconds, prompt processing excluded), as ours exclude the
prefill.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

from transformers import AutoTokenizer

from stagedspec.evaluation.bench_setup import add_split_arg, pick_prompts
from stagedspec.models.chat_text import encode_prompt
from stagedspec.models.packaged import gguf_file
from stagedspec.prompts.prompt_sets import load_prompt_set

DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
ACCEPT = re.compile(r"n_drafted\s*=\s*(\d+).*?n_accept\s*=\s*(\d+)", re.S)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="llama.cpp's build/bin folder")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b")
    ap.add_argument("--data", default="humaneval")
    add_split_arg(ap)
    ap.add_argument("--prompts", type=int, default=4, help="the first N prompts of --split (as peers.py picks them)")
    ap.add_argument(
        "--first-prompt", type=int, default=0, help="skip this many prompts of the split first (peers.py's)"
    )
    ap.add_argument("--stride", type=int, default=1, help="then take every N-th prompt (peers.py's)")
    ap.add_argument("--modes", default="plain,ngram-simple,ngram-mod,draft-simple:16:0.75,draft-simple:8:0.5")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument(
        "--repeats", type=int, default=1, help="samples per prompt of each speculative mode (plain decoding: one)"
    )
    ap.add_argument(
        "--seed",
        type=int,
        default=0,
        help="sample r of prompt i runs with seed + r + 1009 i (peers.py's per-prompt seeds); llama.cpp's own "
        "default would draw a random seed each run",
    )
    ap.add_argument("--work", default=None, help="where the assembled GGUFs go (default: a temporary folder)")
    ap.add_argument("--json", default=None)
    return ap.parse_args(argv)


def run(cmd: list[str]) -> tuple[str, str]:
    """(stdout, stderr) of a llama.cpp program; a failure raises with the end of its stderr."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({p.returncode}): {p.stderr[-400:]}")
    return p.stdout, p.stderr


def plain_rate(bin_dir: Path, model: Path, depth: int, n: int, threads: int) -> dict:
    """llama-bench's token generation rate for n tokens at ``depth`` tokens of context."""
    out, _ = run(
        [
            str(bin_dir / "llama-bench"),
            "-m",
            str(model),
            "-p",
            "0",
            "-n",
            str(n),
            "-d",
            str(depth),
            "-t",
            str(threads),
            "-r",
            "1",
            "-o",
            "json",
        ]
    )
    return {"tokens": n, "tokens_per_s": float(json.loads(out)[0]["avg_ts"])}


def spec_rate(
    bin_dir: Path,
    target: Path,
    draft: Path,
    prompt_file: Path,
    mode: str,
    n: int,
    threads: int,
    temp: float,
    seed: int = 0,
) -> dict:
    kind, *rest = mode.split(":")
    cmd = [
        str(bin_dir / "llama-speculative-simple"),
        "-m",
        str(target),
        "-f",
        str(prompt_file),
        "-n",
        str(n),
        "-t",
        str(threads),
        "--temp",
        str(temp),
        "--seed",
        str(seed),
        "--ignore-eos",
        "--spec-type",
        kind,
        "-c",
        "4096",
    ]
    if kind.startswith("draft"):
        n_max, p_min = rest or ("16", "0.75")
        cmd += ["-md", str(draft), "-td", str(threads), "--spec-draft-n-max", n_max, "--spec-draft-p-min", p_min]
    elif kind == "ngram-simple" and rest:  # ngram-simple:N:M, its lookup n-gram and draft lengths
        size_n, size_m = rest
        cmd += ["--spec-ngram-simple-size-n", size_n, "--spec-ngram-simple-size-m", size_m]
    text = "\n".join(run(cmd))
    m = DECODED.search(text)
    if m is None:
        raise RuntimeError(f"no 'decoded ... t/s' line from {mode}: {text[-400:]}")
    a = ACCEPT.search(text)
    out = {"tokens": int(m.group(1)), "seconds": float(m.group(2)), "tokens_per_s": float(m.group(3))}
    if a:
        out.update(drafted=int(a.group(1)), accepted=int(a.group(2)))
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    bin_dir = Path(args.bin).expanduser()
    work = Path(args.work or tempfile.mkdtemp(prefix="stagedspec-llama-"))
    tgt_gguf, _ = gguf_file(args.target, work)
    draft_gguf, _ = gguf_file(args.draft, work)
    # the tokenizer only, from the assembled GGUF (the one the model cache saves), not the 3 GB model
    tok = AutoTokenizer.from_pretrained(str(tgt_gguf.parent), gguf_file=tgt_gguf.name)
    rows = []
    picked = pick_prompts(load_prompt_set(args.data, split=args.split)[args.first_prompt :: args.stride], args.prompts)
    for k, q in enumerate(picked):
        i = q.question_id
        ids = encode_prompt(tok, q.turns[:1])
        prompt_file = work / f"prompt-{i}.txt"
        prompt_file.write_text(tok.decode(ids, skip_special_tokens=False))
        for rep in range(args.repeats):
            seed = args.seed + rep + 1009 * k
            for mode in args.modes.split(","):
                if mode == "plain":
                    if rep:
                        continue
                    r = plain_rate(bin_dir, tgt_gguf, len(ids), args.max_new_tokens, args.threads)
                else:
                    r = spec_rate(
                        bin_dir,
                        tgt_gguf,
                        draft_gguf,
                        prompt_file,
                        mode,
                        args.max_new_tokens,
                        args.threads,
                        args.temp,
                        seed,
                    )
                    r["repeat"], r["seed"] = rep, seed
                rows.append({"problem": i, "mode": mode, "prompt_tokens": len(ids), **r})
                print(json.dumps(rows[-1]), flush=True)
    summary = {}
    for mode in args.modes.split(","):
        rates = [r["tokens_per_s"] for r in rows if r["mode"] == mode]
        summary[mode] = {
            "median_tokens_per_s": statistics.median(rates),
            "geomean_tokens_per_s": statistics.geometric_mean(rates),
            "per_problem": rates,
        }
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
