/* redis_pipeline.c - kernel floor of a pipelining Redis load client.
 * N connections on one epoll loop, each with a batch of P commands in flight: one send of the P
 * commands, then recv until their P replies are in, counted by bytes (every command is the same
 * SET, every reply "+OK\r\n"). Nothing parsed, no clock read per request, no latency recorded:
 * what is left is what the kernel's loopback TCP costs a client that makes one send and (at
 * best) one recv per batch, the least a client with a window of P per connection can do.
 * Usage: redis_pipeline -p port [-c connections] [-P depth] [-d seconds]
 * Prints "requests N seconds S". Self-bounded: alarm(d + 10). */
#include "common.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#define MAX_CONNS 1024
#define MAX_DEPTH 1024

/* redis-benchmark's `-t set`: the key "key:__rand_int__" (no -r), a 3-byte value. */
static const char SET[] = "*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__\r\n$3\r\nxxx\r\n";
static const long REPLY = 5; /* "+OK\r\n" */

/* The whole batch, or exit: a partial send on the non-blocking socket would stall the connection
 * silently (a batch is at most 1024 × 47 bytes, far under a loopback socket's buffer). */
static void send_all(int fd, const char *p, size_t len) {
    ssize_t w = send(fd, p, len, 0);
    if (w != (ssize_t)len) { fprintf(stderr, "send of a %zu-byte batch wrote %zd\n", len, w); exit(1); }
}

int main(int argc, char **argv) {
    int port = 0, n = 50, depth = 16;
    double seconds = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-p")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-P")) depth = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-d")) seconds = atof(argv[i + 1]);
    }
    if (port <= 0 || n < 1 || n > MAX_CONNS || depth < 1 || depth > MAX_DEPTH) {
        fprintf(stderr, "usage: redis_pipeline -p port [-c 1..%d] [-P 1..%d] [-d s]\n", MAX_CONNS, MAX_DEPTH);
        return 2;
    }
    alarm((unsigned)seconds + 10);
    size_t one = sizeof SET - 1, len = one * (size_t)depth;
    char *batch = malloc(len);
    for (int k = 0; k < depth; k++) memcpy(batch + one * (size_t)k, SET, one);
    long want = REPLY * depth;
    int fds[MAX_CONNS];
    long got[MAX_CONNS];
    int ep = epoll_create1(0);
    for (int i = 0; i < n; i++) {
        fds[i] = dial_loopback(port);
        got[i] = 0;
        fcntl(fds[i], F_SETFL, O_NONBLOCK);
        struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &e);
    }
    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9);
    for (int i = 0; i < n; i++) send_all(fds[i], batch, len);
    long done = 0;
    static char buf[65536];
    struct epoll_event ev[MAX_CONNS];
    while (now_ns() < end) {
        int k = epoll_wait(ep, ev, MAX_CONNS, 10);
        for (int j = 0; j < k; j++) {
            int i = (int)ev[j].data.u32;
            ssize_t r = recv(fds[i], buf, sizeof buf, 0);
            if (r == 0) { fprintf(stderr, "connection %d closed by the server\n", i); return 1; }
            if (r < 0) continue;
            /* '-' never occurs in "+OK\r\n": anywhere in the bytes, it starts an error reply. */
            const char *err = memchr(buf, '-', (size_t)r);
            if (err) { fprintf(stderr, "the server answered an error: %.*s\n", (int)(buf + r - err < 200 ? buf + r - err : 200), err); return 1; }
            got[i] += r;
            if (got[i] >= want) {
                got[i] -= want;
                done += depth;
                send_all(fds[i], batch, len);
            }
        }
    }
    printf("requests %ld seconds %.3f\n", done, (now_ns() - start) / 1e9);
    return 0;
}
