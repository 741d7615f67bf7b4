/*
 * The strata HDF5 virtual file driver, HDF5 1.10 class layout (issue 16).
 *
 * Each callback is a call of the Rust side (src/lib.rs: strata_h5fd_*),
 * which is a client of the daemon's file model: open/create/truncate by
 * path, positioned reads and writes, size, sync, close. Reads past the end
 * of the file give zeros, as sec2's do. H5Fflush (not the flush at close)
 * is durable like fsync in DEFAULT mode; close makes the data visible.
 * Locking is an flock on a per-path lock file in the daemon's runtime
 * directory (HDF5's single-writer rule between processes of a node).
 *
 * Metadata and raw data are told apart by HDF5's memory type: metadata
 * writes are marked hot (strata_h5fd_hint), raw data is left to the
 * organizer's scores.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <hdf5.h>

#include "H5FDstrata.h"

/* the Rust side */
struct strata_h5file;
extern int strata_h5fd_open(const char *path, int flags, const char *mode, struct strata_h5file **out);
extern int strata_h5fd_pread(struct strata_h5file *f, void *buf, size_t len, uint64_t off, size_t *got);
extern int strata_h5fd_pwrite(struct strata_h5file *f, const void *buf, size_t len, uint64_t off);
extern int strata_h5fd_size(struct strata_h5file *f, uint64_t *size);
extern int strata_h5fd_truncate(struct strata_h5file *f, uint64_t len);
extern int strata_h5fd_sync(struct strata_h5file *f);
extern int strata_h5fd_close(struct strata_h5file *f);
extern int strata_h5fd_lock_dir(char *buf, size_t len);
extern void strata_h5fd_hint(struct strata_h5file *f, uint64_t off, uint64_t len, int metadata);
extern const char *strata_h5fd_error(void);

enum { F_READ = 1, F_WRITE = 2, F_CREATE = 4, F_EXCL = 8, F_TRUNC = 16 };

#define MODE_MAX 16

typedef struct {
    char mode[MODE_MAX]; /* "" = the configuration's */
} strata_fapl_t;

typedef struct {
    H5FD_t pub; /* first: HDF5 casts */
    struct strata_h5file *f;
    char *path;
    haddr_t eoa, eof;
    int writable;
    int lock_fd;
} strata_file_t;

static hid_t driver_id = H5I_INVALID_HID;

#define FAIL(maj, min, ret, ...)                                                                                  \
    do {                                                                                                          \
        H5Epush2(H5E_DEFAULT, __FILE__, __func__, __LINE__, H5E_ERR_CLS, maj, min, __VA_ARGS__);                 \
        return ret;                                                                                               \
    } while (0)

/* the absolute path of `name` (which need not exist yet); NULL on failure */
static char *absolute(const char *name)
{
    char dir[PATH_MAX], real[PATH_MAX];
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    if (slash) {
        size_t n = (size_t)(slash - name);
        if (n == 0)
            n = 1; /* "/file" */
        if (n >= sizeof dir)
            return NULL;
        memcpy(dir, name, n);
        dir[n] = 0;
    } else {
        strcpy(dir, ".");
    }
    if (!realpath(dir, real) || !*base)
        return NULL;
    char *out = malloc(strlen(real) + strlen(base) + 2);
    if (out)
        sprintf(out, "%s/%s", strcmp(real, "/") ? real : "", base);
    return out;
}

static void *fapl_get(H5FD_t *file)
{
    (void)file;
    strata_fapl_t *fa = calloc(1, sizeof *fa);
    return fa;
}

static void *fapl_copy(const void *old)
{
    strata_fapl_t *fa = malloc(sizeof *fa);
    if (fa)
        memcpy(fa, old, sizeof *fa);
    return fa;
}

static herr_t fapl_free(void *fa)
{
    free(fa);
    return 0;
}

