/* http_get.c - kernel floor of a keep-alive HTTP/1.1 load client.
 * N connections on one epoll loop, one GET in flight per connection; per response one recv and
 * one send, nothing parsed beyond counting bytes of a response whose size the first request
 * showed (a static file: every response has the same size). No clock read per request, no
 * latency recorded: what is left is what the kernel's loopback TCP costs a client.
 * Usage: http_get -p port [-c connections] [-d seconds] [-u path]
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

/* The size of one whole response: one request, read until the peer is quiet for 100 ms. */
static long response_size(int fd, const char *req, size_t len) {
    char buf[65536];
    long total = 0;
    if (send(fd, req, len, 0) != (ssize_t)len) { perror("send"); exit(1); }
    struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r <= 0) break;
        total += r;
    }
    return total;
}

int main(int argc, char **argv) {
    int port = 0, n = 50;
    double seconds = 3;
    const char *path = "/";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-p")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-d")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-u")) path = argv[i + 1];
    }
    if (port <= 0 || n < 1 || n > MAX_CONNS) { fprintf(stderr, "usage: http_get -p port [-c 1..%d] [-d s] [-u path]\n", MAX_CONNS); return 2; }
    alarm((unsigned)seconds + 10);
    char req[1024];
    int len = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
    int fds[MAX_CONNS];
    long got[MAX_CONNS];
    for (int i = 0; i < n; i++) { fds[i] = dial_loopback(port); got[i] = 0; }
    long size = response_size(fds[0], req, (size_t)len);
    if (size <= 0) { fprintf(stderr, "no response from port %d\n", port); return 1; }
    int ep = epoll_create1(0);
    for (int i = 0; i < n; i++) {
        fcntl(fds[i], F_SETFL, O_NONBLOCK);
        struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &e);
    }
    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9);
    for (int i = 0; i < n; i++) send(fds[i], req, (size_t)len, 0);
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
            got[i] += r;
            while (got[i] >= size) {
                got[i] -= size;
                done++;
                send(fds[i], req, (size_t)len, 0);
            }
        }
    }
    printf("requests %ld seconds %.3f\n", done, (now_ns() - start) / 1e9);
    return 0;
}
