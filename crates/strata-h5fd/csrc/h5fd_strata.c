/*
 * The strata HDF5 virtual file driver (issue 16), one library for two HDF5
 * lines, linked against neither:
 *
 *  - HDF5 1.10 (Debian): a program links libstrata_h5fd and calls
 *    H5Pset_fapl_strata (include/H5FDstrata.h); the driver registers the
 *    1.10 class layout.
 *  - HDF5 >= 1.14 (and 2.x, e.g. the one inside h5py's wheel): a plugin in
 *    HDF5_PLUGIN_PATH selected by HDF5_DRIVER=strata (HDF5_DRIVER_CONFIG:
 *    the mode); H5PLget_plugin_info hands HDF5 the 1.14 class layout, which
 *    adds read_vector/write_vector, del and ctl.
 *
 * The HDF5 functions it calls (error stack, property lists, registration)
 * are looked up at run time in the libhdf5 the process already has loaded
 * (the global scope, else any loaded object exporting H5FDregister: h5py
 * loads its renamed libhdf5 locally, so a plugin linked with the system's
 * libhdf5 would meet a second HDF5 — h5py #1537). The layouts below are
 * written from HDF5's documented public headers of each line.
 *
 * Each callback is a call of the Rust side (src/lib.rs: strata_h5fd_*), a
 * client of the daemon's file model. Reads past the end of the file give
 * zeros, as sec2's do. H5Fflush (not the flush at close) is durable like
 * fsync in DEFAULT mode; close makes the data visible. Locking is an flock
 * on a per-path lock file in the daemon's runtime directory. Metadata
 * writes (HDF5 passes the memory type) mark their pages hot.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- HDF5's public types (the same in 1.10, 1.14 and 2.x) ---- */
typedef int64_t hid_t;
typedef int herr_t;
typedef int htri_t;
typedef uint64_t haddr_t;
typedef unsigned long long hsize_t;
typedef bool hbool_t;
typedef int H5FD_mem_t; /* DEFAULT 0, SUPER 1, BTREE 2, DRAW 3, GHEAP 4, LHEAP 5, OHDR 6 */
#define MEM_NTYPES 7
#define MEM_SUPER 1
#define MEM_DRAW 3
#define MEM_GHEAP 4
#define HADDR_UNDEF ((haddr_t)(int64_t)(-1))
#define ACC_RDWR 0x0001u
#define ACC_TRUNC 0x0002u
#define ACC_EXCL 0x0004u
#define ACC_CREAT 0x0010u
#define CLOSE_WEAK 1
#define FEAT_AGGREGATE_METADATA 0x0001
#define FEAT_ACCUMULATE_METADATA 0x0006
#define FEAT_DATA_SIEVE 0x0008
#define FEAT_AGGREGATE_SMALLDATA 0x0010
#define FEAT_DEFAULT_VFD_COMPATIBLE 0x8000
#define PL_TYPE_VFD 2
/* an unregistered driver value: 256..511 are HDF5's range for such drivers */
#define STRATA_VALUE 0x1f5

/* The public head of every open file (H5FD_t); HDF5 fills it. */
typedef struct {
    hid_t driver_id;
    const void *cls;
    unsigned long fileno;
    unsigned access_flags;
    unsigned long feature_flags;
    haddr_t maxaddr;
    haddr_t base_addr;
    hsize_t threshold;
    hsize_t alignment;
    hbool_t paged_aggr;
} h5fd_pub_t;

typedef herr_t (*terminate_f)(void);
typedef hsize_t (*sb_size_f)(void *);
typedef herr_t (*sb_encode_f)(void *, char *, unsigned char *);
typedef herr_t (*sb_decode_f)(void *, const char *, const unsigned char *);
typedef void *(*fapl_get_f)(void *);
typedef void *(*fapl_copy_f)(const void *);
typedef herr_t (*fapl_free_f)(void *);
typedef void *(*open_f)(const char *, unsigned, hid_t, haddr_t);
typedef herr_t (*close_f)(void *);
typedef int (*cmp_f)(const void *, const void *);
typedef herr_t (*query_f)(const void *, unsigned long *);
typedef haddr_t (*get_eoa_f)(const void *, H5FD_mem_t);
typedef herr_t (*set_eoa_f)(void *, H5FD_mem_t, haddr_t);
typedef herr_t (*get_handle_f)(void *, hid_t, void **);
typedef herr_t (*read_f)(void *, H5FD_mem_t, hid_t, haddr_t, size_t, void *);
typedef herr_t (*write_f)(void *, H5FD_mem_t, hid_t, haddr_t, size_t, const void *);
typedef herr_t (*read_vector_f)(void *, hid_t, uint32_t, H5FD_mem_t *, haddr_t *, size_t *, void **);
typedef herr_t (*write_vector_f)(void *, hid_t, uint32_t, H5FD_mem_t *, haddr_t *, size_t *, const void **);
typedef herr_t (*flush_f)(void *, hid_t, hbool_t);
typedef herr_t (*lock_f)(void *, hbool_t);
typedef herr_t (*unlock_f)(void *);
typedef herr_t (*del_f)(const char *, hid_t);

