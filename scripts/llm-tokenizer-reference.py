#!/usr/bin/env python3
"""Writes tests/data/llm/smollm2_tokenizer.json: llama.cpp's tokenization of a set of texts with
the SmolLM2-135M-Instruct GGUF, the reference table of tests/test_llm_tokenizer.c; with --spm,
tests/data/llm/gemma3_tokenizer.json from Gemma 3 270M's GGUF (SentencePiece), the table of
tests/test_llm_tokenizer_spm.c.

Run it with llama-cpp-python (0.3.36 made the committed table; any version whose llama.cpp knows
the "smollm" pre-tokenizer should give the same ids) and the gguf package:

    python3 -m venv /tmp/lcpp-venv && /tmp/lcpp-venv/bin/pip install llama-cpp-python==0.3.36
    /tmp/lcpp-venv/bin/python scripts/llm-tokenizer-reference.py \\
        /path/to/SmolLM2-135M-Instruct.Q4_1.gguf > tests/data/llm/smollm2_tokenizer.json

    /tmp/lcpp-venv/bin/python scripts/llm-tokenizer-reference.py --spm \\
        /path/to/gemma-3-270m-q4_k_m.gguf > tests/data/llm/gemma3_tokenizer.json

Only the vocabulary is loaded (vocab_only=True). What the table holds:
  - cases: {"text" or "hex", "special", "ids"}: llm.tokenize(bytes, add_bos=False, special=...).
    "hex" holds bytes that are not valid UTF-8 (JSON strings cannot) or that the vocab cannot
    spell, so that they do not come back from decoding;
  - pieces: {"id", "hex"}: llama_token_to_piece(id, special=True), the bytes of single tokens (the
    first 300 ids, then every 61st); called directly, as Llama.detokenize cuts pieces at 32 bytes;
  - pieces_plain: the same with special=False for the control tokens (all empty).
With --spm the cases are the texts above and SPM_TEXTS, each with special=True and special=False,
some also with add_special=True ("bos": true: BOS in front as the model says), and each case has
"detok_hex": llama_detokenize(ids, remove_special=False, unparse_special=special), the bytes
llama.cpp's whole-text detokenizer gives back (its leading-space rule included), and where those
are not valid UTF-8, "detok_valid_hex": them with U+FFFD for each maximal ill-formed subpart.
"""
import ctypes
import json
import sys

import llama_cpp

LLAMA_CPP_VERSION = llama_cpp.__version__

SMOL_PROMPT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
               "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")

C_CODE = """#include <stdio.h>

static int add(int a, int b) {
\treturn a + b; // sum
}

int main(void) {
    printf("%d\\n", add(2, 40));
    return 0;
}
"""

PY_CODE = """def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


class Foo:
    def __init__(self):
        self.x = [i ** 2 for i in range(10)]  # squares
"""

MIXED = ("The quick brown fox (über-schnell!) jumped over 13 lazy dogs at 3:45pm; "
         "价格是¥1,299.00 — or €1.299,00 in Europe. Ça va? Да, всё хорошо. "
         "Email me: jane.doe+test@example.co.uk → https://example.com/a/b?c=d&e=f#g 🙂👍🏽 "
         "\t\tTabs,\nnewlines\r\nand    spaces...   naïve résumé coöperate Σίσυφος ὅτι 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 "
         "x² + y³ = z⁴, ½ ¾ ⅓ ①②③ ٣٤٥ ५६७ ")

