/*
 * A bounded single-producer single-consumer ring in C11 for msgbench's queue lab: the same
 * design as msgbench's own ring (crates/engine/src/ring.rs) — head and tail on their own cache
 * lines, each side caching the other's index so that it reads the shared one only when its
 * cached copy says full or empty — so `bench/queue-library.sh` can show what loading a queue
 * through the ABI costs beside the same ring compiled into msgbench.
 *
 *   cc -O2 -shared -fPIC -o target/queues/libspsc_ring.so examples/queues/spsc_ring.c
 *   msgbench run examples/queue-library.toml
 */
#include "msgbench_queue.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* 128, not 64: x86 prefetches cache lines in pairs, so two hot indices 64 bytes apart still
 * share traffic (crossbeam's CachePadded, which msgbench's ring uses, pads to 128 for this). */
#define LINE 128

struct ring {
    alignas(LINE) _Atomic size_t head; /* next slot to pop; written by the consumer */
    size_t tail_cache;                 /* the consumer's copy of tail */
    alignas(LINE) _Atomic size_t tail; /* next slot to push; written by the producer */
    size_t head_cache;                 /* the producer's copy of head */
    alignas(LINE) size_t capacity;
    size_t item_bytes;
    unsigned char *slots;
};

uint32_t msgbench_queue_abi(void) { return MSGBENCH_QUEUE_ABI; }

void *msgbench_queue_create(size_t capacity, size_t item_bytes) {
    if (capacity == 0 || item_bytes == 0 || capacity > ((size_t)1 << 40) / item_bytes)
        return NULL;
    struct ring *r = aligned_alloc(LINE, sizeof *r);
    if (!r)
        return NULL;
    memset(r, 0, sizeof *r);
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    r->capacity = capacity;
    r->item_bytes = item_bytes;
    r->slots = malloc(capacity * item_bytes);
    if (!r->slots) {
        free(r);
        return NULL;
    }
    return r;
}

/* Indices run over 0..2*capacity, so that full (distance capacity) and empty (0) differ. */
static size_t distance(size_t head, size_t tail, size_t capacity) {
    return head <= tail ? tail - head : 2 * capacity - head + tail;
}

static size_t advance(size_t i, size_t capacity) { return i + 1 == 2 * capacity ? 0 : i + 1; }

/* msgbench's items are 16 bytes: a copy of a size known here is two moves, where memcpy of a
 * size read at run time is a call into libc per item. */
static void copy_item(void *to, const void *from, size_t bytes) {
    if (bytes == 16)
        memcpy(to, from, 16);
    else
        memcpy(to, from, bytes);
}

int msgbench_queue_try_push(void *queue, const void *item) {
    struct ring *r = queue;
    size_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    if (distance(r->head_cache, tail, r->capacity) == r->capacity) {
        r->head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
        if (distance(r->head_cache, tail, r->capacity) == r->capacity)
            return 0;
    }
    size_t slot = tail < r->capacity ? tail : tail - r->capacity;
    copy_item(r->slots + slot * r->item_bytes, item, r->item_bytes);
    atomic_store_explicit(&r->tail, advance(tail, r->capacity), memory_order_release);
    return 1;
}

int msgbench_queue_try_pop(void *queue, void *item) {
    struct ring *r = queue;
    size_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (head == r->tail_cache) {
        r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (head == r->tail_cache)
            return 0;
    }
    size_t slot = head < r->capacity ? head : head - r->capacity;
    copy_item(item, r->slots + slot * r->item_bytes, r->item_bytes);
    atomic_store_explicit(&r->head, advance(head, r->capacity), memory_order_release);
    return 1;
}

size_t msgbench_queue_len(void *queue) {
    struct ring *r = queue;
    size_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    size_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    return distance(head, tail, r->capacity);
}

void msgbench_queue_destroy(void *queue) {
    struct ring *r = queue;
    free(r->slots);
    free(r);
}
