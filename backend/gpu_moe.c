/* backend/gpu_moe.c: the mixture-of-experts FFN of the CUDA backend
 * (LAYER_FFN_MOE; qwen3moe, gpt-oss, qwen35moe), the rules of backend/cpu_moe.c on the device:
 *
 *   xn = norm(x) (f16, the experts' input; a fused product before may have
 *   left it); route: each row's router logits from its own f32 norm and the
 *   f32 router, top-k, softmax, renormalized (gk_moe_route); the (row, slot)
 *   pairs grouped by expert into tiles (gk_moe_sort); gate|up of every tile
 *   with SwiGLU into h (gk_moe_gemv, one launch), down of every tile into y
 *   (one launch); x += sum over a row's experts, ascending, w y
 *   (gk_moe_combine). Prefill steps whose pairs average GK_MOE_MMA_MIN_PAIRS
 *   an expert or more take the tensor cores instead (gk_moe_choose): tiles
 *   of 64 pairs, both products gk_moe_mma.
 *
 * qwen35moe's shared expert (MODEL_FEAT_MOE_SHEXP): its gate|up (one fused
 * matrix) with SwiGLU and its down through gpu_matmul, the dense FFN's
 * products, on the same xn; its weight sigmoid(ffn_gate_inp_shexp . xn)
 * from the router's f32 norm (gk_moe_route); x += weight * output by
 * gk_moe_combine with one slot. Three launches more (two fused).
 *
 * Gemma 4's MoE (MODEL_FEAT_MOE_MLP, llama.cpp's gemma4.cpp; the CPU's
 * rules in cpu_moe.c): a dense GeGLU MLP beside the experts on its own
 * norm (ffn_norm) into g->proj (a tensor-parallel rank: acc's rows after
 * the experts'); the experts on pre_ffw_norm_2's xn, routed
 * from rmsnorm(x) / sqrt(n_embd) * ffn_gate_inp.scale (gk_moe_route's
 * in_scale), GeGLU experts, each down product times its expert's scale
 * (gk_moe_gemv's scale) and summed into b->acc (zeroed); then acc =
 * post_ffw_norm_2(acc) + post_ffw_norm_1(proj) and x += post_ffw_norm(acc).
 *
 * A tensor-parallel rank (backend/gpu_tp.c) holds whole experts [expert0,
 * expert0 + its count) (models/tp.c): it routes over all of them (the router
 * replicated), sorts the pairs of its own alone (gk_moe_sort's expert0, its
 * tiles naming them from 0: its rows of the expert matrices), combines
 * those slots alone (struct gk_moe_part), rank 0's into x, the others' into
 * zeroed rows, and the FFN's all-reduce sums them (gpu_tp_partial_rows).
 * Its columns of qwen35moe's shared expert add into the same rows (the
 * sigmoid weight every rank's whole one). Gemma 4's two partial sums are
 * summed by one all-reduce of both before their norms (beside_sum), in place
 * of the layer loop's.
 *
 * Five launches (six with the norm) whatever the routing: nothing goes to
 * the host, so a decode step's graph replays for any choice of experts. A
 * row's result depends on its own routing alone (each pair's products are
 * its own sums; the tile it shares changes nothing), so batch invariance
 * holds. Kernels in ops/gpu_moe.cu. Compiled twice like gpu.c. Covered by
 * tests/emu/test_backend_moe_emu.c, across ranks tests/tp/test_tp_gpu.py. */
#include "backend/gpu_impl.h"

#include "core/status.h"
#include "ops/gpu_moe.h"
#include "ops/gpu_ops.h"

#include <math.h>

_Static_assert(GK_MOE_MAX_EXPERTS == MODEL_MAX_EXPERTS, "the kernels' expert bound");

/* The largest n_expert, n_expert_used and expert width of m's MoE layers
 * (zeros without one). */
static void moe_max(const struct model *m, int64_t *ne, int64_t *k, int64_t *ff)
{
    *ne = *k = *ff = 0;
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        if (L->ffn != LAYER_FFN_MOE)
            continue;
        *ne = L->n_expert > *ne ? L->n_expert : *ne;
        *k = L->n_expert_used > *k ? L->n_expert_used : *k;
        *ff = L->n_ff > *ff ? L->n_ff : *ff;
    }
}

size_t IG_DEV(gpu_moe_buf_bytes)(const struct model *m, int64_t max_batch)
{
    int64_t ne, k, ff;
    moe_max(m, &ne, &k, &ff);
    size_t pairs = (size_t)(max_batch * k), e = (size_t)m->hp.n_embd;
    if (!pairs)
        return 0;
    return pairs * (4 + 4 + 4 + 2 * (size_t)ff + 4 * e) +
           (size_t)gk_moe_max_tiles((int64_t)pairs, ne) * 12 + 4 +
           (m->hp.has_moe_shexp ? (size_t)max_batch * (4 + 4 * e) : 0) +
           (m->hp.has_moe_mlp ? (size_t)max_batch * 8 * e : 0);
}

