/*
 * libstrata_mpiio: the MPI-IO adapter (issue 16).
 *
 * Preloaded after libstrata_posix.so (`strata run` does both), it interposes
 * the MPI_File_* calls through the MPI profiling interface. A file under the
 * POSIX adapter's include prefixes (`strata_posix_tracks`, asked on every
 * rank and agreed by an allreduce: an open is collective) is served here:
 * the MPI semantics (views with derived datatypes, individual and shared
 * file pointers, atomic mode, split and non-blocking collectives, error
 * classes and handlers) become positioned POSIX reads and writes on one
 * descriptor per rank, and the POSIX adapter buffers those in strata. Every
 * other file, and every call on a handle not made here, goes to PMPI_*.
 *
 * No two-phase aggregation: a collective call is each rank's independent
 * access (the buffer absorbs small strided pieces). MPI_File_sync fsyncs
 * the descriptor (durable by strata's rules, then a barrier); close makes
 * the data visible, not durable, as ROMIO's and ompio's do. The shared
 * file pointer and atomic mode use a hidden sidecar file next to the file
 * (`.NAME.strata-shfp-<rank 0's pid>-<n>`, the kernel's, not strata's: opened
 * past the POSIX adapter) under fcntl record locks, as ROMIO does — no
 * one-sided communication, which Open MPI cannot give over TCP alone.
 *
 * Handles: `MPI_File` is a pointer in both Open MPI and MPICH; ours point
 * into a static pool, so "is this ours" is a range check, never a read of a
 * foreign object.
 *
 * Limits (docs/LIMITS.md): FILES_MAX open files per process, FLAT_MAX
 * pieces per flattened file type, CHUNK_BYTES of staging per access of a
 * non-contiguous memory type, FLAT_DEPTH_MAX nested datatype constructors.
 */
#define _GNU_SOURCE
#include <mpi.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILES_MAX 1024
#define FLAT_MAX (1L << 22)
#define FLAT_DEPTH_MAX 32
#define CHUNK_BYTES (64L << 20)
#define ERRH_MAX 64

/* ------------------------------------------------------------------ */
/* flattened datatypes: (offset, length) pieces in typemap order        */

struct blk {
    MPI_Offset off; /* bytes from the type's origin */
    MPI_Offset len;
    MPI_Offset cum; /* data bytes before this piece */
};

struct flat {
    struct blk *b;
    long n, cap;
    MPI_Offset size; /* data bytes */
};

static void flat_free(struct flat *f)
{
    free(f->b);
    f->b = NULL;
    f->n = f->cap = 0;
    f->size = 0;
}

static int flat_add(struct flat *f, MPI_Offset off, MPI_Offset len)
{
    if (len <= 0)
        return MPI_SUCCESS;
    if (f->n > 0 && f->b[f->n - 1].off + f->b[f->n - 1].len == off) {
        f->b[f->n - 1].len += len;
        f->size += len;
        return MPI_SUCCESS;
    }
    if (f->n == f->cap) {
        long cap = f->cap ? f->cap * 2 : 16;
        if (cap > FLAT_MAX)
            cap = FLAT_MAX;
        if (f->n == cap)
            return MPI_ERR_TYPE; /* more pieces than FLAT_MAX */
        struct blk *nb = realloc(f->b, (size_t)cap * sizeof *nb);
        if (!nb)
            return MPI_ERR_NO_MEM;
        f->b = nb;
        f->cap = cap;
    }
    f->b[f->n].off = off;
    f->b[f->n].len = len;
    f->b[f->n].cum = f->size;
    f->n++;
    f->size += len;
    return MPI_SUCCESS;
}

/* `inner` (flattened at origin 0) placed at `shift`, `reps` times `step` apart */
static int flat_add_rep(struct flat *f, const struct flat *inner, MPI_Offset shift,
                        MPI_Offset reps, MPI_Offset step)
{
    if (inner->n == 1 && inner->b[0].off == 0 && inner->b[0].len == step) {
        /* a run of contiguous elements is one piece */
        return flat_add(f, shift, reps * step);
    }
    for (MPI_Offset r = 0; r < reps; r++)
        for (long i = 0; i < inner->n; i++) {
            int e = flat_add(f, shift + r * step + inner->b[i].off, inner->b[i].len);
            if (e)
                return e;
        }
    return MPI_SUCCESS;
}

static int flatten(MPI_Datatype t, struct flat *f, int depth);

/* `t` flattened at origin 0 into a fresh list */
static int flatten_new(MPI_Datatype t, struct flat *out, int depth)
{
    memset(out, 0, sizeof *out);
    int e = flatten(t, out, depth);
    if (e)
        flat_free(out);
    return e;
}

static int flat_named(MPI_Datatype t, struct flat *f)
{
    int size;
    MPI_Aint lb, ext;
    PMPI_Type_size(t, &size);
    PMPI_Type_get_extent(t, &lb, &ext);
    if (size == 0)
        return MPI_SUCCESS;
    if ((MPI_Aint)size == ext)
        return flat_add(f, lb, size);
    /* the pair types of MINLOC/MAXLOC have a gap after the value */
    struct di { double v; int i; };
    struct li { long v; int i; };
    struct si { short v; int i; };
    struct ldi { long double v; int i; };
    MPI_Offset vlen = 0, ioff = 0;
    if (t == MPI_DOUBLE_INT)
        vlen = sizeof(double), ioff = offsetof(struct di, i);
    else if (t == MPI_LONG_INT)
        vlen = sizeof(long), ioff = offsetof(struct li, i);
    else if (t == MPI_SHORT_INT)
        vlen = sizeof(short), ioff = offsetof(struct si, i);
    else if (t == MPI_LONG_DOUBLE_INT)
        vlen = sizeof(long double), ioff = offsetof(struct ldi, i);
    if (vlen) {
        int e = flat_add(f, 0, vlen);
        return e ? e : flat_add(f, ioff, sizeof(int));
    }
    return MPI_ERR_TYPE;
}

static void free_contents(MPI_Datatype *types, int n)
{
    for (int i = 0; i < n; i++) {
        int ni, na, nd, comb;
        PMPI_Type_get_envelope(types[i], &ni, &na, &nd, &comb);
        if (comb != MPI_COMBINER_NAMED)
            PMPI_Type_free(&types[i]);
    }
}

static int flat_subarray(const int *ints, MPI_Datatype old, struct flat *f, int depth)
{
    int nd = ints[0];
    const int *sizes = ints + 1, *sub = ints + 1 + nd, *starts = ints + 1 + 2 * nd;
    int order = ints[1 + 3 * nd];
    if (nd < 1 || nd > 64)
        return MPI_ERR_TYPE;
    MPI_Aint lb, ext;
    PMPI_Type_get_extent(old, &lb, &ext);
    struct flat in;
    int e = flatten_new(old, &in, depth + 1);
    if (e)
        return e;
    MPI_Offset stride[64];
    int dims[64]; /* dimension order, slowest first */
    for (int k = 0; k < nd; k++)
        dims[k] = order == MPI_ORDER_FORTRAN ? nd - 1 - k : k;
    MPI_Offset s = 1;
    for (int k = nd - 1; k >= 0; k--) {
        stride[dims[k]] = s;
        s *= sizes[dims[k]];
    }
    for (int k = 0; k < nd; k++)
        if (sub[k] <= 0) {
            flat_free(&in);
            return MPI_SUCCESS;
        }
    int fast = dims[nd - 1];
    MPI_Offset idx[64] = {0};
    for (;;) {
        MPI_Offset el = (MPI_Offset)starts[fast] * stride[fast];
        for (int k = 0; k < nd - 1; k++)
            el += ((MPI_Offset)starts[dims[k]] + idx[dims[k]]) * stride[dims[k]];
        e = flat_add_rep(f, &in, el * ext, sub[fast], ext);
        if (e)
            break;
        int k = nd - 2;
        for (; k >= 0; k--) {
            if (++idx[dims[k]] < sub[dims[k]])
                break;
            idx[dims[k]] = 0;
        }
        if (k < 0)
            break;
    }
    flat_free(&in);
    return e;
}

