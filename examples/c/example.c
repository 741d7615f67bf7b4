/*
 * example.c — a tour of the strata C API.
 *
 *   make -C examples/c && ./examples/c/example [/path/to/daemon.sock]
 *
 * Without an argument it connects to the default socket ($STRATA_SOCKET or
 * the configured one). Exits 0 only if every check passed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata.h"

static int failures = 0;

/* Reports a call's outcome; counts it as a failure unless it returned `want`. */
static int check_rc(const char *what, int rc, int want) {
    if (rc == want) {
        printf("ok   %s\n", what);
        return 1;
    }
    printf("FAIL %s: got %d (%s: %s), want %d (%s)\n  detail: %s\n", what, rc, strata_error_name(rc), strata_strerror(rc),
           want, strata_error_name(want), strata_last_error_message());
    failures++;
    return 0;
}

static void check(const char *what, int cond) {
    printf("%s %s\n", cond ? "ok  " : "FAIL", what);
    if (!cond) failures++;
}

struct listing {
    int count;
    char names[16][64];
};

static int collect(const char *name, void *ctx) {
    struct listing *l = ctx;
    if (l->count < 16) {
        snprintf(l->names[l->count], sizeof l->names[0], "%s", name);
    }
    l->count++;
    return 0;
}

static int stop_after_one(const char *name, void *ctx) {
    (void)name;
    (*(int *)ctx)++;
    return 1;
}

