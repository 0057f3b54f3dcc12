/* tests/models/tensor_table_check.c: every walker of the table of tensors
 * (models/tensors.h) against the table, on one model, or on two that hold
 * the same weights (a Hugging Face folder and a GGUF written from it):
 *   - binding (model.c, hf_model.c, synthetic.c): every row the model's
 *     features make present is bound with the table's shape (n_expert,
 *     rows, cols; norms and biases F32), every other row is not (the output
 *     head of tied embeddings is the embedding's weight); for two models,
 *     the same features and, weight by weight, the same values;
 *   - the saved-cache model id (kvcache/kvfile.c) changes when the bytes of
 *     any one weight the model has change;
 *   - CPU int8 packing (ops/ctx.c) holds a packed copy of every matrix a
 *     product reads, where the ISA and the type pack, and none of a table
 *     looked up by token (an untied token_embd);
 *   - the CUDA backend's plan (backend/gpu_plan.c) with --gpu-weights f16
 *     is the table's sum over the stored weights (2 bytes a matrix element,
 *     4 a norm or bias element: the test's models keep every f16 matrix a
 *     multiple of 256 bytes, the device's alignment), and the emulated
 *     backend's upload (backend/gpu_weights.c) allocates exactly that (not
 *     in the sanitizer build, TENSOR_TABLE_NO_EMU: it builds no emulated
 *     backend; the normal build's runs it, ASan and UBSan on).
 * A walker that skips a row fails one of these. Prints each mismatch on
 * stderr; exit 1 on any.
 *
 *   tensor_table_check MODEL [MODEL_WITH_THE_SAME_WEIGHTS]
 *
 * MODEL: a GGUF, a folder, or synthetic:NAME[:TYPE]. Driven by
 * test_tensor_table.py (label unit). */
#include "backend/backend.h"
#include "backend/gpu.h"
#include "backend/gpu_plan.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "models/model.h"
#include "models/synthetic.h"
#include "ops/ops.h"
#include "ops/packed.h"
#include "ops/qmatmul.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

static int load(const char *spec, struct model **m)
{
    if (!strncmp(spec, "synthetic:", 10))
        return model_synthetic_spec(spec, m);
    return model_load(spec, m);
}

/* "blk.3.attn_q.weight" or "token_embd.weight", for messages. */
static const char *name_of(const struct model_tensor_it *it)
{
    static char buf[96];
    model_tensor_gguf_name(it->t, it->layer, it->features, buf, sizeof buf);
    return buf;
}

/* Every row bound as the table says, or absent as the features say. */
static void check_binding(const char *spec, const struct model *m)
{
    unsigned f = model_features(&m->hp);
    int bound = 0;
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL | MODEL_TENSORS_ABSENT);
         model_tensors_next(&it);) {
        const struct model_weight *w = it.w;
        if (!model_tensor_present(it.t, f)) {
            const struct model_weight *e = &m->w[MODEL_TOK_EMBD];
            if (it.t->ties_to_embd)
                CHECKF(w->data == e->data && w->type == e->type && w->rows == e->rows &&
                           w->cols == e->cols && w->n_expert == e->n_expert,
                       "%s: %s is absent but not the embedding's weight", spec, name_of(&it));
            else
                CHECKF(!w->data && !w->rows, "%s: %s is bound, but the model lacks its feature",
                       spec, name_of(&it));
            continue;
        }
        int64_t s[3];
        model_tensor_shape(it.t, &m->hp, it.layer, s);
        CHECKF(w->data || m->virtual_weights, "%s: %s is not bound", spec, name_of(&it));
        CHECKF(w->n_expert == s[0] && w->rows == s[1] && w->cols == s[2],
               "%s: %s is %lld x [%lld, %lld], the table says %lld x [%lld, %lld]", spec,
               name_of(&it), (long long)w->n_expert, (long long)w->rows, (long long)w->cols,
               (long long)s[0], (long long)s[1], (long long)s[2]);
        CHECKF(it.t->kind == TENSOR_MATRIX || w->type == QUANT_F32, "%s: %s is %s, not F32",
               spec, name_of(&it), quant_type_name((uint32_t)w->type));
        CHECKF(w->row_bytes == quant_row_bytes(w->type, w->cols), "%s: %s row bytes", spec,
               name_of(&it));
        bound++;
    }
    fprintf(stderr, "%s: %d weights bound as the table says (features 0x%x)\n", spec, bound, f);
}

