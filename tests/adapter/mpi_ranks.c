/* MPI ranks sharing one file, for the adapter tests (adapter_mpi.rs).
 *
 * Usage: mpi_ranks FILE CHUNK
 *
 * Rank 0 creates FILE (O_TRUNC); after a barrier every rank writes its own
 * CHUNK bytes at offset rank*CHUNK with pwrite, in uneven pieces (CHUNK is
 * not a multiple of the page size, so neighbouring ranks write disjoint
 * ranges of the same page), closes it, and writes a small per-rank file
 * "FILE.rank<r>" with stdio. After a barrier each rank reads its right
 * neighbour's chunk and per-rank file (read-after-write from another
 * process); after another barrier rank 0 checks the whole file's size and
 * bytes. Every check failure prints what differed and aborts. Rank 0
 * prints "ok N bytes" on success. The bytes depend only on the offset, so
 * a run without the adapter produces identical files.
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

static unsigned char byte_at(uint64_t o) {
    uint64_t z = o * 0x9E3779B97F4A7C15ull;
    z ^= z >> 29;
    return (unsigned char)(z ^ (o >> 11));
}

static void fail(const char *fmt, const char *a, long long b, long long c) {
    fprintf(stderr, "rank %d: ", rank);
    fprintf(stderr, fmt, a, b, c);
    fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

static void check_range(int fd, const char *path, uint64_t off, uint64_t len) {
    unsigned char *buf = malloc(len ? len : 1);
    uint64_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, buf + got, len - got, (off_t)(off + got));
        if (n < 0) fail("pread %s at %lld failed (%lld)", path, (long long)(off + got), (long long)n);
        if (n == 0) fail("pread %s: early end of file at %lld (want %lld bytes)", path, (long long)(off + got), (long long)(off + len));
        got += (uint64_t)n;
    }
    for (uint64_t i = 0; i < len; i++)
        if (buf[i] != byte_at(off + i)) fail("%s: wrong byte at offset %lld (got %lld)", path, (long long)(off + i), (long long)buf[i]);
    free(buf);
}

static void rank_file_name(char *out, size_t cap, const char *path, int r) {
    snprintf(out, cap, "%s.rank%d", path, r);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc != 3) {
        if (rank == 0) fprintf(stderr, "usage: mpi_ranks FILE CHUNK\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *path = argv[1];
    uint64_t chunk = strtoull(argv[2], NULL, 10);

    if (rank == 0) {
        int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        if (fd < 0) fail("create %s", path, 0, 0);
        if (close(fd) != 0) fail("close %s", path, 0, 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* Phase 1: disjoint pwrites of uneven pieces, then a per-rank file. */
    int fd = open(path, O_WRONLY);
    if (fd < 0) fail("open %s for writing", path, 0, 0);
    uint64_t base = (uint64_t)rank * chunk, done = 0, piece = 65536 + 7 + (uint64_t)rank * 4096;
    unsigned char *buf = malloc(piece);
    while (done < chunk) {
        uint64_t n = chunk - done < piece ? chunk - done : piece;
        for (uint64_t i = 0; i < n; i++) buf[i] = byte_at(base + done + i);
        ssize_t w = pwrite(fd, buf, n, (off_t)(base + done));
        if (w != (ssize_t)n) fail("pwrite %s at %lld returned %lld", path, (long long)(base + done), (long long)w);
        done += n;
    }
    free(buf);
    if (close(fd) != 0) fail("close %s", path, 0, 0);
    char name[4096];
    rank_file_name(name, sizeof name, path, rank);
    FILE *f = fopen(name, "w");
    if (!f) fail("fopen %s", name, 0, 0);
    fprintf(f, "rank %d of %d wrote %llu bytes at offset %llu\n", rank, nranks, (unsigned long long)chunk, (unsigned long long)base);
    if (fclose(f) != 0) fail("fclose %s", name, 0, 0);
    MPI_Barrier(MPI_COMM_WORLD);

    /* Phase 2: read the right neighbour's chunk and per-rank file. */
    int peer = (rank + 1) % nranks;
    fd = open(path, O_RDONLY);
    if (fd < 0) fail("open %s for reading", path, 0, 0);
    check_range(fd, path, (uint64_t)peer * chunk, chunk);
    close(fd);
    rank_file_name(name, sizeof name, path, peer);
    f = fopen(name, "r");
    if (!f) fail("fopen %s for reading", name, 0, 0);
    char line[256], want[256];
    snprintf(want, sizeof want, "rank %d of %d wrote %llu bytes at offset %llu\n", peer, nranks, (unsigned long long)chunk,
             (unsigned long long)((uint64_t)peer * chunk));
    if (!fgets(line, sizeof line, f) || strcmp(line, want) != 0) fail("%s: unexpected content", name, 0, 0);
    fclose(f);
    MPI_Barrier(MPI_COMM_WORLD);

    /* Phase 3: rank 0 checks the whole file. */
    if (rank == 0) {
        uint64_t total = (uint64_t)nranks * chunk;
        struct stat st;
        if (stat(path, &st) != 0) fail("stat %s", path, 0, 0);
        if ((uint64_t)st.st_size != total) fail("%s: size %lld, want %lld", path, (long long)st.st_size, (long long)total);
        fd = open(path, O_RDONLY);
        if (fd < 0) fail("open %s for the final check", path, 0, 0);
        check_range(fd, path, 0, total);
        char extra;
        if (pread(fd, &extra, 1, (off_t)total) != 0) fail("%s: bytes past %lld", path, (long long)total, 0);
        close(fd);
        printf("ok %llu bytes\n", (unsigned long long)total);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