/* H5FD_class_t of HDF5 1.10 */
typedef struct {
    const char *name;
    haddr_t maxaddr;
    int fc_degree;
    terminate_f terminate;
    sb_size_f sb_size;
    sb_encode_f sb_encode;
    sb_decode_f sb_decode;
    size_t fapl_size;
    fapl_get_f fapl_get;
    fapl_copy_f fapl_copy;
    fapl_free_f fapl_free;
    size_t dxpl_size;
    void *dxpl_copy, *dxpl_free;
    open_f open;
    close_f close;
    cmp_f cmp;
    query_f query;
    void *get_type_map, *alloc, *free;
    get_eoa_f get_eoa;
    set_eoa_f set_eoa;
    get_eoa_f get_eof;
    get_handle_f get_handle;
    read_f read;
    write_f write;
    flush_f flush;
    flush_f truncate;
    lock_f lock;
    unlock_f unlock;
    H5FD_mem_t fl_map[MEM_NTYPES];
} class_110_t;

/* H5FD_class_t of HDF5 1.14 and 2.x (struct version 1) */
typedef struct {
    unsigned version;
    int value;
    const char *name;
    haddr_t maxaddr;
    int fc_degree;
    terminate_f terminate;
    sb_size_f sb_size;
    sb_encode_f sb_encode;
    sb_decode_f sb_decode;
    size_t fapl_size;
    fapl_get_f fapl_get;
    fapl_copy_f fapl_copy;
    fapl_free_f fapl_free;
    size_t dxpl_size;
    void *dxpl_copy, *dxpl_free;
    open_f open;
    close_f close;
    cmp_f cmp;
    query_f query;
    void *get_type_map, *alloc, *free;
    get_eoa_f get_eoa;
    set_eoa_f set_eoa;
    get_eoa_f get_eof;
    get_handle_f get_handle;
    read_f read;
    write_f write;
    read_vector_f read_vector;
    write_vector_f write_vector;
    void *read_selection, *write_selection;
    flush_f flush;
    flush_f truncate;
    lock_f lock;
    unlock_f unlock;
    del_f del;
    void *ctl;
    H5FD_mem_t fl_map[MEM_NTYPES];
} class_114_t;

/* ---- the Rust side ---- */
struct strata_h5file;
extern int strata_h5fd_open(const char *path, int flags, const char *mode, struct strata_h5file **out);
extern int strata_h5fd_pread(struct strata_h5file *f, void *buf, size_t len, uint64_t off, size_t *got);
extern int strata_h5fd_pwrite(struct strata_h5file *f, const void *buf, size_t len, uint64_t off);
extern int strata_h5fd_size(struct strata_h5file *f, uint64_t *size);
extern int strata_h5fd_truncate(struct strata_h5file *f, uint64_t len);
extern int strata_h5fd_sync(struct strata_h5file *f);
extern int strata_h5fd_close(struct strata_h5file *f);
extern int strata_h5fd_delete(const char *path);
extern int strata_h5fd_lock_dir(char *buf, size_t len);
extern void strata_h5fd_hint(struct strata_h5file *f, uint64_t off, uint64_t len, int metadata);
extern const char *strata_h5fd_error(void);

enum { F_READ = 1, F_WRITE = 2, F_CREATE = 4, F_EXCL = 8, F_TRUNC = 16 };

/* ---- the host's HDF5, found at run time ---- */
static struct {
    int found;
    unsigned major, minor, release;
    herr_t (*open)(void);
    herr_t (*push)(hid_t, const char *, const char *, unsigned, hid_t, hid_t, hid_t, const char *, ...);
    const void *(*get_driver_info)(hid_t);
    hid_t (*get_driver)(hid_t);
    herr_t (*set_driver)(hid_t, hid_t, const void *);
    hid_t (*fd_register)(const void *);
    htri_t (*is_valid)(hid_t);
    ssize_t (*get_config_str)(hid_t, char *, size_t);
    hid_t *err_cls, *maj_vfl, *min_open, *min_read, *min_write, *min_badvalue;
} h5;
static pthread_once_t h5_once = PTHREAD_ONCE_INIT;

