/* Per-call cost of mdtest's operations through the adapter (issue 18, t2s):
 * one process, N files of 4 KiB in DIR, then R rounds of each loop, and the
 * mean time per call. Run it directly (the kernel's figure) and under
 * `strata run --mode scratch --include DIR` (strata's), alternately.
 *
 *   create          open(O_CREAT|O_RDWR) + write 4 KiB + close, once per file
 *   stat            stat by absolute path
 *   open-read-close open(O_RDONLY) + read 4 KiB + close
 *   pread           pread 4 KiB of an open file (no path, no open)
 *   unlink          once per file, at the end
 *   held-open, held-close  (with "held") all N files opened read-only and
 *                   kept open, then all closed: the cost of an open and of a
 *                   close while thousands of other files are open
 *
 * With 4 processes at once (DIR/d0..d3) it shows what a single daemon thread
 * and spinning waiters cost on 2 cores: run four copies in parallel.
 *
 * Build: cc -O2 -o md-ops md-ops.c
 * Run:   ./md-ops DIR [N=1000] [R=30] [held]   (held: N up to the fd limit) */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void name(char *p, const char *dir, int i) { snprintf(p, 512, "%s/f%d", dir, i); }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [N] [R]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    int n = argc > 2 ? atoi(argv[2]) : 1000, rounds = argc > 3 ? atoi(argv[3]) : 30;
    char p[512], buf[4096] = {1};
    struct stat st;
    double t0 = now_ns();
    for (int i = 0; i < n; i++) {
        name(p, dir, i);
        int fd = open(p, O_CREAT | O_RDWR, 0644);
        if (fd < 0 || write(fd, buf, sizeof buf) != sizeof buf || close(fd)) {
            perror(p);
            return 1;
        }
    }
    double t1 = now_ns();
    printf("create %.2f us\n", (t1 - t0) / n / 1e3);
    t0 = now_ns();
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++) {
            name(p, dir, i);
            if (stat(p, &st) || st.st_size != sizeof buf) {
                perror(p);
                return 1;
            }
        }
    t1 = now_ns();
    printf("stat %.2f us\n", (t1 - t0) / n / rounds / 1e3);
    t0 = now_ns();
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++) {
            name(p, dir, i);
            int fd = open(p, O_RDONLY);
            if (fd < 0 || read(fd, buf, sizeof buf) != sizeof buf || close(fd)) {
                perror(p);
                return 1;
            }
        }
    t1 = now_ns();
    printf("open-read-close %.2f us\n", (t1 - t0) / n / rounds / 1e3);
    name(p, dir, 0);
    int fd = open(p, O_RDONLY);
    t0 = now_ns();
    for (int r = 0; r < rounds * n; r++)
        if (pread(fd, buf, sizeof buf, 0) != sizeof buf) {
            perror(p);
            return 1;
        }
    t1 = now_ns();
    close(fd);
    printf("pread %.2f us\n", (t1 - t0) / n / rounds / 1e3);
    if (argc > 4 && strcmp(argv[4], "held") == 0) {
        int *fds = malloc(sizeof(int) * n);
        t0 = now_ns();
        for (int i = 0; i < n; i++) {
            name(p, dir, i);
            if ((fds[i] = open(p, O_RDONLY)) < 0) {
                perror(p);
                return 1;
            }
        }
        t1 = now_ns();
        printf("held-open %.2f us\n", (t1 - t0) / n / 1e3);
        t0 = now_ns();
        for (int i = 0; i < n; i++)
            if (close(fds[i])) {
                perror("close");
                return 1;
            }
        t1 = now_ns();
        printf("held-close %.2f us\n", (t1 - t0) / n / 1e3);
        free(fds);
    }
    t0 = now_ns();
    for (int i = 0; i < n; i++) {
        name(p, dir, i);
        if (unlink(p)) {
            perror(p);
            return 1;
        }
    }
    t1 = now_ns();
    printf("unlink %.2f us\n", (t1 - t0) / n / 1e3);
    return 0;
}
