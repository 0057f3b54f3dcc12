"""A sentencepiece model (a serialized sentencepiece.ModelProto) rebuilt
from a GGUF's "llama" vocabulary, so sentencepiece itself can tokenize with
it: the reference for SentencePiece-style vocabularies that come only as
GGUF (Gemma 3's). The protobuf is written by hand (field numbers from
sentencepiece_model.proto), which spares the tests a protobuf runtime.

What llama.cpp's converter changed is undone: it wrote user-defined pieces
with U+2581 turned back into spaces (llama.cpp matches them in the raw
text); sentencepiece matches them in the normalized text, where spaces are
U+2581. The model is BPE with byte fallback and the identity normalizer
(no NFKC), spaces escaped, no dummy prefix unless asked: what a GGUF with
add_space_prefix false describes.
Used by test_gemma3_tok.py and test_llamacpp_vocab.py."""
import struct

from gguf import GGUFReader

USER_DEFINED = 4


def _varint(n):
    if n < 0:
        n += 1 << 64  # int32 fields: negative values take ten bytes
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def _key(field, wire):
    return _varint(field << 3 | wire)


def _bytes(field, b):
    return _key(field, 2) + _varint(len(b)) + b


def _int(field, v):
    return _key(field, 0) + _varint(v)


def _float(field, v):
    return _key(field, 5) + struct.pack("<f", v)


def model_proto(tokens, scores, types, unk=0, bos=1, eos=2, pad=-1, add_dummy_prefix=False):
    """ModelProto bytes: pieces (1: piece, score, type), trainer_spec (2:
    model_type BPE, vocab_size, byte_fallback, ids), normalizer_spec (3)."""
    out = bytearray()
    for t, s, ty in zip(tokens, scores, types):
        piece = t if isinstance(t, bytes) else t.encode("utf-8")
        out += _bytes(1, _bytes(1, piece) + _float(2, s) + _int(3, ty))
    trainer = (_int(3, 2) + _int(4, len(tokens)) + _int(35, 1) + _int(40, unk) +
               _int(41, bos) + _int(42, eos) + _int(43, pad))
    out += _bytes(2, trainer)
    norm = _bytes(1, b"identity") + _int(3, int(add_dummy_prefix)) + _int(4, 0) + _int(5, 1)
    out += _bytes(3, norm)
    return bytes(out)


def from_gguf(path):
    """(ModelProto bytes, tokens, token types) for the GGUF's vocabulary."""
    f = GGUFReader(path).fields
    tokens = f["tokenizer.ggml.tokens"].contents()
    scores = f["tokenizer.ggml.scores"].contents()
    types = f["tokenizer.ggml.token_type"].contents()
    ids = {k: f[f"tokenizer.ggml.{k}_token_id"].contents()
           for k in ("unknown", "bos", "eos", "padding") if f"tokenizer.ggml.{k}_token_id" in f}
    prefix = f["tokenizer.ggml.add_space_prefix"].contents() \
        if "tokenizer.ggml.add_space_prefix" in f else True
    pieces = [t.replace(" ", "\u2581") if ty == USER_DEFINED else t
              for t, ty in zip(tokens, types)]
    proto = model_proto(pieces, scores, types, unk=ids.get("unknown", 0), bos=ids.get("bos", 1),
                        eos=ids.get("eos", 2), pad=ids.get("padding", -1),
                        add_dummy_prefix=prefix)
    return proto, tokens, types
