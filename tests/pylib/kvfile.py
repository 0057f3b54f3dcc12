"""tests/pylib/kvfile.py: the token ids of a saved KV cache (--save-kv), read
by the format's table in docs/kvcache.md rather than by ignite: versions 2
and 3 (the head, then a 24-byte entry a group and a 40-byte entry a layer,
then the tokens; 3 differs only in a quantized K's rotation) and version 1
(an 88-byte head, then the tokens)."""
import struct


def kv_tokens_of(data):
    """The token ids saved in `data`, the bytes of a cache file."""
    if data[:8] != b"IGNITEKV":
        raise ValueError("not an ignite KV cache file")
    version = struct.unpack_from("<I", data, 8)[0]
    if version == 1:
        n = struct.unpack_from("<q", data, 72)[0]
        at = 88
    elif version in (2, 3):
        n_layer, n_groups, n = struct.unpack_from("<3q", data, 48)
        at = 80 + 24 * n_groups + 40 * n_layer
    else:
        raise ValueError(f"KV cache file version {version}")
    return list(struct.unpack_from(f"<{n}i", data, at))


def kv_tokens(path):
    """The token ids saved in the cache file at `path`."""
    with open(path, "rb") as f:
        return kv_tokens_of(f.read())


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli, reflected 0x82F63B78), as core/checksum.c."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def kv_v1_of(data):
    """The version 1 file (docs/kvcache.md) of a version 2 or 3 file whose layers
    are all full attention or sliding window with one shape: the same body
    after the old 88-byte head, the checksum computed again."""
    n_layer, n_groups, n, n_vocab = struct.unpack_from("<4q", data, 48)
    at = 80 + 24 * n_groups
    layers = [struct.unpack_from("<5q", data, at + 40 * i) for i in range(n_layer)]
    kinds = [struct.unpack_from("<I", data, 80 + 24 * g)[0] for g in range(n_groups)]
    shapes = {(heads, dim) for _, heads, dim, _, _ in layers}
    if len(shapes) != 1 or any(k not in (0, 1) for k in kinds):
        raise ValueError("version 1 holds every layer's K and V alike")
    heads, dim = shapes.pop()
    head = data[:8] + struct.pack("<I", 1) + data[12:48] + \
        struct.pack("<5q", n_layer, heads, dim, n, n_vocab)
    body = head + data[at + 40 * n_layer:-4]
    return body + struct.pack("<I", crc32c(body))