static int find_hdf5(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    void **out = data;
    if (!info->dlpi_name || !*info->dlpi_name || !strstr(info->dlpi_name, "hdf5"))
        return 0;
    void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (h && dlsym(h, "H5FDregister")) {
        *out = h;
        return 1;
    }
    if (h)
        dlclose(h);
    return 0;
}

static void h5_init(void)
{
    void *lib = RTLD_DEFAULT;
    if (!dlsym(RTLD_DEFAULT, "H5FDregister")) {
        void *found = NULL;
        dl_iterate_phdr(find_hdf5, &found);
        if (!found)
            return;
        lib = found;
    }
#define SYM(field, name) *(void **)(&h5.field) = dlsym(lib, name)
    SYM(open, "H5open");
    SYM(push, "H5Epush2");
    SYM(get_driver_info, "H5Pget_driver_info");
    SYM(get_driver, "H5Pget_driver");
    SYM(set_driver, "H5Pset_driver");
    SYM(fd_register, "H5FDregister");
    SYM(is_valid, "H5Iis_valid");
    SYM(get_config_str, "H5Pget_driver_config_str");
    SYM(err_cls, "H5E_ERR_CLS_g");
    SYM(maj_vfl, "H5E_VFL_g");
    SYM(min_open, "H5E_CANTOPENFILE_g");
    SYM(min_read, "H5E_READERROR_g");
    SYM(min_write, "H5E_WRITEERROR_g");
    SYM(min_badvalue, "H5E_BADVALUE_g");
#undef SYM
    herr_t (*version)(unsigned *, unsigned *, unsigned *) = (herr_t(*)(unsigned *, unsigned *, unsigned *))dlsym(
        lib, "H5get_libversion");
    if (!h5.open || !h5.push || !h5.get_driver_info || !h5.fd_register || !version)
        return;
    h5.open();
    version(&h5.major, &h5.minor, &h5.release);
    h5.found = 1;
}

static int hdf5(void)
{
    pthread_once(&h5_once, h5_init);
    return h5.found;
}

/* the 1.14 class layout for HDF5 >= 1.13.2 (1.14, 2.x); 1.10 below that */
static int layout_114(void)
{
    return h5.major > 1 || (h5.major == 1 && h5.minor >= 14);
}

/* pushes an error on HDF5's stack (minor: one of h5.min_*) and returns ret */
static void push(const char *func, int line, hid_t *minor, const char *fmt, ...)
{
    if (!hdf5() || !h5.err_cls || !h5.maj_vfl || !minor)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    h5.push(0 /* H5E_DEFAULT */, __FILE__, func, (unsigned)line, *h5.err_cls, *h5.maj_vfl, *minor, "%s", msg);
}

#define FAIL(minor, ret, ...)                                                                                     \
    do {                                                                                                          \
        push(__func__, __LINE__, h5.minor, __VA_ARGS__);                                                          \
        return ret;                                                                                               \
    } while (0)

/* ---- the driver ---- */

#define MODE_MAX 16

typedef struct {
    char mode[MODE_MAX]; /* "" = the configuration's */
} strata_fapl_t;

typedef struct {
    h5fd_pub_t pub;      /* first: HDF5 casts */
    char reserved[128];  /* room should a later HDF5 grow its public head */
    struct strata_h5file *f;
    char *path;
    haddr_t eoa, eof;
    int writable;
    int lock_fd;
} strata_file_t;

static hid_t driver_id = -1;

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

