/* grammar/rules.c: the rule builder the GBNF parser fills: rules growing
 * element by element, byte sets interned so equal sets share an index, and
 * the size limits (GR_MAX_*) enforced as it grows. Checking and compiling
 * the result is check.c's job.
 * Covered by tests/grammar/test_grammar.c. */
#include "grammar/internal.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

void gr_builder_free(struct gr_builder *b)
{
    for (int64_t i = 0; i < b->n_rules; i++) {
        free(b->rules[i].name);
        free(b->rules[i].elems);
    }
    free(b->rules);
    for (int64_t i = 0; i < b->n_classes; i++)
        free(b->classes[i].ranges);
    free(b->classes);
    free(b->sets);
    free(b->set_slots);
    *b = (struct gr_builder){0};
}

static uint64_t set_hash(const struct gr_byteset *s)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 4; i++) {
        h ^= s->w[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return h;
}

/* Doubles the slot table and re-inserts every set. */
static int grow_set_slots(struct gr_builder *b)
{
    int64_t n = b->set_mask ? 2 * (b->set_mask + 1) : 64;
    int32_t *slots = malloc((size_t)n * sizeof *slots);
    if (!slots)
        return -1;
    memset(slots, 0xff, (size_t)n * sizeof *slots);
    for (int64_t i = 0; i < b->n_sets; i++) {
        uint64_t j = set_hash(&b->sets[i]) & (uint64_t)(n - 1);
        while (slots[j] >= 0)
            j = (j + 1) & (uint64_t)(n - 1);
        slots[j] = (int32_t)i;
    }
    free(b->set_slots);
    b->set_slots = slots;
    b->set_mask = n - 1;
    return 0;
}

int32_t gr_builder_set(struct gr_builder *b, const struct gr_byteset *s)
{
    if ((b->n_sets + 1) * 2 > b->set_mask + 1 && grow_set_slots(b) != 0)
        return -1;
    uint64_t j = set_hash(s) & (uint64_t)b->set_mask;
    for (; b->set_slots[j] >= 0; j = (j + 1) & (uint64_t)b->set_mask)
        if (!memcmp(&b->sets[b->set_slots[j]], s, sizeof *s))
            return b->set_slots[j];
    if (b->n_sets == b->cap_sets) {
        int64_t cap = b->cap_sets ? 2 * b->cap_sets : 64;
        struct gr_byteset *p = realloc(b->sets, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        b->sets = p;
        b->cap_sets = cap;
    }
    b->sets[b->n_sets] = *s;
    b->set_slots[j] = (int32_t)b->n_sets;
    return (int32_t)b->n_sets++;
}

int32_t gr_builder_add_rule(struct gr_builder *b, const char *name, size_t len,
                            enum gr_rule_kind kind)
{
    if (b->n_rules >= GR_MAX_RULES)
        return -1;
    if (b->n_rules == b->cap_rules) {
        int64_t cap = b->cap_rules ? 2 * b->cap_rules : 32;
        struct gr_rule *p = realloc(b->rules, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        b->rules = p;
        b->cap_rules = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return -1;
    memcpy(copy, name, len);
    copy[len] = '\0';
    b->rules[b->n_rules] = (struct gr_rule){.name = copy, .kind = kind};
    return (int32_t)b->n_rules++;
}

int gr_builder_push(struct gr_builder *b, int32_t r, uint32_t e)
{
    if (b->total_elems >= GR_MAX_ELEMS)
        return ig_error(IG_E_USAGE, "%s: the grammar is too large (more than %d elements after "
                        "expanding repetitions)", b->source, GR_MAX_ELEMS);
    struct gr_rule *rule = &b->rules[r];
    if (rule->n_elems == rule->cap) {
        int64_t cap = rule->cap ? 2 * rule->cap : 8;
        uint32_t *p = realloc(rule->elems, (size_t)cap * sizeof *p);
        if (!p)
            return ig_error(IG_E_NOMEM, "grammar: out of memory");
        rule->elems = p;
        rule->cap = cap;
    }
    rule->elems[rule->n_elems++] = e;
    b->total_elems++;
    return IG_OK;
}
