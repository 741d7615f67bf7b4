/* Cold-start ceiling of t6 (issue 18): what writing 4 x 256 MiB into shared
 * memory costs when the pages are new, by the ways strata and tmpfs can do it.
 *
 *   tmpfs          4 processes pwrite their own new file in /dev/shm (the peer)
 *   pwrite-shared  4 processes pwrite disjoint ranges of one fallocated file
 *                  (one inode: its lock serialises them)
 *   fault-stream   fallocated, each process maps it and stores (non-temporal)
 *                  page by page: each first touch faults and zeroes the page
 *   popw-stream    the same after MADV_POPULATE_WRITE per 1 MiB (strata's
 *                  client populates each lease this way): zeroing in batches
 *   zeroed-...     the same after another process zeroed every page first
 *                  (a warm daemon's arena, or its pre-fault thread ahead)
 *   zero-only      the zeroing alone (MADV_POPULATE_WRITE of 1 GiB, 1 thread)
 *
 * Build: cc -O2 -mavx2 -o arena-first-touch arena-first-touch.c
 * Run:   ./arena-first-touch [repeats]   (uses /dev/shm, 2 GiB free) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define PER (256UL << 20)
#define CH (1UL << 20)
#define NP 4

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void stream(char *d, const char *s, size_t n) {
    for (size_t i = 0; i < n; i += 64) {
        __m128i a = _mm_loadu_si128((const void *)(s + i)), b = _mm_loadu_si128((const void *)(s + i + 16)),
                c = _mm_loadu_si128((const void *)(s + i + 32)), e = _mm_loadu_si128((const void *)(s + i + 48));
        _mm_stream_si128((void *)(d + i), a);
        _mm_stream_si128((void *)(d + i + 16), b);
        _mm_stream_si128((void *)(d + i + 32), c);
        _mm_stream_si128((void *)(d + i + 48), e);
    }
    _mm_sfence();
}

static double run(const char *mode) {
    int shared = open("/dev/shm/strata-arena-first-touch", O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (shared < 0 || ftruncate(shared, PER * NP) || fallocate(shared, 0, 0, PER * NP)) {
        perror("shared file");
        exit(1);
    }
    if (!strncmp(mode, "zero", 4)) {
        char *m = mmap(0, PER * NP, PROT_READ | PROT_WRITE, MAP_SHARED, shared, 0);
        double t0 = now();
        madvise(m, PER * NP, MADV_POPULATE_WRITE);
        double t1 = now();
        munmap(m, PER * NP);
        if (!strcmp(mode, "zero-only")) {
            close(shared);
            unlink("/dev/shm/strata-arena-first-touch");
            return (NP * PER >> 20) / (t1 - t0);
        }
    }
    double t0 = now();
    for (int p = 0; p < NP; p++)
        if (!fork()) {
            char *buf = aligned_alloc(4096, CH);
            memset(buf, 7, CH);
            if (!strcmp(mode, "tmpfs")) {
                char path[64];
                snprintf(path, sizeof path, "/dev/shm/strata-arena-first-touch.%d", p);
                int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
                for (size_t o = 0; o < PER; o += CH)
                    if (pwrite(fd, buf, CH, o) != (ssize_t)CH) _exit(1);
                _exit(0);
            }
            if (strstr(mode, "pwrite")) {
                for (size_t o = 0; o < PER; o += CH)
                    if (pwrite(shared, buf, CH, p * PER + o) != (ssize_t)CH) _exit(1);
                _exit(0);
            }
            char *m = mmap(0, PER * NP, PROT_READ | PROT_WRITE, MAP_SHARED, shared, 0);
            for (size_t o = 0; o < PER; o += CH) {
                if (strstr(mode, "popw")) madvise(m + p * PER + o, CH, MADV_POPULATE_WRITE);
                stream(m + p * PER + o, buf, CH);
            }
            _exit(0);
        }
    for (int p = 0; p < NP; p++) wait(0);
    double t1 = now();
    for (int p = 0; p < NP; p++) {
        char path[64];
        snprintf(path, sizeof path, "/dev/shm/strata-arena-first-touch.%d", p);
        unlink(path);
    }
    close(shared);
    unlink("/dev/shm/strata-arena-first-touch");
    return (NP * PER >> 20) / (t1 - t0);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    const char *modes[] = {"tmpfs", "pwrite-shared", "fault-stream", "popw-stream", "zeroed-popw-stream", "zero-only"};
    printf("%-20s MiB/s per repeat (4 x 256 MiB; zero-only: 1 GiB, 1 thread)\n", "mode");
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        printf("%-20s", modes[i]);
        for (int r = 0; r < reps; r++) printf(" %6.0f", run(modes[i]));
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