static void *fapl_get(void *file)
{
    (void)file;
    return calloc(1, sizeof(strata_fapl_t));
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

/* the mode: the property list's (H5Pset_fapl_strata), else the driver
 * configuration string (HDF5_DRIVER_CONFIG), else NULL (the configuration's) */
static const char *mode_of(hid_t fapl, char *buf, size_t len)
{
    const strata_fapl_t *fa = h5.get_driver_info ? h5.get_driver_info(fapl) : NULL;
    if (fa && fa->mode[0]) {
        snprintf(buf, len, "%s", fa->mode);
        return buf;
    }
    if (h5.get_config_str) {
        ssize_t n = h5.get_config_str(fapl, buf, len);
        if (n > 0 && (size_t)n < len) {
            buf[strcspn(buf, " \t\n")] = 0;
            return *buf ? buf : NULL;
        }
    }
    return NULL;
}

static void *s_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr)
{
    (void)maxaddr;
    hdf5();
    if (!name || !*name)
        FAIL(min_badvalue, NULL, "invalid file name");
    char *path = absolute(name);
    if (!path)
        FAIL(min_open, NULL, "strata: cannot resolve the directory of %s", name);
    char mbuf[64];
    const char *mode = mode_of(fapl, mbuf, sizeof mbuf);
    int fl = F_READ;
    if (flags & ACC_RDWR)
        fl |= F_WRITE;
    if (flags & ACC_CREAT)
        fl |= F_CREATE;
    if (flags & ACC_EXCL)
        fl |= F_EXCL;
    if (flags & ACC_TRUNC)
        fl |= F_TRUNC;
    struct strata_h5file *h = NULL;
    if (strata_h5fd_open(path, fl, mode, &h) != 0) {
        free(path);
        FAIL(min_open, NULL, "strata: %s", strata_h5fd_error());
    }
    uint64_t size = 0;
    if (strata_h5fd_size(h, &size) != 0) {
        strata_h5fd_close(h);
        free(path);
        FAIL(min_open, NULL, "strata: %s", strata_h5fd_error());
    }
    strata_file_t *f = calloc(1, sizeof *f);
    if (!f) {
        strata_h5fd_close(h);
        free(path);
        FAIL(min_open, NULL, "out of memory");
    }
    f->f = h;
    f->path = path;
    f->eof = (haddr_t)size;
    f->writable = !!(fl & F_WRITE);
    f->lock_fd = -1;
    return f;
}

static herr_t s_close(void *file)
{
    strata_file_t *f = file;
    int e = strata_h5fd_close(f->f);
    if (f->lock_fd >= 0)
        close(f->lock_fd);
    free(f->path);
    free(f);
    if (e)
        FAIL(min_write, -1, "strata: %s", strata_h5fd_error());
    return 0;
}

static int s_cmp(const void *a, const void *b)
{
    int c = strcmp(((const strata_file_t *)a)->path, ((const strata_file_t *)b)->path);
    return c < 0 ? -1 : c > 0;
}

static herr_t s_query(const void *file, unsigned long *flags)
{
    (void)file;
    *flags = FEAT_AGGREGATE_METADATA | FEAT_ACCUMULATE_METADATA | FEAT_DATA_SIEVE | FEAT_AGGREGATE_SMALLDATA |
             FEAT_DEFAULT_VFD_COMPATIBLE;
    return 0;
}

static haddr_t s_get_eoa(const void *file, H5FD_mem_t type)
{
    (void)type;
    return ((const strata_file_t *)file)->eoa;
}

static herr_t s_set_eoa(void *file, H5FD_mem_t type, haddr_t addr)
{
    (void)type;
    ((strata_file_t *)file)->eoa = addr;
    return 0;
}

static haddr_t s_get_eof(const void *file, H5FD_mem_t type)
{
    (void)type;
    return ((const strata_file_t *)file)->eof;
}

static herr_t s_get_handle(void *file, hid_t fapl, void **handle)
{
    (void)fapl;
    if (!handle)
        FAIL(min_badvalue, -1, "file handle not valid");
    *handle = &((strata_file_t *)file)->f;
    return 0;
}

static herr_t s_read(void *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, void *buf)
{
    (void)type, (void)dxpl;
    strata_file_t *f = file;
    if (addr == HADDR_UNDEF || addr + size < addr)
        FAIL(min_badvalue, -1, "address overflow, addr = %llu", (unsigned long long)addr);
    size_t done = 0;
    while (done < size) {
        size_t got = 0;
        if (strata_h5fd_pread(f->f, (char *)buf + done, size - done, addr + done, &got) != 0)
            FAIL(min_read, -1, "strata: %s", strata_h5fd_error());
        if (got == 0)
            break; /* end of file: zeros, as sec2 */
        done += got;
    }
    if (done < size)
        memset((char *)buf + done, 0, size - done);
    return 0;
}

static herr_t s_write(void *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, const void *buf)
{
    (void)dxpl;
    strata_file_t *f = file;
    if (addr == HADDR_UNDEF || addr + size < addr)
        FAIL(min_badvalue, -1, "address overflow, addr = %llu", (unsigned long long)addr);
    if (strata_h5fd_pwrite(f->f, buf, size, addr) != 0)
        FAIL(min_write, -1, "strata: %s", strata_h5fd_error());
    if (type != MEM_DRAW && type != MEM_GHEAP)
        strata_h5fd_hint(f->f, addr, size, 1);
    if (addr + size > f->eof)
        f->eof = addr + size;
    return 0;
}

