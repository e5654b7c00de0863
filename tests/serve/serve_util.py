"""What the hcq serve tests share: the model's path, a server process on a free port, plain HTTP
requests (the standard library only), and the expected greedy text from `hcq generate`."""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

SKIP = 77  # CTest's SKIP_RETURN_CODE


def model_path():
    """SmolLM2 (HCQ_LLM_MODEL, else the default model's place), or None when it is not there."""
    env = os.environ.get("HCQ_LLM_MODEL")
    if env:
        return env if os.path.exists(env) else None
    data = os.environ.get("HCQ_DATA_DIR")
    if not data:
        xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
        data = os.path.join(xdg, "hcq")
    path = os.path.join(data, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.exists(path) else None


def skip(why):
    print("SKIP: " + why)
    sys.exit(SKIP)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """hcq serve on a free port; wait_ready() polls /health until 200."""

    def __init__(self, hcq, model, *extra, api_key=None):
        self.port = free_port()
        self.api_key = api_key
        args = [hcq, "serve", "--model", model, "--port", str(self.port)] + list(extra)
        if api_key:
            args += ["--api-key", api_key]
        tmp = os.environ.get("HCQ_TEST_TMP", "/tmp")
        os.makedirs(tmp, exist_ok=True)
        self.log = open(os.path.join(tmp, "serve-%d.log" % self.port), "w+")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def headers(self, extra=None):
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        h.update(extra or {})
        return h

    def request(self, method, path, body=None, headers=None, conn=None, timeout=60):
        """(status, headers dict, body bytes); body: a dict (sent as JSON), str or bytes."""
        if isinstance(body, dict):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        own = conn is None
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers if headers is not None else self.headers())
            r = conn.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            if own:
                conn.close()

    def post(self, path, body, **kw):
        status, headers, data = self.request("POST", path, body, **kw)
        return status, headers, json.loads(data) if data else None

    def wait_ready(self, seconds=120):
        seen = []
        until = time.time() + seconds
        while time.time() < until:
            if self.proc.poll() is not None:
                raise AssertionError("hcq serve exited %d: %s" % (self.proc.returncode, self.output()))
            try:
                status, _, _ = self.request("GET", "/health", headers={}, timeout=5)
                seen.append(status)
                if status == 200:
                    return seen
            except OSError:
                pass
            time.sleep(0.005)
        raise AssertionError("hcq serve not ready after %ds: %s" % (seconds, self.output()))

    def metrics(self):
        status, _, data = self.request("GET", "/metrics")
        assert status == 200, status
        values = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.split()
                values[name] = float(value)
        return values

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return -1

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def stop(self, sig=signal.SIGTERM, seconds=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("hcq serve did not exit %ds after the signal" % seconds)

    def check_sanitizers(self):
        """Fails on a sanitizer's report in the server's output (a sanitizer build's hcq)."""
        self.log.flush()
        self.log.seek(0)
        text = self.log.read()
        for mark in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer", "runtime error:"):
            if mark in text:
                raise AssertionError("hcq serve's output has a sanitizer report:\n" + text[text.index(mark):][:6000])

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        """A failure prints the server's output; the server never outlives the block."""
        if exc_type is not None:
            print(self.output())
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return False


def expected_text(hcq, model, prompt, steps, chat=False, extra=()):
    """Greedy text from `hcq generate` (the same library, no server): the ground truth; extra: more
    of generate's options (the sampling chain)."""
    args = [hcq, "generate", "--model", model, "--steps", str(steps), "--json", *extra]
    args += ["--chat", prompt] if chat else ["--prompt", prompt]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["text"]


def sse_events(raw):
    """The data: payloads of a server-sent event stream, in order."""
    events = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                events.append(line[6:])
    return events
