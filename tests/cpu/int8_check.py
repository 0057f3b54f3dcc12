"""The int8 path's logits against an fp64 reference, step by step: what the
architecture tests (test_moe.py, test_deltanet.py) share."""
import numpy as np


def int8_steps_match(ours, ref, steps, name):
    """ours: [steps, n_vocab] logits of the int8 path; steps: the token lists the
    reference runs in turn (the prompt, then one token a step). Each step within
    NMSE 1e-3 and 4e-2 of the largest logit, the same top token; prints one line."""
    cache = ref.new_cache()
    worst = [0.0, 0.0]
    for i, toks in enumerate(steps):
        r = ref.forward(toks, cache)
        nmse = np.mean((ours[i] - r) ** 2) / np.mean(r ** 2)
        rel = np.abs(ours[i] - r).max() / np.abs(r).max()
        worst = [max(worst[0], nmse), max(worst[1], rel)]
        if nmse > 1e-3 or rel > 4e-2 or int(np.argmax(ours[i])) != int(np.argmax(r)):
            print(f"FAIL {name}, int8 path, step {i}: nmse {nmse:.2e}, relative {rel:.2e}, "
                  f"top {int(np.argmax(ours[i]))} vs {int(np.argmax(r))}")
            return False
    print(f"ok     {name}, int8 path: worst nmse {worst[0]:.2e}, relative {worst[1]:.2e}")
    return True