/* HDF5 >= 1.14: several pieces in one call; a zero size means "the previous
 * size from here on", H5FD_MEM_NOLIST (-1) the same for types (HDF5's
 * convention for vector I/O) */
/* HDF5's vector convention: from the entry whose size is 0 (or, after the
 * first, whose type is H5FD_MEM_NOLIST) on, the previous size (type) holds to
 * the end. One walker for both directions. */
typedef struct {
    size_t size;
    H5FD_mem_t type;
    int fixed_size, fixed_type;
} vec_walk_t;

static void vec_step(vec_walk_t *w, uint32_t i, const H5FD_mem_t *types, const size_t *sizes)
{
    if (!w->fixed_size) {
        if (sizes[i] == 0)
            w->fixed_size = 1;
        else
            w->size = sizes[i];
    }
    if (!w->fixed_type) {
        if (types[i] == -1 && i > 0)
            w->fixed_type = 1;
        else
            w->type = types[i];
    }
}

static herr_t s_read_vector(void *file, hid_t dxpl, uint32_t count, H5FD_mem_t *types, haddr_t *addrs,
                            size_t *sizes, void **bufs)
{
    vec_walk_t w = {0};
    for (uint32_t i = 0; i < count; i++) {
        vec_step(&w, i, types, sizes);
        if (s_read(file, w.type, dxpl, addrs[i], w.size, bufs[i]) < 0)
            return -1;
    }
    return 0;
}

static herr_t s_write_vector(void *file, hid_t dxpl, uint32_t count, H5FD_mem_t *types, haddr_t *addrs,
                             size_t *sizes, const void **bufs)
{
    vec_walk_t w = {0};
    for (uint32_t i = 0; i < count; i++) {
        vec_step(&w, i, types, sizes);
        if (s_write(file, w.type, dxpl, addrs[i], w.size, bufs[i]) < 0)
            return -1;
    }
    return 0;
}

static herr_t s_flush(void *file, hid_t dxpl, hbool_t closing)
{
    (void)dxpl;
    strata_file_t *f = file;
    /* H5Fflush is durable; the flush at close only makes the data visible */
    if (!closing && f->writable && strata_h5fd_sync(f->f) != 0)
        FAIL(min_write, -1, "strata: %s", strata_h5fd_error());
    return 0;
}

static herr_t s_truncate(void *file, hid_t dxpl, hbool_t closing)
{
    (void)dxpl, (void)closing;
    strata_file_t *f = file;
    if (f->eoa == f->eof)
        return 0;
    if (strata_h5fd_truncate(f->f, f->eoa) != 0)
        FAIL(min_write, -1, "strata: %s", strata_h5fd_error());
    f->eof = f->eoa;
    return 0;
}

static uint64_t fnv64(const char *s)
{
    uint64_t x = 1469598103934665603ull;
    for (; *s; s++)
        x = (x ^ (unsigned char)*s) * 1099511628211ull;
    return x;
}

