"""hcq.llm against the hcq CLI on SmolLM2 (the same tokens, the same greedy text); skipped, saying
why, when the model is not in the data folder (the llm_model test fetches it)."""
import os
import subprocess

import pytest

import hcq
from hcq.llm import Model

CLI = os.environ.get("HCQ_CLI", "")
MODEL = os.path.expanduser(os.environ.get("HCQ_LLM_MODEL", "~/.local/share/hcq/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
pytestmark = pytest.mark.skipif(not os.path.exists(MODEL),
                                reason="the SmolLM2 model is not at %s (hcq generate --fetch-model)" % MODEL)
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def model():
    with Model(MODEL) as m:
        yield m


def _cli(*args):
    if not os.access(CLI, os.X_OK):
        pytest.skip("HCQ_CLI does not name the hcq tool")
    return subprocess.run([CLI, *args], check=True, capture_output=True, text=True).stdout


def test_info(model):
    info = model.info
    assert info["architecture"] == "llama" and info["layers"] == 30 and info["vocab"] == 49152
    assert info["device"] == "CPU:0"


def test_tokens_are_the_clis(model):
    ids = model.tokenize(PROMPT)
    assert ids == [int(t) for t in _cli("tokenize", "--model", MODEL, PROMPT).split()]
    assert model.detokenize(ids) == PROMPT


def test_greedy_text_is_the_clis(model):
    pieces = list(model.generate(PROMPT, max_tokens=12))
    assert len(pieces) >= 2
    assert "".join(pieces) == _cli("generate", "--model", MODEL, "--prompt", PROMPT, "--steps", "12").rstrip("\n")
    result = model.last_result
    assert result.stop in ("length", "end") and len(result.ids) <= 12
    assert result.prompt_tokens == len(model.tokenize(PROMPT))


def test_an_abandoned_iterator_stops_generation(model):
    stream = model.generate(PROMPT, max_tokens=200, ignore_eos=True)
    next(stream)
    stream.close()  # the callback returns false at the next token; the worker ends
    assert model.last_result.stop == "callback" and len(model.last_result.ids) < 200
    again = "".join(model.generate(PROMPT, max_tokens=4))  # and the model is free again
    assert again


def test_bad_arguments(model):
    with pytest.raises(hcq.Error):
        list(model.generate(PROMPT, max_tokens=4, temperature=-1.0))
    with pytest.raises(hcq.Error):
        Model("/nonexistent.gguf")


def test_sampling_chain_is_the_clis(model):
    chain = dict(top_k=40, top_p=0.9, min_p=0.05, seed=7, repeat_penalty=1.2, frequency_penalty=0.1,
                 presence_penalty=0.1, penalty_last_n=32)
    text = "".join(model.generate(PROMPT, max_tokens=10, temperature=0.8, **chain))
    cli = _cli("generate", "--model", MODEL, "--prompt", PROMPT, "--steps", "10", "--temperature", "0.8",
               "--top-k", "40", "--top-p", "0.9", "--min-p", "0.05", "--seed", "7", "--repeat-penalty", "1.2",
               "--frequency-penalty", "0.1", "--presence-penalty", "0.1", "--repeat-last-n", "32")
    assert text == cli.rstrip("\n")


def test_a_stop_string_ends_the_text_before_it(model):
    full = "".join(model.generate(PROMPT, max_tokens=12))
    cut = full[len(full) // 2:][:3]  # a piece from the middle of the greedy text
    text = "".join(model.generate(PROMPT, max_tokens=12, stop=["zzz-never", cut]))
    assert text == full[:full.index(cut)] and model.last_result.stop == "stop"


def test_an_unknown_option_is_a_type_error(model):
    with pytest.raises(TypeError, match="top_q"):
        model.generate(PROMPT, top_q=0.5)