static int flatten(MPI_Datatype t, struct flat *f, int depth)
{
    if (depth > FLAT_DEPTH_MAX)
        return MPI_ERR_TYPE;
    int ni, na, nd, comb;
    PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb);
    if (comb == MPI_COMBINER_NAMED)
        return flat_named(t, f);
    int *ints = malloc(sizeof(int) * (size_t)(ni + 1));
    MPI_Aint *addrs = malloc(sizeof(MPI_Aint) * (size_t)(na + 1));
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * (size_t)(nd + 1));
    if (!ints || !addrs || !types) {
        free(ints), free(addrs), free(types);
        return MPI_ERR_NO_MEM;
    }
    PMPI_Type_get_contents(t, ni, na, nd, ints, addrs, types);
    int e = MPI_SUCCESS;
    MPI_Aint lb = 0, ext = 0;
    struct flat in = {0};
    if (nd >= 1 && comb != MPI_COMBINER_STRUCT) {
        PMPI_Type_get_extent(types[0], &lb, &ext);
        e = flatten_new(types[0], &in, depth + 1);
    }
    if (!e)
        switch (comb) {
        case MPI_COMBINER_DUP:
        case MPI_COMBINER_RESIZED:
            e = flat_add_rep(f, &in, 0, 1, ext);
            break;
        case MPI_COMBINER_CONTIGUOUS:
            e = flat_add_rep(f, &in, 0, ints[0], ext);
            break;
        case MPI_COMBINER_VECTOR:
            for (int i = 0; i < ints[0] && !e; i++)
                e = flat_add_rep(f, &in, (MPI_Offset)i * ints[2] * ext, ints[1], ext);
            break;
        case MPI_COMBINER_HVECTOR:
            for (int i = 0; i < ints[0] && !e; i++)
                e = flat_add_rep(f, &in, (MPI_Offset)i * addrs[0], ints[1], ext);
            break;
        case MPI_COMBINER_INDEXED:
            for (int i = 0; i < ints[0] && !e; i++)
                e = flat_add_rep(f, &in, (MPI_Offset)ints[1 + ints[0] + i] * ext, ints[1 + i], ext);
            break;
        case MPI_COMBINER_HINDEXED:
            for (int i = 0; i < ints[0] && !e; i++)
                e = flat_add_rep(f, &in, addrs[i], ints[1 + i], ext);
            break;
        case MPI_COMBINER_INDEXED_BLOCK:
            for (int i = 0; i < ints[0] && !e; i++)
                e = flat_add_rep(f, &in, (MPI_Offset)ints[2 + i] * ext, ints[1], ext);
            break;
#ifdef MPI_COMBINER_HINDEXED_BLOCK
        case MPI_COMBINER_HINDEXED_BLOCK:
            for (int i = 0; i < ints[0] && !e; i++)
                e = flat_add_rep(f, &in, addrs[i], ints[1], ext);
            break;
#endif
        case MPI_COMBINER_STRUCT:
            for (int i = 0; i < ints[0] && !e; i++) {
                struct flat one;
                MPI_Aint l2, x2;
                PMPI_Type_get_extent(types[i], &l2, &x2);
                e = flatten_new(types[i], &one, depth + 1);
                if (!e)
                    e = flat_add_rep(f, &one, addrs[i], ints[1 + i], x2);
                flat_free(&one);
            }
            break;
        case MPI_COMBINER_SUBARRAY:
            e = flat_subarray(ints, types[0], f, depth);
            break;
        default: {
            /* F90 and other contiguous constructors; DARRAY is not flattened */
            int size;
            MPI_Aint tlb, text;
            PMPI_Type_size(t, &size);
            PMPI_Type_get_true_extent(t, &tlb, &text);
            e = (MPI_Aint)size == text && comb != MPI_COMBINER_DARRAY ? flat_add(f, tlb, size)
                                                                      : MPI_ERR_TYPE;
        }
        }
    flat_free(&in);
    free_contents(types, nd);
    free(ints), free(addrs), free(types);
    return e;
}

/* ------------------------------------------------------------------ */
/* files                                                                */

struct sfile {
    int used;
    int fd;
    MPI_Comm comm;
    int rank;
    int amode;
    int delete_on_close;
    char *path;
    MPI_Info info;
    MPI_Errhandler eh;
    /* the view */
    MPI_Offset disp;
    MPI_Datatype etype, ftype;
    int etype_size;
    struct flat ft;
    MPI_Aint ft_extent;
    int contig_view;
    /* individual file pointer, in etypes */
    MPI_Offset pos;
    /* the sidecar: shared file pointer (bytes 0..8) and the atomic-mode
     * lock (byte 8), under fcntl record locks */
    int shfd;
    char *shpath;
    int atomic;
    /* split collectives */
    int split;
    MPI_Offset split_bytes;
    int split_err;
    pthread_mutex_t mu;
};

static struct sfile pool[FILES_MAX];
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;

static struct sfile *ours(MPI_File fh)
{
    uintptr_t p = (uintptr_t)(void *)fh, lo = (uintptr_t)&pool[0], hi = (uintptr_t)&pool[FILES_MAX];
    if (p < lo || p >= hi || (p - lo) % sizeof(struct sfile) != 0)
        return NULL;
    struct sfile *f = (struct sfile *)(void *)fh;
    return f->used ? f : NULL;
}

static struct sfile *slot_take(void)
{
    pthread_mutex_lock(&pool_mu);
    struct sfile *f = NULL;
    for (int i = 0; i < FILES_MAX; i++)
        if (!pool[i].used) {
            f = &pool[i];
            memset(f, 0, sizeof *f);
            f->used = 1;
            pthread_mutex_init(&f->mu, NULL);
            break;
        }
    pthread_mutex_unlock(&pool_mu);
    return f;
}

static void slot_give(struct sfile *f)
{
    pthread_mutex_lock(&pool_mu);
    pthread_mutex_destroy(&f->mu);
    f->used = 0;
    pthread_mutex_unlock(&pool_mu);
}

/* ------------------------------------------------------------------ */
/* errors                                                               */

static struct {
    MPI_Errhandler eh;
    MPI_File_errhandler_function *fn;
} errh[ERRH_MAX];
static int errh_n;
static pthread_mutex_t errh_mu = PTHREAD_MUTEX_INITIALIZER;

int MPI_File_create_errhandler(MPI_File_errhandler_function *fn, MPI_Errhandler *eh)
{
    int r = PMPI_File_create_errhandler(fn, eh);
    if (r == MPI_SUCCESS) {
        pthread_mutex_lock(&errh_mu);
        if (errh_n < ERRH_MAX) {
            errh[errh_n].eh = *eh;
            errh[errh_n].fn = fn;
            errh_n++;
        }
        pthread_mutex_unlock(&errh_mu);
    }
    return r;
}

static int class_of_errno(int e)
{
    switch (e) {
    case ENOENT:
        return MPI_ERR_NO_SUCH_FILE;
    case EACCES:
    case EPERM:
        return MPI_ERR_ACCESS;
    case EEXIST:
        return MPI_ERR_FILE_EXISTS;
    case ENOSPC:
        return MPI_ERR_NO_SPACE;
    case EDQUOT:
        return MPI_ERR_QUOTA;
    case EROFS:
        return MPI_ERR_READ_ONLY;
    case ENAMETOOLONG:
    case EISDIR:
    case ENOTDIR:
        return MPI_ERR_BAD_FILE;
    case ENOMEM:
        return MPI_ERR_NO_MEM;
    default:
        return MPI_ERR_IO;
    }
}

