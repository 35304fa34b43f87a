"""Text and token ids for a loaded model: prompts in, answers out, and where to stop.

Prompts go through the model's chat template when it has one (``encode_prompt``). Models
without a tokenizer (the random "tiny" test models) read text byte-wise: a prompt's ids
are ``[b % vocab_size for b in text.encode("utf-8")]``, and output ids are shown as text
the same way backwards (``bytes(ids).decode(errors="replace")``); they have no EOS.
"""

from __future__ import annotations

from typing import Any

from .model_loading import LoadedModel


def encode_prompt(tokenizer: Any, turns: list[str] | str, history: list[tuple[str, str]] | None = None) -> list[int]:
    """Token ids of a prompt, ready for generation.

    ``history`` holds earlier (user, assistant) exchanges; ``turns`` the new user
    message(s), each sent as a user message in order. With a chat template the messages
    alternate user/assistant and end with the generation prompt; without one the texts
    are joined by blank lines and encoded plainly.
    """
    if isinstance(turns, str):
        turns = [turns]
    turns = list(turns)
    if not turns or any(not isinstance(t, str) or not t.strip() for t in turns):
        raise ValueError(f"empty prompt: every turn must be non-blank text, got {turns!r}")
    messages: list[dict[str, str]] = []
    for user, assistant in history or []:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    messages += [{"role": "user", "content": t} for t in turns]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        # The template's text already holds any special tokens it wants (BOS, <|im_start|>).
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    text = "\n\n".join(m["content"] for m in messages)
    return list(tokenizer(text)["input_ids"])


def encode(target: LoadedModel, user: str, history: list[tuple[str, str]]) -> list[int]:
    """One user turn after the earlier ``(user, answer)`` exchanges, as the target's ids."""
    if target.tokenizer is None:
        parts = [t for pair in history for t in pair] + [user]
        return text_to_ids("\n\n".join(parts), target.vocab_size)
    return encode_prompt(target.tokenizer, [user], history=history)


def text_to_ids(text: str, vocab_size: int) -> list[int]:
    """Tokenizer-less models (tiny tests): one id per UTF-8 byte, folded into the vocabulary."""
    return [b % vocab_size for b in text.encode("utf-8")]


def ids_to_text(target: LoadedModel, ids: list[int]) -> str:
    if target.tokenizer is None:
        return bytes(i % 256 for i in ids).decode("utf-8", errors="replace")
    return target.tokenizer.decode(ids, skip_special_tokens=True)


def eos_token_ids(target: LoadedModel) -> list[int]:
    """The ids that end an answer: the tokenizer's and the generation config's EOS."""
    ids: set[int] = set()
    for source in (getattr(target.tokenizer, "eos_token_id", None), target.model.generation_config.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif source is not None:
            ids.update(int(i) for i in source)
    return sorted(ids) if target.tokenizer is not None else []  # random tiny models: no EOS
