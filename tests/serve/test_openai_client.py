"""hcq serve with the official `openai` Python package (from PyPI, installed into a venv in the build
folder): a plain chat completion, a streamed one, a text completion and eight chat completions at
once, each greedy answer equal to `hcq generate`'s text for the same prompt.

usage: test_openai_client.py HCQ VENV  (exit 77: skipped, no model or PyPI out of reach)"""
import concurrent.futures
import os
import subprocess
import sys

from serve_util import Server, expected_text, model_path, skip

KEY = "sk-openai-client"


def venv_python(venv):
    """The venv's python with openai importable; None when PyPI cannot be reached."""
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    if subprocess.run([python, "-c", "import openai"], capture_output=True).returncode == 0:
        return python
    r = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "openai"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(r.stderr[-2000:])
        return None
    return python


# Runs inside the venv: prints one line per check, raises on a wrong answer.
CLIENT = r'''
import concurrent.futures, json, sys
import openai
port, key, chat_want, text_want = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
client = openai.OpenAI(base_url="http://127.0.0.1:%s/v1" % port, api_key=key, max_retries=0)
model = client.models.list().data[0].id
msgs = [{"role": "user", "content": "What is the capital of France?"}]
r = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
assert r.choices[0].message.content == chat_want, (r, chat_want)
assert r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "length", r
print("plain: ok")
parts = []
for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
assert "".join(parts) == chat_want, (parts, chat_want)
print("streaming: ok (%d chunks)" % len(parts))
c = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
assert c.choices[0].text == text_want, (c, text_want)
print("completions: ok")
r = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, logprobs=True,
                                   top_logprobs=2)
content = r.choices[0].logprobs.content
assert "".join(bytes(t.bytes).decode("utf-8", "replace") for t in content) == chat_want, content
assert all(len(t.top_logprobs) == 2 and t.top_logprobs[0].logprob >= t.logprob - 1e-6 for t in content), content
print("logprobs: ok")
def one(i):
    return client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0,
                                          stream=bool(i % 2))
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    results = list(pool.map(one, range(8)))
for i, r in enumerate(results):
    text = r.choices[0].message.content if not i % 2 else "".join(
        ch.choices[0].delta.content or "" for ch in r if ch.choices)
    assert text == chat_want, (i, text, chat_want)
print("eight concurrent (4 streamed): ok")
try:
    client.chat.completions.create(model="no-such-model", messages=msgs, max_tokens=1)
    raise AssertionError("an unknown model was accepted")
except openai.NotFoundError as e:
    assert e.code == "model_not_found", e
try:
    openai.OpenAI(base_url="http://127.0.0.1:%s/v1" % port, api_key="wrong", max_retries=0).models.list()
    raise AssertionError("a wrong key was accepted")
except openai.AuthenticationError:
    pass
print("errors as openai exceptions: ok")
'''


def main():
    hcq, venv = sys.argv[1], sys.argv[2]
    model = model_path()
    if not model:
        skip("the SmolLM2 model is not there (the llm_model test fetches it)")
    try:
        python = venv_python(venv)
    except (subprocess.SubprocessError, OSError) as e:
        python = None
        print(e)
    if not python:
        skip("the openai package could not be installed from PyPI into %s" % venv)
    import json
    chat_want = expected_text(hcq, model, "What is the capital of France?", 12, chat=True)
    text_want = expected_text(hcq, model, "The capital of France is", 8)
    with Server(hcq, model, "--ctx", "1024", api_key=KEY) as server:
        server.wait_ready()
        subprocess.run([python, "-c", CLIENT, str(server.port), KEY, json.dumps(chat_want), json.dumps(text_want)],
                       check=True, timeout=300)
        assert server.stop() == 0, server.output()
        server.check_sanitizers()


if __name__ == "__main__":
    main()