/* Calls the file's error handler (MPI_FILE_NULL's for `f == NULL`) and
 * returns `code`. */
static int fail(struct sfile *f, int code)
{
    if (code == MPI_SUCCESS)
        return code;
    MPI_Errhandler eh;
    MPI_File fh = f ? (MPI_File)(void *)f : MPI_FILE_NULL;
    if (f)
        eh = f->eh;
    else
        PMPI_File_get_errhandler(MPI_FILE_NULL, &eh);
    if (eh == MPI_ERRORS_RETURN)
        return code;
    if (eh == MPI_ERRORS_ARE_FATAL) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        PMPI_Error_string(code, msg, &len);
        fprintf(stderr, "strata mpiio: %s: %s (MPI_ERRORS_ARE_FATAL)\n", f && f->path ? f->path : "MPI_FILE_NULL", msg);
        PMPI_Abort(f ? f->comm : MPI_COMM_WORLD, code);
        return code;
    }
    MPI_File_errhandler_function *fn = NULL;
    pthread_mutex_lock(&errh_mu);
    for (int i = 0; i < errh_n; i++)
        if (errh[i].eh == eh)
            fn = errh[i].fn;
    pthread_mutex_unlock(&errh_mu);
    if (fn) {
        int c = code;
        fn(&fh, &c);
    }
    return code;
}

/* ------------------------------------------------------------------ */
/* which files are ours                                                 */

static int (*posix_tracks)(const char *);
static pthread_once_t syms_once = PTHREAD_ONCE_INIT;

static void syms_init(void)
{
    const char *off = getenv("STRATA_MPIIO");
    if (off && strcmp(off, "off") == 0)
        return;
    posix_tracks = (int (*)(const char *))dlsym(RTLD_DEFAULT, "strata_posix_tracks");
}

/* ROMIO's "ufs:", "nfs:", "lustre:" … prefixes name a driver, not a path */
static const char *strip_driver(const char *p)
{
    const char *c = strchr(p, ':');
    if (!c || c == p || c - p > 16 || strchr(p, '/') < c)
        return p;
    for (const char *q = p; q < c; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9')))
            return p;
    return c + 1;
}

static int tracked(const char *path)
{
    pthread_once(&syms_once, syms_init);
    return posix_tracks && path && posix_tracks(strip_driver(path));
}

/* ------------------------------------------------------------------ */
/* open, close, delete                                                  */

static int amode_bad(int a)
{
    int acc = !!(a & MPI_MODE_RDONLY) + !!(a & MPI_MODE_WRONLY) + !!(a & MPI_MODE_RDWR);
    if (acc != 1)
        return 1;
    if ((a & MPI_MODE_RDONLY) && (a & (MPI_MODE_CREATE | MPI_MODE_EXCL)))
        return 1;
    if ((a & MPI_MODE_RDWR) && (a & MPI_MODE_SEQUENTIAL))
        return 1;
    return 0;
}

static void view_default(struct sfile *f)
{
    flat_free(&f->ft);
    f->disp = 0;
    f->etype = MPI_BYTE;
    f->ftype = MPI_BYTE;
    f->etype_size = 1;
    f->ft_extent = 1;
    f->contig_view = 1;
    flat_add(&f->ft, 0, 1);
}

static void info_copy_into(MPI_Info from, MPI_Info to)
{
    int n = 0;
    if (from == MPI_INFO_NULL)
        return;
    PMPI_Info_get_nkeys(from, &n);
    for (int i = 0; i < n; i++) {
        char key[MPI_MAX_INFO_KEY + 1], val[MPI_MAX_INFO_VAL + 1];
        int flag = 0;
        PMPI_Info_get_nthkey(from, i, key);
        PMPI_Info_get(from, key, MPI_MAX_INFO_VAL, val, &flag);
        if (flag)
            PMPI_Info_set(to, key, val);
    }
}

static int file_size(struct sfile *f, MPI_Offset *size)
{
    struct stat st;
    if (fstat(f->fd, &st) != 0)
        return class_of_errno(errno);
    *size = st.st_size;
    return MPI_SUCCESS;
}

/* the C library's calls, past the POSIX adapter (preloaded before us):
 * the sidecar is a kernel file on the destination's file system */
static struct {
    int (*open)(const char *, int, ...);
    int (*close)(int);
    ssize_t (*pread)(int, void *, size_t, off_t);
    ssize_t (*pwrite)(int, const void *, size_t, off_t);
    int (*fcntl)(int, int, ...);
    int (*unlink)(const char *);
} kern;
static pthread_once_t kern_once = PTHREAD_ONCE_INIT;

static void kern_init(void)
{
    *(void **)&kern.open = dlsym(RTLD_NEXT, "open");
    *(void **)&kern.close = dlsym(RTLD_NEXT, "close");
    *(void **)&kern.pread = dlsym(RTLD_NEXT, "pread");
    *(void **)&kern.pwrite = dlsym(RTLD_NEXT, "pwrite");
    *(void **)&kern.fcntl = dlsym(RTLD_NEXT, "fcntl");
    *(void **)&kern.unlink = dlsym(RTLD_NEXT, "unlink");
}

static int kern_ok(void)
{
    pthread_once(&kern_once, kern_init);
    return kern.open && kern.close && kern.pread && kern.pwrite && kern.fcntl && kern.unlink;
}

/* an fcntl record lock on [at, at+len) of the sidecar (waits) */
static int sidecar_lock(struct sfile *f, short type, off_t at, off_t len)
{
    struct flock l;
    memset(&l, 0, sizeof l);
    l.l_type = type;
    l.l_whence = SEEK_SET;
    l.l_start = at;
    l.l_len = len;
    /* Bounded: EINTR is the only retry (a signal handler ran). */
    for (;;) {
        if (kern.fcntl(f->shfd, F_SETLKW, &l) == 0)
            return MPI_SUCCESS;
        if (errno != EINTR)
            return class_of_errno(errno);
    }
}

static int64_t sidecar_get(struct sfile *f)
{
    int64_t v = 0;
    if (kern.pread(f->shfd, &v, sizeof v, 0) != (ssize_t)sizeof v)
        v = 0;
    return v;
}

static int sidecar_put(struct sfile *f, int64_t v)
{
    return kern.pwrite(f->shfd, &v, sizeof v, 0) == (ssize_t)sizeof v ? MPI_SUCCESS : class_of_errno(errno);
}

static int shared_set(struct sfile *f, int64_t v)
{
    int e = sidecar_lock(f, F_WRLCK, 0, 8);
    if (e)
        return e;
    e = sidecar_put(f, v);
    sidecar_lock(f, F_UNLCK, 0, 8);
    return e;
}

/* the sidecar's path: `.NAME.strata-shfp-PID-N` beside `path` */
static char *sidecar_path(const char *path, long pid, long n)
{
    const char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path + 1) : 0;
    char *out = malloc(strlen(path) + 64);
    if (out)
        sprintf(out, "%.*s.%s.strata-shfp-%ld-%ld", (int)dir, path, path + dir, pid, n);
    return out;
}