TEXTS = [
    # English
    "Hello world",
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "Once upon a time, there was a little girl named Lily. She loved to play outside.",
    "I can't believe it's not butter!",
    # digits and numbers
    "123456789",
    "3.14159",
    "1,000,000",
    "In 2024, 42% of 1500 people paid $19.99 (about 7e-3 per day).",
    "0x1F 0b1010 007 1e10",
    "phone: +1 (555) 123-4567",
    # contractions
    "don't I'm they'll we've she'd it's",
    "DON'T I'M THEY'LL WE'VE SHE'D IT'S",
    "'s 't 're 've 'm 'll 'd",
    "rock'n'roll y'all o'clock",
    "don’t it’s ‘quoted’ “double”",
    # white space
    "a  b",
    "a   b",
    "a    b",
    "a     b",
    "a      b",
    "a       b",
    "a        b",
    "  leading spaces",
    "trailing spaces   ",
    "   ",
    "\t",
    "a\tb\t\tc",
    "line1\nline2",
    "\n\n\n",
    "para one.\n\n\nPara two.",
    "windows\r\nline\r\n",
    " \n \n ",
    "\u00a0non-breaking\u00a0space and\u3000ideographic space",
    "\u2009thin\u200bzero-width",
    # accents and Latin
    "café",
    "naïve",
    "Ångström",
    "e\u0301 (e + combining acute)",
    "Straße Œuvre ﬁne ſ",
    # CJK
    "中文",
    "日本語のテキスト",
    "한국어",
    "我爱北京天安门，天安门上太阳升。",
    # emoji
    "🙂",
    "👍🏽",
    "👨‍👩‍👧‍👦",
    "🇫🇷🇯🇵",
    "I ❤️ emoji 🎉🎉",
    # other scripts
    "Привет, как дела?",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "Γειά σου Κόσμε",
    "สวัสดีชาวโลก",
    "שלום עולם",
    # code
    C_CODE,
    PY_CODE,
    "if (x != 0 && y >= 1) { z += x->y[i]; }",
    "<div class=\"a\">Hi &amp; bye</div>",
    # URLs and emails
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2",
    "mailto:someone@example.com",
    # special tokens
    "<|im_start|><|im_end|>",
    "<|im_start|>user\nhi<|im_end|>",
    "hi<|im_end|>there",
    "<|im_start|>",
    "<|im_start",
    "<|im_",
    "im_end|>",
    "<|endoftext|>",
    "<|im_start|><|im_start|>",
    "<<|im_end|>>",
    "<repo_name>hcq<file_sep>main.c",
    SMOL_PROMPT,
    # punctuation
    "!!!???...",
    "...and then?!",
    "a,b;c:d",
    "(((nested)))",
    "--- *** ___ ===",
    "¿Qué? ¡Sí!",
    # degenerate
    "",
    " ",
    "a",
    "\u0000",
    "a\u0000b",
    "\u001b[31mred\u001b[0m",
    "\ufffd",
    # mixed
    MIXED,
]

SPECIAL_OFF = [
    "<|im_start|>",
    "<|im_start|>user\nhi<|im_end|>",
    "hi<|endoftext|>",
    SMOL_PROMPT,
]

# Bytes that are not valid UTF-8 (llama.cpp reads each bad byte as U+FFFD), or whose byte tokens
# SmolLM2's vocab lacks (0x04, 0x06, 0x13, 0x1D, 0xF1...: llama.cpp drops them).
RAW = [
    b"\x04",
    b"a\x06b",
    b"\x1d\x13 x",
    b"\xf1\x80\x80\x80",
    b"a\xffb",
    b"\xc3",
    b"\xc3(",
    b"\xe4\xb8",
    b"\xe4\xb8\xadx\x80\x80",
    b"\xc0\xaf",
    b"\xed\xa0\x80",
    b"\xf0\x9f\x99",
    b"\xfe\xfe\xff",
    b"ok \x80 \xbf ok",
]


# SentencePiece's own troubles: spaces (U+2581), byte fallback, Gemma's user-defined runs of
# newlines and tabs, its turn markers.
SPM_TEXTS = [
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces  ",
    "multiple   spaces   inside",
    "\n",
    "\n\n",
    "a\nb\n\nc\n\n\nd",
    "\t",
    "\t\tx\t",
    " \t \n ",
    "emoji 🙂🤖🦙 done",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "CJK 中文字符 漢字 日本語 한국어",
    "rare 𠀀𠀁𪚥 CJK extension",
    "\u2581 literal space mark \u2581\u2581",
    "<start_of_turn>user\n",
    "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "<bos>",
    "<bos>text after bos",
    "text <bos> inside",
    "<eos><pad><unk>",
    "<start_of_turn",
    "<unused0> <unused1>",
    "<start_of_image>",
    "[multimodal]",
    "I'm here. Aren't you?",
]


