"""What the Python tests share: where the test model is, the same rule as
core/paths.c and scripts/fetch-model.sh."""
import os

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_path():
    """$IGNITE_MODEL, else the default model in ignite's cache directory."""
    p = os.environ.get("IGNITE_MODEL")
    if p:
        return p
    cache = os.environ.get("IGNITE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ignite")
    return os.path.join(cache, DEFAULT_MODEL_FILE)