int MPI_File_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh)
{
    int mine = tracked(filename), all = 0;
    if (comm == MPI_COMM_NULL)
        return PMPI_File_open(comm, filename, amode, info, fh);
    PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
    if (!all)
        return PMPI_File_open(comm, filename, amode, info, fh);
    if (amode_bad(amode))
        return fail(NULL, MPI_ERR_AMODE);
    const char *path = strip_driver(filename);
    int rank;
    PMPI_Comm_rank(comm, &rank);
    int flags = (amode & MPI_MODE_RDONLY) ? O_RDONLY : (amode & MPI_MODE_WRONLY) ? O_WRONLY : O_RDWR;
    int fd = -1, err = MPI_SUCCESS;
    /* rank 0 creates (exactly one O_EXCL), then the others open */
    if (rank == 0) {
        int cf = flags | ((amode & MPI_MODE_CREATE) ? O_CREAT : 0) | ((amode & MPI_MODE_EXCL) ? O_EXCL : 0);
        fd = open(path, cf | O_CLOEXEC, 0666);
        if (fd < 0)
            err = class_of_errno(errno);
    }
    PMPI_Bcast(&err, 1, MPI_INT, 0, comm);
    if (err != MPI_SUCCESS)
        return fail(NULL, err);
    if (rank != 0) {
        fd = open(path, flags | O_CLOEXEC);
        if (fd < 0)
            err = class_of_errno(errno);
    }
    int worst = 0;
    PMPI_Allreduce(&err, &worst, 1, MPI_INT, MPI_MAX, comm);
    struct sfile *f = worst == MPI_SUCCESS ? slot_take() : NULL;
    int got = f != NULL, every = 0;
    PMPI_Allreduce(&got, &every, 1, MPI_INT, MPI_MIN, comm);
    if (worst != MPI_SUCCESS || !every) {
        if (fd >= 0)
            close(fd);
        if (f)
            slot_give(f);
        return fail(NULL, err != MPI_SUCCESS ? err : worst != MPI_SUCCESS ? worst : MPI_ERR_NO_MEM);
    }
    f->fd = fd;
    f->rank = rank;
    f->amode = amode;
    f->delete_on_close = !!(amode & MPI_MODE_DELETE_ON_CLOSE);
    f->path = strdup(path);
    PMPI_Comm_dup(comm, &f->comm);
    PMPI_Info_create(&f->info);
    info_copy_into(info, f->info);
    PMPI_Info_set(f->info, "strata_buffered", "true");
    PMPI_File_get_errhandler(MPI_FILE_NULL, &f->eh);
    view_default(f);
    MPI_Offset start = 0;
    if (amode & MPI_MODE_APPEND)
        file_size(f, &start);
    f->pos = start;
    /* the sidecar: rank 0 makes it (named by its pid and open count), then
     * the others open it */
    static long opens;
    long tag[2] = {(long)getpid(), __atomic_add_fetch(&opens, 1, __ATOMIC_RELAXED)};
    PMPI_Bcast(tag, 2, MPI_LONG, 0, f->comm);
    f->shpath = sidecar_path(path, tag[0], tag[1]);
    f->shfd = -1;
    int serr = !f->shpath || !kern_ok() ? MPI_ERR_NO_MEM : MPI_SUCCESS;
    if (!serr && rank == 0) {
        f->shfd = kern.open(f->shpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int64_t v = start;
        if (f->shfd < 0 || kern.pwrite(f->shfd, &v, sizeof v, 0) != (ssize_t)sizeof v)
            serr = class_of_errno(errno);
    }
    PMPI_Bcast(&serr, 1, MPI_INT, 0, f->comm);
    if (!serr && rank != 0) {
        f->shfd = kern.open(f->shpath, O_RDWR | O_CLOEXEC);
        if (f->shfd < 0)
            serr = class_of_errno(errno);
    }
    int sworst = 0;
    PMPI_Allreduce(&serr, &sworst, 1, MPI_INT, MPI_MAX, f->comm);
    if (sworst != MPI_SUCCESS) {
        if (f->shfd >= 0)
            kern.close(f->shfd);
        PMPI_Barrier(f->comm);
        if (rank == 0 && f->shpath)
            kern.unlink(f->shpath);
        close(f->fd);
        PMPI_Info_free(&f->info);
        flat_free(&f->ft);
        PMPI_Comm_free(&f->comm);
        free(f->path);
        free(f->shpath);
        slot_give(f);
        return fail(NULL, sworst);
    }
    *fh = (MPI_File)(void *)f;
    return MPI_SUCCESS;
}

static int is_named(MPI_Datatype t)
{
    int ni, na, nd, comb;
    PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb);
    return comb == MPI_COMBINER_NAMED;
}

/* the view's types are ours (dups) unless they are named types */
static void view_types_free(struct sfile *f)
{
    if (!is_named(f->etype))
        PMPI_Type_free(&f->etype);
    if (!is_named(f->ftype))
        PMPI_Type_free(&f->ftype);
    f->etype = f->ftype = MPI_BYTE;
}

static void release(struct sfile *f)
{
    kern.close(f->shfd);
    PMPI_Barrier(f->comm); /* every rank is done with the sidecar */
    if (f->rank == 0)
        kern.unlink(f->shpath);
    free(f->shpath);
    PMPI_Info_free(&f->info);
    view_types_free(f);
    flat_free(&f->ft);
    PMPI_Comm_free(&f->comm);
    free(f->path);
    slot_give(f);
}

int MPI_File_close(MPI_File *fh)
{
    struct sfile *f = fh ? ours(*fh) : NULL;
    if (!f)
        return PMPI_File_close(fh);
    int err = MPI_SUCCESS;
    /* Visibility, not durability: MPI_FILE_CLOSE "first synchronizes file
     * state" (MPI 4.0 §14.2.2) — what close-to-open gives other ranks here.
     * Durability is MPI_File_sync's, as in ROMIO and ompio, which do not
     * fsync at close either (IOR's -e asks for the sync explicitly). */
    if (close(f->fd) != 0 && err == MPI_SUCCESS)
        err = class_of_errno(errno);
    PMPI_Barrier(f->comm);
    if (f->delete_on_close && f->rank == 0 && unlink(f->path) != 0 && err == MPI_SUCCESS)
        err = class_of_errno(errno);
    release(f);
    *fh = MPI_FILE_NULL;
    return fail(NULL, err);
}

int MPI_File_delete(const char *filename, MPI_Info info)
{
    if (!tracked(filename))
        return PMPI_File_delete(filename, info);
    if (unlink(strip_driver(filename)) != 0)
        return fail(NULL, class_of_errno(errno));
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* the data path                                                        */

static int full_pwrite(int fd, const char *p, MPI_Offset n, MPI_Offset off)
{
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n > (1L << 30) ? (1L << 30) : (size_t)n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (w == 0)
            return -EIO;
        p += w, n -= w, off += w;
    }
    return 0;
}

