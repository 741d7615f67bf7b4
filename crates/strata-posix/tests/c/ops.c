/* Adapter self-test: runs a fixed sequence of file operations in DIR and
 * prints one line per operation (return value, errno, bytes). Run once on a
 * tracked directory under the adapter and once on an untracked twin: the
 * outputs must be identical.  Usage: ops DIR [SCENARIO] */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* readdir_r */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <aio.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[4096];
static char pbuf[4][4200];
static const char *P(int slot, const char *name) {
    snprintf(pbuf[slot], sizeof pbuf[slot], "%s/%s", dir, name);
    return pbuf[slot];
}

#define R(expr)                                                                 \
    do {                                                                        \
        errno = 0;                                                              \
        long long _r = (long long)(expr);                                       \
        int _e = errno;                                                         \
        printf("%-60s = %lld%s%s\n", #expr, _r, _r < 0 ? " " : "",              \
               _r < 0 ? strerrorname_np(_e) : "");                              \
    } while (0)

/* like R for calls returning a descriptor: its number is not compared */
#define F(expr)                                                                 \
    do {                                                                        \
        errno = 0;                                                              \
        long long _r = (long long)(expr);                                       \
        int _e = errno;                                                         \
        printf("%-60s = %s%s\n", #expr, _r < 0 ? "-1 " : "fd",                  \
               _r < 0 ? strerrorname_np(_e) : "");                              \
    } while (0)

static uint64_t fnv(const unsigned char *b, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* Prints size and a hash of the whole content read through read(). */
static void dump(const char *name) {
    int fd = open(P(3, name), O_RDONLY);
    if (fd < 0) { printf("dump %s: %s\n", name, strerrorname_np(errno)); return; }
    static unsigned char buf[1 << 20];
    size_t total = 0; uint64_t h = 1469598103934665603ULL; ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n; i++) h = (h ^ buf[i]) * 1099511628211ULL;
        total += n;
    }
    struct stat st; fstat(fd, &st);
    printf("dump %s: n=%zu hash=%016llx st_size=%lld reg=%d\n", name, total, (unsigned long long)h,
           (long long)st.st_size, S_ISREG(st.st_mode));
    close(fd);
}