int IG_DEV(gpu_moe_alloc)(struct gpu_backend *g)
{
    int64_t ne, k, ff;
    moe_max(g->m, &ne, &k, &ff);
    size_t pairs = (size_t)(g->max_batch * k), e = (size_t)g->m->hp.n_embd;
    struct gpu_moe_bufs *b = &g->moe;
    if (!pairs)
        return IG_OK;
    size_t tiles = (size_t)gk_moe_max_tiles((int64_t)pairs, ne);
    int st;
    if ((st = IG_DEV(gpu_alloc)(g, pairs * 4, &b->sel, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, pairs * 4, &b->wts, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, pairs * 4, &b->order, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, tiles * 12, &b->tiles, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, 4, &b->n_tiles, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, pairs * (size_t)ff * 2, &b->h, NULL)) ||
        (st = IG_DEV(gpu_alloc)(g, pairs * e * 4, &b->y, NULL)))
        return st;
    size_t rows = (size_t)g->max_batch;
    if (g->m->hp.has_moe_mlp && (st = IG_DEV(gpu_alloc)(g, 2 * rows * e * 4, &b->acc, NULL)))
        return st;
    if (!g->m->hp.has_moe_shexp)
        return IG_OK;
    if ((st = IG_DEV(gpu_alloc)(g, rows * 4, &b->shexp_w, NULL)))
        return st;
    return IG_DEV(gpu_alloc)(g, rows * e * 4, &b->shexp_y, NULL);
}

/* One expert-indexed product, on the tensor cores over tiles of
 * GK_MOE_MMA_TILE (mma) or the GEMV: the kernel, or in the emulated build
 * their twin unless IGNITE_EMU_MATMUL=kernels (as every product there:
 * backend/gpu_matmul.c; tests/emu/test_moe_emu.c runs the kernels). */
static int expert_product(struct gpu_backend *g, const struct gk_moe_gemv_params *p, bool mma)
{
#if defined(IG_EMU_BACKEND)
    if (!g->emu_kernels) {
        IG_DEV(dev_note_launch)(g->dev); /* the kernel it stands for */
        gk_moe_gemv_ref(p);
        return IG_OK;
    }
#endif
    return mma ? IG_DEV(gk_moe_mma)(p, g->stream) : IG_DEV(gk_moe_gemv)(p, g->stream);
}

/* qwen35moe's shared expert over `rows` rows of xn into b->shexp_y: gate|up
 * with SwiGLU into h16 (the activation in the GEMV where it fuses, as the
 * dense FFN's), down into the f32 rows. */
static int shared_expert(struct gpu_backend *g, const struct gpu_layer *L, int64_t l,
                         int64_t rows)
{
    int64_t e = g->m->hp.n_embd, ff = g->m->layers[l].n_ff_shexp; /* (a rank's columns) */
    const struct gpu_matrix *gu = &L->mat[LAYER_FFN_GATE_SHEXP];
    int st;
    IG_ASSERT(ff > 0); /* an empty share's adds nothing: not called */
    if (IG_DEV(gpu_matmul_glu_ok)(g, gu, rows))
        st = IG_DEV(gpu_matmul_glu)(g, gu, g->xn, e, rows, GK_GLU_SILU, g->h16, ff);
    else if ((st = IG_DEV(gpu_matmul)(g, gu, g->xn, e, rows, g->gu, 2 * ff, 0.0f)) == IG_OK)
        st = IG_DEV(gk_swiglu)(g->gu, rows, ff, g->h16, g->stream);
    if (st != IG_OK)
        return st;
    return IG_DEV(gpu_matmul)(g, &L->mat[LAYER_FFN_DOWN_SHEXP], g->h16, ff, rows,
                              g->moe.shexp_y, e, 0.0f);
}

/* gemma4's dense MLP beside the experts over `rows` rows of x into mlp
 * (f32, not yet normed): ffn_norm, gate|up with GeGLU at the MLP's own
 * width (a rank's columns), down. */
