"""Language models from GGUF files (include/hcq/llm.h, libhcq_llm): what `hcq generate` runs.

    from hcq.llm import Model
    with Model("smollm2") as model:               # a GGUF path, "smollm2" or "gemma-3-270m"
        for piece in model.generate("The capital of France is", max_tokens=16):
            print(piece, end="", flush=True)

generate() is an iterator: the C library generates on a worker thread whose token callback hands
each piece to the iterator through a queue, and returns false (stopping generation at the next
token) once the iterator is closed or collected, so an abandoned iterator neither blocks nor keeps
generating. One generation per model at a time (others wait for it).
"""
import queue
import threading
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Union

from ._ffi import NULL, ffi, llm_lib, text
from .status import Closeable, InvalidArgument, check, closed_error

_ALIASES = {"smollm2": "smollm2-135m", "smollm": "smollm2-135m"}


def _lib():
    return llm_lib()


def known_models() -> List[str]:
    """The model names Model() downloads on first use (the default first)."""
    lib = _lib()
    return [text(lib.hcq_llm_known_model(i)) for i in range(lib.hcq_llm_known_model_count())]


_SAMPLING = ("top_k", "top_p", "min_p", "seed", "repeat_penalty", "frequency_penalty", "presence_penalty",
             "penalty_last_n")