/* bytes read (short at the end of the file) or -errno */
static MPI_Offset full_pread(int fd, char *p, MPI_Offset n, MPI_Offset off)
{
    MPI_Offset done = 0;
    while (n > 0) {
        ssize_t r = pread(fd, p, n > (1L << 30) ? (1L << 30) : (size_t)n, off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        p += r, n -= r, off += r, done += r;
    }
    return done;
}

/* The file byte at data-stream byte `s` of the view, and how many data
 * bytes follow it contiguously in the file (within one piece). */
static MPI_Offset view_map(const struct sfile *f, MPI_Offset s, MPI_Offset *run)
{
    if (f->contig_view) {
        *run = INT64_MAX;
        return f->disp + s;
    }
    MPI_Offset tile = s / f->ft.size, r = s % f->ft.size;
    long lo = 0, hi = f->ft.n - 1;
    while (lo < hi) {
        long mid = (lo + hi + 1) / 2;
        if (f->ft.b[mid].cum <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    const struct blk *b = &f->ft.b[lo];
    *run = b->len - (r - b->cum);
    return f->disp + tile * (MPI_Offset)f->ft_extent + b->off + (r - b->cum);
}

/* Moves `n` bytes between `mem` and the view's data stream at byte `s`.
 * Returns bytes moved (a read is short at the end of the file) or -errno. */
static MPI_Offset stream_rw(struct sfile *f, int write, MPI_Offset s, char *mem, MPI_Offset n)
{
    MPI_Offset done = 0;
    while (done < n) {
        MPI_Offset run, off = view_map(f, s + done, &run);
        MPI_Offset len = run < n - done ? run : n - done;
        /* adjacent pieces are one I/O */
        while (done + len < n) {
            MPI_Offset run2, off2 = view_map(f, s + done + len, &run2);
            if (off2 != off + len)
                break;
            len += run2 < n - done - len ? run2 : n - done - len;
        }
        if (write) {
            int e = full_pwrite(f->fd, mem + done, len, off);
            if (e)
                return e;
            done += len;
        } else {
            MPI_Offset r = full_pread(f->fd, mem + done, len, off);
            if (r < 0)
                return r;
            done += r;
            if (r < len)
                break; /* end of file: the view's later pieces lie beyond it */
        }
    }
    return done;
}

enum { AT_EXPLICIT, AT_INDIVIDUAL, AT_SHARED };

static void set_status(MPI_Status *st, MPI_Offset bytes)
{
    if (st == MPI_STATUS_IGNORE)
        return;
    PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)bytes);
    PMPI_Status_set_cancelled(st, 0);
    st->MPI_SOURCE = MPI_UNDEFINED;
    st->MPI_TAG = MPI_UNDEFINED;
}

/* atomic mode: every access holds the sidecar's byte 8 exclusively */
static void atomic_lock(struct sfile *f)
{
    sidecar_lock(f, F_WRLCK, 8, 1);
}

static void atomic_unlock(struct sfile *f)
{
    sidecar_lock(f, F_UNLCK, 8, 1);
}

/* fetch-and-add on the shared file pointer; `inc` 0 reads it */
static int64_t shared_add(struct sfile *f, int64_t inc, int locked)
{
    (void)locked;
    sidecar_lock(f, inc ? F_WRLCK : F_RDLCK, 0, 8);
    int64_t old = sidecar_get(f);
    if (inc)
        sidecar_put(f, old + inc);
    sidecar_lock(f, F_UNLCK, 0, 8);
    return old;
}

static int contiguous(MPI_Datatype dt, MPI_Count count, MPI_Aint *start)
{
    int size;
    MPI_Aint lb, ext, tlb, text;
    PMPI_Type_size(dt, &size);
    PMPI_Type_get_extent(dt, &lb, &ext);
    PMPI_Type_get_true_extent(dt, &tlb, &text);
    *start = tlb;
    if ((MPI_Aint)size != text || (count > 1 && ext != (MPI_Aint)size))
        return 0;
    int ni, na, nd, comb;
    PMPI_Type_get_envelope(dt, &ni, &na, &nd, &comb);
    if (comb == MPI_COMBINER_NAMED)
        return 1;
    struct flat fl;
    if (flatten_new(dt, &fl, 0) != MPI_SUCCESS)
        return 0;
    int one = fl.n == 1 && fl.b[0].off == tlb;
    flat_free(&fl);
    return one;
}

/* One access of `count` × `dt` at `where`; `off` in etypes for AT_EXPLICIT.
 * `*bytes` gets the bytes moved. */
static int access_rw(struct sfile *f, int write, int where, MPI_Offset off, void *buf, MPI_Count count,
                     MPI_Datatype dt, MPI_Offset *bytes)
{
    *bytes = 0;
    if (count < 0)
        return MPI_ERR_COUNT;
    if (dt == MPI_DATATYPE_NULL)
        return MPI_ERR_TYPE;
    if (write && (f->amode & MPI_MODE_RDONLY))
        return MPI_ERR_READ_ONLY;
    if (!write && (f->amode & MPI_MODE_WRONLY))
        return MPI_ERR_ACCESS;
    if ((f->amode & MPI_MODE_SEQUENTIAL) && where != AT_SHARED)
        return MPI_ERR_UNSUPPORTED_OPERATION;
    if (where == AT_EXPLICIT && off < 0)
        return MPI_ERR_ARG;
    int tsize;
    PMPI_Type_size(dt, &tsize);
    MPI_Offset n = (MPI_Offset)count * tsize;
    if (n % f->etype_size != 0)
        return MPI_ERR_ARG; /* only whole etypes can be accessed */
    if (f->atomic)
        atomic_lock(f);
    pthread_mutex_lock(&f->mu);
    MPI_Offset start = where == AT_EXPLICIT ? off : where == AT_INDIVIDUAL ? f->pos : 0;
    pthread_mutex_unlock(&f->mu);
    if (where == AT_SHARED)
        start = shared_add(f, n / f->etype_size, f->atomic);
    MPI_Offset s = start * f->etype_size, done = 0;
    int err = MPI_SUCCESS;
    MPI_Aint mstart;
    if (n == 0) {
        /* nothing moves */
    } else if (contiguous(dt, count, &mstart)) {
        MPI_Offset r = stream_rw(f, write, s, (char *)buf + mstart, n);
        if (r < 0)
            err = class_of_errno((int)-r);
        else
            done = r;
    } else {
        /* pack/unpack whole elements through a bounded staging buffer */
        MPI_Aint lb, ext;
        PMPI_Type_get_extent(dt, &lb, &ext);
        MPI_Count per = CHUNK_BYTES / (tsize ? tsize : 1);
        if (per < 1)
            per = 1;
        MPI_Count first = count < per ? count : per;
        char *tmp = malloc((size_t)(first * tsize));
        if (!tmp)
            err = MPI_ERR_NO_MEM;
        for (MPI_Count i = 0; i < count && !err;) {
            MPI_Count k = count - i < per ? count - i : per;
            char *elem = (char *)buf + i * ext;
            int pos = 0;
            if (write) {
                PMPI_Pack(elem, (int)k, dt, tmp, (int)(k * tsize), &pos, f->comm);
                MPI_Offset r = stream_rw(f, 1, s + done, tmp, k * tsize);
                if (r < 0) {
                    err = class_of_errno((int)-r);
                    break;
                }
                done += r;
            } else {
                MPI_Offset r = stream_rw(f, 0, s + done, tmp, k * tsize);
                if (r < 0) {
                    err = class_of_errno((int)-r);
                    break;
                }
                done += r;
                MPI_Count whole = r / tsize;
                if (whole > 0)
                    PMPI_Unpack(tmp, (int)(whole * tsize), &pos, elem, (int)whole, dt, f->comm);
                if (r < k * tsize)
                    break;
            }
            i += k;
        }
        free(tmp);
    }
    if (where == AT_INDIVIDUAL) {
        pthread_mutex_lock(&f->mu);
        f->pos = start + done / f->etype_size;
        pthread_mutex_unlock(&f->mu);
    }
    if (f->atomic)
        atomic_unlock(f);
    *bytes = done;
    return err;
}

/* the collective ordered access: offsets from an exclusive scan, the shared
 * pointer moved once by rank 0 */
static int access_ordered(struct sfile *f, int write, void *buf, MPI_Count count, MPI_Datatype dt,
                          MPI_Offset *bytes)
{
    int tsize;
    *bytes = 0;
    if (count < 0 || dt == MPI_DATATYPE_NULL)
        return count < 0 ? MPI_ERR_COUNT : MPI_ERR_TYPE;
    PMPI_Type_size(dt, &tsize);
    int64_t mine = (int64_t)count * tsize / f->etype_size, before = 0, total = 0, base = 0;
    PMPI_Exscan(&mine, &before, 1, MPI_INT64_T, MPI_SUM, f->comm);
    if (f->rank == 0)
        before = 0;
    PMPI_Allreduce(&mine, &total, 1, MPI_INT64_T, MPI_SUM, f->comm);
    if (f->rank == 0)
        base = shared_add(f, total, 0);
    PMPI_Bcast(&base, 1, MPI_INT64_T, 0, f->comm);
    int seq = f->amode & MPI_MODE_SEQUENTIAL;
    f->amode &= ~MPI_MODE_SEQUENTIAL; /* the offset is the shared pointer's */
    int err = access_rw(f, write, AT_EXPLICIT, base + before, buf, count, dt, bytes);
    f->amode |= seq;
    return err;
}

/* ------------------------------------------------------------------ */
/* generalized requests for the non-blocking calls (done at the call)   */

struct greq {
    MPI_Offset bytes;
};

static int greq_query(void *x, MPI_Status *st)
{
    set_status(st, ((struct greq *)x)->bytes);
    st->MPI_ERROR = MPI_SUCCESS;
    return MPI_SUCCESS;
}

static int greq_free(void *x)
{
    free(x);
    return MPI_SUCCESS;
}

static int greq_cancel(void *x, int complete)
{
    (void)x, (void)complete;
    return MPI_SUCCESS;
}

static int done_request(MPI_Offset bytes, MPI_Request *req)
{
    struct greq *g = malloc(sizeof *g);
    if (!g)
        return MPI_ERR_NO_MEM;
    g->bytes = bytes;
    int r = PMPI_Grequest_start(greq_query, greq_free, greq_cancel, g, req);
    if (r != MPI_SUCCESS) {
        free(g);
        return r;
    }
    return PMPI_Grequest_complete(*req);
}

/* ------------------------------------------------------------------ */
/* the data-access entry points                                         */

#define BLOCKING(NAME, SFX, CT, WRITE, WHERE, BUFQ)                                                                  \
    int MPI_File_##NAME##SFX(MPI_File fh, BUFQ void *buf, CT count, MPI_Datatype dt, MPI_Status *st)            \
    {                                                                                                       \
        struct sfile *f = ours(fh);                                                                         \
        if (!f)                                                                                             \
            return PMPI_File_##NAME##SFX(fh, buf, count, dt, st);                                                \
        MPI_Offset b;                                                                                       \
        int e = access_rw(f, WRITE, WHERE, 0, (void *)buf, count, dt, &b);                                  \
        set_status(st, b);                                                                                  \
        return fail(f, e);                                                                                  \
    }

#define BLOCKING_AT(NAME, SFX, CT, WRITE, BUFQ)                                                                      \
    int MPI_File_##NAME##SFX(MPI_File fh, MPI_Offset off, BUFQ void *buf, CT count, MPI_Datatype dt,            \
                        MPI_Status *st)                                                                     \
    {                                                                                                       \
        struct sfile *f = ours(fh);                                                                         \
        if (!f)                                                                                             \
            return PMPI_File_##NAME##SFX(fh, off, buf, count, dt, st);                                           \
        MPI_Offset b;                                                                                       \
        int e = access_rw(f, WRITE, AT_EXPLICIT, off, (void *)buf, count, dt, &b);                          \
        set_status(st, b);                                                                                  \
        return fail(f, e);                                                                                  \
    }

