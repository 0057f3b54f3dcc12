/* backend/gpu_moe.c: the mixture-of-experts FFN of the CUDA backend
 * (LAYER_FFN_MOE; qwen3moe), the rules of backend/cpu_moe.c on the device:
 *
 *   xn = norm(x) (f16, the experts' input; a fused product before may have
 *   left it); route: each row's router logits from its own f32 norm and the
 *   f32 router, top-k, softmax, renormalized (gk_moe_route); the (row, slot)
 *   pairs grouped by expert into tiles (gk_moe_sort); gate|up of every tile
 *   with SwiGLU into h (gk_moe_gemv, one launch), down of every tile into y
 *   (one launch); x += sum over a row's experts, ascending, w y
 *   (gk_moe_combine).
 *
 * Five launches (six with the norm) whatever the routing: nothing goes to
 * the host, so a decode step's graph replays for any choice of experts. A
 * row's result depends on its own routing alone (each pair's products are
 * its own sums; the tile it shares changes nothing), so batch invariance
 * holds. Kernels in ops/gpu_moe.cu. Compiled twice like gpu.c. Covered by
 * tests/emu/test_backend_moe_emu.c. */
#include "backend/gpu_impl.h"

#include "core/status.h"
#include "ops/gpu_moe.h"
#include "ops/gpu_ops.h"

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
    size_t pairs = (size_t)(max_batch * k);
    if (!pairs)
        return 0;
    return pairs * (4 + 4 + 4 + 2 * (size_t)ff + 4 * (size_t)m->hp.n_embd) +
           (size_t)gk_moe_max_tiles((int64_t)pairs, ne) * 12 + 4;
}

int IG_DEV(gpu_moe_alloc)(struct gpu_backend *g)
{
    int64_t ne, k, ff;
    moe_max(g->m, &ne, &k, &ff);
    size_t pairs = (size_t)(g->max_batch * k);
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
        (st = IG_DEV(gpu_alloc)(g, pairs * (size_t)ff * 2, &b->h, NULL)))
        return st;
    return IG_DEV(gpu_alloc)(g, pairs * (size_t)g->m->hp.n_embd * 4, &b->y, NULL);
}

/* One expert-indexed product: the kernel, or in the emulated build its
 * twin unless IGNITE_EMU_MATMUL=kernels (as every product there:
 * backend/gpu_matmul.c; tests/emu/test_moe_emu.c runs the kernel). */
static int expert_product(struct gpu_backend *g, const struct gk_moe_gemv_params *p)
{
#if defined(IG_EMU_BACKEND)
    if (!g->emu_kernels) {
        IG_DEV(dev_note_launch)(g->dev); /* the kernel it stands for */
        gk_moe_gemv_ref(p);
        return IG_OK;
    }
#endif
    return IG_DEV(gk_moe_gemv)(p, g->stream);
}

int IG_DEV(gpu_ffn_moe)(struct gpu_backend *g, int64_t l, int64_t row0, int64_t n)
{
    const struct model_hparams *hp = &g->m->hp;
    const struct model_layer *ML = &g->m->layers[l];
    const struct gpu_layer *L = &g->layers[l];
    struct gpu_moe_bufs *b = &g->moe;
    int64_t e = hp->n_embd, rows = n - row0, k = ML->n_expert_used, ff = ML->n_ff;
    int64_t pairs = rows * k, max_tiles = gk_moe_max_tiles(pairs, ML->n_expert);
    float *x = g->x + row0 * e, eps = (float)hp->norm_eps;
    const float *norm = L->vec[LAYER_FFN_NORM];
    const struct gpu_matrix *gate = &L->mat[LAYER_FFN_GATE_EXPS], *up = &L->mat[LAYER_FFN_UP_EXPS],
                            *down = &L->mat[LAYER_FFN_DOWN_EXPS];
    IG_ASSERT(gate->n_parts == 1 && up->n_parts == 1 && down->n_parts == 1 && b->sel);
    /* the product before may have left xn = norm(x) (a decode step's whole rows) */
    bool ready = g->xn_of == norm && row0 == 0;
    g->xn_of = NULL;
    g->xq_ready = false;
    int st = ready ? IG_OK : IG_DEV(gk_rmsnorm)(x, e, norm, rows, e, eps, g->xn, g->stream);
    if (st != IG_OK || rows == 0)
        return st;

    struct gk_moe_route_params rp = {
        .x = x, .ld_x = e, .norm_w = norm, .eps = eps, .router = L->vec[LAYER_FFN_GATE_INP],
        .bias = L->vec[LAYER_FFN_GATE_INP_B], .n = rows, .n_embd = e, .n_expert = ML->n_expert,
        .k = k, .norm_topk = ML->moe_norm_topk, .sel = b->sel, .wts = b->wts,
    };
    struct gk_moe_sort_params sp = {
        .sel = b->sel, .n_pairs = pairs, .n_expert = ML->n_expert, .order = b->order,
        .tiles = b->tiles, .n_tiles = b->n_tiles,
    };
    struct gk_moe_gemv_params gu = {
        .w = gate->part[0], .w2 = up->part[0], .rows = ff,
        .bias = L->vec[LAYER_FFN_GATE_EXPS_B], .bias2 = L->vec[LAYER_FFN_UP_EXPS_B],
        .x = g->xn, .ld_x = e, .x_div = k,
        .order = b->order, .tiles = b->tiles, .n_tiles = b->n_tiles, .max_tiles = max_tiles,
        .glu = hp->ffn_act == MODEL_ACT_SWIGLU_OAI ? GK_MOE_GLU_OAI : GK_GLU_SILU,
        .h = b->h, .ld_h = ff,
    };
    struct gk_moe_gemv_params dp = {
        .w = down->part[0], .rows = e, .bias = L->vec[LAYER_FFN_DOWN_EXPS_B],
        .x = b->h, .ld_x = ff, .x_div = 1,
        .order = b->order, .tiles = b->tiles, .n_tiles = b->n_tiles, .max_tiles = max_tiles,
        .y = b->y, .ld_y = e,
    };
    if ((st = IG_DEV(gk_moe_route)(&rp, g->stream)) || (st = IG_DEV(gk_moe_sort)(&sp, g->stream)) ||
        (st = expert_product(g, &gu)) || (st = expert_product(g, &dp)))
        return st;
    return IG_DEV(gk_moe_combine)(x, e, b->y, e, b->wts, rows, k, e, g->stream);
}
