"""What the Python tests share: where the test models are (the same rule as
core/paths.c and scripts/fetch-model.sh) and a check counter."""
import os
import sys

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


def cache_dir():
    return os.environ.get("IGNITE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ignite")


def model_path():
    """$IGNITE_MODEL, else the default model in ignite's cache directory."""
    p = os.environ.get("IGNITE_MODEL")
    if p:
        return p
    return os.path.join(cache_dir(), DEFAULT_MODEL_FILE)


def gemma3_path():
    """$IGNITE_GEMMA3, else Gemma 3 270M Q4_K_M in the cache
    (scripts/fetch-model.sh gemma3-270m)."""
    return os.environ.get("IGNITE_GEMMA3") or os.path.join(cache_dir(), GEMMA3_FILE)


def llama_vocab(name):
    """llama.cpp's models/ggml-vocab-NAME.gguf from its source ($LLAMA_SRC, else
    the copy scripts/fetch-model.sh llama-src unpacks into the cache), or None
    where it is absent."""
    src = os.environ.get("LLAMA_SRC") or os.path.join(
        cache_dir(), "llama-src", "llama_cpp_python-0.3.36", "vendor", "llama.cpp")
    path = os.path.join(src, "models", f"ggml-vocab-{name}.gguf")
    return path if os.path.isfile(path) else None


def tiny_qwen35(tmp):
    """bench/random_gguf.py's tiny qwen35 (3 gated DeltaNet layers, then 1
    attention layer; Q8_0, seed 5) with llama.cpp's qwen35 vocabulary, written
    into folder tmp: its path, or None (said on stderr) without the vocabulary."""
    vocab = llama_vocab("qwen35")
    if not vocab:
        print("SKIP the tiny qwen35: no ggml-vocab-qwen35.gguf (scripts/fetch-model.sh "
              "llama-src)", file=sys.stderr)
        return None
    from bench_gguf import random_gguf
    path = os.path.join(tmp, "qwen35.gguf")
    random_gguf.write(path, "tiny", "Q8_0", seed=5, arch="qwen35", vocab_from=vocab)
    return path


_checks = 0
_failures = 0


def check(cond, what):
    """Counts a check; prints FAIL and what was wrong when cond is false."""
    global _checks, _failures
    _checks += 1
    if not cond:
        _failures += 1
        print(f"FAIL: {what}", file=sys.stderr)


def summary(name):
    """Prints the tally on stderr; returns the exit status (1 if any failed)."""
    print(f"{name}: {_checks} checks, {_failures} failed", file=sys.stderr)
    return 1 if _failures else 0


def sanitized():
    """True when the build under test has ASan + UBSan (ctest sets
    IGNITE_SANITIZED there; by hand, the build's CMakeCache.txt says): its
    forward is ~30x slower, so the model tests run shorter cases."""
    if os.environ.get("IGNITE_SANITIZED") == "1":
        return True
    cache = os.path.join(os.environ.get("IGNITE_BUILD_DIR", ""), "CMakeCache.txt")
    try:
        with open(cache) as f:
            return any(line.startswith("IGNITE_SANITIZE:BOOL=ON") for line in f)
    except OSError:
        return False