#define NONBLOCKING(NAME, SFX, CT, WRITE, WHERE, BUFQ)                                                               \
    int MPI_File_##NAME##SFX(MPI_File fh, BUFQ void *buf, CT count, MPI_Datatype dt, MPI_Request *req)          \
    {                                                                                                       \
        struct sfile *f = ours(fh);                                                                         \
        if (!f)                                                                                             \
            return PMPI_File_##NAME##SFX(fh, buf, count, dt, req);                                               \
        MPI_Offset b;                                                                                       \
        int e = access_rw(f, WRITE, WHERE, 0, (void *)buf, count, dt, &b);                                  \
        if (e == MPI_SUCCESS)                                                                               \
            e = done_request(b, req);                                                                       \
        return fail(f, e);                                                                                  \
    }

#define NONBLOCKING_AT(NAME, SFX, CT, WRITE, BUFQ)                                                                   \
    int MPI_File_##NAME##SFX(MPI_File fh, MPI_Offset off, BUFQ void *buf, CT count, MPI_Datatype dt,            \
                        MPI_Request *req)                                                                   \
    {                                                                                                       \
        struct sfile *f = ours(fh);                                                                         \
        if (!f)                                                                                             \
            return PMPI_File_##NAME##SFX(fh, off, buf, count, dt, req);                                          \
        MPI_Offset b;                                                                                       \
        int e = access_rw(f, WRITE, AT_EXPLICIT, off, (void *)buf, count, dt, &b);                          \
        if (e == MPI_SUCCESS)                                                                               \
            e = done_request(b, req);                                                                       \
        return fail(f, e);                                                                                  \
    }

BLOCKING(read, , int, 0, AT_INDIVIDUAL, )
BLOCKING(read_all, , int, 0, AT_INDIVIDUAL, )
BLOCKING(write, , int, 1, AT_INDIVIDUAL, const)
BLOCKING(write_all, , int, 1, AT_INDIVIDUAL, const)
BLOCKING(read_shared, , int, 0, AT_SHARED, )
BLOCKING(write_shared, , int, 1, AT_SHARED, const)
BLOCKING_AT(read_at, , int, 0, )
BLOCKING_AT(read_at_all, , int, 0, )
BLOCKING_AT(write_at, , int, 1, const)
BLOCKING_AT(write_at_all, , int, 1, const)
NONBLOCKING(iread, , int, 0, AT_INDIVIDUAL, )
NONBLOCKING(iwrite, , int, 1, AT_INDIVIDUAL, const)
NONBLOCKING(iread_shared, , int, 0, AT_SHARED, )
NONBLOCKING(iwrite_shared, , int, 1, AT_SHARED, const)
NONBLOCKING_AT(iread_at, , int, 0, )
NONBLOCKING_AT(iwrite_at, , int, 1, const)
#if MPI_VERSION > 3 || (MPI_VERSION == 3 && MPI_SUBVERSION >= 1)
NONBLOCKING(iread_all, , int, 0, AT_INDIVIDUAL, )
NONBLOCKING(iwrite_all, , int, 1, AT_INDIVIDUAL, const)
NONBLOCKING_AT(iread_at_all, , int, 0, )
NONBLOCKING_AT(iwrite_at_all, , int, 1, const)
#endif

#define ORDERED(NAME, SFX, CT, WRITE, BUFQ)                                                                          \
    int MPI_File_##NAME##SFX(MPI_File fh, BUFQ void *buf, CT count, MPI_Datatype dt, MPI_Status *st)            \
    {                                                                                                       \
        struct sfile *f = ours(fh);                                                                         \
        if (!f)                                                                                             \
            return PMPI_File_##NAME##SFX(fh, buf, count, dt, st);                                                \
        MPI_Offset b;                                                                                       \
        int e = access_ordered(f, WRITE, (void *)buf, count, dt, &b);                                       \
        set_status(st, b);                                                                                  \
        return fail(f, e);                                                                                  \
    }
ORDERED(read_ordered, , int, 0, )
ORDERED(write_ordered, , int, 1, const)

/* split collectives: the access runs at _begin, _end reports it */
static int split_begin(struct sfile *f, int e, MPI_Offset b)
{
    if (f->split)
        return fail(f, MPI_ERR_OTHER); /* one split collective at a time per file */
    f->split = 1;
    f->split_bytes = b;
    f->split_err = e;
    return MPI_SUCCESS;
}

static int split_end(struct sfile *f, MPI_Status *st)
{
    if (!f->split)
        return fail(f, MPI_ERR_OTHER);
    f->split = 0;
    set_status(st, f->split_bytes);
    return fail(f, f->split_err);
}

#define SPLIT(NAME, SFX, CT, WRITE, WHERE, BUFQ)                                                                     \
    int MPI_File_##NAME##_begin##SFX(MPI_File fh, BUFQ void *buf, CT count, MPI_Datatype dt)                    \
    {                                                                                                       \
        struct sfile *f = ours(fh);                                                                         \
        if (!f)                                                                                             \
            return PMPI_File_##NAME##_begin##SFX(fh, buf, count, dt);                                            \
        if (f->split)                                                                                       \
            return fail(f, MPI_ERR_OTHER);                                                                  \
        MPI_Offset b;                                                                                       \
        int e = WHERE < 0 ? access_ordered(f, WRITE, (void *)buf, count, dt, &b)                            \
                          : access_rw(f, WRITE, WHERE, 0, (void *)buf, count, dt, &b);                      \
        return split_begin(f, e, b);                                                                        \
    }

