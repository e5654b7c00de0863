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
