"""The reference tokenizers, built independently of ignite from a GGUF read
by the gguf package: HF tokenizers set up as SmolLM2's original pipeline.
Shared by test_hf_smollm.py and bench/tokenizer_speed.py."""
from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

CONTROL = 3
USER_DEFINED = 4


def read_vocab(path):
    r = GGUFReader(path)
    f = r.fields
    tokens = f["tokenizer.ggml.tokens"].contents()
    types = f["tokenizer.ggml.token_type"].contents()
    merges = f["tokenizer.ggml.merges"].contents()
    pre = f["tokenizer.ggml.pre"].contents()
    return tokens, types, merges, pre


def smollm_tokenizer(path, specials=True):
    """SmolLM2's tokenizer.json pipeline: Digits(individual) then ByteLevel
    with GPT-2's regex, BPE over the GGUF's vocabulary and merges, ByteLevel
    decoder, and the control/user-defined tokens as added special tokens."""
    tokens, types, merges, _ = read_vocab(path)
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab, [tuple(m.split(" ", 1)) for m in merges])
    tk = Tokenizer(bpe)
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel()
    if specials:
        tk.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                               for i in range(len(tokens)) if types[i] in (CONTROL, USER_DEFINED)])
    return tk, tokens, types


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (as in its encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def split_chars(b):
    """Characters of raw bytes: a valid UTF-8 sequence is one character, any
    other byte is one character of its own (ignite's documented rule)."""
    out = []
    i = 0
    while i < len(b):
        c = b[i]
        n = 1 if c < 0x80 else 2 if 0xC2 <= c <= 0xDF else 3 if 0xE0 <= c <= 0xEF else \
            4 if 0xF0 <= c <= 0xF4 else 0
        if n > 1:
            try:
                out.append((b[i:i + n].decode("utf-8"), b[i:i + n]))
                i += n
                continue
            except UnicodeDecodeError:
                pass
        if n == 1:
            out.append((chr(c), b[i:i + 1]))
        else:
            out.append((None, b[i:i + 1]))
        i += 1
    return out


def hf_encode_raw(tk, specials, b):
    """HF's pipeline applied to bytes that are not valid UTF-8: special text
    is split out (leftmost, longest), each invalid byte stands in as U+FFFD
    (class 'other', like ignite treats it) for HF's pre-tokenizer, and the
    raw bytes of each pre-token go through HF's BPE model."""
    enc = bytes_to_unicode()
    ids = []
    sp = sorted(specials.items(), key=lambda kv: -len(kv[0]))
    i = start = 0
    segs = []
    while i < len(b):
        hit = next(((t, tid) for t, tid in sp if b.startswith(t, i)), None)
        if hit:
            segs.append((b[start:i], None))
            segs.append((None, hit[1]))
            i += len(hit[0])
            start = i
        else:
            i += 1
    segs.append((b[start:], None))
    for text, sid in segs:
        if sid is not None:
            ids.append(sid)
            continue
        if not text:
            continue
        chars = split_chars(text)
        s = "".join(c if c is not None else "\ufffd" for c, _ in chars)
        for _, (a, e) in tk.pre_tokenizer.pre_tokenize_str(s):
            raw = b"".join(rb for _, rb in chars[a:e])
            ids += [t.id for t in tk.model.tokenize("".join(enc[x] for x in raw))]
    return ids