static int dense_beside(struct gpu_backend *g, const struct gpu_layer *L, int64_t l, float *x,
                        int64_t rows, bool first, float *mlp)
{
    int64_t e = g->m->hp.n_embd, ff = g->m->layers[l].n_ff_mlp;
    const struct gpu_matrix *gu = &L->mat[LAYER_FFN_GATE];
    const float *norm = L->vec[LAYER_FFN_NORM];
    bool ready = g->xn_of == norm && first;
    g->xn_of = NULL;
    g->xq_ready &= ready;
    if (ff == 0) /* a tensor-parallel rank's empty share (models/tp.c): zeros to the sum */
        return IG_DEV(dev_memset)(g->dev, mlp, 0, (size_t)(rows * e) * sizeof *mlp);
    int st = ready ? IG_OK
                   : IG_DEV(gk_rmsnorm)(x, e, norm, rows, e, (float)g->m->hp.norm_eps, g->xn,
                                        g->stream);
    if (st != IG_OK)
        return st;
    if (IG_DEV(gpu_matmul_glu_ok)(g, gu, rows))
        st = IG_DEV(gpu_matmul_glu)(g, gu, g->xn, e, rows, GK_GLU_GELU, g->h16, ff);
    else if ((st = IG_DEV(gpu_matmul)(g, gu, g->xn, e, rows, g->gu, 2 * ff, 0.0f)) == IG_OK)
        st = IG_DEV(gk_geglu)(g->gu, rows, ff, g->h16, g->stream);
    if (st != IG_OK)
        return st;
    return IG_DEV(gpu_matmul)(g, &L->mat[LAYER_FFN_DOWN], g->h16, ff, rows, mlp, e, 0.0f);
}

/* gemma4: acc = post_ffw_norm_2(experts' sum) + post_ffw_norm_1(the dense
 * MLP's, in mlp); x += post_ffw_norm(acc). A tensor-parallel rank's two are
 * partial sums, side by side (mlp = acc's rows after the experts'): a norm
 * of a part is no part of the norm, so one all-reduce sums both first and
 * every rank adds the whole to its x (the layer loop's reduce then has
 * nothing). */
static int beside_sum(struct gpu_backend *g, const struct gpu_layer *L, float *x, int64_t rows,
                      float *mlp)
{
    int64_t e = g->m->hp.n_embd;
    float eps = (float)g->m->hp.norm_eps, *acc = g->moe.acc;
    int st = g->tp ? IG_DEV(gpu_tp_sum_rows)(g, acc, 2 * rows) : IG_OK;
    if (st == IG_OK)
        st = IG_DEV(gk_head_rmsnorm)(acc, e, rows, 1, e, L->vec[LAYER_FFN_POST_NORM_2], eps,
                                     g->stream);
    if (st == IG_OK)
        st = IG_DEV(gk_rmsnorm_add)(acc, e, mlp, e, L->vec[LAYER_FFN_POST_NORM_1], rows, e,
                                    eps, g->stream);
    return st != IG_OK ? st
                       : IG_DEV(gk_rmsnorm_add)(x, e, acc, e, L->vec[LAYER_FFN_POST_NORM], rows,
                                                e, eps, g->stream);
}

