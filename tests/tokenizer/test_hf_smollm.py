#!/usr/bin/env python3
"""ignite's tokenizer vs HF tokenizers on the test model (SmolLM2, gpt2 BPE
with the smollm pre-tokenizer), over every string of corpus.txt and 5,000 random strings of edge characters:
  - ids identical, with special-token parsing on and off;
  - decode(encode(s)) == s byte for byte, and the streaming decoder agrees
    with it and never emits a partial UTF-8 character;
  - strings that are not valid UTF-8 against HF's pipeline fed the raw bytes
    (hfref.hf_encode_raw; HF itself only takes valid text).
Exits 77 when the model is absent. Labels: tokenizer, model."""
import sys

import corpus
import hfref


def main():
    model = corpus.model_path()
    if not model:
        print("test model not found; skipped")
        return 77
    records = corpus.load() + corpus.random_strings(5000, seed=11)
    failures = 0
    for special in (True, False):
        tk, tokens, types = hfref.smollm_tokenizer(model, specials=special)
        specials = {tokens[i].encode(): i for i in range(len(tokens))
                    if types[i] in (hfref.CONTROL, hfref.USER_DEFINED)} if special else {}
        args = ["encode", model] + ([] if special else ["--no-special"])
        lines = corpus.run_tool(args, records)
        n_valid = n_invalid = 0
        # Bytes the vocabulary has no token for: both tokenizers drop them.
        enc = hfref.bytes_to_unicode()
        vocab = set(tokens)
        missing = {b for b in range(256) if enc[b] not in vocab}
        for rec, line in zip(records, lines):
            f = line.split()
            rt, st, ours = f[0], f[1], [int(x) for x in f[2:]]
            if corpus.is_valid(rec):
                n_valid += 1
                want = tk.encode(rec.decode("utf-8")).ids
                # HF's own decoder must give the text back too (sanity of the reference).
                if tk.decode(want, skip_special_tokens=False) != rec.decode("utf-8") and \
                        not any(x in missing for x in rec):
                    print("reference does not round-trip: %r" % rec[:80])
            else:
                n_invalid += 1
                want = hfref.hf_encode_raw(tk, specials, rec)
            problems = []
            if ours != want:
                i = corpus.first_diff(ours, want)
                problems.append("ids differ at position %d: ours %s, HF %s" %
                                (i, ours[i:i + 6], want[i:i + 6]))
            if rt != "1" and not any(x in missing for x in rec):
                problems.append("decode(encode(s)) != s")
            if st != "1":
                problems.append("streaming decode differs or split a UTF-8 character")
            if problems:
                failures += 1
                if failures <= 10:
                    print("MISMATCH (special=%s) %r:\n  %s" % (special, rec[:120], "\n  ".join(problems)))
        print("special=%s: %d valid + %d invalid-UTF-8 strings compared" % (special, n_valid, n_invalid))
    print("bytes without a token (dropped by both): %s" % sorted(missing))
    print("%d mismatching strings" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