static herr_t s_lock(void *file, hbool_t rw)
{
    strata_file_t *f = file;
    if (f->lock_fd < 0) {
        char dir[PATH_MAX], p[PATH_MAX + 64];
        if (strata_h5fd_lock_dir(dir, sizeof dir) != 0)
            FAIL(min_open, -1, "strata: %s", strata_h5fd_error());
        snprintf(p, sizeof p, "%s/h5lock-%016llx", dir, (unsigned long long)fnv64(f->path));
        f->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (f->lock_fd < 0)
            FAIL(min_open, -1, "strata: cannot open the lock file %s: %s", p, strerror(errno));
    }
    if (flock(f->lock_fd, (rw ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0)
        FAIL(min_open, -1, "unable to lock the file (%s): %s", f->path, strerror(errno));
    return 0;
}

static herr_t s_unlock(void *file)
{
    strata_file_t *f = file;
    if (f->lock_fd >= 0 && flock(f->lock_fd, LOCK_UN) != 0)
        FAIL(min_open, -1, "unable to unlock the file: %s", strerror(errno));
    return 0;
}

static herr_t s_del(const char *name, hid_t fapl)
{
    (void)fapl;
    char *path = absolute(name);
    if (!path)
        FAIL(min_badvalue, -1, "strata: cannot resolve %s", name);
    int e = strata_h5fd_delete(path);
    free(path);
    if (e)
        FAIL(min_write, -1, "strata: %s", strata_h5fd_error());
    return 0;
}

static herr_t s_terminate(void)
{
    driver_id = -1;
    return 0;
}

#define DICHOTOMY {MEM_SUPER, MEM_SUPER, MEM_SUPER, MEM_DRAW, MEM_DRAW, MEM_SUPER, MEM_SUPER}

static const class_110_t class_110 = {
    .name = "strata",
    .maxaddr = (haddr_t)INT64_MAX,
    .fc_degree = CLOSE_WEAK,
    .terminate = s_terminate,
    .fapl_size = sizeof(strata_fapl_t),
    .fapl_get = fapl_get,
    .fapl_copy = fapl_copy,
    .fapl_free = fapl_free,
    .open = s_open,
    .close = s_close,
    .cmp = s_cmp,
    .query = s_query,
    .get_eoa = s_get_eoa,
    .set_eoa = s_set_eoa,
    .get_eof = s_get_eof,
    .get_handle = s_get_handle,
    .read = s_read,
    .write = s_write,
    .flush = s_flush,
    .truncate = s_truncate,
    .lock = s_lock,
    .unlock = s_unlock,
    .fl_map = DICHOTOMY,
};

static const class_114_t class_114 = {
    .version = 1,
    .value = STRATA_VALUE,
    .name = "strata",
    .maxaddr = (haddr_t)INT64_MAX,
    .fc_degree = CLOSE_WEAK,
    .terminate = s_terminate,
    .fapl_size = sizeof(strata_fapl_t),
    .fapl_get = fapl_get,
    .fapl_copy = fapl_copy,
    .fapl_free = fapl_free,
    .open = s_open,
    .close = s_close,
    .cmp = s_cmp,
    .query = s_query,
    .get_eoa = s_get_eoa,
    .set_eoa = s_set_eoa,
    .get_eof = s_get_eof,
    .get_handle = s_get_handle,
    .read = s_read,
    .write = s_write,
    .read_vector = s_read_vector,
    .write_vector = s_write_vector,
    .flush = s_flush,
    .truncate = s_truncate,
    .lock = s_lock,
    .unlock = s_unlock,
    .del = s_del,
    .fl_map = DICHOTOMY,
};

/* ---- entry points (exported by src/lib.rs under their public names) ---- */

hid_t strata_h5fd_c_init(void)
{
    if (!hdf5()) {
        fprintf(stderr, "strata h5fd: no HDF5 library found in this process\n");
        return -1;
    }
    if (driver_id >= 0 && h5.is_valid && h5.is_valid(driver_id) > 0)
        return driver_id;
    if (h5.major == 1 && h5.minor < 14 && h5.minor != 10) {
        push(__func__, __LINE__, h5.min_badvalue, "strata: HDF5 %u.%u is not supported (1.10, or 1.14 and later)",
             h5.major, h5.minor);
        return -1;
    }
    driver_id = h5.fd_register(layout_114() ? (const void *)&class_114 : (const void *)&class_110);
    return driver_id;
}

herr_t strata_h5fd_c_set_fapl(hid_t fapl, const char *mode)
{
    strata_fapl_t fa;
    memset(&fa, 0, sizeof fa);
    if (mode) {
        if (strcmp(mode, "default") && strcmp(mode, "scratch") && strcmp(mode, "workflow"))
            FAIL(min_badvalue, -1, "strata: mode %s: use default, scratch, workflow or NULL", mode);
        strcpy(fa.mode, mode);
    }
    hid_t id = strata_h5fd_c_init();
    if (id < 0 || !h5.set_driver)
        return -1;
    return h5.set_driver(fapl, id, &fa);
}

herr_t strata_h5fd_c_get_fapl(hid_t fapl, char *mode, size_t len)
{
    if (!hdf5() || !h5.get_driver || h5.get_driver(fapl) != strata_h5fd_c_init())
        FAIL(min_badvalue, -1, "not a strata file access property list");
    const strata_fapl_t *fa = h5.get_driver_info(fapl);
    if (!fa || !mode || len == 0)
        FAIL(min_badvalue, -1, "bad arguments");
    snprintf(mode, len, "%s", fa->mode);
    return 0;
}

int strata_h5fd_c_plugin_type(void)
{
    return PL_TYPE_VFD;
}

const void *strata_h5fd_c_plugin_info(void)
{
    /* plugins exist from 1.14 on: that layout */
    return &class_114;
}
