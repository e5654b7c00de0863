"""examples/python run and check themselves (the LLM one is left to test_llm.py: it downloads)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("name", ["mlp", "jit_decorator", "dlpack"])
def test_example_runs(name):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", name + ".py")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
