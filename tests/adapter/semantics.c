/*
 * The adapter's semantic matrix: every case performs the same operations on
 * a file in a TRACKED directory (buffered by libstrata_posix.so) and on its
 * twin in an UNTRACKED directory (plain kernel file system), recording each
 * call's return value, errno (when it failed) and a hash of the bytes it
 * returned. The two traces must be identical, and so must the final bytes of
 * every file (read back through the adapter on the tracked side).
 *
 * Usage: semantics TRACKED_DIR TWIN_DIR MODE [CASE]
 *   MODE: default | scratch | workflow (only changes which cases run: mmap
 *   needs a destination). CASE: run only the case of that name.
 * Seed files: the driver creates seed_a.dat (3 MiB + 123 bytes) and
 * seed_b.dat (200000 bytes) with identical bytes in both directories before
 * the run (they exist at the destination before the adapter sees them).
 *
 * Prints "MISMATCH ..." lines and exits 1 on any difference; prints
 * "semantics: N cases, M operations compared, all identical" on success.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB 1024L
#define MiB (1024L * 1024L)
/* Interesting boundaries: the default page size and a small one. */
#define PG MiB

/* ------------------------------------------------------------------ trace */

typedef struct {
    const char *label;
    long long ret;
    int err;
    int line;
} rec_t;

static rec_t *tr[2];
static int ntr[2], captr[2];
static int side;          /* 0 = tracked, 1 = twin */
static const char *D;     /* directory of the current side */
static const char *DIRS[2];
static const char *MODE;
static long long ops_compared;
static int mismatches;

static long long rec_(int line, const char *label, long long ret, int failed, int e) {
    if (ntr[side] == captr[side]) {
        captr[side] = captr[side] ? captr[side] * 2 : 1024;
        tr[side] = realloc(tr[side], sizeof(rec_t) * captr[side]);
        if (!tr[side]) {
            perror("realloc");
            exit(2);
        }
    }
    tr[side][ntr[side]++] = (rec_t){label, ret, failed ? e : 0, line};
    return ret;
}

/* R: an int/ssize_t/off_t call; errno recorded when it returns < 0. */
#define R(expr) ({ errno = 0; long long _r = (long long)(expr); int _e = errno; rec_(__LINE__, #expr, _r, _r < 0, _e); errno = _e; _r; })
/* RFD: like R for calls returning a descriptor (its number is not compared). */
#define RFD(expr) ({ errno = 0; long long _r = (long long)(expr); int _e = errno; rec_(__LINE__, #expr, _r < 0 ? _r : 0, _r < 0, _e); errno = _e; (int)_r; })
/* RP: a call returning a pointer; records whether it is NULL (and errno). */
#define RP(expr) ({ errno = 0; void *_p = (void *)(expr); int _e = errno; rec_(__LINE__, #expr, _p != NULL, _p == NULL, _e); errno = _e; _p; })
/* V: a value computed by the case (sizes, positions, hashes). */
#define V(label, x) rec_(__LINE__, label, (long long)(x), 0, 0)
#define H(label, buf, n) rec_(__LINE__, label, (long long)fnv((buf), (n)), 0, 0)

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h ^ n;
}

static void fill(void *p, size_t n, uint64_t seed) {
    unsigned char *b = p;
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        b[i] = (unsigned char)(s >> 24);
    }
}

static uint64_t rng_state;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static char *pth(const char *name) {
    static char b[16][4096];
    static int i;
    i = (i + 1) % 16;
    snprintf(b[i], sizeof b[i], "%s/%s", D, name);
    return b[i];
}

static void *xmalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        perror("calloc");
        exit(2);
    }
    return p;
}

/* The stat fields both sides must agree on. */
static void rec_stat(int line, const char *label, int r, const struct stat *st) {
    rec_(line, label, r, r < 0, errno);
    if (r == 0) {
        rec_(line, "st_size", st->st_size, 0, 0);
        rec_(line, "S_ISREG", S_ISREG(st->st_mode), 0, 0);
        rec_(line, "S_ISDIR", S_ISDIR(st->st_mode), 0, 0);
    }
}
#define STAT(path) ({ struct stat _st; errno = 0; int _r = stat((path), &_st); rec_stat(__LINE__, "stat(" #path ")", _r, &_st); _r; })
#define LSTAT(path) ({ struct stat _st; errno = 0; int _r = lstat((path), &_st); rec_stat(__LINE__, "lstat(" #path ")", _r, &_st); _r; })
#define FSTAT(fd) ({ struct stat _st; errno = 0; int _r = fstat((fd), &_st); rec_stat(__LINE__, "fstat(" #fd ")", _r, &_st); _r; })

/* Reads the whole file at `path` with requests of `chunk` bytes and records
 * each return value and a hash of the whole content. */
static void read_all_rec(int line, const char *path, size_t chunk) {
    int fd = open(path, O_RDONLY);
    rec_(line, "read_all open", fd < 0 ? -1 : 0, fd < 0, errno);
    if (fd < 0)
        return;
    char *buf = xmalloc(chunk);
    uint64_t h = 0xcbf29ce484222325ULL;
    long long total = 0;
    for (;;) {
        ssize_t n = read(fd, buf, chunk);
        if (n <= 0) {
            rec_(line, "read_all last read", n, n < 0, errno);
            break;
        }
        for (ssize_t i = 0; i < n; i++) {
            h ^= (unsigned char)buf[i];
            h *= 0x100000001b3ULL;
        }
        total += n;
    }
    rec_(line, "read_all bytes", total, 0, 0);
    rec_(line, "read_all hash", (long long)h, 0, 0);
    close(fd);
    free(buf);
}
#define READ_ALL(path, chunk) read_all_rec(__LINE__, (path), (chunk))

/* ------------------------------------------------------------------ cases */

