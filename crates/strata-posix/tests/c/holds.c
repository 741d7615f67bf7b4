/* Unlink-while-open and remove through the adapter (tests/adapter.rs runs
 * it under LD_PRELOAD with the directory tracked).
 *   holds DIR same        unlink of an open file in one process (and a dup)
 *   holds DIR fork        a forked child keeps reading after the parent
 *                         unlinked and closed the file
 *   holds DIR hold        open, write, unlink; "ready" on stdout, wait for a
 *                         line on stdin; close; "closed", wait for a line
 *   holds DIR create NAME create NAME with "buffered\n"
 *   holds DIR sync NAME   create NAME with "durable\n" and fsync it
 *   holds DIR rm NAME     unlink NAME; prints "unlink=R errno=E"
 *   holds DIR readclose NAME  open NAME read-only, read it, close it; prints
 *                         "read=N open=M": M descriptors of this process
 *                         still open on NAME (/proc/self/fd)
 * Exits 1 with a message on the first unexpected result. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

static char dir[4096];

static const char *pth(const char *name) {
    static char buf[2][4200];
    static int i;
    i ^= 1;
    snprintf(buf[i], sizeof buf[i], "%s/%s", dir, name);
    return buf[i];
}

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "line %d: %s: ", __LINE__, #cond);                    \
            fprintf(stderr, __VA_ARGS__);                                         \
            fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno));          \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

/* pread of the whole content at offset 0 equals `want`. */
static void expect(int fd, const char *want, const char *what) {
    char buf[256] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    CHECK(n == (ssize_t)strlen(want) && memcmp(buf, want, n) == 0, "%s: read %zd bytes '%s', want '%s'", what, n, n > 0 ? buf : "", want);
}

static void put(const char *name, const char *content) {
    int fd = open(pth(name), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0, "create %s", name);
    CHECK(write(fd, content, strlen(content)) == (ssize_t)strlen(content), "write %s", name);
    CHECK(close(fd) == 0, "close %s", name);
}

static void same(void) {
    int fd = open(pth("f"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(fd >= 0, "open");
    CHECK(write(fd, "hello world", 11) == 11, "write");
    int fd2 = dup(fd);
    CHECK(fd2 >= 0, "dup");
    CHECK(unlink(pth("f")) == 0, "unlink of an open file");
    struct stat st;
    CHECK(stat(pth("f"), &st) == -1 && errno == ENOENT, "stat after unlink");
    CHECK(open(pth("f"), O_RDONLY) == -1 && errno == ENOENT, "open after unlink");
    expect(fd, "hello world", "pread after unlink");
    /* the name is free: a new file there is a different file */
    put("f", "new");
    expect(fd, "hello world", "pread after re-create");
    CHECK(pwrite(fd, "!!", 2, 11) == 2, "pwrite after unlink");
    CHECK(fstat(fd, &st) == 0 && st.st_size == 13, "fstat after unlink: size %lld", (long long)st.st_size);
    CHECK(close(fd) == 0, "close");
    expect(fd2, "hello world!!", "pread through the dup after the first close");
    CHECK(close(fd2) == 0, "close dup");
    int f3 = open(pth("f"), O_RDONLY);
    CHECK(f3 >= 0, "open re-created");
    expect(f3, "new", "re-created file");
    close(f3);
    CHECK(unlink(pth("f")) == 0, "unlink re-created");
    printf("same ok\n");
}

static void fork_case(void) {
    int fd = open(pth("g"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(fd >= 0, "open");
    CHECK(write(fd, "parent data", 11) == 11, "write");
    int up[2], down[2];
    CHECK(pipe(up) == 0 && pipe(down) == 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    char c;
    if (pid == 0) {
        /* first use of the inherited descriptor: the child holds the file */
        expect(fd, "parent data", "child: first read");
        CHECK(write(up[1], "1", 1) == 1, "child: signal");
        CHECK(read(down[0], &c, 1) == 1, "child: wait");
        /* the parent has unlinked the file and closed its descriptor */
        expect(fd, "parent data", "child: read after the parent unlinked and closed");
        CHECK(pwrite(fd, " + child", 8, 11) == 8, "child: pwrite");
        expect(fd, "parent data + child", "child: read back");
        CHECK(close(fd) == 0, "child: close");
        _exit(0);
    }
    CHECK(read(up[0], &c, 1) == 1, "parent: wait");
    CHECK(unlink(pth("g")) == 0, "parent: unlink");
    CHECK(close(fd) == 0, "parent: close");
    CHECK(write(down[1], "2", 1) == 1, "parent: signal");
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status %d)", status);
    struct stat st;
    CHECK(stat(pth("g"), &st) == -1 && errno == ENOENT, "stat after unlink");
    printf("fork ok\n");
}

static void wait_line(void) {
    char line[64];
    CHECK(fgets(line, sizeof line, stdin) != NULL, "stdin");
}

static void hold(void) {
    int fd = open(pth("h"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(fd >= 0, "open");
    CHECK(write(fd, "held bytes", 10) == 10, "write");
    CHECK(unlink(pth("h")) == 0, "unlink");
    printf("ready\n");
    fflush(stdout);
    wait_line();
    expect(fd, "held bytes", "read after unlink");
    CHECK(close(fd) == 0, "close");
    /* close notifies the daemon without waiting; any later request of this
     * thread is ordered after it (a stat of the now absent name is one). */
    struct stat st;
    CHECK(stat(pth("h"), &st) != 0, "stat after close");
    printf("closed\n");
    fflush(stdout);
    wait_line();
}

static void read_close(const char *name) {
    char buf[4096];
    int fd = open(pth(name), O_RDONLY);
    CHECK(fd >= 0, "open");
    ssize_t n = read(fd, buf, sizeof buf);
    CHECK(n >= 0, "read");
    CHECK(close(fd) == 0, "close");
    int open_on_name = 0;
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL, "opendir /proc/self/fd");
    struct dirent *e;
    char link[4200], target[4200];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t l = readlink(link, target, sizeof target - 1);
        if (l <= 0) continue;
        target[l] = 0;
        if (!strcmp(target, pth(name))) open_on_name++;
    }
    closedir(d);
    printf("read=%zd open=%d\n", n, open_on_name);
}

int main(int argc, char **argv) {
    CHECK(argc >= 3, "usage: holds DIR CASE [NAME]");
    snprintf(dir, sizeof dir, "%s", argv[1]);
    const char *c = argv[2];
    if (!strcmp(c, "same")) same();
    else if (!strcmp(c, "fork")) fork_case();
    else if (!strcmp(c, "hold")) hold();
    else if (!strcmp(c, "create") && argc > 3) put(argv[3], "buffered\n");
    else if (!strcmp(c, "sync") && argc > 3) {
        int fd = open(pth(argv[3]), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        CHECK(fd >= 0, "create");
        CHECK(write(fd, "durable\n", 8) == 8, "write");
        CHECK(fsync(fd) == 0, "fsync");
        CHECK(close(fd) == 0, "close");
    } else if (!strcmp(c, "readclose") && argc > 3) {
        read_close(argv[3]);
    } else if (!strcmp(c, "rm") && argc > 3) {
        errno = 0;
        int r = unlink(pth(argv[3]));
        printf("unlink=%d errno=%d\n", r, r ? errno : 0);
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    return 0;
}
