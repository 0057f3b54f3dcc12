"""bench/random_gguf.py, the writer of random GGUF files, for the tests:
`from bench_gguf import random_gguf`. It imports its siblings in bench/
(randgguf_*.py), so bench/ goes on sys.path here, once."""
import os
import sys

_BENCH = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                       "bench"))
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)

import random_gguf  # noqa: E402,F401