static void basic(void) {
    int fd; char buf[256];
    F(fd = open(P(0, "a"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    R(write(fd, "hello ", 6));
    R(write(fd, "world\n", 6));
    R(write(fd, "", 0));
    R(read(fd, buf, 10));                         /* EBADF: write-only */
    R(lseek(fd, 0, SEEK_CUR));
    R(fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND));
    R(close(fd));
    F(fd = open(P(0, "a"), O_RDONLY));
    memset(buf, 0, sizeof buf);
    R(read(fd, buf, 100));
    printf("content: %s", buf);
    R(read(fd, buf, 100));                        /* EOF */
    R(write(fd, "x", 1));                         /* EBADF: read-only */
    R(fcntl(fd, F_GETFL) & O_ACCMODE);
    R(close(fd));
    R(close(fd));                                 /* EBADF */
    F(open(P(0, "missing"), O_RDONLY));           /* ENOENT */
    F(open(P(0, "a"), O_CREAT | O_EXCL | O_WRONLY, 0644)); /* EEXIST */
    F(open(P(0, "nodir/x"), O_CREAT | O_WRONLY, 0644));    /* ENOENT */
    F(open(dir, O_WRONLY));                        /* EISDIR */
    F(fd = open(dir, O_RDONLY | O_DIRECTORY));
    R(close(fd));
    dump("a");
}

static void positional(void) {
    int fd; unsigned char buf[20000];
    F(fd = open(P(0, "p"), O_CREAT | O_RDWR | O_TRUNC, 0600));
    R(pwrite(fd, "tail!", 5, 10000));             /* hole [0,10000) */
    R(lseek(fd, 0, SEEK_CUR));
    R(pread(fd, buf, sizeof buf, 0));
    printf("hole hash %016llx\n", (unsigned long long)fnv(buf, 10005));
    R(pread(fd, buf, 10, 20000));                 /* past EOF */
    R(pread(fd, buf, 10, -1));                    /* EINVAL */
    R(pwrite(fd, "abc", 3, -5));                  /* EINVAL */
    R(pwrite(fd, "mid", 3, 5000));
    R(lseek(fd, -3, SEEK_END));
    R(read(fd, buf, 10));
    R(lseek(fd, -1, SEEK_SET));                   /* EINVAL */
    R(lseek(fd, 100, SEEK_SET));
    R(lseek(fd, 50, SEEK_CUR));
    R(lseek(fd, -200, SEEK_CUR));                 /* EINVAL */
    R(lseek(fd, 5, SEEK_END));
    R(lseek(fd, 0, 99));                          /* EINVAL */
    R(write(fd, "Z", 1));                         /* extends with a hole */
    R(lseek(fd, 0, SEEK_END));
    R(close(fd));
    dump("p");
    /* dense file: SEEK_DATA / SEEK_HOLE */
    F(fd = open(P(0, "d"), O_CREAT | O_RDWR | O_TRUNC, 0600));
    memset(buf, 7, 8192);
    R(write(fd, buf, 8192));
    R(lseek(fd, 100, SEEK_DATA));
    R(lseek(fd, 100, SEEK_HOLE));
    R(lseek(fd, 9000, SEEK_DATA));                /* ENXIO */
    R(close(fd));
}

static void append_trunc(void) {
    int fd; char buf[64];
    F(fd = open(P(0, "ap"), O_CREAT | O_WRONLY | O_TRUNC | O_APPEND, 0644));
    R(write(fd, "one\n", 4));
    R(lseek(fd, 0, SEEK_SET));
    R(write(fd, "two\n", 4));                     /* still appends */
    R(lseek(fd, 0, SEEK_CUR));
    R(pwrite(fd, "three\n", 6, 0));               /* Linux: appends */
    R(lseek(fd, 0, SEEK_CUR));
    R(fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND));
    R(fcntl(fd, F_SETFL, 0));
    R(fcntl(fd, F_GETFL) & O_APPEND);
    R(pwrite(fd, "ONE", 3, 0));                   /* now in place */
    R(close(fd));
    dump("ap");
    F(fd = open(P(0, "ap"), O_RDWR | O_TRUNC));
    R(read(fd, buf, 64));
    R(write(fd, "new", 3));
    R(ftruncate(fd, 10));
    R(lseek(fd, 0, SEEK_END));
    R(ftruncate(fd, 2));
    R(ftruncate(fd, -1));                         /* EINVAL */
    R(close(fd));
    dump("ap");
    F(fd = open(P(0, "ap"), O_RDONLY));
    R(ftruncate(fd, 0));                          /* EINVAL: not writable */
    R(close(fd));
    R(truncate(P(0, "ap"), 5));
    R(truncate(P(0, "nothere"), 5));              /* ENOENT */
    dump("ap");
    struct stat st;
    R(stat(P(0, "ap"), &st));
    printf("stat size=%lld reg=%d nlink=%lu mode=%o\n", (long long)st.st_size, S_ISREG(st.st_mode),
           (unsigned long)st.st_nlink, st.st_mode & 0777);
    R(lstat(P(0, "ap"), &st));
    R(stat(P(0, "nothere"), &st));                /* ENOENT */
    R(fstatat(AT_FDCWD, P(0, "ap"), &st, 0));
    struct statx sx;
    R(statx(AT_FDCWD, P(0, "ap"), 0, STATX_BASIC_STATS, &sx));
    printf("statx size=%llu\n", (unsigned long long)sx.stx_size);
    R(access(P(0, "ap"), F_OK));
    R(access(P(0, "ap"), R_OK | W_OK));
    R(access(P(0, "nothere"), F_OK));             /* ENOENT */
    F(fd = open(P(0, "ap"), O_RDWR));
    R(posix_fallocate(fd, 0, 100));
    R(fstat(fd, &st));
    printf("after fallocate size=%lld\n", (long long)st.st_size);
    R(close(fd));
}

static void names(void) {
    int fd, dfd;
    F(fd = open(P(0, "r1"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    R(write(fd, "renamed", 7));
    R(close(fd));
    R(rename(P(0, "r1"), P(1, "r2")));
    R(access(P(0, "r1"), F_OK));                  /* ENOENT */
    dump("r2");
    R(rename(P(0, "r1"), P(1, "r3")));            /* ENOENT */
    R(unlink(P(0, "r2")));
    R(unlink(P(0, "r2")));                        /* ENOENT */
    R(access(P(0, "r2"), F_OK));                  /* ENOENT */
    F(dfd = open(dir, O_RDONLY | O_DIRECTORY));
    F(fd = openat(dfd, "at", O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(write(fd, "via openat", 10));
    R(close(fd));
    struct stat st;
    R(fstatat(dfd, "at", &st, 0));
    printf("fstatat size=%lld\n", (long long)st.st_size);
    R(renameat(dfd, "at", dfd, "at2"));
    R(unlinkat(dfd, "at2", 0));
    R(unlinkat(dfd, "at2", 0));                   /* ENOENT */
    R(close(dfd));
    F(fd = creat(P(0, "cr"), 0644));
    R(write(fd, "creat", 5));
    R(close(fd));
    R(remove(P(0, "cr")));
    R(access(P(0, "cr"), F_OK));                  /* ENOENT */
}

static void fds(void) {
    int fd, fd2; char buf[64];
    F(fd = open(P(0, "dup"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(write(fd, "0123456789", 10));
    F(fd2 = dup(fd));
    R(lseek(fd2, 2, SEEK_SET));
    R(read(fd, buf, 3));                          /* shared offset */
    R(lseek(fd2, 0, SEEK_CUR));
    R(dup2(fd, 20));
    R(read(20, buf, 2));
    R(fcntl(fd, F_DUPFD_CLOEXEC, 30) >= 30);
    R(close(20));
    R(close(fd2));
    struct iovec iov[3] = {{"ab", 2}, {"", 0}, {"cde", 3}};
    R(lseek(fd, 0, SEEK_SET));
    R(writev(fd, iov, 3));
    char x[2], y[4];
    struct iovec in[2] = {{x, 2}, {y, 4}};
    R(lseek(fd, 0, SEEK_SET));
    R(readv(fd, in, 2));
    printf("readv %.2s|%.4s\n", x, y);
    R(preadv(fd, in, 2, 4));
    printf("preadv %.2s|%.4s\n", x, y);
    R(pwritev(fd, iov, 3, 8));
    R(close(fd));
    dump("dup");
    /* fork: the child writes through the inherited descriptor */
    F(fd = open(P(0, "fork"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(write(fd, "parent;", 7));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        write(fd, "child;", 6);
        int c = open(P(1, "forkchild"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        write(c, "made by child", 13);
        close(c);
        _exit(0);
    }
    int status; waitpid(pid, &status, 0);
    R(lseek(fd, 0, SEEK_CUR));                    /* child advanced the shared offset */
    R(write(fd, "parent2", 7));
    R(close(fd));
    dump("fork");
    dump("forkchild");
    /* exec: a shell appends to an inherited descriptor */
    F(fd = open(P(0, "exec"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    R(write(fd, "before\n", 7));
    R(dup2(fd, 3) == 3 || fd == 3);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        char *argv[] = {"sh", "-c", "echo from-exec >&3; echo second >&3", NULL};
        execvp("sh", argv);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    R(WEXITSTATUS(status));
    R(write(fd, "after\n", 6));
    if (fd != 3) close(3);
    R(close(fd));
    dump("exec");
    /* mmap of a buffered file */
    F(fd = open(P(0, "map"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(write(fd, "mapped bytes", 12));
    char *m = mmap(NULL, 12, PROT_READ, MAP_PRIVATE, fd, 0);
    R(m != MAP_FAILED);
    if (m != MAP_FAILED) { printf("mmap: %.12s\n", m); munmap(m, 12); }
    R(close(fd));
}

static void stdio_ops(void) {
    FILE *f; char line[256];
    R((f = fopen(P(0, "s"), "w")) != NULL);
    if (!f) exit(1);
    R(fprintf(f, "line %d\n", 1));
    R(fputs("line two\n", f));
    R(fwrite("raw\n", 1, 4, f));
    R(ftell(f));
    R(fileno(f) >= 0);
    R(fclose(f));
    R((f = fopen(P(0, "s"), "r")) != NULL);
    while (fgets(line, sizeof line, f)) printf("fgets: %s", line);
    R(feof(f) != 0);
    R(ferror(f));
    clearerr(f);
    R(feof(f));
    R(fseek(f, 5, SEEK_SET));
    R(ftell(f));
    R(fgetc(f));
    rewind(f);
    char *gl = NULL; size_t cap = 0;
    R(getline(&gl, &cap, f));
    printf("getline: %s", gl);
    free(gl);
    fpos_t pos;
    R(fgetpos(f, &pos));
    R(fread(line, 1, 4, f));
    R(fsetpos(f, &pos));
    R(fread(line, 1, 4, f));
    R(fseeko(f, -4, SEEK_END));
    R(ftello(f));
    struct stat st;
    R(fstat(fileno(f), &st));
    printf("fstat(fileno) size=%lld\n", (long long)st.st_size);
    R(fclose(f));
    R((f = fopen(P(0, "s"), "a+")) != NULL);
    R(fputs("appended\n", f));
    R(fflush(f));
    R(fseek(f, 0, SEEK_SET));
    R(fread(line, 1, 6, f));
    R(fclose(f));
    R(fopen(P(0, "s"), "wx") == NULL);            /* EEXIST */
    R(fopen(P(0, "nothere"), "r") == NULL);       /* ENOENT */
    R((f = fopen(P(0, "s"), "r+")) != NULL);
    R(fputs("LINE", f));
    R(fclose(f));
    int fd;
    F(fd = open(P(0, "s"), O_RDONLY));
    R((f = fdopen(fd, "r")) != NULL);
    R(fgets(line, sizeof line, f) != NULL);
    printf("fdopen: %s", line);
    R(fclose(f));
    dump("s");
}


/* stdout re-pointed at a tracked file with dup2 and back (bash builtins,
 * programs redirecting themselves): stdio must follow the descriptor */
static void std_redirect(void) {
    int fd, save;
    fflush(stdout);
    F(save = dup(1));
    F(fd = open(P(0, "redir"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    dup2(fd, 1);
    printf("redirected %d\n", 7);
    fputs("via fputs\n", stdout);
    fflush(stdout);
    dup2(save, 1);
    close(save);
    R(close(fd));
    printf("back on the original stdout\n");
    /* close(1) + open: the new file gets descriptor 1 */
    fflush(stdout);
    F(save = dup(1));
    close(1);
    F(fd = open(P(0, "redir2"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    printf("lowest descriptor %d\n", fd);
    fflush(stdout);
    dup2(save, 1);
    close(save);
    dump("redir");
    dump("redir2");
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* names of DIR's entries through readdir, sorted, on one line */
static void list(const char *what, DIR *d) {
    char *names[256]; int n = 0; struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        names[n++] = strdup(e->d_name);
    }
    qsort(names, n, sizeof names[0], cmp_str);
    printf("%s:", what);
    for (int i = 0; i < n; i++) { printf(" %s", names[i]); free(names[i]); }
    printf("\n");
}

static int not_dots(const struct dirent *e) { return strcmp(e->d_name, ".") && strcmp(e->d_name, ".."); }

/* directory listings include files that exist only in the buffer */
static void dirs(void) {
    int fd; DIR *d; struct dirent *e;
    R(mkdir(P(0, "dl"), 0755));
    R(mkdir(P(0, "dl/sub"), 0755));
    const char *files[] = {"dl/f1", "dl/f2", "dl/sub/g", "dl/f3"};
    for (int i = 0; i < 4; i++) {
        F(fd = open(P(0, files[i]), O_CREAT | O_WRONLY | O_TRUNC, 0644));
        R(write(fd, "x", 1));
        R(close(fd));
    }
    R((d = opendir(P(0, "dl"))) != NULL);
    list("readdir", d);
    rewinddir(d);
    list("after rewinddir", d);
    rewinddir(d);
    long start = telldir(d);
    int count = 0;
    while ((e = readdir(d))) count++;
    printf("entries with dots: %d\n", count);
    seekdir(d, start);
    list("after seekdir", d);
    R(closedir(d));
    /* a buffered file's type and inode as readdir reports them */
    R((d = opendir(P(0, "dl"))) != NULL);
    while ((e = readdir(d)))
        if (!strcmp(e->d_name, "f2")) printf("f2: d_type=%d\n", e->d_type);
    R(closedir(d));
    /* readdir_r */
    R((d = opendir(P(0, "dl/sub"))) != NULL);
    struct dirent ent, *res; int n = 0;
    while (readdir_r(d, &ent, &res) == 0 && res)
        if (strcmp(ent.d_name, ".") && strcmp(ent.d_name, "..")) { printf("readdir_r: %s\n", ent.d_name); n++; }
    R(n);
    R(closedir(d));
    /* fdopendir (fts, find, rm -r) */
    int dfd;
    F(dfd = open(P(0, "dl"), O_RDONLY | O_DIRECTORY));
    R((d = fdopendir(dfd)) != NULL);
    list("fdopendir", d);
    R(closedir(d));
    /* scandir (glibc's own readdir loop) */
    struct dirent **nl;
    n = scandir(P(0, "dl"), &nl, not_dots, alphasort);
    R(n);
    for (int i = 0; i < n; i++) { printf("scandir: %s type=%d\n", nl[i]->d_name, nl[i]->d_type); free(nl[i]); }
    if (n >= 0) free(nl);
    /* rmdir of a directory holding only buffered files */
    R(rmdir(P(0, "dl/sub")));                     /* ENOTEMPTY */
    R(unlinkat(AT_FDCWD, P(0, "dl/sub"), AT_REMOVEDIR)); /* ENOTEMPTY */
    R(unlink(P(0, "dl/sub/g")));
    R(rmdir(P(0, "dl/sub")));
    R((d = opendir(P(0, "dl"))) != NULL);
    list("after rmdir", d);
    R(closedir(d));
    R(rename(P(0, "dl/f3"), P(1, "dl/f4")));
    R((d = opendir(P(0, "dl"))) != NULL);
    list("after rename", d);
    R(closedir(d));
    R(unlink(P(0, "dl/f1")));
    R(unlink(P(0, "dl/f2")));
    R(unlink(P(0, "dl/f4")));
    R(rmdir(P(0, "dl")));
    R(opendir(P(0, "dl")) == NULL ? -1 : 0);      /* ENOENT */
}

/* stdout is a tracked file (sh -c 'ops DIR stdout-exit > FILE'): glibc
 * flushes it at exit, through the adapter */
static void stdout_lines(void) {
    for (int i = 0; i < 20000; i++) printf("line %d of stdout\n", i);
    fputs("stderr unbuffered\n", stderr);
    fwrite("partial", 1, 7, stdout);
}

static void print_file(const char *name) {
    char buf[256]; int fd; ssize_t n;
    F(fd = open(P(0, name), O_RDONLY));
    F(n = read(fd, buf, sizeof buf));
    printf("%s: %zd [", name, n);
    for (ssize_t i = 0; i < n; i++) putchar(buf[i] ? buf[i] : '.');
    printf("]\n");
    R(close(fd));
}

/* bytes written around the adapter (raw system calls, as io_uring or a
 * program that is not preloaded would write) fail in the program's own call
 * instead of vanishing; the adapter's writes around them are intact */
static void bypass(void) {
    int fd;
    F(fd = open(P(0, "bypassed"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    R(write(fd, "hello world", 11) == 11 ? 0 : -1);
    long r = syscall(SYS_write, fd, "raw", 3);
    printf("raw write: %ld errno=%s\n", r, r < 0 ? strerror(errno) : "-");
    r = syscall(SYS_pwrite64, fd, "RAW", 3, 6);
    printf("raw pwrite: %ld errno=%s\n", r, r < 0 ? strerror(errno) : "-");
    r = syscall(SYS_ftruncate, fd, 100);
    printf("raw ftruncate: %ld errno=%s\n", r, r < 0 ? strerror(errno) : "-");
    R(fsync(fd));
    R(close(fd));
    print_file("bypassed");
    exit(0);
}

/* chmod and utimes of buffered files */
static void attrs(void) {
    int fd; struct stat st;
    struct timespec ts[2] = {{100, 5}, {200, 7}};
    F(fd = open(P(0, "at"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    R(fchmod(fd, 0600));
    R(fstat(fd, &st));
    printf("fchmod: mode=%o\n", st.st_mode & 07777);
    R(futimens(fd, ts));
    R(fstat(fd, &st));
    printf("futimens: atime=%lld.%ld mtime=%lld.%ld\n", (long long)st.st_atim.tv_sec, st.st_atim.tv_nsec, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    R(close(fd));
    R(chmod(P(0, "at"), 0640));
    R(stat(P(0, "at"), &st));
    printf("chmod: mode=%o\n", st.st_mode & 07777);
    R(fchmodat(AT_FDCWD, P(0, "at"), 0604, 0));
    R(stat(P(0, "at"), &st));
    printf("fchmodat: mode=%o\n", st.st_mode & 07777);
    struct timespec ts2[2] = {{300, 0}, {0, UTIME_OMIT}};
    R(utimensat(AT_FDCWD, P(0, "at"), ts2, 0));
    R(stat(P(0, "at"), &st));
    printf("utimensat: atime=%lld mtime=%lld\n", (long long)st.st_atim.tv_sec, (long long)st.st_mtim.tv_sec);
    struct timeval tv[2] = {{400, 0}, {500, 0}};
    R(utimes(P(0, "at"), tv));
    R(stat(P(0, "at"), &st));
    printf("utimes: atime=%lld mtime=%lld\n", (long long)st.st_atim.tv_sec, (long long)st.st_mtim.tv_sec);
    R(chmod(P(0, "nothere"), 0600));               /* ENOENT */
    R(unlink(P(0, "at")));
}

/* exits without fclose: glibc flushes the stream at exit */
static void exit_unflushed(void) {
    FILE *f = fopen(P(0, "unflushed"), "w");
    fprintf(f, "written at exit %d\n", 42);
    exit(0);
}

/* POSIX AIO (issue 12 item 24: glibc's AIO threads write with internal
 * pwrite calls the adapter never saw, and the data was lost). */
static atomic_int aio_notified;
static sem_t aio_sem;
static void aio_done(union sigval v) { atomic_fetch_add(&aio_notified, v.sival_int); sem_post(&aio_sem); }

static void aio_wait(struct aiocb *cb) {
    const struct aiocb *l[1] = {cb};
    for (int i = 0; i < 100000 && aio_error(cb) == EINPROGRESS; i++) aio_suspend(l, 1, NULL);
}

static void aio_ops(void) {
    enum { N = 8, B = 65536 + 123 };
    static unsigned char blk[N + 4][B];
    static struct aiocb cbs[N + 4];
    int fd;
    F(fd = open(P(0, "aio"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    for (int i = 0; i < N + 4; i++) for (int j = 0; j < B; j++) blk[i][j] = (unsigned char)(i * 31 + j * 7);
    /* strided, last block first, like an MPI file view */
    for (int k = 0; k < N; k++) {
        int i = N - 1 - k;
        memset(&cbs[i], 0, sizeof cbs[i]);
        cbs[i].aio_fildes = fd; cbs[i].aio_buf = blk[i]; cbs[i].aio_nbytes = B;
        cbs[i].aio_offset = (off_t)i * 2 * B; cbs[i].aio_sigevent.sigev_notify = SIGEV_NONE;
        R(aio_write(&cbs[i]));
    }
    for (int i = 0; i < N; i++) { aio_wait(&cbs[i]); R(aio_error(&cbs[i])); R(aio_return(&cbs[i])); }
    /* lio_listio fills the gaps */
    struct aiocb *list[4];
    for (int i = 0; i < 4; i++) {
        struct aiocb *c = &cbs[N + i];
        memset(c, 0, sizeof *c);
        c->aio_fildes = fd; c->aio_buf = blk[N + i]; c->aio_nbytes = B;
        c->aio_offset = (off_t)(2 * i + 1) * B; c->aio_lio_opcode = LIO_WRITE;
        list[i] = c;
    }
    R(lio_listio(LIO_WAIT, list, 4, NULL));
    for (int i = 0; i < 4; i++) R(aio_return(list[i]));
    /* fsync and a thread notification */
    struct aiocb s; memset(&s, 0, sizeof s); s.aio_fildes = fd;
    R(aio_fsync(O_SYNC, &s)); aio_wait(&s); R(aio_error(&s)); R(aio_return(&s));
    sem_init(&aio_sem, 0, 0);
    struct aiocb t; memset(&t, 0, sizeof t);
    t.aio_fildes = fd; t.aio_buf = (void *)"tail"; t.aio_nbytes = 4; t.aio_offset = 20 * B;
    t.aio_sigevent.sigev_notify = SIGEV_THREAD; t.aio_sigevent.sigev_notify_function = aio_done;
    t.aio_sigevent.sigev_value.sival_int = 5;
    R(aio_write(&t));
    sem_wait(&aio_sem);
    R(atomic_load(&aio_notified)); R(aio_return(&t));
    /* read back one block through AIO */
    static unsigned char back[B];
    struct aiocb r; memset(&r, 0, sizeof r);
    r.aio_fildes = fd; r.aio_buf = back; r.aio_nbytes = B; r.aio_offset = 3 * 2 * B;
    R(aio_read(&r)); aio_wait(&r); R(aio_return(&r));
    R(memcmp(back, blk[3], B));
    R(aio_cancel(fd, NULL));
    R(close(fd));
    dump("aio");
}

/* Bad path pointers: EFAULT from every call, never a crash inside the
 * adapter (issue 12 item 22). */
static void bad_pointers(void) {
    const char *bad = (const char *)-1;
    const char *low = (const char *)16;
    R(open(bad, O_RDONLY));
    R(open(low, O_CREAT | O_WRONLY, 0644));
    R(unlink(bad));
    R(rmdir(bad));
    R(truncate(bad, 10));
    R(chmod(bad, 0644));
    R(rename(bad, P(0, "x")));
    R(rename(P(0, "x"), bad));
    R(mkdir(bad, 0755));
    struct stat st;
    R(stat(bad, &st));
    R(access(low, F_OK));
    /* NULL, an address in range but unmapped (pjdfstest's 0xdeadc0de), and a
     * string that runs off a mapped page into an unmapped one */
    char *two = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (two == MAP_FAILED) return;
    munmap(two + 4096, 4096);
    memset(two, 'a', 4096);
    const char *gone = two + 4096, *off_end = two + 4090;
    const char *ptrs[] = {NULL, (const char *)0xdeadc0deUL, gone, off_end};
    for (int i = 0; i < 4; i++) {
        const char *b = ptrs[i];
        printf("pointer %d\n", i);
        R(open(b, O_RDONLY));
        R(open(b, O_CREAT | O_WRONLY, 0644));
        R(unlink(b));
        R(rmdir(b));
        R(truncate(b, 10));
        R(chmod(b, 0644));
        R(chown(b, 0, 0));
        R(rename(b, P(0, "x")));
        R(rename(P(0, "x"), b));
        R(mkdir(b, 0755));
        R(stat(b, &st));
        R(lstat(b, &st));
        R(utimensat(AT_FDCWD, b, NULL, 0));
        R(link(b, P(0, "y")));
        R(symlink(P(0, "x"), b));
        R(access(b, F_OK));
    }
    munmap(two, 4096);
}

/* a path through a file that exists only in the buffer is ENOTDIR, as the
 * kernel says with the file there (was ENOENT); a directory never replaces
 * a buffered file (the kernel alone would let it shadow the file) */
static void through_files(void) {
    int fd; struct stat st;
    F(fd = open(P(0, "tf"), O_CREAT | O_WRONLY | O_TRUNC, 0644));
    R(write(fd, "keep", 4));
    R(close(fd));
    R(open(P(0, "tf/x"), O_RDONLY));
    R(open(P(0, "tf/x"), O_CREAT | O_WRONLY, 0644));
    R(mkdir(P(0, "tf/x"), 0755));
    R(mkfifo(P(0, "tf/x"), 0644));
    R(stat(P(0, "tf/x"), &st));
    R(lstat(P(0, "tf/x/y"), &st));
    R(access(P(0, "tf/x"), F_OK));
    R(unlink(P(0, "tf/x")));
    R(rmdir(P(0, "tf/x")));
    R(chmod(P(0, "tf/x"), 0600));
    R(truncate(P(0, "tf/x"), 0));
    R(rename(P(0, "tf/x"), P(1, "y")));
    R(rename(P(0, "tf"), P(1, "tf/y")));
    R(link(P(0, "tf"), P(1, "tf/y")));
    R(symlink("tf", P(0, "tf/y")));
    R(mkdir(P(0, "td"), 0755));
    R(rename(P(0, "td"), P(1, "tf")));
    R(lstat(P(0, "tf"), &st));
    printf("tf: regular=%d size=%lld\n", S_ISREG(st.st_mode), (long long)st.st_size);
    R(lstat(P(0, "td"), &st));
    printf("td: dir=%d\n", S_ISDIR(st.st_mode));
    R(rmdir(P(0, "td")));
    R(unlink(P(0, "tf")));
}

int main(int argc, char **argv) {
    snprintf(dir, sizeof dir, "%s", argv[1]);
    const char *s = argc > 2 ? argv[2] : "all";
    if (!strcmp(s, "stdout-exit")) { stdout_lines(); exit(0); }
    if (!strcmp(s, "stdout-return")) { stdout_lines(); return 0; }
    if (!strcmp(s, "bypass")) bypass();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(s, "exit")) exit_unflushed();
    if (!strcmp(s, "dump")) { dump(argv[3]); return 0; }
    if (!strcmp(s, "all") || !strcmp(s, "basic")) basic();
    if (!strcmp(s, "all") || !strcmp(s, "positional")) positional();
    if (!strcmp(s, "all") || !strcmp(s, "append")) append_trunc();
    if (!strcmp(s, "all") || !strcmp(s, "names")) names();
    if (!strcmp(s, "all") || !strcmp(s, "fds")) fds();
    if (!strcmp(s, "all") || !strcmp(s, "stdio")) stdio_ops();
    if (!strcmp(s, "all") || !strcmp(s, "redirect")) std_redirect();
    if (!strcmp(s, "all") || !strcmp(s, "dirs")) dirs();
    if (!strcmp(s, "all") || !strcmp(s, "attrs")) attrs();
    if (!strcmp(s, "all") || !strcmp(s, "aio")) aio_ops();
    if (!strcmp(s, "all") || !strcmp(s, "badptr")) bad_pointers();
    if (!strcmp(s, "all") || !strcmp(s, "through")) through_files();
    return 0;
}
