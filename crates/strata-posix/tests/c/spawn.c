/* Threads, vfork and posix_spawn through the adapter (tests/adapter.rs runs
 * it under LD_PRELOAD with DIR tracked). Every check reads back through the
 * adapter; prints "ok <case>" per case, exits non-zero on the first failure.
 *   spawn DIR
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static const char *dir;

#define CHECK(c, what)                                                        \
    do {                                                                      \
        if (!(c)) {                                                           \
            fprintf(stderr, "FAILED %s: %s (errno %d)\n", what, #c, errno);   \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

/* Per thread: the workers call it concurrently (a shared ring let two
 * threads get one buffer, and one of them opened the other's file). */
static char *pth(const char *name) {
    static __thread char buf[8][4096];
    static __thread int i;
    char *b = buf[i++ % 8];
    snprintf(b, 4096, "%s/%s", dir, name);
    return b;
}

enum { THREADS = 4, WRITES = 64, CHUNK = 4096 };
static int shared_fd;

static void fill(unsigned char *b, int t, int k) {
    for (int j = 0; j < CHUNK; j++) b[j] = (unsigned char)(t * 31 + k * 7 + j);
}

/* Each thread: disjoint pwrites into one shared file, plus a private file
 * opened, written, closed and re-read. */
static void *worker(void *arg) {
    int t = (int)(long)arg;
    unsigned char b[CHUNK], r[CHUNK];
    char name[64];
    snprintf(name, sizeof name, "thread.%d", t);
    for (int k = 0; k < WRITES; k++) {
        fill(b, t, k);
        off_t off = ((off_t)k * THREADS + t) * CHUNK;
        CHECK(pwrite(shared_fd, b, CHUNK, off) == CHUNK, "thread pwrite");
        int fd = open(pth(name), O_CREAT | O_WRONLY | O_APPEND, 0644);
        CHECK(fd >= 0, "thread open");
        CHECK(write(fd, b, CHUNK) == CHUNK, "thread append");
        CHECK(close(fd) == 0, "thread close");
    }
    int fd = open(pth(name), O_RDONLY);
    CHECK(fd >= 0, "thread reopen");
    for (int k = 0; k < WRITES; k++) {
        fill(b, t, k);
        CHECK(read(fd, r, CHUNK) == CHUNK && memcmp(b, r, CHUNK) == 0, "thread read back");
    }
    CHECK(close(fd) == 0, "thread close 2");
    return NULL;
}

static void threads(void) {
    shared_fd = open(pth("shared"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(shared_fd >= 0, "open shared");
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0, "pthread_create");
    for (int t = 0; t < THREADS; t++) CHECK(pthread_join(th[t], NULL) == 0, "pthread_join");
    struct stat st;
    CHECK(fstat(shared_fd, &st) == 0 && st.st_size == (off_t)THREADS * WRITES * CHUNK, "shared size");
    unsigned char b[CHUNK], r[CHUNK];
    for (int k = 0; k < WRITES; k++)
        for (int t = 0; t < THREADS; t++) {
            fill(b, t, k);
            CHECK(pread(shared_fd, r, CHUNK, ((off_t)k * THREADS + t) * CHUNK) == CHUNK && memcmp(b, r, CHUNK) == 0, "shared read back");
        }
    CHECK(close(shared_fd) == 0, "close shared");
    printf("ok threads\n");
}

static void expect_file(const char *path, const char *want, const char *what) {
    char got[256] = {0};
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0, what);
    ssize_t n = read(fd, got, sizeof got - 1);
    close(fd);
    if (n != (ssize_t)strlen(want) || memcmp(got, want, n) != 0) {
        fprintf(stderr, "FAILED %s: got %zd bytes \"%s\", want \"%s\"\n", what, n, got, want);
        exit(1);
    }
}

/* posix_spawn of `cat IN` with stdout on a tracked file opened by the
 * parent (inherited placeholder), and of `sh -c` writing a tracked path. */
static void spawn(void) {
    int in = open(pth("spawn.in"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(in >= 0 && write(in, "spawned bytes\n", 14) == 14 && close(in) == 0, "write spawn.in");
    int out = open(pth("spawn.out"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(out >= 0, "open spawn.out");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    char *argv1[] = {"cat", pth("spawn.in"), NULL};
    pid_t pid;
    CHECK(posix_spawnp(&pid, "cat", &fa, NULL, argv1, environ) == 0, "posix_spawnp cat");
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "cat exit");
    posix_spawn_file_actions_destroy(&fa);
    CHECK(close(out) == 0, "close spawn.out");
    expect_file(pth("spawn.out"), "spawned bytes\n", "spawn.out");
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "printf 'from sh\\n' > %s", pth("spawn.sh"));
    char *argv2[] = {"sh", "-c", cmd, NULL};
    CHECK(posix_spawnp(&pid, "sh", NULL, NULL, argv2, environ) == 0, "posix_spawnp sh");
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "sh exit");
    expect_file(pth("spawn.sh"), "from sh\n", "spawn.sh");
    printf("ok posix_spawn\n");
}

/* vfork: the child only dup2s an inherited tracked descriptor onto stdout
 * and execs; the parent then reads what the new program wrote. */
static void vfork_exec(void) {
    int out = open(pth("vfork.out"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(out >= 0, "open vfork.out");
    pid_t pid = vfork();
    if (pid == 0) {
        dup2(out, 1);
        execlp("echo", "echo", "from vfork", (char *)NULL);
        _exit(127);
    }
    CHECK(pid > 0, "vfork");
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "vfork child exit");
    CHECK(close(out) == 0, "close vfork.out");
    expect_file(pth("vfork.out"), "from vfork\n", "vfork.out");
    printf("ok vfork\n");
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: spawn DIR");
    dir = argv[1];
    setvbuf(stdout, NULL, _IONBF, 0);
    threads();
    spawn();
    vfork_exec();
    return 0;
}