int main(int argc, char **argv) {
    const char *socket = argc > 1 ? argv[1] : NULL;
    strata_client *client = NULL;
    strata_bucket *bucket = NULL;

    int rc = strata_connect(socket, &client);
    if (rc != STRATA_OK) {
        fprintf(stderr, "cannot connect: %s (%s)\n", strata_strerror(rc), strata_last_error_message());
        return 2;
    }
    printf("connected to %s\n", socket ? socket : "the default socket");

    /* A leftover from an earlier failed run would make EXCL fail: start clean. */
    if (strata_bucket_open(client, "c-example", 0, &bucket) == STRATA_OK) {
        strata_bucket_destroy(bucket);
    }
    if (!check_rc("create bucket c-example", strata_bucket_open(client, "c-example", STRATA_CREATE | STRATA_EXCL, &bucket), STRATA_OK)) {
        strata_disconnect(client);
        return 1;
    }
    check_rc("tag bucket", strata_bucket_tag(bucket, "owner", "example.c"), STRATA_OK);

    /* Small blobs. */
    const char *hello = "hello, strata";
    check_rc("put hello", strata_put(bucket, "hello", hello, strlen(hello)), STRATA_OK);
    check_rc("put empty", strata_put(bucket, "empty", NULL, 0), STRATA_OK);

    char small[64];
    size_t len = 0;
    check_rc("get hello", strata_get(bucket, "hello", small, sizeof small, &len), STRATA_OK);
    check("hello round-trips", len == strlen(hello) && memcmp(small, hello, len) == 0);

    /* Too small a buffer: ERANGE, required size reported. */
    len = 0;
    check_rc("get hello into 4 bytes -> ERANGE", strata_get(bucket, "hello", small, 4, &len), -STRATA_ERANGE);
    check("ERANGE reports the required size", len == strlen(hello));

    check_rc("get empty", strata_get(bucket, "empty", NULL, 0, &len), STRATA_OK);
    check("empty blob has length 0", len == 0);

    /* A 4 MiB blob with a pattern (bigger than one lease: written in pieces). */
    size_t big_len = 4u << 20;
    unsigned char *big = malloc(big_len);
    unsigned char *back = malloc(big_len);
    if (!big || !back) {
        fprintf(stderr, "out of memory\n");
        return 2;
    }
    for (size_t i = 0; i < big_len; i++) big[i] = (unsigned char)((i * 31u + (i >> 12)) & 0xff);
    check_rc("put big (4 MiB)", strata_put(bucket, "big", big, big_len), STRATA_OK);
    memset(back, 0, big_len);
    check_rc("get big", strata_get(bucket, "big", back, big_len, &len), STRATA_OK);
    check("big round-trips (memcmp)", len == big_len && memcmp(big, back, big_len) == 0);

    void *copy = NULL;
    size_t copy_len = 0;
    check_rc("get_alloc big", strata_get_alloc(bucket, "big", &copy, &copy_len), STRATA_OK);
    check("get_alloc matches", copy != NULL && copy_len == big_len && memcmp(copy, big, big_len) == 0);
    strata_free(copy);

    /* Partial writes and reads. */
    uint64_t new_size = 0;
    check_rc("put_at big[1 MiB] = \"PATCH\"", strata_put_at(bucket, "big", 1u << 20, "PATCH", 5, &new_size), STRATA_OK);
    check("put_at keeps the size", new_size == big_len);
    size_t got = 0;
    char patch[16];
    check_rc("get_at big[1 MiB - 2 .. +9]", strata_get_at(bucket, "big", (1u << 20) - 2, patch, 9, &got), STRATA_OK);
    check("get_at sees the patch", got == 9 && memcmp(patch, big + (1u << 20) - 2, 2) == 0 && memcmp(patch + 2, "PATCH", 5) == 0 &&
                                       memcmp(patch + 7, big + (1u << 20) + 5, 2) == 0);
    check_rc("get_at at the end of big", strata_get_at(bucket, "big", big_len - 3, patch, sizeof patch, &got), STRATA_OK);
    check("get_at is short at the end", got == 3);
    check_rc("put_at sparse[10] = \"xyz\"", strata_put_at(bucket, "sparse", 10, "xyz", 3, &new_size), STRATA_OK);
    check("sparse is 13 bytes", new_size == 13);
    check_rc("get sparse", strata_get(bucket, "sparse", small, sizeof small, &len), STRATA_OK);
    check("sparse gap reads as zeros", len == 13 && small[0] == 0 && small[9] == 0 && memcmp(small + 10, "xyz", 3) == 0);

    /* Append. */
    check_rc("append log 1", strata_append(bucket, "log", "line 1\n", 7, NULL), STRATA_OK);
    check_rc("append log 2", strata_append(bucket, "log", "line 2\n", 7, &new_size), STRATA_OK);
    check("append grows the blob", new_size == 14);
    check_rc("get log", strata_get(bucket, "log", small, sizeof small, &len), STRATA_OK);
    check("log holds both lines", len == 14 && memcmp(small, "line 1\nline 2\n", 14) == 0);

    /* Scores, rename, exists, size. */
    check_rc("set_score big 0.9 stationary", strata_set_score(bucket, "big", 0.9f, 1), STRATA_OK);
    strata_blob_stat st;
    check_rc("stat big", strata_stat(bucket, "big", &st), STRATA_OK);
    check("stat: size, user score, stationary, score = user score, on some tier",
          st.size == big_len && st.user_score == 0.9f && st.stationary == 1 && st.score == 0.9f && st.tier_mask != 0 && st.access_count >= 2);
    check_rc("clear score of big", strata_set_score(bucket, "big", STRATA_SCORE_NONE, 0), STRATA_OK);
    check_rc("stat big again", strata_stat(bucket, "big", &st), STRATA_OK);
    check("cleared: no user score, not stationary, organizer score in [0, 1]", isnan(st.user_score) && st.stationary == 0 && st.score >= 0.0f && st.score <= 1.0f);
    check_rc("stat of a missing blob", strata_stat(bucket, "nope", &st), -STRATA_ENOBLOB);
    check_rc("rename hello -> greeting", strata_rename(bucket, "hello", "greeting", 0), STRATA_OK);
    check_rc("rename log -> greeting without replace -> EEXIST", strata_rename(bucket, "log", "greeting", 0), -STRATA_EEXIST);
    int exists = -1;
    check_rc("exists greeting", strata_exists(bucket, "greeting", &exists), STRATA_OK);
    check("greeting exists", exists == 1);
    check_rc("exists hello", strata_exists(bucket, "hello", &exists), STRATA_OK);
    check("hello is gone", exists == 0);
    uint64_t size = 0;
    check_rc("blob_size big", strata_blob_size(bucket, "big", &size), STRATA_OK);
    check("big is 4 MiB", size == big_len);

    /* Listing. */
    struct listing l = {0};
    check_rc("list blobs", strata_blob_list(bucket, collect, &l), STRATA_OK);
    printf("blobs:");
    for (int i = 0; i < l.count && i < 16; i++) printf(" %s", l.names[i]);
    printf("\n");
    check("5 blobs listed (big empty greeting log sparse)",
          l.count == 5 && strcmp(l.names[0], "big") == 0 && strcmp(l.names[1], "empty") == 0 && strcmp(l.names[2], "greeting") == 0 &&
              strcmp(l.names[3], "log") == 0 && strcmp(l.names[4], "sparse") == 0);
    int calls = 0;
    check_rc("list stops when the callback says so", strata_blob_list(bucket, stop_after_one, &calls), STRATA_OK);
    check("callback ran once", calls == 1);
    uint64_t bytes = 0, blobs = 0;
    check_rc("bucket_size", strata_bucket_size(bucket, &bytes, &blobs), STRATA_OK);
    printf("bucket c-example: %llu bytes in %llu blobs\n", (unsigned long long)bytes, (unsigned long long)blobs);
    check("bucket counts 5 blobs", blobs == 5 && bytes == big_len + 13 + 13 + 14);
    struct listing bl = {0};
    check_rc("list buckets", strata_bucket_list(client, collect, &bl), STRATA_OK);
    int seen = 0;
    for (int i = 0; i < bl.count && i < 16; i++) seen |= strcmp(bl.names[i], "c-example") == 0;
    check("c-example is among the buckets", seen);

    /* Delete, and a deliberate error. */
    check_rc("delete greeting", strata_delete(bucket, "greeting"), STRATA_OK);
    rc = strata_get(bucket, "greeting", small, sizeof small, &len);
    printf("get of a deleted blob: %d = -%s: %s (%s)\n", rc, strata_error_name(rc), strata_strerror(rc), strata_last_error_message());
    check_rc("get deleted blob -> ENOBLOB", rc, -STRATA_ENOBLOB);
    check_rc("delete it again -> ENOBLOB", strata_delete(bucket, "greeting"), -STRATA_ENOBLOB);

    /* Clean up. */
    check_rc("destroy bucket", strata_bucket_destroy(bucket), STRATA_OK);
    check_rc("bucket is gone", strata_bucket_open(client, "c-example", 0, &bucket), -STRATA_ENOBUCKET);
    check("failed open leaves NULL", bucket == NULL);
    strata_disconnect(client);
    free(big);
    free(back);

    if (failures) {
        printf("%d check(s) FAILED\n", failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}