int IG_DEV(gpu_ffn_moe)(struct gpu_backend *g, int64_t l, int64_t row0, int64_t n)
{
    const struct model_hparams *hp = &g->m->hp;
    const struct model_layer *ML = &g->m->layers[l];
    const struct gpu_layer *L = &g->layers[l];
    struct gpu_moe_bufs *b = &g->moe;
    int64_t e = hp->n_embd, rows = n - row0, k = ML->n_expert_used, ff = ML->n_ff;
    int64_t pairs = rows * k;
    float *x = g->x + row0 * e, eps = (float)hp->norm_eps;
    bool beside = hp->has_moe_mlp; /* gemma4 */
    /* qwen35moe's shared expert, where this rank holds columns of it (models/tp.c:
     * an empty share adds nothing) */
    bool shexp = hp->has_moe_shexp && ML->n_ff_shexp > 0;
    const float *norm = L->vec[beside ? LAYER_FFN_PRE_NORM_2 : LAYER_FFN_NORM];
    const struct gpu_matrix *gate = &L->mat[LAYER_FFN_GATE_EXPS], *up = &L->mat[LAYER_FFN_UP_EXPS],
                            *down = &L->mat[LAYER_FFN_DOWN_EXPS];
    IG_ASSERT(gate->n_parts == 1 && up->n_parts == 1 && down->n_parts == 1 && b->sel);
    IG_ASSERT(!beside || (b->acc && g->proj));
    /* the experts this backend holds: [e0, e0 + n_local) of the layer's (a
     * tensor-parallel rank's part, models/tp.c: the others' pairs are
     * theirs; its columns of a shared expert or a dense MLP beside) */
    int64_t e0 = ML->expert0, n_local = ML->w[LAYER_FFN_GATE_EXPS].n_expert;
    bool part = n_local != ML->n_expert;
    IG_ASSERT(e0 >= 0 && e0 + n_local <= ML->n_expert);
    /* tiles of 64 pairs on the tensor cores, or of 8 for the GEMV */
    int64_t tile = gk_moe_choose(gate->part[0].type, down->part[0].type, pairs, ML->n_expert);
    int64_t max_tiles = gk_moe_max_tiles_of(pairs, n_local, tile);
    bool mma = tile == GK_MOE_MMA_TILE;
    float *mlp = !beside ? NULL : g->tp ? b->acc + rows * e : g->proj; /* gemma4's MLP's */
    int st = beside && rows ? dense_beside(g, L, l, x, rows, row0 == 0, mlp) : IG_OK;
    if (st != IG_OK)
        return st;
    /* the product before may have left xn = norm(x) (a decode step's whole rows) */
    bool ready = g->xn_of == norm && row0 == 0;
    g->xn_of = NULL;
    g->xq_ready = false;
    st = ready ? IG_OK : IG_DEV(gk_rmsnorm)(x, e, norm, rows, e, eps, g->xn, g->stream);
    if (st != IG_OK || rows == 0)
        return st;

    struct gk_moe_route_params rp = {
        .x = x, .ld_x = e, .eps = eps, .router = L->vec[LAYER_FFN_GATE_INP],
        /* gemma4: rmsnorm(x) / sqrt(n_embd) * ffn_gate_inp.scale */
        .norm_w = beside ? L->vec[LAYER_FFN_GATE_INP_SCALE] : norm,
        .in_scale = beside ? (float)(1.0 / sqrt((double)e)) : 0.0f,
        .bias = L->vec[LAYER_FFN_GATE_INP_B], .n = rows, .n_embd = e, .n_expert = ML->n_expert,
        .k = k, .norm_topk = ML->moe_norm_topk, .sel = b->sel, .wts = b->wts,
        .shexp_gate = hp->has_moe_shexp ? L->vec[LAYER_FFN_GATE_INP_SHEXP] : NULL,
        .shexp_w = b->shexp_w,
    };
    struct gk_moe_sort_params sp = {
        .sel = b->sel, .n_pairs = pairs, .expert0 = e0, .n_expert = n_local, .tile = tile,
        .order = b->order, .tiles = b->tiles, .n_tiles = b->n_tiles,
    };
    struct gk_moe_gemv_params gu = {
        .w = gate->part[0], .w2 = up->part[0], .rows = ff,
        .bias = L->vec[LAYER_FFN_GATE_EXPS_B], .bias2 = L->vec[LAYER_FFN_UP_EXPS_B],
        .x = g->xn, .ld_x = e, .x_div = k,
        .order = b->order, .tiles = b->tiles, .n_tiles = b->n_tiles, .max_tiles = max_tiles,
        .glu = hp->ffn_act == MODEL_ACT_SWIGLU_OAI ? GK_MOE_GLU_OAI
               : hp->ffn_act == MODEL_ACT_GELU_TANH ? GK_GLU_GELU
                                                    : GK_GLU_SILU,
        .h = b->h, .ld_h = ff,
    };
    struct gk_moe_gemv_params dp = {
        .w = down->part[0], .rows = e, .bias = L->vec[LAYER_FFN_DOWN_EXPS_B],
        .x = b->h, .ld_x = ff, .x_div = 1,
        .order = b->order, .tiles = b->tiles, .n_tiles = b->n_tiles, .max_tiles = max_tiles,
        /* the tiles' experts are local: the scale is the whole layer's */
        .y = b->y, .ld_y = e, .scale = beside ? L->vec[LAYER_FFN_DOWN_EXPS_SCALE] + e0 : NULL,
    };
    float *sum = beside ? b->acc : x; /* gemma4: the experts' sum alone, normed after */
    /* the routed pairs of this part's experts alone (the others' y are not
     * written here); a rank's sum goes to the layer loop's reduce, x's rows
     * once in it (gemma4's: beside_sum's own) */
    struct gk_moe_part mine = {part ? b->sel : NULL, e0, n_local};
    bool keep = !g->tp || beside || IG_DEV(gpu_tp_partial_rows)(g, x, rows);
    if ((st = IG_DEV(gk_moe_route)(&rp, g->stream)) || (st = IG_DEV(gk_moe_sort)(&sp, g->stream)) ||
        (shexp && (st = shared_expert(g, L, l, rows))) ||
        (st = expert_product(g, &gu, mma)) || (st = expert_product(g, &dp, mma)) ||
        ((beside || !keep) && (st = IG_DEV(dev_memset)(g->dev, sum, 0, (size_t)(rows * e) * 4))) ||
        (st = IG_DEV(gk_moe_combine)(sum, e, b->y, e, b->wts, mine, rows, k, e, g->stream)) ||
        (beside && (st = beside_sum(g, L, x, rows, mlp))))
        return st;
    b->mma_layers += mma;
    /* x += the shared expert's weight times its output: one slot a row */
    if (hp->has_moe_shexp && !shexp)
        return IG_OK; /* an empty share of the shared expert: nothing to add */
    return hp->has_moe_shexp
               ? IG_DEV(gk_moe_combine)(x, e, b->shexp_y, e, b->shexp_w, (struct gk_moe_part){0},
                                        rows, 1, e, g->stream)
               : IG_OK;
}
