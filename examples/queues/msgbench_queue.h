/*
 * msgbench's queue ABI: put your own single-producer single-consumer queue in msgbench's queue
 * lab (`queue.ring = "library"`, `queue.library = "libyours.so"`). Build your queue as a shared
 * library that exports these six functions; msgbench loads it at run time and runs its
 * producer, consumer, pacing, wait strategies, pinning and accounting through them, every
 * latency recorded. docs/own-queue.md walks through it; spsc_ring.c is a complete example.
 *
 * Contract:
 *  - one thread calls try_push, another calls try_pop (and both may call len), concurrently;
 *    create and destroy are called once each, with no push or pop running;
 *  - items are `item_bytes` bytes (msgbench's fixed-size records: 16 bytes today), copied in by
 *    try_push and out by try_pop; the queue keeps no pointer to them;
 *  - try_push returns 1 when the item is in the queue and 0 when the queue is full;
 *    try_pop returns 1 and writes the oldest item when there is one, else 0 (never blocks);
 *  - len returns how many items are waiting: it may lag the other thread (msgbench uses it to
 *    decide when to wait, then tries again), but must not claim items that were never pushed;
 *  - msgbench_queue_abi returns MSGBENCH_QUEUE_ABI of the header the library was built with.
 *
 * msgbench checks what your queue returns: an item it was never given, or given twice, is
 * counted as a sequence error (a duplicate), which fails the run. What it cannot
 * guard against is what any library in the process can do: crash it or write over its memory.
 */
#ifndef MSGBENCH_QUEUE_H
#define MSGBENCH_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#define MSGBENCH_QUEUE_ABI 1u

#ifdef __cplusplus
extern "C" {
#endif

uint32_t msgbench_queue_abi(void);
/* A queue of at least `capacity` items of `item_bytes` each; NULL when it cannot be made. */
void *msgbench_queue_create(size_t capacity, size_t item_bytes);
int msgbench_queue_try_push(void *queue, const void *item);
int msgbench_queue_try_pop(void *queue, void *item);
size_t msgbench_queue_len(void *queue);
void msgbench_queue_destroy(void *queue);

#ifdef __cplusplus
}
#endif

#endif
