"""bench/gguf_to_f32.py: rewrites a GGUF model with every tensor dequantized
to F32 (metadata copied as is), so ignite and llama.cpp can be compared on
the f32 weights path without downloading another file.
Usage: gguf_to_f32.py IN.gguf OUT.gguf   (needs the gguf and numpy packages)"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = GGUFReader(src)
    arch = r.fields["general.architecture"]
    arch = bytes(arch.parts[arch.data[0]]).decode()
    w = GGUFWriter(dst, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vt = f.types[0]
        if vt == GGUFValueType.ARRAY:
            sub = f.types[1]
            if sub == GGUFValueType.STRING:
                val = [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data]
            else:
                val = [f.parts[i][0].item() for i in f.data]
            w.add_key_value(name, val, vt, sub_type=sub)
        elif vt == GGUFValueType.STRING:
            w.add_key_value(name, bytes(f.parts[f.data[0]]).decode("utf-8", "surrogateescape"), vt)
        else:
            w.add_key_value(name, f.parts[f.data[0]][0].item(), vt)
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = [int(x) for x in reversed(t.shape.tolist())]
        w.add_tensor(t.name, a.reshape(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
