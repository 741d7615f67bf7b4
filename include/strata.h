/*
 * strata.h — the C API of strata, a multi-tier I/O buffering daemon.
 *
 * Link with -lstrata (libstrata.so, built by `cargo build -p strata-capi`).
 *
 * Conventions:
 *   - Every int-returning function returns STRATA_OK (0) on success and a
 *     NEGATIVE error code on failure: -STRATA_ENOBLOB, -STRATA_EINVAL, ...
 *     strata_strerror() / strata_error_name() accept either sign, and
 *     strata_last_error_message() gives this thread's detail of the last failure.
 *   - NULL handles/pointers are rejected with -STRATA_EINVAL, names that are
 *     empty or not UTF-8 with -STRATA_ENAME. No call aborts the process on
 *     such misuse; using a handle after closing it is undefined behaviour.
 *   - Handles are owned by the caller and freed exactly once: a client by
 *     strata_disconnect, a bucket by strata_bucket_close or strata_bucket_destroy.
 *     A bucket keeps its connection alive, so the order does not matter.
 *   - Handles may be used from several threads at once, except that a
 *     close/destroy/disconnect must not race other calls on the same handle.
 *   - Not (yet) in the C API: asynchronous put/get, reading
 *     tags, placement overrides, daemon status/control requests.
 */
#ifndef STRATA_H
#define STRATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Error codes: functions return their negation (e.g. -STRATA_ENOBLOB).
 * The numbers are stable and equal strata_proto::Errno::code(). */
#define STRATA_OK 0          /* success */
#define STRATA_EINVAL 1      /* invalid argument (NULL pointer, bad flags, ...) */
#define STRATA_ENOBUCKET 2   /* no such bucket */
#define STRATA_ENOBLOB 3     /* no such blob */
#define STRATA_EEXIST 4      /* already exists */
#define STRATA_ENAME 5       /* name empty, too long or not UTF-8 */
#define STRATA_ELIMIT 6      /* a metadata limit was reached */
#define STRATA_EMALFORMED 7  /* request malformed */
#define STRATA_ENODAEMON 8   /* daemon unreachable */
#define STRATA_EVERSION 9    /* protocol version mismatch */
#define STRATA_EIO 10        /* I/O error on a tier */
#define STRATA_ENOSPC 11     /* out of space on every tier */
#define STRATA_EBUSY 12      /* too many in-flight requests or channels */
#define STRATA_ERANGE 13     /* buffer too small */
#define STRATA_ESHUTDOWN 14  /* daemon is shutting down */
#define STRATA_EINTERNAL 15  /* internal error (including a caught panic) */
#define STRATA_ENOTEMPTY 16  /* bucket not empty */
#define STRATA_ETIMEDOUT 17  /* operation timed out */
#define STRATA_ENOFILE 18    /* no such file (file model of the adapters) */
#define STRATA_ENEEDDEST 19  /* internal to the file protocol */
#define STRATA_ENEEDFILL 20  /* internal to the file protocol */
#define STRATA_EISDIR 21     /* is a directory */
#define STRATA_EWRITETHROUGH 22 /* internal to the file protocol: buffer full, write to the destination */
#define STRATA_ENOTDURABLE 23 /* flush(durable) impossible: no non-volatile tier (journal) */
#define STRATA_EPERM 24      /* permission denied: the daemon belongs to another user */
#define STRATA_ETOOBIG 25    /* size beyond the configured maximum (metadata.blob_size_max) */
#define STRATA_ESTALE 26     /* internal: the record must be revalidated against the destination */
#define STRATA_ENODEDOWN 27  /* a cluster node that holds the data is down or unreachable */
#define STRATA_EQUOTA    28  /* over quota: the bucket or path prefix holds its configured limit */

/* ---- strata_bucket_open flags. */
#define STRATA_CREATE 1 /* create the bucket if it does not exist */
#define STRATA_EXCL 2   /* with STRATA_CREATE: fail with -STRATA_EEXIST if it exists */

/* ---- Opaque handles. */
typedef struct strata_client strata_client;
typedef struct strata_bucket strata_bucket;