static H5FD_t *s_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr)
{
    (void)maxaddr;
    if (!name || !*name)
        FAIL(H5E_ARGS, H5E_BADVALUE, NULL, "invalid file name");
    char *path = absolute(name);
    if (!path)
        FAIL(H5E_FILE, H5E_CANTOPENFILE, NULL, "strata: cannot resolve the directory of %s", name);
    const strata_fapl_t *fa = H5Pget_driver_info(fapl);
    int fl = F_READ;
    if (flags & H5F_ACC_RDWR)
        fl |= F_WRITE;
    if (flags & H5F_ACC_CREAT)
        fl |= F_CREATE;
    if (flags & H5F_ACC_EXCL)
        fl |= F_EXCL;
    if (flags & H5F_ACC_TRUNC)
        fl |= F_TRUNC;
    struct strata_h5file *h = NULL;
    int e = strata_h5fd_open(path, fl, fa && fa->mode[0] ? fa->mode : NULL, &h);
    if (e) {
        free(path);
        FAIL(H5E_FILE, H5E_CANTOPENFILE, NULL, "strata: %s", strata_h5fd_error());
    }
    uint64_t size = 0;
    if ((e = strata_h5fd_size(h, &size)) != 0) {
        strata_h5fd_close(h);
        free(path);
        FAIL(H5E_FILE, H5E_CANTGET, NULL, "strata: %s", strata_h5fd_error());
    }
    strata_file_t *f = calloc(1, sizeof *f);
    if (!f) {
        strata_h5fd_close(h);
        free(path);
        FAIL(H5E_RESOURCE, H5E_NOSPACE, NULL, "out of memory");
    }
    f->f = h;
    f->path = path;
    f->eof = (haddr_t)size;
    f->writable = !!(fl & F_WRITE);
    f->lock_fd = -1;
    return &f->pub;
}

static herr_t s_close(H5FD_t *file)
{
    strata_file_t *f = (strata_file_t *)file;
    int e = strata_h5fd_close(f->f);
    if (f->lock_fd >= 0)
        close(f->lock_fd);
    free(f->path);
    free(f);
    if (e)
        FAIL(H5E_IO, H5E_CANTCLOSEFILE, -1, "strata: %s", strata_h5fd_error());
    return 0;
}

static int s_cmp(const H5FD_t *a, const H5FD_t *b)
{
    int c = strcmp(((const strata_file_t *)a)->path, ((const strata_file_t *)b)->path);
    return c < 0 ? -1 : c > 0;
}

static herr_t s_query(const H5FD_t *file, unsigned long *flags)
{
    (void)file;
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
             H5FD_FEAT_AGGREGATE_SMALLDATA | H5FD_FEAT_DEFAULT_VFD_COMPATIBLE;
    return 0;
}

static haddr_t s_get_eoa(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const strata_file_t *)file)->eoa;
}

static herr_t s_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr)
{
    (void)type;
    ((strata_file_t *)file)->eoa = addr;
    return 0;
}

static haddr_t s_get_eof(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const strata_file_t *)file)->eof;
}

static herr_t s_get_handle(H5FD_t *file, hid_t fapl, void **handle)
{
    (void)fapl;
    if (!handle)
        FAIL(H5E_ARGS, H5E_BADVALUE, -1, "file handle not valid");
    *handle = &((strata_file_t *)file)->f;
    return 0;
}

static int is_metadata(H5FD_mem_t type)
{
    return type != H5FD_MEM_DRAW && type != H5FD_MEM_GHEAP;
}

static herr_t s_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, void *buf)
{
    (void)type, (void)dxpl;
    strata_file_t *f = (strata_file_t *)file;
    if (addr == HADDR_UNDEF || addr + size < addr)
        FAIL(H5E_ARGS, H5E_OVERFLOW, -1, "address overflow, addr = %llu", (unsigned long long)addr);
    size_t done = 0;
    while (done < size) {
        size_t got = 0;
        if (strata_h5fd_pread(f->f, (char *)buf + done, size - done, addr + done, &got) != 0)
            FAIL(H5E_IO, H5E_READERROR, -1, "strata: %s", strata_h5fd_error());
        if (got == 0)
            break; /* end of file: zeros, as sec2 */
        done += got;
    }
    if (done < size)
        memset((char *)buf + done, 0, size - done);
    return 0;
}

static herr_t s_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, const void *buf)
{
    (void)dxpl;
    strata_file_t *f = (strata_file_t *)file;
    if (addr == HADDR_UNDEF || addr + size < addr)
        FAIL(H5E_ARGS, H5E_OVERFLOW, -1, "address overflow, addr = %llu", (unsigned long long)addr);
    if (strata_h5fd_pwrite(f->f, buf, size, addr) != 0)
        FAIL(H5E_IO, H5E_WRITEERROR, -1, "strata: %s", strata_h5fd_error());
    if (is_metadata(type))
        strata_h5fd_hint(f->f, addr, size, 1);
    if (addr + size > f->eof)
        f->eof = addr + size;
    return 0;
}

