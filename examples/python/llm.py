"""SmolLM2 from Python, streamed as it is generated (the same text as `hcq generate`).
    python3 examples/python/llm.py ["prompt"]"""
import sys

from hcq.llm import Model

with Model("smollm2") as model:  # downloaded into the data folder on first use (98 MB)
    question = sys.argv[1] if len(sys.argv) > 1 else "What is the capital of France? Answer in one sentence."
    for piece in model.chat([{"role": "user", "content": question}], max_tokens=64):
        print(piece, end="", flush=True)
    r = model.last_result
    print("\n[%d tokens, stop: %s, %.1f tok/s]" % (len(r.ids), r.stop, len(r.ids) / (r.decode_ms / 1e3 or 1)))