/* List callback: called once per name; return nonzero to stop the listing. */
typedef int (*strata_name_cb)(const char *name, void *ctx);

/* ---- Errors. */

/* Static description of an error code (either sign); "unknown error" if unknown. */
const char *strata_strerror(int code);
/* Static identifier of an error code (either sign), e.g. "STRATA_ENOBLOB"; "STRATA_EUNKNOWN" if unknown. */
const char *strata_error_name(int code);
/* Detail of this thread's last failed call ("" if none); valid until its next failure. */
const char *strata_last_error_message(void);

/* ---- Connection. */

/* Connects to the daemon at socket (NULL or "" → $STRATA_SOCKET or the configured default); *out is NULL on failure. */
int strata_connect(const char *socket_or_null, strata_client **out);
/* Frees a client handle (NULL is a no-op); open buckets stay usable. */
void strata_disconnect(strata_client *client);

/* ---- Buckets. */

/* Opens bucket name; flags 0 (must exist), STRATA_CREATE, or STRATA_CREATE|STRATA_EXCL; *out is NULL on failure. */
int strata_bucket_open(strata_client *client, const char *name, int flags, strata_bucket **out);
/* Frees a bucket handle; the bucket and its blobs stay (NULL is a no-op). */
void strata_bucket_close(strata_bucket *bucket);
/* Destroys the bucket and all its blobs, and frees the handle (also when it fails). */
int strata_bucket_destroy(strata_bucket *bucket);
/* Total bytes and number of blobs in the bucket. */
int strata_bucket_size(strata_bucket *bucket, uint64_t *bytes, uint64_t *blobs);
/* Renames the bucket. */
int strata_bucket_rename(strata_bucket *bucket, const char *new_name);
/* Sets tag key to value on the bucket (an empty value removes the tag). */
int strata_bucket_tag(strata_bucket *bucket, const char *key, const char *value);
/* Calls cb(name, ctx) for every bucket until cb returns nonzero. */
int strata_bucket_list(strata_client *client, strata_name_cb cb, void *ctx);

/* ---- Blobs. */

/* Stores len bytes from data as blob name, replacing it (data may be NULL if len is 0). */
int strata_put(strata_bucket *bucket, const char *name, const void *data, size_t len);
/* Writes len bytes at byte offset of blob name (created if missing, gaps read as zeros); new size to *new_size_or_null. */
int strata_put_at(strata_bucket *bucket, const char *name, uint64_t offset, const void *data, size_t len, uint64_t *new_size_or_null);
/* Appends len bytes to blob name (created if missing); new size to *new_size_or_null. */
int strata_append(strata_bucket *bucket, const char *name, const void *data, size_t len, uint64_t *new_size_or_null);
/* Copies the whole blob into buf; if cap is too small returns -STRATA_ERANGE, copies nothing and sets *len_out to the size needed. */
int strata_get(strata_bucket *bucket, const char *name, void *buf, size_t cap, size_t *len_out);
/* Reads up to cap bytes from byte offset into buf; *got is short at the end of the blob. */
int strata_get_at(strata_bucket *bucket, const char *name, uint64_t offset, void *buf, size_t cap, size_t *got);
/* Returns the whole blob in a new buffer *data of *len bytes (never NULL on success); free it with strata_free. */
int strata_get_alloc(strata_bucket *bucket, const char *name, void **data, size_t *len);
/* Frees a buffer returned by strata_get_alloc (NULL is a no-op). */
void strata_free(void *data);
/* Deletes blob name. */
int strata_delete(strata_bucket *bucket, const char *name);
/* durable != 0: returns once the bucket's blobs are on a non-volatile tier,
 * journaled and synced (they survive a daemon crash); STRATA_ENOTDURABLE
 * when the daemon has no non-volatile tier. durable == 0: no-op. */