/* Row r of w counting through its experts (a folder's lie apart). */
static const void *row_of(const struct model_weight *w, int64_t r)
{
    struct model_weight one = ops_weight_expert(w, r / w->rows);
    return (const char *)one.data + (size_t)(r % w->rows) * w->row_bytes;
}

/* Two models of the same weights: the same features, each weight's values
 * equal (dequantized to f32). */
static void check_same(const char *sa, const struct model *a, const char *sb,
                       const struct model *b)
{
    CHECKF(model_features(&a->hp) == model_features(&b->hp), "%s has features 0x%x, %s 0x%x",
           sa, model_features(&a->hp), sb, model_features(&b->hp));
    if (model_features(&a->hp) != model_features(&b->hp) || a->hp.n_layer != b->hp.n_layer)
        return;
    struct model_tensor_it ia, ib;
    model_tensors_begin(&ib, b, MODEL_TENSORS_ALL);
    for (model_tensors_begin(&ia, a, MODEL_TENSORS_ALL); model_tensors_next(&ia);) {
        CHECK(model_tensors_next(&ib) && ib.t == ia.t && ib.layer == ia.layer);
        const struct model_weight *x = ia.w, *y = ib.w;
        if (!x->data || !y->data || x->rows != y->rows || x->cols != y->cols ||
            x->n_expert != y->n_expert)
            continue; /* check_binding said so */
        float *fx = malloc((size_t)x->cols * sizeof *fx), *fy = malloc((size_t)x->cols * sizeof *fy);
        int64_t bad = -1;
        for (int64_t r = 0; r < x->n_expert * x->rows && bad < 0 && fx && fy; r++) {
            quant_dequantize_row(x->type, row_of(x, r), fx, x->cols);
            quant_dequantize_row(y->type, row_of(y, r), fy, y->cols);
            if (memcmp(fx, fy, (size_t)x->cols * sizeof *fx))
                bad = r;
        }
        CHECKF(bad < 0, "%s: %s row %lld differs from %s's", sa, name_of(&ia), (long long)bad,
               sb);
        free(fx);
        free(fy);
    }
}

/* The saved-cache id: stable, and changed by a change of any one weight's
 * bytes (the first byte, which the id samples). */
static void check_id(const char *spec, struct model *m)
{
    unsigned char id0[KV_MODEL_ID_BYTES], id[KV_MODEL_ID_BYTES];
    kv_model_id(m, id0);
    kv_model_id(m, id);
    CHECKF(!memcmp(id0, id, sizeof id), "%s: the id differs between two calls", spec);
    int n = 0;
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL); model_tensors_next(&it);) {
        struct model_weight *w = model_weight_at(m, it.t, it.layer);
        /* the first expert's bytes where the experts lie apart (a folder's) */
        size_t bytes = w->expert_data ? (size_t)w->rows * w->row_bytes : model_weight_size(w);
        unsigned char *copy = w->data && bytes ? malloc(bytes) : NULL;
        if (!copy)
            continue; /* check_binding says what is wrong */
        memcpy(copy, w->data, bytes);
        copy[0] ^= 0x5A;
        const void *keep = w->data, *const *keep_experts = w->expert_data;
        const void *apart[MODEL_MAX_EXPERTS];
        if (keep_experts) {
            memcpy(apart, keep_experts, (size_t)w->n_expert * sizeof *apart);
            apart[0] = copy;
            w->expert_data = apart;
        }
        w->data = copy;
        kv_model_id(m, id);
        w->data = keep;
        w->expert_data = keep_experts;
        free(copy);
        CHECKF(memcmp(id0, id, sizeof id), "%s: the model id ignores the bytes of %s", spec,
               name_of(&it));
        n++;
    }
    fprintf(stderr, "%s: the model id follows each of %d weights\n", spec, n);
}

/* CPU packing: each matrix a product reads (the head too when tied) packed
 * where ops_packed_add packs its type. */
