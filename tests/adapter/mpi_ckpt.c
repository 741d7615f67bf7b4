/* An IOR-like checkpoint and restart (seed 000: `ior -w -r -C -e [-F]`),
 * for the tests and benchmark of files across nodes (cluster.rs).
 *
 * Usage: mpi_ckpt nn|n1 FILE BLOCK XFER SEGMENTS [nofsync]
 *
 * nn: file per process, rank r writes FILE.<r>: SEGMENTS blocks of BLOCK
 *     bytes, one after another.
 * n1: one shared FILE, IOR's segmented layout: segment s of rank r is at
 *     (s * nranks + r) * BLOCK. BLOCK need not be a multiple of any page
 *     size, so neighbouring ranks write disjoint ranges of the same page.
 *
 * Write phase: every block is written in XFER-byte pwrites, then fsync
 * (IOR -e; not with `nofsync`), then close. After a barrier, the read phase reads the data of
 * rank (r + ranks per node) % nranks — the rank one node further, as
 * IOR's -C does — and checks every byte and the file's size. Ranks per
 * node come from MPI_COMM_TYPE_SHARED. The bytes depend only on the
 * writer rank (nn) or the offset (n1), so every run makes the same files.
 *
 * Rank 0 prints one line:
 *   ok MODE ranks=N per_node=P bytes=B write_s=W read_s=R
 * with the slowest rank's phase times (barrier to barrier). Any check
 * failure prints what differed and aborts the job.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rank, nranks;

static unsigned char byte_at(uint64_t seed, uint64_t o) {
    uint64_t z = (o + seed * 0x100000001b3ull) * 0x9E3779B97F4A7C15ull;
    z ^= z >> 29;
    return (unsigned char)(z ^ (o >> 11));
}

static void fail(const char *what, const char *path, long long a) {
    fprintf(stderr, "rank %d: %s %s (%lld) (errno %d: %s)\n", rank, what, path, a, errno,
            strerror(errno));
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

/* The offset of segment `s` of rank `r` and the seed of its bytes. */
static uint64_t block_at(int n1, int r, uint64_t s, uint64_t block) {
    return n1 ? (s * (uint64_t)nranks + (uint64_t)r) * block : s * block;
}

static void fill(unsigned char *buf, uint64_t seed, uint64_t off, uint64_t len) {
    for (uint64_t i = 0; i < len; i++) buf[i] = byte_at(seed, off + i);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc < 6 || argc > 7 || (strcmp(argv[1], "nn") && strcmp(argv[1], "n1")) ||
        (argc == 7 && strcmp(argv[6], "nofsync"))) {
        if (rank == 0) fprintf(stderr, "usage: mpi_ckpt nn|n1 FILE BLOCK XFER SEGMENTS [nofsync]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int sync = argc == 6;
    int n1 = strcmp(argv[1], "n1") == 0;
    uint64_t block = strtoull(argv[3], 0, 10), xfer = strtoull(argv[4], 0, 10),
             segs = strtoull(argv[5], 0, 10);
    if (!block || !xfer || !segs) fail("bad sizes for", argv[2], 0);
    MPI_Comm node;
    int per_node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &per_node);

    char mine[4096], theirs[4096];
    int from = (rank + per_node) % nranks;
    if (n1) {
        snprintf(mine, sizeof mine, "%s", argv[2]);
        snprintf(theirs, sizeof theirs, "%s", argv[2]);
    } else {
        snprintf(mine, sizeof mine, "%s.%d", argv[2], rank);
        snprintf(theirs, sizeof theirs, "%s.%d", argv[2], from);
    }
    uint64_t want_size = n1 ? segs * block * (uint64_t)nranks : segs * block;
    unsigned char *buf = malloc(xfer), *got = malloc(xfer);
    if (!buf || !got) fail("out of memory for", argv[2], (long long)xfer);

    if (n1 && rank == 0) {
        int fd = open(mine, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        if (fd < 0 || close(fd)) fail("create", mine, fd);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int fd = open(mine, O_CREAT | O_WRONLY | (n1 ? 0 : O_TRUNC), 0644);
    if (fd < 0) fail("open for writing", mine, fd);
    for (uint64_t s = 0; s < segs; s++) {
        uint64_t at = block_at(n1, rank, s, block), seed = n1 ? 0 : (uint64_t)rank + 1;
        for (uint64_t done = 0; done < block;) {
            uint64_t len = block - done < xfer ? block - done : xfer;
            fill(buf, seed, at + done, len);
            ssize_t w = pwrite(fd, buf, len, (off_t)(at + done));
            if (w != (ssize_t)len) fail("pwrite", mine, (long long)w);
            done += len;
        }
    }
    if (sync && fsync(fd)) fail("fsync", mine, 0);
    if (close(fd)) fail("close", mine, 0);
    double t1 = MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);
    double t2 = MPI_Wtime();

    fd = open(theirs, O_RDONLY);
    if (fd < 0) fail("open for reading", theirs, fd);
    struct stat st;
    if (fstat(fd, &st)) fail("fstat", theirs, 0);
    if ((uint64_t)st.st_size != want_size) fail("wrong size of", theirs, (long long)st.st_size);
    for (uint64_t s = 0; s < segs; s++) {
        uint64_t at = block_at(n1, from, s, block), seed = n1 ? 0 : (uint64_t)from + 1;
        for (uint64_t done = 0; done < block;) {
            uint64_t len = block - done < xfer ? block - done : xfer;
            ssize_t r = pread(fd, got, len, (off_t)(at + done));
            if (r != (ssize_t)len) fail("short pread of", theirs, (long long)r);
            fill(buf, seed, at + done, len);
            if (memcmp(buf, got, len)) {
                uint64_t i = 0;
                while (buf[i] == got[i]) i++;
                fail("wrong byte in", theirs, (long long)(at + done + i));
            }
            done += len;
        }
    }
    if (close(fd)) fail("close", theirs, 0);
    double t3 = MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);

    double mine_s[2] = {t1 - t0, t3 - t2}, max_s[2];
    MPI_Reduce(mine_s, max_s, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("ok %s ranks=%d per_node=%d bytes=%llu write_s=%.6f read_s=%.6f\n", argv[1], nranks,
               per_node, (unsigned long long)(segs * block * (uint64_t)nranks), max_s[0], max_s[1]);
    free(buf);
    free(got);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