int strata_flush(strata_bucket *bucket, int durable);
/* Renames blob from to to; -STRATA_EEXIST if to exists and replace is 0. */
int strata_rename(strata_bucket *bucket, const char *from, const char *to, int replace);
/* Sets *exists to 1 if blob name exists, else 0. */
int strata_exists(strata_bucket *bucket, const char *name, int *exists);
/* Sets *size to the size of blob name in bytes. */
int strata_blob_size(strata_bucket *bucket, const char *name, uint64_t *size);
/* Calls cb(name, ctx) for every blob of the bucket, in sorted order, until cb returns nonzero. */
int strata_blob_list(strata_bucket *bucket, strata_name_cb cb, void *ctx);
/* Clears a user score (strata_set_score); NAN and values outside [0, 1] are -STRATA_EINVAL. */
#define STRATA_SCORE_NONE (-1.0f)
/* Sets blob name's user score in [0, 1] (STRATA_SCORE_NONE clears it); nonzero stationary pins it on its tier. */
int strata_set_score(strata_bucket *bucket, const char *name, float score, int stationary);

/* A blob's metadata, as the buffer organizer sees it. */
typedef struct strata_blob_stat {
    uint64_t size;
    uint64_t access_count;   /* reads and writes */
    uint64_t atime_ns;       /* last access, ns since the epoch */
    uint64_t mtime_ns;
    uint64_t ctime_ns;
    float score;             /* in [0, 1]: the user score if set, else from access frequency and recency */
    float user_score;        /* NAN when none */
    uint32_t tier_mask;      /* bit i: bytes on tier i (tier 0 is the fastest) */
    uint32_t extent_count;
    int32_t stationary;      /* 1: the organizer never moves it */
    int32_t dirty;           /* 1: modified since last persisted */
} strata_blob_stat;

/* Fills *out with the metadata of blob name. */
int strata_stat(strata_bucket *bucket, const char *name, strata_blob_stat *out);

/* ---- Staging (files at their destination <-> the buffer). */

#define STRATA_MODE_DEFAULT 0   /* flushed to the destination in the background when modified */
#define STRATA_MODE_SCRATCH 1   /* never written back */
#define STRATA_MODE_WORKFLOW 2  /* kept in the buffer until staged out */
#define STRATA_STAGE_EVICT 1    /* strata_stage_out: drop the files' clean pages once persisted */
#define STRATA_STAGE_NO_WAIT 2  /* strata_stage_out: mark the files, do not wait */

typedef struct strata_stage_report {
    uint64_t files;          /* files staged (stage-in: read; stage-out: persisted) */
    uint64_t bytes;          /* bytes moved */
    uint64_t failed;         /* files that failed */
    uint64_t buffered_bytes; /* bytes of the paths held in the buffer afterwards */
    uint64_t evicted_bytes;  /* stage-out with STRATA_STAGE_EVICT: bytes dropped from the buffer */
    double seconds;
} strata_stage_report;

/* Progress: called from the library's threads (one call at a time), never after the call returned. */
typedef void (*strata_stage_cb)(uint64_t files_done, uint64_t files_total, uint64_t bytes_done, uint64_t bytes_total, void *ctx);

/* Reads npaths files or directories (recursively) from their destination into the buffer, jobs files in
 * parallel (0 = 4); new records get mode STRATA_MODE_*. Other files are staged when some fail: the report
 * is filled and the first failure's code returned (its path in strata_last_error_message). */
int strata_stage_in(strata_client *client, const char *const *paths, size_t npaths, int mode, unsigned jobs,
                    strata_stage_cb cb_or_null, void *ctx, strata_stage_report *report_or_null);
/* Writes the buffered WORKFLOW and DEFAULT files under paths to their destination and, unless
 * STRATA_STAGE_NO_WAIT, waits until persisted (at most timeout_s seconds, 0 = no limit; -STRATA_ETIMEDOUT);
 * STRATA_STAGE_EVICT then drops them from the buffer. A path neither buffered nor at the destination
 * fails with -STRATA_ENOFILE. */
int strata_stage_out(strata_client *client, const char *const *paths, size_t npaths, int flags, double timeout_s,
                     strata_stage_cb cb_or_null, void *ctx, strata_stage_report *report_or_null);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_H */