static void check_packing(const char *spec, const struct model *m)
{
    enum qmm_isa isa = ops_qmm_best_isa();
    struct ops_pool *pool = NULL;
    struct ops_packed *p = NULL;
    CHECK(ops_pool_create(1, &pool) == IG_OK && ops_packed_create(m, pool, &p) == IG_OK);
    if (!p) {
        ops_pool_free(pool);
        return;
    }
    int packed = 0, skipped = 0;
    struct model_tensor_it it;
    bool tied = !model_tensor_present(model_tensor_row(TENSOR_PER_MODEL, MODEL_OUTPUT),
                                      model_features(&m->hp));
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL | MODEL_TENSORS_TIED);
         model_tensors_next(&it);) {
        bool head = tied && it.t->scope == TENSOR_PER_MODEL && it.t->role == MODEL_TOK_EMBD;
        if (it.t->gathered && !head) /* rows read by token: kept as stored */
            CHECKF(ops_packed_find(p, it.w) == NULL, "%s: %s is looked up, yet packed", spec,
                   name_of(&it));
        if (it.t->kind != TENSOR_MATRIX || it.t->gathered)
            continue;
        const struct model_weight *w = it.w;
        if (isa == QMM_SCALAR || w->cols % QMM_QK ||
            (!ops_qmm_gemv8(w->type, isa) && !ops_qmm_fgemm_packed(w->type))) {
            skipped++;
            continue;
        }
        for (int64_t e = 0; e < w->n_expert; e++) { /* each expert its own copy */
            struct model_weight one = ops_weight_expert(w, e);
            CHECKF(ops_packed_find(p, &one) != NULL, "%s: %s (%s) expert %lld is not packed",
                   spec, name_of(&it), quant_type_name((uint32_t)w->type), (long long)e);
        }
        packed++;
    }
    fprintf(stderr, "%s: %d matrices packed, %d of types the int8 path reads as stored\n", spec,
            packed, skipped);
    ops_packed_free(p);
    ops_pool_free(pool);
}

/* The plan's f16 bytes and the emulated upload's against the table's sum. */
static void check_gpu(const char *spec, const struct model *m)
{
    struct backend_opts o = {.device = {.kind = BACKEND_CUDA}, .n_ctx = 64, .max_rows = 16,
                             .n_slots = 1, .n_blocks = 1, .gpu_weights = BACKEND_GPU_F16};
    struct backend *be = NULL;
    /* what the device does not run (backend_gpu_missing) is refused in one
     * line, not uploaded */
    int64_t layer;
    if (backend_gpu_missing(m, &layer)) {
#ifndef TENSOR_TABLE_NO_EMU
        CHECK(gpu_backend_create_emu(m, &o, &be) == IG_E_MODEL && !be);
#endif
        return;
    }
    size_t want = 0;
    struct model_tensor_it it;
    for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL); model_tensors_next(&it);) {
        size_t elems = (size_t)(it.w->n_expert * it.w->rows * it.w->cols);
        bool matrix = it.t->kind == TENSOR_MATRIX && !gpu_plan_f32_matrix(it.t); /* routers f32 */
        want += elems * (matrix ? 2 : 4);
        CHECKF(!matrix || elems * 2 % 256 == 0,
               "%s: %s is not a multiple of 256 bytes in f16: the sum is not the device's; "
               "give the test model other sizes", spec, name_of(&it));
    }
    size_t plan = backend_gpu_weight_bytes(m, BACKEND_GPU_F16);
    CHECKF(plan == want, "%s: the plan puts %zu weight bytes on the device, the table %zu", spec,
           plan, want);
#ifdef TENSOR_TABLE_NO_EMU
    (void)o, (void)be;
#else
    CHECK(gpu_backend_create_emu(m, &o, &be) == IG_OK);
    if (!be)
        return;
    struct gpu_backend_info info;
    gpu_get_info_emu(be, &info);
    CHECKF(info.weight_bytes == want, "%s: the upload allocates %zu weight bytes, the table %zu",
           spec, info.weight_bytes, want);
    fprintf(stderr, "%s: plan and upload %zu bytes (f16), the table's sum %zu\n", spec,
            info.weight_bytes, want);
    backend_free(be);
#endif
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: tensor_table_check MODEL [MODEL_WITH_THE_SAME_WEIGHTS]\n");
        return 2;
    }
    struct model *m[2] = {NULL, NULL};
    for (int i = 0; i + 1 < argc; i++) {
        CHECKF(load(argv[i + 1], &m[i]) == IG_OK, "%s does not load", argv[i + 1]);
        if (!m[i])
            continue;
        check_binding(argv[i + 1], m[i]);
        check_id(argv[i + 1], m[i]);
        check_packing(argv[i + 1], m[i]);
        check_gpu(argv[i + 1], m[i]);
    }
    if (m[0] && m[1])
        check_same(argv[1], m[0], argv[2], m[1]);
    model_free(m[0]);
    model_free(m[1]);
    return test_summary("tensor_table_check");
}
