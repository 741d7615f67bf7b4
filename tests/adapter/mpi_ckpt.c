/* An IOR-like checkpoint and restart (seed 000: `ior -w -r -C -e [-F]`),
 * for the tests and benchmark of files across nodes (cluster.rs).
 *
 * Usage: mpi_ckpt nn|n1 FILE BLOCK XFER SEGMENTS [nofsync] [mpiio|coll] [reads=K]
 *
 * I/O: POSIX pwrite/pread (default), MPI-IO independent calls
 * (`mpiio`: MPI_File_write_at/read_at, MPI_File_sync) or MPI-IO collective
 * calls (`coll`: MPI_File_write_at_all/read_at_all). A shared file is
 * opened on MPI_COMM_WORLD, a file per process on MPI_COMM_SELF.
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
 * `reads=K` repeats the read phase K times (a restart read again, as by
 * K epochs of an analysis): each pass is timed on its own.
 *
 * Rank 0 prints one line:
 *   ok MODE ranks=N per_node=P bytes=B write_s=W read_s=R last_read_s=L
 * with the slowest rank's phase times (barrier to barrier); L is the last
 * read pass's (R when K is 1). Any check
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

/* the I/O interface under test: 0 POSIX, 1 MPI-IO independent, 2 collective */
static int api;

struct file {
    int fd;
    MPI_File mf;
};

static void f_open(struct file *f, const char *path, int write, int shared, int trunc) {
    if (!api) {
        f->fd = open(path, write ? O_CREAT | O_WRONLY | (trunc ? O_TRUNC : 0) : O_RDONLY, 0644);
        if (f->fd < 0) fail(write ? "open for writing" : "open for reading", path, f->fd);
        return;
    }
    MPI_Comm c = shared ? MPI_COMM_WORLD : MPI_COMM_SELF;
    int rc = MPI_File_open(c, path, write ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY,
                           MPI_INFO_NULL, &f->mf);
    if (rc != MPI_SUCCESS) fail("MPI_File_open", path, rc);
    if (trunc && (rc = MPI_File_set_size(f->mf, 0)) != MPI_SUCCESS) fail("MPI_File_set_size", path, rc);
}

static void f_write(struct file *f, const char *path, const void *b, uint64_t len, uint64_t off) {
    if (!api) {
        ssize_t w = pwrite(f->fd, b, len, (off_t)off);
        if (w != (ssize_t)len) fail("pwrite", path, (long long)w);
        return;
    }
    MPI_Status st;
    int n = 0, rc = api == 2 ? MPI_File_write_at_all(f->mf, (MPI_Offset)off, b, (int)len, MPI_BYTE, &st)
                              : MPI_File_write_at(f->mf, (MPI_Offset)off, b, (int)len, MPI_BYTE, &st);
    MPI_Get_count(&st, MPI_BYTE, &n);
    if (rc != MPI_SUCCESS || (uint64_t)n != len) fail("MPI_File_write_at", path, rc ? rc : n);
}

static void f_read(struct file *f, const char *path, void *b, uint64_t len, uint64_t off) {
    if (!api) {
        ssize_t r = pread(f->fd, b, len, (off_t)off);
        if (r != (ssize_t)len) fail("short pread of", path, (long long)r);
        return;
    }
    MPI_Status st;
    int n = 0, rc = api == 2 ? MPI_File_read_at_all(f->mf, (MPI_Offset)off, b, (int)len, MPI_BYTE, &st)
                              : MPI_File_read_at(f->mf, (MPI_Offset)off, b, (int)len, MPI_BYTE, &st);
    MPI_Get_count(&st, MPI_BYTE, &n);
    if (rc != MPI_SUCCESS || (uint64_t)n != len) fail("short MPI_File_read_at of", path, rc ? rc : n);
}