def detok(llm, ids, special):
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_detokenize(llm._model.vocab, arr, len(ids), buf, len(buf), False, special)
    assert 0 <= n <= len(buf)
    return buf.raw[:n]


def with_detok(case, llm, ids, special):
    """llama_detokenize's bytes, and where they are not valid UTF-8, what a decoder that writes one
    U+FFFD per maximal ill-formed subpart (Python's errors="replace", hcq's llm_detokenize) makes
    of them."""
    raw = detok(llm, ids, special)
    case["detok_hex"] = raw.hex()
    valid = raw.decode("utf-8", errors="replace").encode("utf-8")
    if valid != raw:
        case["detok_valid_hex"] = valid.hex()
    return case


def spm_cases(llm):
    cases = []
    for text in TEXTS + SPM_TEXTS:
        for special in (True, False):
            ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
            cases.append(with_detok({"text": text, "special": special, "ids": ids}, llm, ids, special))
    for text in ["Hello world", "", " x", "<start_of_turn>user\nHi<end_of_turn>\n"]:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        cases.append(with_detok({"text": text, "special": True, "bos": True, "ids": ids}, llm, ids, True))
    for raw in RAW:
        ids = llm.tokenize(raw, add_bos=False, special=True)
        cases.append(with_detok({"hex": raw.hex(), "special": True, "ids": ids}, llm, ids, True))
    return cases


def piece(llm, token, special):
    buf = ctypes.create_string_buffer(4096)
    n = llama_cpp.llama_token_to_piece(llm._model.vocab, token, buf, len(buf), 0, special)
    assert 0 <= n <= len(buf)
    return buf.raw[:n]


def main():
    args = sys.argv[1:]
    spm = args[:1] == ["--spm"]
    args = args[1:] if spm else args
    if len(args) != 1:
        sys.exit("usage: llm-tokenizer-reference.py [--spm] MODEL.gguf > TABLE.json")
    path = args[0]
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    cases = spm_cases(llm) if spm else []
    for text in TEXTS if not spm else []:
        cases.append({"text": text, "special": True,
                      "ids": llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)})
    for text in SPECIAL_OFF if not spm else []:
        cases.append({"text": text, "special": False,
                      "ids": llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)})
    for raw in RAW if not spm else []:
        cases.append({"hex": raw.hex(), "special": True, "ids": llm.tokenize(raw, add_bos=False, special=True)})
    n_vocab = llm.n_vocab()
    step = 613 if spm else 61  # Gemma's 262k tokens: about 700 pieces
    ids = sorted(set(list(range(300)) + list(range(300, n_vocab, step)) + [n_vocab - 1]))
    pieces = [{"id": i, "hex": piece(llm, i, True).hex()} for i in ids]
    control = [i for i in range(n_vocab) if llama_cpp.llama_vocab_get_attr(llm._model.vocab, i)
               & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL]
    plain = [{"id": i, "hex": piece(llm, i, False).hex()} for i in (control[:200] if spm else control)]
    out = sys.stdout
    out.write('{"producer": %s,\n "model": %s,\n' % (
        json.dumps("llama-cpp-python %s (scripts/llm-tokenizer-reference.py)" % LLAMA_CPP_VERSION),
        json.dumps(path.rsplit("/", 1)[-1])))
    for name, rows in (("cases", cases), ("pieces", pieces), ("pieces_plain", plain)):
        out.write(' "%s": [\n' % name)
        out.write(",\n".join("  " + json.dumps(r, ensure_ascii=False) for r in rows))
        out.write("\n ]%s\n" % ("," if name != "pieces_plain" else ""))
    out.write("}\n")


main()