#define SPLIT_END(NAME, BUFQ)                                                                               \
    int MPI_File_##NAME##_end(MPI_File fh, BUFQ void *buf, MPI_Status *st)                                  \
    {                                                                                                       \
        struct sfile *f = ours(fh);                                                                         \
        if (!f)                                                                                             \
            return PMPI_File_##NAME##_end(fh, buf, st);                                                     \
        return split_end(f, st);                                                                            \
    }

SPLIT_END(read_all, )
SPLIT_END(write_all, const)
SPLIT_END(read_ordered, )
SPLIT_END(write_ordered, const)
SPLIT_END(read_at_all, )
SPLIT_END(write_at_all, const)

SPLIT(read_all, , int, 0, AT_INDIVIDUAL, )
SPLIT(write_all, , int, 1, AT_INDIVIDUAL, const)
SPLIT(read_ordered, , int, 0, -1, )
SPLIT(write_ordered, , int, 1, -1, const)

#define SPLIT_AT(NAME, SFX, CT, WRITE, BUFQ)                                                                         \
    int MPI_File_##NAME##_begin##SFX(MPI_File fh, MPI_Offset off, BUFQ void *buf, CT count, MPI_Datatype dt)    \
    {                                                                                                       \
        struct sfile *f = ours(fh);                                                                         \
        if (!f)                                                                                             \
            return PMPI_File_##NAME##_begin##SFX(fh, off, buf, count, dt);                                       \
        if (f->split)                                                                                       \
            return fail(f, MPI_ERR_OTHER);                                                                  \
        MPI_Offset b;                                                                                       \
        int e = access_rw(f, WRITE, AT_EXPLICIT, off, (void *)buf, count, dt, &b);                          \
        return split_begin(f, e, b);                                                                        \
    }

SPLIT_AT(read_at_all, , int, 0, )
SPLIT_AT(write_at_all, , int, 1, const)

#if MPI_VERSION >= 4
/* MPI 4.0's large-count variants (MPICH 4): the same calls with MPI_Count */
BLOCKING(read, _c, MPI_Count, 0, AT_INDIVIDUAL, )
BLOCKING(read_all, _c, MPI_Count, 0, AT_INDIVIDUAL, )
BLOCKING(write, _c, MPI_Count, 1, AT_INDIVIDUAL, const)
BLOCKING(write_all, _c, MPI_Count, 1, AT_INDIVIDUAL, const)
BLOCKING(read_shared, _c, MPI_Count, 0, AT_SHARED, )
BLOCKING(write_shared, _c, MPI_Count, 1, AT_SHARED, const)
BLOCKING_AT(read_at, _c, MPI_Count, 0, )
BLOCKING_AT(read_at_all, _c, MPI_Count, 0, )
BLOCKING_AT(write_at, _c, MPI_Count, 1, const)
BLOCKING_AT(write_at_all, _c, MPI_Count, 1, const)
NONBLOCKING(iread, _c, MPI_Count, 0, AT_INDIVIDUAL, )
NONBLOCKING(iwrite, _c, MPI_Count, 1, AT_INDIVIDUAL, const)
NONBLOCKING(iread_shared, _c, MPI_Count, 0, AT_SHARED, )
NONBLOCKING(iwrite_shared, _c, MPI_Count, 1, AT_SHARED, const)
NONBLOCKING_AT(iread_at, _c, MPI_Count, 0, )
NONBLOCKING_AT(iwrite_at, _c, MPI_Count, 1, const)
NONBLOCKING(iread_all, _c, MPI_Count, 0, AT_INDIVIDUAL, )
NONBLOCKING(iwrite_all, _c, MPI_Count, 1, AT_INDIVIDUAL, const)
NONBLOCKING_AT(iread_at_all, _c, MPI_Count, 0, )
NONBLOCKING_AT(iwrite_at_all, _c, MPI_Count, 1, const)
ORDERED(read_ordered, _c, MPI_Count, 0, )
ORDERED(write_ordered, _c, MPI_Count, 1, const)
SPLIT(read_all, _c, MPI_Count, 0, AT_INDIVIDUAL, )
SPLIT(write_all, _c, MPI_Count, 1, AT_INDIVIDUAL, const)
SPLIT(read_ordered, _c, MPI_Count, 0, -1, )
SPLIT(write_ordered, _c, MPI_Count, 1, -1, const)
SPLIT_AT(read_at_all, _c, MPI_Count, 0, )
SPLIT_AT(write_at_all, _c, MPI_Count, 1, const)
#endif

/* ------------------------------------------------------------------ */
/* pointers, size, view, info, sync                                     */

/* the view's data bytes that lie below file byte `size` */
static MPI_Offset view_bytes_below(const struct sfile *f, MPI_Offset size)
{
    if (size <= f->disp)
        return 0;
    MPI_Offset rel = size - f->disp;
    if (f->contig_view)
        return rel;
    MPI_Offset tiles = rel / f->ft_extent, rem = rel % f->ft_extent, bytes = tiles * f->ft.size;
    for (long i = 0; i < f->ft.n; i++) {
        const struct blk *b = &f->ft.b[i];
        if (b->off >= rem)
            continue;
        bytes += b->off + b->len <= rem ? b->len : rem - b->off;
    }
    return bytes;
}

static int seek_target(struct sfile *f, MPI_Offset cur, MPI_Offset off, int whence, MPI_Offset *out)
{
    MPI_Offset base;
    if (whence == MPI_SEEK_SET)
        base = 0;
    else if (whence == MPI_SEEK_CUR)
        base = cur;
    else if (whence == MPI_SEEK_END) {
        MPI_Offset size;
        int e = file_size(f, &size);
        if (e)
            return e;
        base = view_bytes_below(f, size) / f->etype_size;
    } else
        return MPI_ERR_ARG;
    if (base + off < 0)
        return MPI_ERR_ARG;
    *out = base + off;
    return MPI_SUCCESS;
}

int MPI_File_seek(MPI_File fh, MPI_Offset off, int whence)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_seek(fh, off, whence);
    if (f->amode & MPI_MODE_SEQUENTIAL)
        return fail(f, MPI_ERR_UNSUPPORTED_OPERATION);
    pthread_mutex_lock(&f->mu);
    MPI_Offset to;
    int e = seek_target(f, f->pos, off, whence, &to);
    if (!e)
        f->pos = to;
    pthread_mutex_unlock(&f->mu);
    return fail(f, e);
}

int MPI_File_get_position(MPI_File fh, MPI_Offset *off)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_get_position(fh, off);
    if (f->amode & MPI_MODE_SEQUENTIAL)
        return fail(f, MPI_ERR_UNSUPPORTED_OPERATION);
    pthread_mutex_lock(&f->mu);
    *off = f->pos;
    pthread_mutex_unlock(&f->mu);
    return MPI_SUCCESS;
}

int MPI_File_seek_shared(MPI_File fh, MPI_Offset off, int whence)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_seek_shared(fh, off, whence);
    int e = MPI_SUCCESS;
    /* every rank's earlier shared-pointer access lands before the move */
    PMPI_Barrier(f->comm);
    if (f->rank == 0) {
        int64_t cur = shared_add(f, 0, 0);
        MPI_Offset to;
        e = seek_target(f, cur, off, whence, &to);
        if (!e)
            shared_set(f, to);
    }
    PMPI_Bcast(&e, 1, MPI_INT, 0, f->comm);
    return fail(f, e);
}

int MPI_File_get_position_shared(MPI_File fh, MPI_Offset *off)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_get_position_shared(fh, off);
    *off = shared_add(f, 0, 0);
    return MPI_SUCCESS;
}