def _generate_options(max_tokens: int, temperature: float, options: Dict[str, object]):
    """hcq_llm_generate_options_t from generate()'s keywords, and the C strings it points to (kept
    alive by the caller while the generation runs). An unknown keyword is a TypeError, as Python's."""
    unknown = set(options) - set(_SAMPLING) - {"stop", "ignore_eos", "special"}
    if unknown:
        raise TypeError(f"generate() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    sampling = {"temperature": temperature, **{k: options[k] for k in _SAMPLING if k in options}}
    stops = options.get("stop") or []
    if isinstance(stops, str):
        stops = [stops]
    keep = [ffi.new("char[]", str(s).encode()) for s in stops]
    array = ffi.new("char *[]", keep) if keep else NULL
    c_options = ffi.new("hcq_llm_generate_options_t *", {
        "max_tokens": max_tokens, "ignore_eos": bool(options.get("ignore_eos", False)),
        "special": bool(options.get("special", False)), "sampling": sampling, "stop": array, "nstop": len(keep)})
    return c_options, (keep, array)


class Result(NamedTuple):
    """How the last generation went (hcq_llm_result_t)."""
    ids: List[int]
    stop: str  # "end", "length", "context" or "callback"
    prompt_tokens: int
    prompt_ms: float
    decode_ms: float
    host_us_per_token: float


class Model(Closeable):
    """A GGUF language model on an hcq device. model: a file path, or a known name ("smollm2",
    "smollm2-135m", "gemma-3-270m"; downloaded into the data folder on first use unless
    no_download). device: "CPU" (default), "VULKAN", "CUDA" or "METAL". ctx: positions (0: the
    model's trained context, at most 4096). eager: kernel launches instead of graph replays."""

    def __init__(self, model: Optional[str] = None, *, device: Optional[str] = None, ctx: int = 0,
                 max_batch: int = 0, eager: bool = False, no_download: bool = False) -> None:
        lib = _lib()
        self._ptr = NULL
        self._lock = threading.Lock()
        name = _ALIASES.get(model, model) if model else None
        self._device = ffi.new("char[]", device.encode()) if device else NULL
        options = ffi.new("hcq_llm_options_t *", {"device": self._device, "ctx": ctx, "max_batch": max_batch,
                                                   "eager": eager, "no_download": no_download})
        out = ffi.new("hcq_llm_t **")
        check(lib.hcq_llm_open(name.encode() if name else NULL, options, out))
        self._ptr = out[0]
        self.last_result: Optional[Result] = None

    def _live(self):
        if self._ptr == NULL:
            raise closed_error("model")
        return self._ptr

    @property
    def info(self) -> Dict[str, object]:
        """path, name, architecture, weight_types, chat_template, device, vocab, ctx, layers, ..."""
        out = ffi.new("hcq_llm_info_t *")
        _lib().hcq_llm_get_info(self._live(), out)
        fields = {f: getattr(out, f) for f in dir(out)}
        return {f: (text(v) if isinstance(v, ffi.CData) else v) for f, v in fields.items()}

    def tokenize(self, text_: str, *, add_special: bool = True, parse_special: bool = True) -> List[int]:
        """The token ids of text; add_special: the model's start token in front; parse_special:
        special tokens spelled in the text (<|im_start|>) are matched (as `hcq tokenize`)."""
        data = text_.encode()
        cap = len(data) + 8
        ids, n = ffi.new("int32_t[]", cap), ffi.new("size_t *")
        check(_lib().hcq_llm_tokenize(self._live(), data, len(data), add_special, parse_special, ids, cap, n))
        return list(ids[0:n[0]])

    def detokenize(self, ids: Sequence[int], *, special: bool = True) -> str:
        """The text of ids (special: control tokens' text too)."""
        array = ffi.new("int32_t[]", list(ids) or [0])
        length = ffi.new("size_t *")
        cap = 16 * len(ids) + 64
        while True:
            out = ffi.new("char[]", cap)
            check(_lib().hcq_llm_detokenize(self._live(), array, len(ids), special, out, cap, length))
            if length[0] < cap:
                return ffi.unpack(out, length[0]).decode("utf-8", "replace")
            cap = length[0] + 1

    def generate(self, prompt: Union[str, Sequence[int]], max_tokens: int = 256, temperature: float = 0.0,
                 **options) -> Iterator[str]:
        """The text of each new token, as generated (the same tokens as `hcq generate --prompt`
        with the same options). prompt: text (tokenized with special tokens matched) or token ids.
        temperature 0 is greedy. options, as hcq_llm_generate_options_t and hcq_llm_sampling_t name
        them: top_k, top_p, min_p, seed, repeat_penalty, frequency_penalty, presence_penalty,
        penalty_last_n, stop (a list of strings), ignore_eos, special. When it ends, last_result says
        why (stop "stop" for a stop string) and how fast."""
        c_options, keep = _generate_options(max_tokens, temperature, options)
        if isinstance(prompt, str):
            c_prompt = ffi.new("char[]", prompt.encode())
            start = lambda: _lib().hcq_llm_generate_text(self._ptr, c_prompt, c_options, result)  # noqa: E731
        else:
            ids = ffi.new("int32_t[]", list(prompt) or [0])
            start = lambda: _lib().hcq_llm_generate(self._ptr, ids, len(prompt), c_options, result)  # noqa: E731
        result = ffi.new("hcq_llm_result_t *")
        return self._stream(start, c_options, result, keep)

    def chat(self, messages: Sequence[Dict[str, str]], max_tokens: int = 256, temperature: float = 0.0,
             **options) -> Iterator[str]:
        """generate() on a conversation ([{"role": "user", "content": "..."}]) rendered in the model's
        chat template, ending with the assistant's opening (as `hcq generate --chat`); the same
        options as generate()."""
        c_options, keep = _generate_options(max_tokens, temperature, options)
        texts = [(ffi.new("char[]", m["role"].encode()), ffi.new("char[]", m["content"].encode())) for m in messages]
        array = ffi.new("hcq_llm_message_t[]", [{"role": r, "content": c} for r, c in texts] or [{}])
        result = ffi.new("hcq_llm_result_t *")
        start = lambda: _lib().hcq_llm_chat(self._ptr, array, len(messages), c_options, result)  # noqa: E731
        return self._stream(start, c_options, result, keep, texts)

    def _stream(self, start, options, result, *keep) -> Iterator[str]:
        self._live()
        pieces: "queue.Queue" = queue.Queue()  # unbounded: the producer never blocks on a gone reader
        stop = threading.Event()

        @ffi.callback("bool(void *, int32_t, const char *, size_t)")
        def on_token(user, token, piece, length):
            pieces.put(ffi.unpack(piece, length) if length else b"")
            return not stop.is_set()

        options.on_token = on_token
        outcome = {}

        def work():
            with self._lock:
                try:
                    check(start())
                    stop_name = text(_lib().hcq_llm_stop_name(result.stop))
                    outcome["result"] = Result(list(result.ids[0:result.n]), stop_name,
                                               result.prompt_tokens, result.prompt_ms, result.decode_ms,
                                               result.host_us_per_token)
                except Exception as error:  # noqa: BLE001 - handed to the reader
                    outcome["error"] = error
                finally:
                    _lib().hcq_llm_result_free(result)
                    pieces.put(None)

        worker = threading.Thread(target=work, name="hcq.llm.generate", daemon=True)
        worker.start()
        return self._reader(pieces, stop, worker, outcome, on_token, keep)

    def _reader(self, pieces, stop, worker, outcome, on_token, keep) -> Iterator[str]:
        pending = b""
        try:
            while True:
                piece = pieces.get()
                if piece is None:
                    break
                pending += piece
                try:
                    out, pending = pending.decode("utf-8"), b""
                except UnicodeDecodeError:  # a character split over tokens: wait for its end
                    continue
                if out:
                    yield out
            if pending:
                yield pending.decode("utf-8", "replace")
        finally:  # also when the reader is closed or collected (GeneratorExit)
            stop.set()
            worker.join()
            self.last_result = outcome.get("result", self.last_result)
        if "error" in outcome:
            raise outcome["error"]

    def complete(self, prompt: Union[str, Sequence[int]], max_tokens: int = 256, **kw) -> str:
        """generate() joined into one string."""
        return "".join(self.generate(prompt, max_tokens, **kw))

    def close(self) -> None:
        """Waits for the device and frees the model (idempotent)."""
        with self._lock:
            ptr, self._ptr = self._ptr, NULL
            if ptr != NULL:
                check(_lib().hcq_llm_close(ptr))

    def __enter__(self) -> "Model":
        return self