static void c_seq_small(void) {
    char buf[100];
    int fd = RFD(open(pth("seq_small.dat"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    for (int i = 0; i < 300; i++) {
        fill(buf, sizeof buf, 100 + i);
        R(write(fd, buf, sizeof buf));
    }
    FSTAT(fd);
    R(close(fd));
    fd = RFD(open(pth("seq_small.dat"), O_RDONLY));
    for (int i = 0; i < 302; i++) {
        memset(buf, 0, sizeof buf);
        long long n = R(read(fd, buf, sizeof buf));
        if (n > 0)
            H("seq_small chunk", buf, n);
    }
    R(close(fd));
}

static void c_seq_medium(void) {
    size_t n = 64 * KiB;
    char *buf = xmalloc(n);
    int fd = RFD(open(pth("seq_medium.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    for (int i = 0; i < 40; i++) {
        fill(buf, n, 200 + i);
        R(write(fd, buf, n));
    }
    R(lseek(fd, 0, SEEK_SET));
    for (int i = 0; i < 41; i++) {
        memset(buf, 0, n);
        long long r = R(read(fd, buf, n));
        if (r > 0)
            H("seq_medium chunk", buf, r);
    }
    R(close(fd));
    READ_ALL(pth("seq_medium.dat"), 4096);
    free(buf);
}

static void c_seq_large(void) {
    size_t n = 3 * MiB + 17;
    char *buf = xmalloc(n);
    int fd = RFD(open(pth("seq_large.dat"), O_CREAT | O_WRONLY | O_TRUNC, 0600));
    for (int i = 0; i < 3; i++) {
        fill(buf, n, 300 + i);
        R(write(fd, buf, n));
    }
    R(close(fd));
    fd = RFD(open(pth("seq_large.dat"), O_RDONLY));
    for (int i = 0; i < 4; i++) {
        memset(buf, 0, n);
        long long r = R(read(fd, buf, n));
        if (r > 0)
            H("seq_large chunk", buf, r);
    }
    R(close(fd));
    READ_ALL(pth("seq_large.dat"), 1 * MiB + 3);
    free(buf);
}

static void c_random(void) {
    rng_state = 0x1234567;
    size_t span = 6 * MiB;
    char *buf = xmalloc(256 * KiB);
    int fd = RFD(open(pth("random.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    for (int i = 0; i < 300; i++) {
        size_t len;
        switch (rnd() % 3) {
        case 0: len = 1 + rnd() % 200; break;
        case 1: len = 1 + rnd() % (64 * KiB); break;
        default: len = 1 + rnd() % (256 * KiB); break;
        }
        off_t off = rnd() % span;
        fill(buf, len, 400 + i);
        R(pwrite(fd, buf, len, off));
    }
    FSTAT(fd);
    for (int i = 0; i < 300; i++) {
        size_t len = 1 + rnd() % (256 * KiB);
        off_t off = rnd() % (span + 512 * KiB);
        memset(buf, 0xEE, len);
        long long r = R(pread(fd, buf, len, off));
        if (r > 0)
            H("random pread", buf, r);
    }
    R(close(fd));
    free(buf);
}

static void c_strided(void) {
    char rec[1000], back[1000];
    int fd = RFD(open(pth("strided.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    for (int i = 0; i < 600; i++) {
        fill(rec, sizeof rec, 500 + i);
        R(lseek(fd, (off_t)i * 4096 + 7, SEEK_SET));
        R(write(fd, rec, sizeof rec));
    }
    FSTAT(fd);
    /* Read with a different stride that straddles records and holes. */
    for (int i = 0; i < 700; i++) {
        memset(back, 0xAA, sizeof back);
        long long r = R(pread(fd, back, sizeof back, (off_t)i * 3500 + 3));
        if (r > 0)
            H("strided pread", back, r);
    }
    R(close(fd));
}

/* Update in place of a file that already existed at the destination
 * (read-through and page fill), across page boundaries. */
static void c_update_in_place(void) {
    char buf[5000];
    int fd = RFD(open(pth("seed_a.dat"), O_RDWR));
    FSTAT(fd);
    off_t offs[] = {0, 100, PG - 10, PG + 1, 2 * PG - 2500, 64 * KiB - 1, 3 * PG + 100};
    for (unsigned i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        fill(buf, 20 + i * 700, 600 + i);
        R(pwrite(fd, buf, 20 + i * 700, offs[i]));
    }
    for (unsigned i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        memset(buf, 0, sizeof buf);
        long long r = R(pread(fd, buf, sizeof buf, offs[i] > 1000 ? offs[i] - 1000 : 0));
        if (r > 0)
            H("update pread", buf, r);
    }
    FSTAT(fd);
    R(close(fd));
    READ_ALL(pth("seed_a.dat"), 64 * KiB);
}

/* Read-only access to a pre-existing destination file (read-through). */
static void c_read_seed(void) {
    STAT(pth("seed_b.dat"));
    READ_ALL(pth("seed_b.dat"), 100);
    READ_ALL(pth("seed_b.dat"), 3 * MiB + 1);
    int fd = RFD(open(pth("seed_b.dat"), O_RDONLY));
    char buf[7000];
    for (int i = 0; i < 40; i++) {
        long long r = R(pread(fd, buf, sizeof buf, (off_t)i * 5003));
        if (r > 0)
            H("seed pread", buf, r);
    }
    R(write(fd, "x", 1)); /* EBADF: read-only */
    R(close(fd));
}

/* NULL buffers: legal with a zero length (write(fd, NULL, 0) returns 0),
 * EFAULT with bytes, as the kernel answers. */
static void c_null_buffers(void) {
    char *volatile nul = NULL; /* volatile: no compile-time nonnull checks */
    int fd = RFD(open(pth("null.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(write(fd, nul, 0));
    R(write(fd, "0123456789", 10));
    R(pwrite(fd, nul, 0, 3));
    R(lseek(fd, 0, SEEK_SET));
    R(read(fd, nul, 0));
    R(pread(fd, nul, 0, 2));
    struct iovec v = {nul, 0};
    R(writev(fd, &v, 1));
    R(readv(fd, &v, 1));
    R(write(fd, nul, 5));
    R(read(fd, nul, 5));
    R(lseek(fd, 0, SEEK_CUR));
    FSTAT(fd);
    R(close(fd));
    READ_ALL(pth("null.dat"), 4);
}

static void c_append(void) {
    char buf[3000];
    int fd = RFD(open(pth("append.dat"), O_CREAT | O_WRONLY | O_APPEND | O_TRUNC, 0644));
    for (int i = 0; i < 20; i++) {
        fill(buf, 100 + i * 131, 700 + i);
        R(write(fd, buf, 100 + i * 131));
        R(lseek(fd, 0, SEEK_CUR));
    }
    R(lseek(fd, 0, SEEK_SET));
    R(write(fd, "AFTER-SEEK", 10)); /* still appends */
    R(lseek(fd, 0, SEEK_CUR));
    R(fcntl(fd, F_GETFL) & (O_APPEND | O_ACCMODE));
    R(close(fd));
    /* Two descriptors appending in turn. */
    int a = RFD(open(pth("append.dat"), O_WRONLY | O_APPEND));
    int b = RFD(open(pth("append.dat"), O_RDWR | O_APPEND));
    for (int i = 0; i < 10; i++) {
        fill(buf, 50 + i, 800 + i);
        R(write(i % 2 ? a : b, buf, 50 + i));
    }
    /* pwrite on O_APPEND appends on Linux. */
    R(pwrite(b, "PW", 2, 0));
    memset(buf, 0, sizeof buf);
    long long r = R(pread(b, buf, 100, 0));
    if (r > 0)
        H("append head", buf, r);
    FSTAT(a);
    R(close(a));
    R(close(b));
    /* Appending to a pre-existing destination file. */
    int c = RFD(open(pth("seed_b.dat"), O_WRONLY | O_APPEND));
    R(write(c, "tail of seed b\n", 15));
    FSTAT(c);
    R(close(c));
    READ_ALL(pth("append.dat"), 777);
}

static void c_truncate(void) {
    size_t n = 3 * MiB;
    char *buf = xmalloc(n);
    fill(buf, n, 900);
    int fd = RFD(open(pth("trunc.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(write(fd, buf, n));
    R(ftruncate(fd, 1000));
    FSTAT(fd);
    R(lseek(fd, 0, SEEK_CUR));
    memset(buf, 0, n);
    long long r = R(pread(fd, buf, n, 0));
    if (r > 0)
        H("after shrink", buf, r);
    R(ftruncate(fd, 2 * MiB + 500)); /* extend: zeros */
    memset(buf, 1, n);
    r = R(pread(fd, buf, n, 0));
    if (r > 0)
        H("after extend", buf, r);
    R(write(fd, "end", 3)); /* at offset 3 MiB (position kept) */
    FSTAT(fd);
    R(ftruncate(fd, -1));
    R(close(fd));
    R(truncate(pth("trunc.dat"), PG + 1));
    STAT(pth("trunc.dat"));
    R(truncate(pth("no_such_file.dat"), 10));
    READ_ALL(pth("trunc.dat"), 10000);
    /* Shrink then extend a file that existed at the destination: the old
     * bytes beyond the shrink point must read as zeros. */
    R(truncate(pth("seed_a.dat"), 100));
    R(truncate(pth("seed_a.dat"), 5000));
    READ_ALL(pth("seed_a.dat"), 4096);
    fd = RFD(open(pth("seed_a.dat"), O_RDWR));
    R(ftruncate(fd, 2 * PG + 5));
    R(pwrite(fd, "mid", 3, PG + 7));
    FSTAT(fd);
    R(close(fd));
    READ_ALL(pth("seed_a.dat"), 1 * MiB);
    /* O_TRUNC of a pre-existing destination file. */
    fd = RFD(open(pth("seed_trunc.dat"), O_RDWR | O_TRUNC));
    FSTAT(fd);
    R(write(fd, "new", 3));
    R(close(fd));
    READ_ALL(pth("seed_trunc.dat"), 10);
    free(buf);
}

static void c_holes(void) {
    char buf[8192];
    int fd = RFD(open(pth("holes.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(lseek(fd, 5 * PG + 3, SEEK_SET));
    R(write(fd, "X", 1));
    FSTAT(fd);
    R(pwrite(fd, "Y", 1, 10 * MiB + 77));
    FSTAT(fd);
    for (int i = 0; i < 12; i++) {
        memset(buf, 0x55, sizeof buf);
        long long r = R(pread(fd, buf, sizeof buf, (off_t)i * PG - 4000 + (i == 0 ? 4000 : 0)));
        if (r > 0)
            H("hole read", buf, r);
    }
    R(close(fd));
    READ_ALL(pth("holes.dat"), 3 * MiB + 1);
}

static void c_eof(void) {
    char buf[4096];
    int fd = RFD(open(pth("eof.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    fill(buf, 1500, 1000);
    R(write(fd, buf, 1500));
    R(read(fd, buf, sizeof buf));          /* at EOF: 0 */
    R(pread(fd, buf, sizeof buf, 1500));   /* at EOF: 0 */
    R(pread(fd, buf, sizeof buf, 99999));  /* past EOF: 0 */
    R(pread(fd, buf, sizeof buf, 1000));   /* straddles: 500 */
    R(lseek(fd, 100, SEEK_END));
    R(read(fd, buf, 10));                  /* past EOF: 0 */
    R(lseek(fd, -10, SEEK_END));
    memset(buf, 0, sizeof buf);
    long long r = R(read(fd, buf, 100));
    if (r > 0)
        H("tail", buf, r);
    R(pread(fd, buf, 10, -1));             /* EINVAL */
    R(read(fd, buf, 0));
    R(close(fd));
    int e = RFD(open(pth("empty.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(read(e, buf, 10));
    FSTAT(e);
    R(close(e));
}

static void c_stat(void) {
    int fd = RFD(open(pth("stat.dat"), O_CREAT | O_WRONLY | O_TRUNC, 0640));
    STAT(pth("stat.dat"));
    char buf[3000];
    fill(buf, sizeof buf, 1100);
    R(write(fd, buf, sizeof buf));
    STAT(pth("stat.dat")); /* size visible before close */
    LSTAT(pth("stat.dat"));
    FSTAT(fd);
    struct stat st;
    errno = 0;
    int r = fstatat(AT_FDCWD, pth("stat.dat"), &st, 0);
    rec_stat(__LINE__, "fstatat", r, &st);
    r = stat(pth("stat.dat"), &st);
    V("mode bits", r == 0 ? (long long)(st.st_mode & 07777) : -1);
    V("uid matches", r == 0 ? st.st_uid == getuid() : -1);
    struct statx sx;
    errno = 0;
    r = statx(AT_FDCWD, pth("stat.dat"), 0, STATX_SIZE | STATX_MODE, &sx);
    rec_(__LINE__, "statx", r, r < 0, errno);
    if (r == 0) {
        V("statx size", sx.stx_size);
        V("statx reg", S_ISREG(sx.stx_mode));
    }
    R(close(fd));
    STAT(pth("no_such.dat"));
    R(access(pth("stat.dat"), F_OK));
    R(access(pth("stat.dat"), R_OK | W_OK));
    R(access(pth("no_such.dat"), F_OK));
    STAT(D);
    /* A file in a sub-directory. */
    R(mkdir(pth("sub"), 0755));
    int s = RFD(open(pth("sub/inner.dat"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    R(write(s, buf, 1234));
    R(close(s));
    STAT(pth("sub/inner.dat"));
    STAT(pth("sub"));
    R(open(pth("sub"), O_RDONLY | O_DIRECTORY) >= 0);
    RFD(open(pth("sub/missing/x.dat"), O_CREAT | O_WRONLY, 0644)); /* ENOENT */
}

static void c_lseek(void) {
    int fd = RFD(open(pth("lseek.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    char buf[10000];
    fill(buf, sizeof buf, 1200);
    R(write(fd, buf, sizeof buf));
    R(lseek(fd, 0, SEEK_CUR));
    R(lseek(fd, 10, SEEK_SET));
    R(lseek(fd, 25, SEEK_CUR));
    R(lseek(fd, -5, SEEK_CUR));
    R(lseek(fd, 0, SEEK_END));
    R(lseek(fd, -20000, SEEK_END)); /* EINVAL */
    R(lseek(fd, 0, SEEK_CUR));      /* unchanged */
    R(lseek(fd, -1, SEEK_SET));     /* EINVAL */
    R(lseek(fd, 0, 42));            /* EINVAL */
    R(lseek(fd, 1 << 20, SEEK_SET));
    R(lseek(fd, 3, SEEK_SET));
    char small[7];
    long long r = R(read(fd, small, sizeof small));
    if (r > 0)
        H("read at 3", small, r);
    R(lseek(fd, 0, SEEK_CUR));
    R(close(fd));
    R(lseek(fd, 0, SEEK_SET)); /* EBADF */
}

static void c_pread_pwrite(void) {
    int fd = RFD(open(pth("prw.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    char buf[200000];
    fill(buf, sizeof buf, 1300);
    R(pwrite(fd, buf, sizeof buf, 1000));
    R(lseek(fd, 0, SEEK_CUR)); /* pwrite does not move the position */
    R(write(fd, "head", 4));
    R(lseek(fd, 0, SEEK_CUR));
    memset(buf, 0, sizeof buf);
    long long r = R(pread(fd, buf, sizeof buf, 500));
    if (r > 0)
        H("pread", buf, r);
    R(lseek(fd, 0, SEEK_CUR));
    R(pread(fd, buf, 10, 10 * MiB));
    R(pwrite(fd, buf, 10, -5)); /* EINVAL */
    R(close(fd));
    int ro = RFD(open(pth("prw.dat"), O_RDONLY));
    R(pwrite(ro, buf, 10, 0)); /* EBADF */
    R(close(ro));
    int wo = RFD(open(pth("prw.dat"), O_WRONLY));
    R(pread(wo, buf, 10, 0)); /* EBADF */
    R(close(wo));
}

static void c_vectored(void) {
    int fd = RFD(open(pth("vec.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    static char a[100], b[70000], c[3 * MiB + 11];
    fill(a, sizeof a, 1400);
    fill(b, sizeof b, 1401);
    fill(c, sizeof c, 1402);
    struct iovec iov[3] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}};
    R(writev(fd, iov, 3));
    R(lseek(fd, 0, SEEK_CUR));
    R(pwritev(fd, iov, 2, PG - 50));
    R(lseek(fd, 0, SEEK_CUR));
    struct iovec z[2] = {{a, 0}, {b, 0}};
    R(writev(fd, z, 2));
    R(lseek(fd, 7, SEEK_SET));
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    memset(c, 0, sizeof c);
    long long r = R(readv(fd, iov, 3));
    if (r > 0) {
        H("readv a", a, sizeof a);
        H("readv b", b, sizeof b);
        H("readv c", c, sizeof c);
    }
    r = R(preadv(fd, iov, 3, 2 * PG + 3));
    if (r > 0) {
        H("preadv a", a, sizeof a);
        H("preadv b", b, sizeof b);
        H("preadv c", c, sizeof c);
    }
    R(pwritev2(fd, iov, 1, 5, 0));
    r = R(preadv2(fd, iov, 2, 0, 0));
    if (r > 0)
        H("preadv2 a", a, sizeof a);
    R(close(fd));
}

static void c_dup(void) {
    int fd = RFD(open(pth("dup.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(write(fd, "0123456789", 10));
    int d1 = RFD(dup(fd));
    R(lseek(d1, 0, SEEK_CUR)); /* shared offset: 10 */
    R(write(d1, "abc", 3));
    R(lseek(fd, 0, SEEK_CUR)); /* 13 */
    int d2 = RFD(fcntl(fd, F_DUPFD, 100));
    V("F_DUPFD >= 100", d2 >= 100);
    int d3 = RFD(fcntl(fd, F_DUPFD_CLOEXEC, 0));
    R(fcntl(d3, F_GETFD) & FD_CLOEXEC);
    R(fcntl(d2, F_GETFD) & FD_CLOEXEC);
    R(fcntl(d2, F_GETFL) & (O_ACCMODE | O_APPEND));
    R(lseek(d2, 2, SEEK_SET));
    char buf[32] = {0};
    R(read(d3, buf, 4));
    H("dup read", buf, 4);
    R(close(fd));
    R(write(d1, "XY", 2)); /* still open through the dup */
    /* dup2 onto another open (tracked) descriptor closes it first. */
    int other = RFD(open(pth("dup_other.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(write(other, "other", 5));
    int target = other;
    R(dup2(d1, target) == target);
    R(write(target, "Z", 1));
    R(lseek(d1, 0, SEEK_CUR));
    R(dup2(target, target) == target);
    R(dup3(target, target, 0)); /* EINVAL */
    /* F_SETFL O_APPEND on a tracked fd. */
    R(fcntl(d1, F_SETFL, O_APPEND));
    R(fcntl(d1, F_GETFL) & O_APPEND);
    R(lseek(d1, 0, SEEK_SET));
    R(write(d1, "APP", 3));
    R(lseek(d1, 0, SEEK_CUR));
    R(close(d1));
    R(close(d2));
    R(close(d3));
    R(close(target));
    R(close(target)); /* EBADF */
    READ_ALL(pth("dup.dat"), 5);
    READ_ALL(pth("dup_other.dat"), 5);
    /* dup2 of an untracked descriptor (stdout) over a tracked one. */
    int t = RFD(open(pth("dup_std.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(write(t, "keep", 4));
    int saved = RFD(dup(1));
    R(dup2(t, 1) == 1); /* stdout now goes to the file */
    R(write(1, "via-stdout\n", 11));
    R(dup2(saved, 1) == 1);
    R(close(saved));
    R(close(t));
    READ_ALL(pth("dup_std.dat"), 100);
}

static void c_excl_trunc(void) {
    RFD(open(pth("excl.dat"), O_CREAT | O_EXCL | O_WRONLY, 0644));
    RFD(open(pth("excl.dat"), O_CREAT | O_EXCL | O_WRONLY, 0644)); /* EEXIST */
    int fd = RFD(open(pth("excl.dat"), O_WRONLY));
    R(write(fd, "some bytes here", 15));
    R(close(fd));
    STAT(pth("excl.dat"));
    fd = RFD(open(pth("excl.dat"), O_WRONLY | O_TRUNC));
    FSTAT(fd);
    R(write(fd, "ab", 2));
    R(read(fd, (char[4]){0}, 4)); /* EBADF */
    R(close(fd));
    RFD(open(pth("absent.dat"), O_RDONLY));         /* ENOENT */
    RFD(open(pth("absent.dat"), O_WRONLY));         /* ENOENT */
    RFD(open(pth("seed_b.dat"), O_CREAT | O_EXCL | O_RDWR, 0644)); /* EEXIST at the destination */
    int c = RFD(creat(pth("creat.dat"), 0600));
    R(write(c, "creat", 5));
    R(read(c, (char[4]){0}, 4)); /* EBADF: creat is write-only */
    R(close(c));
    c = RFD(creat(pth("creat.dat"), 0600)); /* truncates */
    FSTAT(c);
    R(close(c));
    int o = RFD(openat(AT_FDCWD, pth("openat.dat"), O_CREAT | O_RDWR, 0644));
    R(write(o, "openat", 6));
    R(close(o));
    int dfd = RFD(open(D, O_RDONLY | O_DIRECTORY));
    o = RFD(openat(dfd, "openat.dat", O_RDWR | O_APPEND));
    R(write(o, "+rel", 4));
    R(close(o));
    R(close(dfd));
    READ_ALL(pth("openat.dat"), 100);
}

static void c_rename(void) {
    int fd = RFD(open(pth("ren_a.dat"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    char buf[300000];
    fill(buf, sizeof buf, 1500);
    R(write(fd, buf, sizeof buf));
    R(close(fd));
    R(rename(pth("ren_a.dat"), pth("ren_b.dat")));
    STAT(pth("ren_a.dat"));
    STAT(pth("ren_b.dat"));
    READ_ALL(pth("ren_b.dat"), 65536);
    /* Rename over an existing file replaces it. */
    fd = RFD(open(pth("ren_c.dat"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    R(write(fd, "old content of c", 16));
    R(close(fd));
    R(rename(pth("ren_b.dat"), pth("ren_c.dat")));
    STAT(pth("ren_b.dat"));
    READ_ALL(pth("ren_c.dat"), 65536);
    R(rename(pth("ren_missing.dat"), pth("ren_x.dat"))); /* ENOENT */
    /* Renaming an open file: the descriptor follows it. */
    fd = RFD(open(pth("ren_c.dat"), O_RDWR));
    R(renameat(AT_FDCWD, pth("ren_c.dat"), AT_FDCWD, pth("ren_d.dat")));
    R(pwrite(fd, "patched", 7, 10));
    R(close(fd));
    READ_ALL(pth("ren_d.dat"), 65536);
    /* Into a sub-directory. */
    R(mkdir(pth("rensub"), 0755));
    R(rename(pth("ren_d.dat"), pth("rensub/ren_e.dat")));
    READ_ALL(pth("rensub/ren_e.dat"), 4096);
}

static void c_unlink(void) {
    int fd = RFD(open(pth("unl.dat"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    R(write(fd, "to be removed", 13));
    R(close(fd));
    R(unlink(pth("unl.dat")));
    STAT(pth("unl.dat"));
    RFD(open(pth("unl.dat"), O_RDONLY));
    R(unlink(pth("unl.dat"))); /* ENOENT */
    R(unlinkat(AT_FDCWD, pth("unl.dat"), 0));
    /* Re-create under the same name: fresh content. */
    fd = RFD(open(pth("unl.dat"), O_CREAT | O_RDWR, 0644));
    FSTAT(fd);
    R(write(fd, "new", 3));
    R(close(fd));
    READ_ALL(pth("unl.dat"), 10);
    /* Unlinking an open file: the descriptor keeps working (POSIX). */
    fd = RFD(open(pth("unl_open.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(write(fd, "still readable", 14));
    R(unlink(pth("unl_open.dat")));
    STAT(pth("unl_open.dat"));
    char buf[32] = {0};
    long long r = R(pread(fd, buf, sizeof buf, 0));
    if (r > 0)
        H("after unlink", buf, r);
    R(close(fd));
    R(mkdir(pth("unl_dir"), 0755));
    R(unlink(pth("unl_dir"))); /* EISDIR */
    R(rmdir(pth("unl_dir")));
}

static void c_stdio(void) {
    FILE *f = RP(fopen(pth("stdio.txt"), "w"));
    if (f) {
        char blk[5000];
        fill(blk, sizeof blk, 1600);
        R(fwrite(blk, 1, sizeof blk, f));
        R(fprintf(f, "\nline %d %s %.3f\n", 42, "text", 3.25));
        R(fputs("second line\n", f));
        R(fputc('c', f));
        R(fputs("\nthird line without newline at the end", f));
        R(ftell(f));
        R(fflush(f));
        STAT(pth("stdio.txt"));
        R(fclose(f));
    }
    f = RP(fopen(pth("stdio.txt"), "r"));
    if (f) {
        char blk[5000];
        R(fread(blk, 1, sizeof blk, f));
        H("fread", blk, sizeof blk);
        char line[256];
        for (int i = 0; i < 6; i++) {
            memset(line, 0, sizeof line);
            char *p = RP(fgets(line, sizeof line, f));
            if (p)
                H("fgets", line, strlen(line));
        }
        R(feof(f) != 0);
        R(ferror(f) != 0);
        clearerr(f);
        R(feof(f) != 0);
        R(fseek(f, 10, SEEK_SET));
        R(ftell(f));
        R(fgetc(f));
        fpos_t pos;
        R(fgetpos(f, &pos));
        R(fgetc(f));
        R(fsetpos(f, &pos));
        R(fgetc(f));
        R(fseeko(f, -20, SEEK_END));
        R(ftello(f));
        char *lp = NULL;
        size_t cap = 0;
        ssize_t n = R(getline(&lp, &cap, f));
        if (n > 0)
            H("getline", lp, n);
        R(getline(&lp, &cap, f)); /* EOF: -1 */
        rewind(f);
        R(ftell(f));
        R(fseek(f, 5000, SEEK_SET));
        int words = 0;
        char w[64];
        while (fscanf(f, "%63s", w) == 1)
            words++;
        V("words", words);
        int fdn = fileno(f);
        V("fileno valid", fdn >= 0);
        FSTAT(fdn);
        free(lp);
        R(fclose(f));
    }
    /* Append mode and update modes. */
    f = RP(fopen(pth("stdio.txt"), "a"));
    if (f) {
        R(fprintf(f, "\nappended %d\n", 7));
        R(ftell(f));
        R(fclose(f));
    }
    f = RP(fopen(pth("stdio.txt"), "r+"));
    if (f) {
        R(fseek(f, 2, SEEK_SET));
        R(fwrite("RPLUS", 1, 5, f));
        R(fseek(f, 0, SEEK_SET));
        char h[16] = {0};
        R(fread(h, 1, 10, f));
        H("r+ head", h, 10);
        R(fclose(f));
    }
    f = RP(fopen(pth("stdio_wplus.txt"), "w+"));
    if (f) {
        for (int i = 0; i < 1000; i++)
            fprintf(f, "record %05d %s\n", i, i % 3 ? "odd" : "even");
        R(ftell(f));
        rewind(f);
        char line[64];
        int count = 0;
        uint64_t h = 0;
        while (fgets(line, sizeof line, f)) {
            count++;
            h ^= fnv(line, strlen(line)) + (uint64_t)count;
        }
        V("w+ lines", count);
        V("w+ hash", h);
        R(fclose(f));
    }
    f = RP(fopen(pth("stdio_missing.txt"), "r")); /* ENOENT */
    if (f)
        fclose(f);
    /* fdopen on a tracked descriptor. */
    int fd = RFD(open(pth("stdio_fdopen.txt"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    f = RP(fdopen(fd, "w+"));
    if (f) {
        R(fputs("via fdopen\n", f));
        R(fseek(f, 0, SEEK_SET));
        char l[32] = {0};
        RP(fgets(l, sizeof l, f));
        H("fdopen line", l, strlen(l));
        R(fclose(f));
    }
    /* freopen onto a tracked path. */
    f = RP(fopen(pth("stdio_a.txt"), "w"));
    if (f) {
        R(fputs("first\n", f));
        FILE *g = RP(freopen(pth("stdio_b.txt"), "w", f));
        if (g) {
            R(fputs("second\n", g));
            R(fclose(g));
        }
    }
    /* A stream never closed: glibc flushes it at exit. */
    static FILE *leak;
    leak = RP(fopen(pth("stdio_unclosed.txt"), "w"));
    if (leak) {
        R(fputs("flushed at exit only if the stream is flushed\n", leak));
        R(fflush(leak));
    }
    READ_ALL(pth("stdio.txt"), 333);
}

/* Wait for a child and record its exit code. */
static void rec_child(int line, pid_t pid) {
    int st = 0;
    pid_t w = waitpid(pid, &st, 0);
    rec_(line, "waitpid", w == pid ? 0 : -1, w != pid, errno);
    rec_(line, "child exit", WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st), 0, 0);
}

/* Two processes write disjoint ranges of one file (sharing a page). */
static void c_shared_fork(void) {
    int fd = RFD(open(pth("shared.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(close(fd));
    fflush(NULL);
    size_t half = PG + PG / 2 + 13;
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            int f = open(pth("shared.dat"), O_WRONLY);
            if (f < 0)
                _exit(10);
            char *b = malloc(half);
            fill(b, half, 1700 + k);
            /* In pieces, interleaving with the sibling. */
            for (size_t off = 0; off < half; off += 40000) {
                size_t n = half - off < 40000 ? half - off : 40000;
                if (pwrite(f, b + off, n, (off_t)k * half + off) != (ssize_t)n)
                    _exit(11);
            }
            if (close(f) != 0)
                _exit(12);
            _exit(0);
        }
    }
    rec_child(__LINE__, kids[0]);
    rec_child(__LINE__, kids[1]);
    STAT(pth("shared.dat"));
    READ_ALL(pth("shared.dat"), 100000);
    /* An inherited descriptor: parent and child share its offset. */
    fd = RFD(open(pth("shared_fd.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(write(fd, "parent-1 ", 9));
    fflush(NULL);
    pid_t c = fork();
    if (c == 0) {
        _exit(write(fd, "child ", 6) == 6 ? 0 : 20);
    }
    rec_child(__LINE__, c);
    R(lseek(fd, 0, SEEK_CUR));
    R(write(fd, "parent-2", 8));
    R(close(fd));
    READ_ALL(pth("shared_fd.dat"), 100);
}

/* Read-after-write from another process, while the writer keeps the file open. */
static void c_raw_process(void) {
    int fd = RFD(open(pth("raw.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    char buf[100000];
    fill(buf, sizeof buf, 1800);
    R(write(fd, buf, sizeof buf));
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        perror("pipe");
        exit(2);
    }
    fflush(NULL);
    pid_t c = fork();
    if (c == 0) {
        close(pipefd[0]);
        int f = open(pth("raw.dat"), O_RDONLY);
        char b[100000];
        ssize_t n = f < 0 ? -1 : pread(f, b, sizeof b, 0);
        uint64_t h = n > 0 ? fnv(b, n) : 0;
        long long msg[2] = {n, (long long)h};
        if (write(pipefd[1], msg, sizeof msg) != sizeof msg)
            _exit(31);
        /* And write something for the parent to read. */
        int w = open(pth("raw_child.dat"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (w < 0 || write(w, "from the child", 14) != 14)
            _exit(32);
        _exit(0); /* no close: nothing may be lost */
    }
    close(pipefd[1]);
    long long msg[2] = {0, 0};
    V("pipe read", read(pipefd[0], msg, sizeof msg));
    close(pipefd[0]);
    V("child read bytes", msg[0]);
    V("child read hash", msg[1]);
    rec_child(__LINE__, c);
    READ_ALL(pth("raw_child.dat"), 100);
    /* An exec'd program (cat) reads the file written by this process. */
    if (pipe(pipefd) != 0)
        exit(2);
    fflush(NULL);
    c = fork();
    if (c == 0) {
        dup2(pipefd[1], 1);
        close(pipefd[0]);
        close(pipefd[1]);
        execlp("cat", "cat", pth("raw.dat"), (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    static char got[200000];
    size_t total = 0;
    ssize_t n;
    while ((n = read(pipefd[0], got + total, sizeof got - total)) > 0)
        total += n;
    close(pipefd[0]);
    V("cat bytes", total);
    H("cat hash", got, total);
    rec_child(__LINE__, c);
    /* An exec'd program inheriting a tracked descriptor as its stdout. */
    int out = RFD(open(pth("exec_out.dat"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    R(write(out, "header\n", 7));
    fflush(NULL);
    c = fork();
    if (c == 0) {
        dup2(out, 1);
        execlp("echo", "echo", "written by echo", (char *)NULL);
        _exit(127);
    }
    rec_child(__LINE__, c);
    R(lseek(out, 0, SEEK_CUR));
    R(write(out, "footer\n", 7));
    R(close(out));
    R(close(fd));
    READ_ALL(pth("exec_out.dat"), 100);
}

static void c_sync(void) {
    int fd = RFD(open(pth("sync.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    char buf[70000];
    fill(buf, sizeof buf, 1900);
    R(write(fd, buf, sizeof buf));
    R(fsync(fd));
    R(fdatasync(fd));
    R(posix_fallocate(fd, 0, 3 * MiB + 5)); /* returns an error number, not -1 */
    FSTAT(fd);
    R(fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 4 * MiB));
    FSTAT(fd);
    R(close(fd));
    R(fsync(fd)); /* EBADF */
    READ_ALL(pth("sync.dat"), 1 * MiB);
}

static void c_mmap(void) {
    int fd = RFD(open(pth("mmap.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    size_t n = 2 * MiB + 100;
    char *buf = xmalloc(n);
    fill(buf, n, 2000);
    R(write(fd, buf, n));
    void *m = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
    V("mmap ok", m != MAP_FAILED);
    if (m != MAP_FAILED) {
        H("mmap bytes", m, n);
        munmap(m, n);
    }
    R(close(fd));
    /* mmap of a pre-existing destination file opened read-only. */
    fd = RFD(open(pth("seed_b.dat"), O_RDONLY));
    struct stat st;
    fstat(fd, &st);
    m = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    V("mmap seed ok", m != MAP_FAILED);
    if (m != MAP_FAILED) {
        H("mmap seed", m, st.st_size);
        munmap(m, st.st_size);
    }
    R(close(fd));
    free(buf);
}

/* ------------------------------------------------------------------ driver */

typedef struct {
    const char *name;
    void (*fn)(void);
    int needs_destination;
} case_t;

static const case_t CASES[] = {
    {"seq_small", c_seq_small, 0},
    {"seq_medium", c_seq_medium, 0},
    {"seq_large", c_seq_large, 0},
    {"random", c_random, 0},
    {"strided", c_strided, 0},
    {"read_seed", c_read_seed, 0},
    {"update_in_place", c_update_in_place, 0},
    {"append", c_append, 0},
    {"null_buffers", c_null_buffers, 0},
    {"truncate", c_truncate, 0},
    {"holes", c_holes, 0},
    {"eof", c_eof, 0},
    {"stat", c_stat, 0},
    {"lseek", c_lseek, 0},
    {"pread_pwrite", c_pread_pwrite, 0},
    {"vectored", c_vectored, 0},
    {"dup", c_dup, 0},
    {"excl_trunc", c_excl_trunc, 0},
    {"rename", c_rename, 0},
    {"unlink", c_unlink, 0},
    {"stdio", c_stdio, 0},
    {"shared_fork", c_shared_fork, 0},
    {"raw_process", c_raw_process, 0},
    {"sync", c_sync, 0},
    {"mmap", c_mmap, 1},
};

static void compare_traces(const char *name) {
    int n = ntr[0] > ntr[1] ? ntr[0] : ntr[1];
    int shown = 0;
    for (int i = 0; i < n; i++) {
        if (i >= ntr[0] || i >= ntr[1]) {
            printf("MISMATCH %s: trace lengths differ (tracked %d, twin %d)\n", name, ntr[0], ntr[1]);
            mismatches++;
            break;
        }
        rec_t *a = &tr[0][i], *b = &tr[1][i];
        ops_compared++;
        if (a->line != b->line || strcmp(a->label, b->label)) {
            /* A call skipped on one side only: what follows is not comparable. */
            printf("MISMATCH %s: traces diverge at operation %d: tracked did line %d (%s), twin line %d (%s); the previous operation differed\n", name, i,
                   a->line, a->label, b->line, b->label);
            mismatches++;
            break;
        }
        if (a->ret != b->ret || a->err != b->err) {
            mismatches++;
            if (shown++ < 25)
                printf("MISMATCH %s line %d: %s: tracked ret=%lld errno=%d (%s), twin ret=%lld errno=%d (%s)\n", name, a->line, a->label,
                       a->ret, a->err, a->err ? strerror(a->err) : "-", b->ret, b->err, b->err ? strerror(b->err) : "-");
        }
    }
    if (shown > 25)
        printf("MISMATCH %s: ... %d more\n", name, shown - 25);
    ntr[0] = ntr[1] = 0;
}

/* Reads a whole file; returns its size or -1 (errno set). */
static long long slurp(const char *path, char **out) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    for (;;) {
        if (len == cap) {
            cap *= 2;
            b = realloc(b, cap);
        }
        ssize_t n = read(fd, b + len, cap - len);
        if (n < 0) {
            int e = errno;
            close(fd);
            free(b);
            errno = e;
            return -1;
        }
        if (n == 0)
            break;
        len += n;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && (long long)st.st_size != (long long)len) {
        printf("MISMATCH final %s: fstat says %lld bytes, read returned %zu\n", path, (long long)st.st_size, len);
        mismatches++;
    }
    close(fd);
    *out = b;
    return (long long)len;
}

/* Compares every regular file of the twin tree with its tracked copy. */
static int compare_tree(const char *rel) {
    char tdir[4096], udir[4096];
    snprintf(tdir, sizeof tdir, "%s%s%s", DIRS[0], *rel ? "/" : "", rel);
    snprintf(udir, sizeof udir, "%s%s%s", DIRS[1], *rel ? "/" : "", rel);
    DIR *d = opendir(udir);
    if (!d) {
        printf("MISMATCH cannot list %s: %s\n", udir, strerror(errno));
        mismatches++;
        return 0;
    }
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char r2[4096], up[8192], tp[8192];
        snprintf(r2, sizeof r2, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        snprintf(up, sizeof up, "%s/%s", DIRS[1], r2);
        snprintf(tp, sizeof tp, "%s/%s", DIRS[0], r2);
        struct stat us, ts;
        if (lstat(up, &us) != 0)
            continue;
        if (S_ISDIR(us.st_mode)) {
            if (stat(tp, &ts) != 0 || !S_ISDIR(ts.st_mode)) {
                printf("MISMATCH final %s: directory missing on the tracked side\n", r2);
                mismatches++;
            } else {
                files += compare_tree(r2);
            }
            continue;
        }
        files++;
        char *ub = NULL, *tb = NULL;
        long long un = slurp(up, &ub);
        long long tn = slurp(tp, &tb);
        if (tn < 0) {
            printf("MISMATCH final %s: tracked copy unreadable: %s\n", r2, strerror(errno));
            mismatches++;
        } else if (un != tn) {
            printf("MISMATCH final %s: tracked %lld bytes, twin %lld bytes\n", r2, tn, un);
            mismatches++;
        } else if (memcmp(ub, tb, un) != 0) {
            long long i = 0;
            while (ub[i] == tb[i])
                i++;
            printf("MISMATCH final %s: bytes differ from offset %lld (tracked 0x%02x, twin 0x%02x)\n", r2, i, (unsigned char)tb[i],
                   (unsigned char)ub[i]);
            mismatches++;
        }
        free(ub);
        free(tb);
    }
    closedir(d);
    return files;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TRACKED_DIR TWIN_DIR MODE [CASE]\n", argv[0]);
        return 2;
    }
    DIRS[0] = argv[1];
    DIRS[1] = argv[2];
    MODE = argv[3];
    const char *only = argc > 4 ? argv[4] : NULL;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int ran = 0;
    for (unsigned i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const case_t *c = &CASES[i];
        if (only && strcmp(only, c->name))
            continue;
        if (c->needs_destination && !strcmp(MODE, "scratch"))
            continue;
        for (side = 0; side < 2; side++) {
            D = DIRS[side];
            c->fn();
        }
        int before = mismatches;
        compare_traces(c->name);
        printf("case %-16s %s\n", c->name, mismatches == before ? "ok" : "MISMATCHES");
        ran++;
    }
    int files = compare_tree("");
    printf("final contents: %d files compared\n", files);
    if (mismatches) {
        printf("semantics: %d mismatches\n", mismatches);
        return 1;
    }
    printf("semantics: %d cases, %lld operations compared, all identical\n", ran, ops_compared);
    return 0;
}