static herr_t s_flush(H5FD_t *file, hid_t dxpl, hbool_t closing)
{
    (void)dxpl;
    strata_file_t *f = (strata_file_t *)file;
    /* H5Fflush is durable; the flush at close only makes the data visible */
    if (!closing && f->writable && strata_h5fd_sync(f->f) != 0)
        FAIL(H5E_IO, H5E_CANTFLUSH, -1, "strata: %s", strata_h5fd_error());
    return 0;
}

static herr_t s_truncate(H5FD_t *file, hid_t dxpl, hbool_t closing)
{
    (void)dxpl, (void)closing;
    strata_file_t *f = (strata_file_t *)file;
    if (f->eoa == f->eof)
        return 0;
    if (strata_h5fd_truncate(f->f, f->eoa) != 0)
        FAIL(H5E_IO, H5E_SEEKERROR, -1, "strata: %s", strata_h5fd_error());
    f->eof = f->eoa;
    return 0;
}

static uint64_t fnv64(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static herr_t s_lock(H5FD_t *file, hbool_t rw)
{
    strata_file_t *f = (strata_file_t *)file;
    if (f->lock_fd < 0) {
        char dir[PATH_MAX], p[PATH_MAX + 64];
        if (strata_h5fd_lock_dir(dir, sizeof dir) != 0)
            FAIL(H5E_FILE, H5E_CANTLOCKFILE, -1, "strata: %s", strata_h5fd_error());
        snprintf(p, sizeof p, "%s/h5lock-%016llx", dir, (unsigned long long)fnv64(f->path));
        f->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (f->lock_fd < 0)
            FAIL(H5E_FILE, H5E_CANTLOCKFILE, -1, "strata: cannot open the lock file %s: %s", p, strerror(errno));
    }
    if (flock(f->lock_fd, (rw ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0)
        FAIL(H5E_FILE, H5E_CANTLOCKFILE, -1, "unable to lock the file (%s): %s", f->path, strerror(errno));
    return 0;
}

static herr_t s_unlock(H5FD_t *file)
{
    strata_file_t *f = (strata_file_t *)file;
    if (f->lock_fd >= 0 && flock(f->lock_fd, LOCK_UN) != 0)
        FAIL(H5E_FILE, H5E_CANTUNLOCKFILE, -1, "unable to unlock the file: %s", strerror(errno));
    return 0;
}

static herr_t s_terminate(void)
{
    driver_id = H5I_INVALID_HID;
    return 0;
}

static const H5FD_class_t strata_class = {
    "strata",                 /* name */
    (haddr_t)INT64_MAX,       /* maxaddr */
    H5F_CLOSE_WEAK,           /* fc_degree */
    s_terminate,              /* terminate */
    NULL, NULL, NULL,         /* sb_size, sb_encode, sb_decode */
    sizeof(strata_fapl_t),    /* fapl_size */
    fapl_get, fapl_copy, fapl_free,
    0, NULL, NULL,            /* dxpl */
    s_open, s_close, s_cmp, s_query,
    NULL,                     /* get_type_map */
    NULL, NULL,               /* alloc, free */
    s_get_eoa, s_set_eoa, s_get_eof, s_get_handle,
    s_read, s_write, s_flush, s_truncate, s_lock, s_unlock,
    H5FD_FLMAP_DICHOTOMY,
};

hid_t strata_h5fd_c_init(void)
{
    if (H5Iget_type(driver_id) != H5I_VFL)
        driver_id = H5FDregister(&strata_class);
    return driver_id;
}

herr_t strata_h5fd_c_set_fapl(hid_t fapl, const char *mode)
{
    strata_fapl_t fa;
    memset(&fa, 0, sizeof fa);
    if (mode) {
        if (strcmp(mode, "default") && strcmp(mode, "scratch") && strcmp(mode, "workflow"))
            FAIL(H5E_ARGS, H5E_BADVALUE, -1, "strata: mode %s: use default, scratch, workflow or NULL", mode);
        strcpy(fa.mode, mode);
    }
    hid_t id = strata_h5fd_c_init();
    if (id < 0)
        return -1;
    return H5Pset_driver(fapl, id, &fa);
}

herr_t strata_h5fd_c_get_fapl(hid_t fapl, char *mode, size_t len)
{
    if (H5Pget_driver(fapl) != strata_h5fd_c_init())
        FAIL(H5E_PLIST, H5E_BADVALUE, -1, "not a strata file access property list");
    const strata_fapl_t *fa = H5Pget_driver_info(fapl);
    if (!fa || !mode || len == 0)
        FAIL(H5E_PLIST, H5E_BADVALUE, -1, "bad arguments");
    snprintf(mode, len, "%s", fa->mode);
    return 0;
}
