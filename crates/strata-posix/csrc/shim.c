/* Variadic entry points of libstrata_posix.so. Stable Rust cannot define
 * C-variadic functions, so these read the optional argument with va_arg and
 * forward to the Rust implementations (src/lib.rs). Nothing else lives here.
 *
 * The exported names (open, openat, fcntl, ...) are tail-jump trampolines
 * defined in Rust (src/shim.rs, naked functions): rustc's version script
 * exports only Rust symbols, so a C definition of `open` would stay local.
 * A tail jump keeps every register and the stack, so va_arg here sees the
 * caller's arguments exactly. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>

int strata_posix_open(const char *path, int flags, unsigned int mode);
int strata_posix_openat(int dirfd, const char *path, int flags, unsigned int mode);
int strata_posix_fcntl(int fd, int cmd, unsigned long arg);

#define STRATA_EXPORT __attribute__((visibility("default")))

/* The mode argument is only present with O_CREAT or O_TMPFILE. */
#define MODE_ARG(flags, mode)                                   \
    do {                                                        \
        if ((flags) & (O_CREAT | __O_TMPFILE)) {                \
            va_list ap;                                         \
            va_start(ap, flags);                                \
            mode = va_arg(ap, unsigned int);                    \
            va_end(ap);                                         \
        }                                                       \
    } while (0)

STRATA_EXPORT int strata_shim_open(const char *path, int flags, ...) {
    unsigned int mode = 0;
    MODE_ARG(flags, mode);
    return strata_posix_open(path, flags, mode);
}

STRATA_EXPORT int strata_shim_open64(const char *path, int flags, ...) {
    unsigned int mode = 0;
    MODE_ARG(flags, mode);
    return strata_posix_open(path, flags, mode);
}

STRATA_EXPORT int strata_shim_openat(int dirfd, const char *path, int flags, ...) {
    unsigned int mode = 0;
    MODE_ARG(flags, mode);
    return strata_posix_openat(dirfd, path, flags, mode);
}

STRATA_EXPORT int strata_shim_openat64(int dirfd, const char *path, int flags, ...) {
    unsigned int mode = 0;
    MODE_ARG(flags, mode);
    return strata_posix_openat(dirfd, path, flags, mode);
}

/* glibc reads fcntl's third argument as a pointer-sized value whatever cmd is. */
STRATA_EXPORT int strata_shim_fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    unsigned long arg = va_arg(ap, unsigned long);
    va_end(ap);
    return strata_posix_fcntl(fd, cmd, arg);
}

STRATA_EXPORT int strata_shim_fcntl64(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    unsigned long arg = va_arg(ap, unsigned long);
    va_end(ap);
    return strata_posix_fcntl(fd, cmd, arg);
}
