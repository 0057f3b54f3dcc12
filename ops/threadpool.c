/* ops/threadpool.c: a persistent pool of worker threads that runs one
 * parallel-for at a time.
 *
 * The caller of ops_pool_run is thread 0 and works too; n_threads - 1 workers
 * wait between jobs. Items are handed out in chunks of `grain` through one
 * atomic counter, so uneven items (causal attention tiles) balance themselves.
 * Waiting spins briefly (a forward pass issues jobs back to back) and then
 * sleeps on a condition variable, so an idle pool costs no CPU. Nothing is
 * allocated per job. What the items are is the caller's business.
 *
 * A job is open while thread 0 works through it; a worker joins by counting
 * itself `active` and then checking that the job is still open. Once thread 0
 * has run out of items it closes the job and waits only for the workers that
 * joined. A worker the OS has not scheduled yet (machines with more threads
 * than cores: parallel ctest, shared CI) is thus never waited for; it finds
 * the job closed, or joins whatever job is open when it does run.
 * Covered by every tests/cpu/ test (they all run on the pool). */
#include "ops/ops.h"

#include "core/status.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

/* Spin iterations before a waiting thread sleeps: tens of microseconds. */
#define POOL_SPIN 2000

struct ops_pool {
    int n_threads;
    pthread_t *workers; /* n_threads - 1 */
    pthread_mutex_t mu;
    pthread_cond_t wake; /* a new job (or stop) was posted */
    pthread_cond_t done; /* the last active worker left the job */
    _Atomic uint64_t generation; /* bumped once per job */
    _Atomic bool open;           /* the current job accepts workers */
    _Atomic int active;          /* workers inside the current job */
    bool stop;

    /* The current job; written by thread 0 before `open` is set. */
    ops_task_fn fn;
    void *arg;
    int64_t n_items, grain;
    _Atomic int64_t next; /* first item not yet handed out */
};

struct worker_arg {
    struct ops_pool *pool;
    int thread;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Takes chunks of the current job until none is left. */
static void run_items(struct ops_pool *p, int thread)
{
    for (;;) {
        int64_t i0 = atomic_fetch_add_explicit(&p->next, p->grain, memory_order_relaxed);
        if (i0 >= p->n_items)
            return;
        int64_t i1 = i0 + p->grain < p->n_items ? i0 + p->grain : p->n_items;
        p->fn(p->arg, i0, i1, thread);
    }
}

static void *worker_main(void *varg)
{
    struct worker_arg wa = *(struct worker_arg *)varg;
    free(varg);
    struct ops_pool *p = wa.pool;
    uint64_t seen = 0;
    for (;;) {
        for (int i = 0; i < POOL_SPIN; i++) {
            if (atomic_load_explicit(&p->generation, memory_order_acquire) != seen)
                break;
            cpu_relax();
        }
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->generation) == seen && !p->stop)
            pthread_cond_wait(&p->wake, &p->mu);
        bool stop = p->stop;
        seen = atomic_load(&p->generation);
        pthread_mutex_unlock(&p->mu);
        if (stop)
            return NULL;

        /* Count in first, then look: thread 0 closes first, then counts
         * (all seq_cst), so one of the two always sees the other. */
        atomic_fetch_add(&p->active, 1);
        if (atomic_load(&p->open))
            run_items(p, wa.thread);
        if (atomic_fetch_sub(&p->active, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

int ops_pool_create(int n_threads, struct ops_pool **out)
{
    *out = NULL;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > OPS_POOL_MAX_THREADS)
        n_threads = OPS_POOL_MAX_THREADS;
    struct ops_pool *p = calloc(1, sizeof *p);
    if (!p)
        return ig_error(IG_E_NOMEM, "out of memory creating a thread pool");
    p->n_threads = 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers)
            goto fail_nomem;
    }
    for (int t = 1; t < n_threads; t++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (!wa)
            goto fail_nomem;
        wa->pool = p;
        wa->thread = t;
        if (pthread_create(&p->workers[t - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            ops_pool_free(p);
            return ig_error(IG_E_NOMEM, "could not start thread %d of %d", t + 1, n_threads);
        }
        p->n_threads = t + 1;
    }
    *out = p;
    return IG_OK;

fail_nomem:
    ops_pool_free(p);
    return ig_error(IG_E_NOMEM, "out of memory creating a thread pool");
}

void ops_pool_free(struct ops_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int t = 1; t < p->n_threads; t++)
        pthread_join(p->workers[t - 1], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

int ops_pool_threads(const struct ops_pool *p)
{
    return p->n_threads;
}

void ops_pool_run(struct ops_pool *p, int64_t n_items, int64_t grain, ops_task_fn fn, void *arg)
{
    if (n_items <= 0)
        return;
    if (grain < 1)
        grain = 1;
    if (p->n_threads == 1 || n_items <= grain) {
        fn(arg, 0, n_items, 0);
        return;
    }
    /* No worker is active here: the previous job ended with active == 0 and a
     * late joiner only reads the fields below after seeing open == true. */
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n_items = n_items;
    p->grain = grain;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store(&p->open, true);
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    run_items(p, 0);

    atomic_store(&p->open, false);
    for (int i = 0; i < POOL_SPIN; i++) {
        if (atomic_load(&p->active) == 0)
            return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->active) != 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