int MPI_File_get_byte_offset(MPI_File fh, MPI_Offset off, MPI_Offset *disp)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_get_byte_offset(fh, off, disp);
    if (off < 0)
        return fail(f, MPI_ERR_ARG);
    MPI_Offset run;
    *disp = view_map(f, off * f->etype_size, &run);
    return MPI_SUCCESS;
}

int MPI_File_get_size(MPI_File fh, MPI_Offset *size)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_get_size(fh, size);
    return fail(f, file_size(f, size));
}

/* collective resize by rank 0; `grow_only` for preallocate */
static int resize(struct sfile *f, MPI_Offset size, int grow_only)
{
    int e = MPI_SUCCESS;
    if (size < 0)
        e = MPI_ERR_ARG;
    else if (f->amode & MPI_MODE_RDONLY)
        e = MPI_ERR_READ_ONLY;
    else if (f->amode & MPI_MODE_SEQUENTIAL)
        e = MPI_ERR_UNSUPPORTED_OPERATION;
    PMPI_Barrier(f->comm); /* every rank's earlier writes land first */
    if (!e && f->rank == 0) {
        MPI_Offset cur = 0;
        e = file_size(f, &cur);
        if (!e && (!grow_only || cur < size) && cur != size && ftruncate(f->fd, size) != 0)
            e = class_of_errno(errno);
    }
    PMPI_Bcast(&e, 1, MPI_INT, 0, f->comm);
    return fail(f, e);
}

int MPI_File_set_size(MPI_File fh, MPI_Offset size)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_set_size(fh, size);
    return resize(f, size, 0);
}

int MPI_File_preallocate(MPI_File fh, MPI_Offset size)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_preallocate(fh, size);
    return resize(f, size, 1);
}

int MPI_File_sync(MPI_File fh)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_sync(fh);
    int e = MPI_SUCCESS;
    if (f->amode & MPI_MODE_RDONLY)
        e = MPI_SUCCESS; /* nothing written on this descriptor */
    else if (fsync(f->fd) != 0)
        e = class_of_errno(errno);
    PMPI_Barrier(f->comm);
    return fail(f, e);
}

int MPI_File_set_atomicity(MPI_File fh, int flag)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_set_atomicity(fh, flag);
    PMPI_Barrier(f->comm);
    f->atomic = flag != 0;
    return MPI_SUCCESS;
}

int MPI_File_get_atomicity(MPI_File fh, int *flag)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_get_atomicity(fh, flag);
    *flag = f->atomic;
    return MPI_SUCCESS;
}

int MPI_File_get_amode(MPI_File fh, int *amode)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_get_amode(fh, amode);
    *amode = f->amode;
    return MPI_SUCCESS;
}

int MPI_File_get_group(MPI_File fh, MPI_Group *group)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_get_group(fh, group);
    return PMPI_Comm_group(f->comm, group);
}

int MPI_File_get_info(MPI_File fh, MPI_Info *info)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_get_info(fh, info);
    return PMPI_Info_dup(f->info, info);
}

int MPI_File_set_info(MPI_File fh, MPI_Info info)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_set_info(fh, info);
    info_copy_into(info, f->info);
    return MPI_SUCCESS;
}

int MPI_File_set_view(MPI_File fh, MPI_Offset disp, MPI_Datatype etype, MPI_Datatype filetype,
                      const char *datarep, MPI_Info info)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_set_view(fh, disp, etype, filetype, datarep, info);
    int e = MPI_SUCCESS;
    int esize = 0, fsize = 0;
    if (etype == MPI_DATATYPE_NULL || filetype == MPI_DATATYPE_NULL)
        e = MPI_ERR_TYPE;
    else if (!datarep || strcmp(datarep, "native") != 0)
        e = MPI_ERR_UNSUPPORTED_DATAREP;
    if (!e) {
        PMPI_Type_size(etype, &esize);
        PMPI_Type_size(filetype, &fsize);
        if (esize <= 0 || fsize % esize != 0)
            e = MPI_ERR_TYPE;
    }
    if (!e && disp == MPI_DISPLACEMENT_CURRENT) {
        if (f->amode & MPI_MODE_SEQUENTIAL)
            disp = f->disp + shared_add(f, 0, 0) * f->etype_size;
        else
            e = MPI_ERR_ARG;
    }
    if (!e && disp < 0)
        e = MPI_ERR_ARG;
    struct flat fl = {0};
    MPI_Aint lb = 0, ext = 0;
    if (!e) {
        e = flatten_new(filetype, &fl, 0);
        PMPI_Type_get_extent(filetype, &lb, &ext);
        if (!e && (fl.size == 0 || ext <= 0))
            e = MPI_ERR_TYPE;
    }
    if (e) {
        flat_free(&fl);
        return fail(f, e);
    }
    PMPI_Barrier(f->comm);
    view_types_free(f);
    flat_free(&f->ft);
    if (!is_named(etype))
        PMPI_Type_dup(etype, &f->etype);
    else
        f->etype = etype;
    if (!is_named(filetype))
        PMPI_Type_dup(filetype, &f->ftype);
    else
        f->ftype = filetype;
    f->disp = disp;
    f->etype_size = esize;
    f->ft = fl;
    f->ft_extent = ext;
    f->contig_view = fl.n == 1 && fl.b[0].off == 0 && fl.b[0].len == ext;
    if (info != MPI_INFO_NULL)
        info_copy_into(info, f->info);
    f->pos = 0;
    if (f->rank == 0)
        shared_set(f, 0);
    PMPI_Barrier(f->comm);
    return MPI_SUCCESS;
}

int MPI_File_get_view(MPI_File fh, MPI_Offset *disp, MPI_Datatype *etype, MPI_Datatype *filetype,
                      char *datarep)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_get_view(fh, disp, etype, filetype, datarep);
    *disp = f->disp;
    if (is_named(f->etype))
        *etype = f->etype;
    else
        PMPI_Type_dup(f->etype, etype);
    if (is_named(f->ftype))
        *filetype = f->ftype;
    else
        PMPI_Type_dup(f->ftype, filetype);
    strcpy(datarep, "native");
    return MPI_SUCCESS;
}

int MPI_File_get_type_extent(MPI_File fh, MPI_Datatype dt, MPI_Aint *extent)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_get_type_extent(fh, dt, extent);
    MPI_Aint lb;
    return PMPI_Type_get_extent(dt, &lb, extent);
}

#if MPI_VERSION >= 4
int MPI_File_get_type_extent_c(MPI_File fh, MPI_Datatype dt, MPI_Count *extent)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_get_type_extent_c(fh, dt, extent);
    MPI_Count lb;
    return PMPI_Type_get_extent_x(dt, &lb, extent);
}
#endif

int MPI_File_set_errhandler(MPI_File fh, MPI_Errhandler eh)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_set_errhandler(fh, eh);
    f->eh = eh;
    return MPI_SUCCESS;
}

int MPI_File_get_errhandler(MPI_File fh, MPI_Errhandler *eh)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_get_errhandler(fh, eh);
    *eh = f->eh;
    return MPI_SUCCESS;
}

int MPI_File_call_errhandler(MPI_File fh, int code)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_call_errhandler(fh, code);
    fail(f, code);
    return MPI_SUCCESS;
}

/* Fortran handles of our files: negative, never a PMPI index */
#define FINT_BASE (-1000)

MPI_Fint MPI_File_c2f(MPI_File fh)
{
    struct sfile *f = ours(fh);
    if (!f)
        return PMPI_File_c2f(fh);
    return (MPI_Fint)(FINT_BASE - (f - pool));
}

MPI_File MPI_File_f2c(MPI_Fint h)
{
    if (h <= FINT_BASE && h > FINT_BASE - FILES_MAX) {
        struct sfile *f = &pool[FINT_BASE - h];
        return f->used ? (MPI_File)(void *)f : MPI_FILE_NULL;
    }
    return PMPI_File_f2c(h);
}