static uint64_t f_size(struct file *f, const char *path) {
    if (!api) {
        struct stat st;
        if (fstat(f->fd, &st)) fail("fstat", path, 0);
        return (uint64_t)st.st_size;
    }
    MPI_Offset n = 0;
    if (MPI_File_get_size(f->mf, &n) != MPI_SUCCESS) fail("MPI_File_get_size", path, 0);
    return (uint64_t)n;
}

static void f_sync(struct file *f, const char *path) {
    if (!api ? fsync(f->fd) != 0 : MPI_File_sync(f->mf) != MPI_SUCCESS) fail("fsync", path, 0);
}

static void f_close(struct file *f, const char *path) {
    if (!api ? close(f->fd) != 0 : MPI_File_close(&f->mf) != MPI_SUCCESS) fail("close", path, 0);
}

static void fill(unsigned char *buf, uint64_t seed, uint64_t off, uint64_t len) {
    for (uint64_t i = 0; i < len; i++) buf[i] = byte_at(seed, off + i);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    int sync = 1, reads = 1, bad = argc < 6 || (strcmp(argv[1], "nn") && strcmp(argv[1], "n1"));
    for (int i = 6; i < argc; i++) {
        if (!strcmp(argv[i], "nofsync"))
            sync = 0;
        else if (!strcmp(argv[i], "mpiio"))
            api = 1;
        else if (!strcmp(argv[i], "coll"))
            api = 2;
        else if (!strncmp(argv[i], "reads=", 6) && atoi(argv[i] + 6) > 0)
            reads = atoi(argv[i] + 6);
        else
            bad = 1;
    }
    if (bad) {
        if (rank == 0) fprintf(stderr, "usage: mpi_ckpt nn|n1 FILE BLOCK XFER SEGMENTS [nofsync] [mpiio|coll] [reads=K]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
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
    struct file f;
    f_open(&f, mine, 1, n1, !n1);
    for (uint64_t s = 0; s < segs; s++) {
        uint64_t at = block_at(n1, rank, s, block), seed = n1 ? 0 : (uint64_t)rank + 1;
        for (uint64_t done = 0; done < block;) {
            uint64_t len = block - done < xfer ? block - done : xfer;
            fill(buf, seed, at + done, len);
            f_write(&f, mine, buf, len, at + done);
            done += len;
        }
    }
    if (sync) f_sync(&f, mine);
    f_close(&f, mine);
    double t1 = MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);
    double t2 = MPI_Wtime(), first_read_s = 0;
  for (int pass = 0; pass < reads; pass++) {
    if (pass > 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        t2 = MPI_Wtime();
    }
    f_open(&f, theirs, 0, n1, 0);
    uint64_t size = f_size(&f, theirs);
    if (size != want_size) fail("wrong size of", theirs, (long long)size);
    for (uint64_t s = 0; s < segs; s++) {
        uint64_t at = block_at(n1, from, s, block), seed = n1 ? 0 : (uint64_t)from + 1;
        for (uint64_t done = 0; done < block;) {
            uint64_t len = block - done < xfer ? block - done : xfer;
            f_read(&f, theirs, got, len, at + done);
            fill(buf, seed, at + done, len);
            if (memcmp(buf, got, len)) {
                uint64_t i = 0;
                while (buf[i] == got[i]) i++;
                fail("wrong byte in", theirs, (long long)(at + done + i));
            }
            done += len;
        }
    }
    f_close(&f, theirs);
    if (pass == 0) first_read_s = MPI_Wtime() - t2;
  }
    double t3 = MPI_Wtime();
    MPI_Barrier(MPI_COMM_WORLD);

    double mine_s[3] = {t1 - t0, first_read_s, t3 - t2}, max_s[3];
    MPI_Reduce(mine_s, max_s, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("ok %s ranks=%d per_node=%d bytes=%llu write_s=%.6f read_s=%.6f last_read_s=%.6f\n",
               argv[1], nranks, per_node, (unsigned long long)(segs * block * (uint64_t)nranks),
               max_s[0], max_s[1], max_s[2]);
    free(buf);
    free(got);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return 0;
}
