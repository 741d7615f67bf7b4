/*
 * Every MPI-IO call of issue 16 on a file strata buffers and on an untracked
 * twin, compared: `mpiio_calls BUFFERED_DIR TWIN_DIR` (4 ranks or more).
 *
 * The same script of calls runs twice: in BUFFERED_DIR (served by
 * libstrata_mpiio under `strata run`) and in TWIN_DIR (the MPI library's own
 * MPI-IO). Each call's error class, status count and the checksum of what it
 * read go into a transcript per run; the transcripts and the final bytes of
 * every file must be equal. Rank 0 prints "ok <calls> calls, <bytes> bytes
 * compared, buffered=<0|1>" — buffered says whether MPI_File_get_info of the
 * buffered files carried strata's key (the adapter served them).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nprocs;
static char log_buf[2][1 << 16];
static size_t log_len[2];
static int run; /* 0: buffered, 1: twin */
static long calls;
static int buffered_seen;
static int handler_calls;

static int cls(int rc)
{
    int c = rc;
    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &c);
    return c;
}

static uint64_t sum(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void rec(const char *what, int rc, long long v)
{
    calls++;
    if (getenv("MPIIO_CALLS_TRACE"))
        fprintf(stderr, "[%d/%d] %s rc=%d v=%lld\n", rank, run, what, cls(rc), v);
    log_len[run] += snprintf(log_buf[run] + log_len[run], sizeof log_buf[run] - log_len[run], "%s rc=%d v=%lld\n",
                             what, cls(rc), v);
}

static long long count_of(MPI_Status *st)
{
    int n = 0;
    MPI_Get_count(st, MPI_BYTE, &n);
    return n;
}

static void path(char *out, const char *dir, const char *name)
{
    snprintf(out, 4096, "%s/%s", dir, name);
}

static void on_error(MPI_File *fh, int *code, ...)
{
    (void)fh, (void)code;
    handler_calls++;
}

static void check_info(MPI_File fh)
{
    MPI_Info info;
    char v[64];
    int flag = 0;
    MPI_File_get_info(fh, &info);
    MPI_Info_get(info, "strata_buffered", 63, v, &flag);
    if (run == 0 && flag)
        buffered_seen = 1;
    MPI_Info_free(&info);
}

static void script(const char *dir)
{
    char p[4096];
    MPI_File fh;
    MPI_Status st;
    int rc;
    char buf[8192], back[8192];

    /* 1. explicit offsets, unaligned, every rank; sizes; sync */
    path(p, dir, "explicit");
    rc = MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    rec("open explicit", rc, 0);
    check_info(fh);
    for (int i = 0; i < 3001; i++)
        buf[i] = (char)(rank * 31 + i * 7);
    rc = MPI_File_write_at(fh, rank * 3001 + 17, buf, 3001, MPI_BYTE, &st);
    rec("write_at", rc, count_of(&st));
    rc = MPI_File_write_at_all(fh, nprocs * 3001 + 17 + rank * 1000, buf, 1000, MPI_BYTE, &st);
    rec("write_at_all", rc, count_of(&st));
    rc = MPI_File_sync(fh);
    rec("sync", rc, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_File_read_at(fh, ((rank + 1) % nprocs) * 3001 + 17, back, 3001, MPI_BYTE, &st);
    rec("read_at neighbour", rc, (long long)sum(back, count_of(&st)));
    rc = MPI_File_read_at_all(fh, 0, back, 8192, MPI_BYTE, &st);
    rec("read_at_all head", rc, (long long)sum(back, count_of(&st)) ^ count_of(&st));
    MPI_Offset size = -1;
    rc = MPI_File_get_size(fh, &size);
    rec("get_size", rc, size);
    rc = MPI_File_read_at(fh, size + 100, back, 10, MPI_BYTE, &st);
    rec("read_at past end", rc, count_of(&st));
    /* preallocate: checked on the buffered file only — Open MPI 4.1's own
     * MPI_File_preallocate loses step between ranks and deadlocks a later
     * collective (seen here every run); the twin's answer is what the
     * standard asks (the size grows to at least the argument, never shrinks) */
    MPI_Barrier(MPI_COMM_WORLD);
    if (run == 0) {
        MPI_Offset before = size, after = -1, after2 = -1;
        int r1 = MPI_File_preallocate(fh, size + 5000);
        MPI_File_get_size(fh, &after);
        int r2 = MPI_File_preallocate(fh, 10);
        MPI_File_get_size(fh, &after2);
        rec("preallocate", r1 | r2, after == before + 5000 && after2 == after);
    } else {
        rec("preallocate", 0, 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_File_set_size(fh, 12345);
    MPI_File_get_size(fh, &size);
    rec("set_size", rc, size);
    int amode = 0, atom = -1;
    MPI_File_get_amode(fh, &amode);
    rec("get_amode", 0, amode);
    MPI_File_set_atomicity(fh, 1);
    MPI_File_get_atomicity(fh, &atom);
    rec("atomicity", 0, atom);
    /* overlapping writes in atomic mode: each 500-byte write lands whole */
    memset(buf, 'A' + rank, 500);
    rc = MPI_File_write_at_all(fh, 100, buf, 500, MPI_BYTE, &st);
    rec("atomic overlapping write", rc, count_of(&st));
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_File_read_at(fh, 100, back, 500, MPI_BYTE, &st);
    int whole = 1;
    for (int i = 1; i < 500; i++)
        whole &= back[i] == back[0];
    rec("atomic write whole", rc, whole);
    MPI_File_set_atomicity(fh, 0);
    MPI_Group g;
    int gsize = 0;
    MPI_File_get_group(fh, &g);
    MPI_Group_size(g, &gsize);
    MPI_Group_free(&g);
    rec("get_group", 0, gsize);
    MPI_Fint fint = MPI_File_c2f(fh);
    rec("c2f/f2c", 0, MPI_File_f2c(fint) == fh);
    MPI_Aint ext = 0;
    MPI_File_get_type_extent(fh, MPI_DOUBLE, &ext);
    rec("get_type_extent", 0, ext);
    /* the atomic-mode winner differs between runs: make the bytes equal */
    memset(buf, 'Z', 500);
    if (rank == 0)
        MPI_File_write_at(fh, 100, buf, 500, MPI_BYTE, &st);
    rc = MPI_File_close(&fh);
    rec("close", rc, fh == MPI_FILE_NULL);

    /* 2. individual pointer, seek, byte offsets, etype views */
    path(p, dir, "pointer");
    MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    int ints[256];
    for (int i = 0; i < 256; i++)
        ints[i] = rank * 1000 + i;
    MPI_File_set_view(fh, rank * 256 * sizeof(int), MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
    rc = MPI_File_write(fh, ints, 100, MPI_INT, &st);
    rec("write", rc, count_of(&st));
    MPI_Offset pos = -1;
    MPI_File_get_position(fh, &pos);
    rec("position after write", 0, pos);
    rc = MPI_File_write_all(fh, ints + 100, 156, MPI_INT, &st);
    rec("write_all", rc, count_of(&st));
    rc = MPI_File_seek(fh, 10, MPI_SEEK_SET);
    MPI_File_get_position(fh, &pos);
    rec("seek set", rc, pos);
    rc = MPI_File_seek(fh, 5, MPI_SEEK_CUR);
    MPI_File_get_position(fh, &pos);
    rec("seek cur", rc, pos);
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_File_seek(fh, -3, MPI_SEEK_END);
    MPI_File_get_position(fh, &pos);
    rec("seek end", rc, pos);
    rc = MPI_File_seek(fh, -1, MPI_SEEK_SET);
    rec("seek negative", rc, 0);
    MPI_File_seek(fh, 20, MPI_SEEK_SET);
    int rd[50];
    rc = MPI_File_read(fh, rd, 50, MPI_INT, &st);
    rec("read", rc, (long long)sum(rd, sizeof rd) ^ count_of(&st));
    rc = MPI_File_read_all(fh, rd, 50, MPI_INT, &st);
    rec("read_all", rc, (long long)sum(rd, sizeof rd) ^ count_of(&st));
    MPI_Offset bo = -1;
    MPI_File_get_byte_offset(fh, 7, &bo);
    rec("get_byte_offset", 0, bo);
    MPI_Offset d;
    MPI_Datatype et, ft;
    char rep[MPI_MAX_DATAREP_STRING];
    MPI_File_get_view(fh, &d, &et, &ft, rep);
    int esz;
    MPI_Type_size(et, &esz);
    rec("get_view", 0, d * 1000 + esz + (strcmp(rep, "native") == 0) * 7);
    rc = MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "external32x", MPI_INFO_NULL);
    rec("set_view bad datarep", rc, 0);
    MPI_File_close(&fh);

    /* 3. derived file types: vector interleave, subarray quadrants, indexed, struct */
    path(p, dir, "views");
    MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    MPI_Datatype vec, vecr;
    MPI_Type_vector(40, 3, 3 * nprocs, MPI_INT, &vec);
    MPI_Type_create_resized(vec, 0, 40 * 3 * nprocs * sizeof(int), &vecr);
    MPI_Type_commit(&vecr);
    rc = MPI_File_set_view(fh, rank * 3 * sizeof(int), MPI_INT, vecr, "native", MPI_INFO_NULL);
    rec("set_view vector", rc, 0);
    int many[240];
    for (int i = 0; i < 240; i++)
        many[i] = rank * 100000 + i;
    rc = MPI_File_write_all(fh, many, 240, MPI_INT, &st);
    rec("write_all vector view", rc, count_of(&st));
    MPI_File_seek(fh, 0, MPI_SEEK_SET);
    int again[240];
    rc = MPI_File_read_all(fh, again, 240, MPI_INT, &st);
    rec("read_all vector view", rc, (long long)sum(again, sizeof again) ^ count_of(&st));
    /* a memory type with gaps into that view */
    MPI_Datatype mvec;
    MPI_Type_vector(60, 1, 2, MPI_INT, &mvec);
    MPI_Type_commit(&mvec);
    rc = MPI_File_write_at(fh, 240, many, 1, mvec, &st);
    rec("write_at strided memory", rc, count_of(&st));
    memset(again, 0, sizeof again);
    rc = MPI_File_read_at(fh, 240, again, 1, mvec, &st);
    rec("read_at strided memory", rc, (long long)sum(again, sizeof again) ^ count_of(&st));
    MPI_Type_free(&mvec);
    MPI_Type_free(&vec);
    MPI_Type_free(&vecr);
    /* subarray: a 48 x 64 array of doubles in quadrants (2 x nprocs/2 grid) */
    int gsz[2] = {48, 64}, sub[2] = {24, 64 / (nprocs / 2)}, start[2] = {(rank % 2) * 24, (rank / 2) * (64 / (nprocs / 2))};
    MPI_Datatype subt;
    MPI_Type_create_subarray(2, gsz, sub, start, MPI_ORDER_C, MPI_DOUBLE, &subt);
    MPI_Type_commit(&subt);
    rc = MPI_File_set_view(fh, 65536, MPI_DOUBLE, subt, "native", MPI_INFO_NULL);
    rec("set_view subarray", rc, 0);
    int nq = sub[0] * sub[1];
    double *q = malloc(sizeof(double) * nq), *q2 = malloc(sizeof(double) * nq);
    for (int i = 0; i < nq; i++)
        q[i] = rank + i / 1000.0;
    rc = MPI_File_write_all(fh, q, nq, MPI_DOUBLE, &st);
    rec("write_all subarray", rc, count_of(&st));
    rc = MPI_File_read_at_all(fh, 0, q2, nq, MPI_DOUBLE, &st);
    rec("read_at_all subarray", rc, (long long)sum(q2, sizeof(double) * nq) ^ count_of(&st));
    MPI_Type_free(&subt);
    /* Fortran order too */
    MPI_Type_create_subarray(2, gsz, sub, start, MPI_ORDER_FORTRAN, MPI_DOUBLE, &subt);
    MPI_Type_commit(&subt);
    rc = MPI_File_set_view(fh, 65536 + 48 * 64 * 8, MPI_DOUBLE, subt, "native", MPI_INFO_NULL);
    rc = MPI_File_write_all(fh, q, nq, MPI_DOUBLE, &st);
    rec("write_all subarray fortran", rc, count_of(&st));
    MPI_Type_free(&subt);
    free(q), free(q2);
    /* indexed blocks and a struct with a gap */
    int bl[3] = {2, 5, 1}, dp[3] = {0, 4, 13};
    MPI_Datatype idx, idxr;
    MPI_Type_indexed(3, bl, dp, MPI_SHORT, &idx);
    MPI_Type_create_resized(idx, 0, 16 * sizeof(short) * nprocs, &idxr);
    MPI_Type_commit(&idxr);
    rc = MPI_File_set_view(fh, 100000 + rank * 16 * sizeof(short), MPI_SHORT, idxr, "native", MPI_INFO_NULL);
    short sh[64];
    for (int i = 0; i < 64; i++)
        sh[i] = (short)(rank * 500 + i);
    rc = MPI_File_write_all(fh, sh, 64, MPI_SHORT, &st);
    rec("write_all indexed", rc, count_of(&st));
    MPI_Type_free(&idx);
    MPI_Type_free(&idxr);
    struct {
        int a;
        double b;
    } sv[8];
    int sbl[2] = {1, 1};
    MPI_Aint sdp[2] = {0, 8};
    MPI_Datatype sty[2] = {MPI_INT, MPI_DOUBLE}, st_t, st_r;
    MPI_Type_create_struct(2, sbl, sdp, sty, &st_t);
    MPI_Type_create_resized(st_t, 0, 16, &st_r);
    MPI_Type_commit(&st_r);
    for (int i = 0; i < 8; i++)
        sv[i].a = rank * 10 + i, sv[i].b = i * 0.5;
    rc = MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL);
    rc = MPI_File_write_at(fh, 200000 + rank * 8 * 12, sv, 8, st_r, &st);
    rec("write_at struct memory", rc, count_of(&st));
    MPI_Type_free(&st_t);
    MPI_Type_free(&st_r);
#if MPI_VERSION >= 4
    /* the large-count variants of MPI 4.0 */
    rc = MPI_File_write_at_c(fh, 300000 + rank * 64, buf, (MPI_Count)64, MPI_BYTE, &st);
    rec("write_at_c", rc, count_of(&st));
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_File_read_at_all_c(fh, 300000, back, (MPI_Count)(64 * nprocs), MPI_BYTE, &st);
    rec("read_at_all_c", rc, (long long)sum(back, 64 * nprocs) ^ count_of(&st));
    MPI_Count cext = 0;
    MPI_File_get_type_extent_c(fh, MPI_INT, &cext);
    rec("get_type_extent_c", 0, cext);
#endif
    MPI_File_close(&fh);

    /* 4. shared pointer: write_ordered (deterministic), write_shared (any order) */
    path(p, dir, "shared");
    MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    char line[64];
    int ln = snprintf(line, sizeof line, "rank %d says hello %.*s\n", rank, rank * 3, "xxxxxxxxxxxxxxxxxxxxxxxxxx");
    rc = MPI_File_write_ordered(fh, line, ln, MPI_CHAR, &st);
    rec("write_ordered", rc, count_of(&st));
    MPI_Offset sp = -1;
    MPI_File_get_position_shared(fh, &sp);
    rec("position_shared", 0, sp);
    MPI_Barrier(MPI_COMM_WORLD); /* (collectives need not synchronize: no test races) */
    /* the same bytes from every rank: the order of shared-pointer writes is a race */
    rc = MPI_File_write_shared(fh, "shared!\n", 8, MPI_CHAR, &st);
    rec("write_shared", rc, count_of(&st));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_get_position_shared(fh, &sp);
    rec("position_shared after", 0, sp);
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_File_seek_shared(fh, 0, MPI_SEEK_SET);
    rec("seek_shared", rc, 0);
    char rb[64];
    rc = MPI_File_read_ordered(fh, rb, ln, MPI_CHAR, &st);
    rec("read_ordered", rc, (long long)sum(rb, count_of(&st)));
    rc = MPI_File_read_shared(fh, rb, 1, MPI_CHAR, &st);
    rec("read_shared", rc, count_of(&st));
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_File_seek_shared(fh, 0, MPI_SEEK_END);
    MPI_File_get_position_shared(fh, &sp);
    rec("seek_shared end", rc, sp);
    MPI_File_close(&fh);

    /* 5. non-blocking, split collectives */
    path(p, dir, "async");
    MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    MPI_Request rq[4];
    MPI_Status sts[4];
    for (int i = 0; i < 4096; i++)
        buf[i] = (char)(i * 13 + rank);
    rc = MPI_File_iwrite_at(fh, rank * 4096, buf, 4096, MPI_BYTE, &rq[0]);
    rec("iwrite_at", rc, 0);
    rc = MPI_File_iwrite_at(fh, (nprocs + rank) * 4096, buf, 2048, MPI_BYTE, &rq[1]);
    rc = MPI_Waitall(2, rq, sts);
    rec("waitall", rc, count_of(&sts[0]) * 10000 + count_of(&sts[1]));
    MPI_File_seek(fh, rank * 4096 + 7, MPI_SEEK_SET);
    rc = MPI_File_iwrite(fh, buf, 100, MPI_BYTE, &rq[0]);
    int flag = 0;
    while (!flag)
        MPI_Test(&rq[0], &flag, &st);
    rec("iwrite+test", rc, count_of(&st));
    /* the non-blocking collectives (MPI 3.1): the twin's reference is the
     * blocking call — Open MPI 4.1's ROMIO crashes in them */
    if (run == 0) {
        rc = MPI_File_iwrite_at_all(fh, 2 * nprocs * 4096 + rank * 10, buf, 10, MPI_BYTE, &rq[0]);
        MPI_Wait(&rq[0], &st);
    } else
        rc = MPI_File_write_at_all(fh, 2 * nprocs * 4096 + rank * 10, buf, 10, MPI_BYTE, &st);
    rec("iwrite_at_all", rc, count_of(&st));
    if (run == 0) {
        rc = MPI_File_iwrite_all(fh, buf, 10, MPI_BYTE, &rq[0]);
        MPI_Wait(&rq[0], &st);
    } else
        rc = MPI_File_write_all(fh, buf, 10, MPI_BYTE, &st);
    rec("iwrite_all", rc, count_of(&st));
    MPI_File_sync(fh);
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_File_iread_at(fh, ((rank + 1) % nprocs) * 4096, back, 4096, MPI_BYTE, &rq[0]);
    MPI_Wait(&rq[0], &st);
    rec("iread_at", rc, (long long)sum(back, 4096) ^ count_of(&st));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_seek(fh, 0, MPI_SEEK_SET);
    rc = MPI_File_iread(fh, back, 50, MPI_BYTE, &rq[0]);
    MPI_Wait(&rq[0], &st);
    rec("iread", rc, (long long)sum(back, 50));
    if (run == 0) {
        rc = MPI_File_iread_all(fh, back, 50, MPI_BYTE, &rq[0]);
        MPI_Wait(&rq[0], &st);
    } else
        rc = MPI_File_read_all(fh, back, 50, MPI_BYTE, &st);
    rec("iread_all", rc, (long long)sum(back, 50) ^ count_of(&st));
    if (run == 0) {
        rc = MPI_File_iread_at_all(fh, 0, back, 64, MPI_BYTE, &rq[0]);
        MPI_Wait(&rq[0], &st);
    } else
        rc = MPI_File_read_at_all(fh, 0, back, 64, MPI_BYTE, &st);
    rec("iread_at_all", rc, (long long)sum(back, 64) ^ count_of(&st));
    int idx_done = -1;
    rc = MPI_File_iread_at(fh, 0, back, 8, MPI_BYTE, &rq[0]);
    MPI_Waitany(1, rq, &idx_done, &st);
    rec("waitany", rc, idx_done);
    rc = MPI_File_write_at_all_begin(fh, 3 * nprocs * 4096 + rank * 100, buf, 100, MPI_BYTE);
    rec("write_at_all_begin", rc, 0);
    rc = MPI_File_write_at_all_end(fh, buf, &st);
    rec("write_at_all_end", rc, count_of(&st));
    MPI_File_seek(fh, 0, MPI_SEEK_SET);
    rc = MPI_File_read_all_begin(fh, back, 30, MPI_BYTE);
    rc = MPI_File_read_all_end(fh, back, &st);
    rec("read_all split", rc, (long long)sum(back, 30) ^ count_of(&st));
    MPI_File_seek(fh, rank * 4096 + 200, MPI_SEEK_SET);
    rc = MPI_File_write_all_begin(fh, buf, 30, MPI_BYTE);
    rc = MPI_File_write_all_end(fh, buf, &st);
    rec("write_all split", rc, count_of(&st));
    rc = MPI_File_read_at_all_begin(fh, 0, back, 30, MPI_BYTE);
    rc = MPI_File_read_at_all_end(fh, back, &st);
    rec("read_at_all split", rc, (long long)sum(back, 30));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_seek_shared(fh, 0, MPI_SEEK_END);
    rc = MPI_File_write_ordered_begin(fh, line, ln, MPI_CHAR);
    rc = MPI_File_write_ordered_end(fh, line, &st);
    rec("write_ordered split", rc, count_of(&st));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_seek_shared(fh, 0, MPI_SEEK_SET);
    rc = MPI_File_read_ordered_begin(fh, rb, 5, MPI_CHAR);
    rc = MPI_File_read_ordered_end(fh, rb, &st);
    rec("read_ordered split", rc, (long long)sum(rb, 5));
    rc = MPI_File_iwrite_shared(fh, "sss", 3, MPI_BYTE, &rq[0]);
    MPI_Wait(&rq[0], &st);
    rec("iwrite_shared", rc, count_of(&st));
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_File_iread_shared(fh, back, 3, MPI_BYTE, &rq[0]);
    MPI_Wait(&rq[0], &st);
    rec("iread_shared", rc, count_of(&st));
    MPI_File_close(&fh);

    /* 6. errors and handlers; append; delete on close; delete */
    path(p, dir, "missing");
    rc = MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    rec("open missing", rc, 0);
    path(p, dir, "explicit");
    rc = MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    rec("open excl existing", rc, 0);
    rc = MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_RDONLY | MPI_MODE_CREATE, MPI_INFO_NULL, &fh);
    rec("open rdonly|create", rc, 0);
    rc = MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    rec("open rdonly", rc, 0);
    rc = MPI_File_write_at(fh, 0, buf, 1, MPI_BYTE, &st);
    rec("write on rdonly", rc, 0);
    MPI_Errhandler eh;
    MPI_File_create_errhandler(on_error, &eh);
    MPI_File_set_errhandler(fh, eh);
    handler_calls = 0;
    rc = MPI_File_write_at(fh, 0, buf, 1, MPI_BYTE, &st);
    rec("custom handler called", rc, handler_calls);
    MPI_File_call_errhandler(fh, MPI_ERR_OTHER);
    rec("call_errhandler", 0, handler_calls);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&eh);
    MPI_File_close(&fh);
    path(p, dir, "append");
    MPI_File_open(MPI_COMM_SELF, p, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    if (rank == 0)
        MPI_File_write(fh, "0123456789", 10, MPI_CHAR, &st);
    MPI_File_close(&fh);
    MPI_Barrier(MPI_COMM_WORLD);
    rc = MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_APPEND | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    MPI_File_get_position(fh, &pos);
    rec("append position", rc, pos);
    rc = MPI_File_read_at(fh, 0, back, 1, MPI_BYTE, &st);
    rec("read on wronly", rc, 0);
    MPI_File_close(&fh);
    path(p, dir, "temporary");
    rc = MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL,
                       &fh);
    MPI_File_write_at(fh, rank, "t", 1, MPI_CHAR, &st);
    MPI_File_close(&fh);
    rc = MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    rec("deleted on close", rc, 0);
    path(p, dir, "victim");
    MPI_File_open(MPI_COMM_WORLD, p, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    MPI_File_close(&fh);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        rc = MPI_File_delete(p, MPI_INFO_NULL);
        rec("delete", rc, 0);
        rc = MPI_File_delete(p, MPI_INFO_NULL);
        rec("delete missing", rc, 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static const char *files[] = {"explicit", "pointer", "views", "shared", "async", "append"};

/* the whole file through MPI-IO (rank 0), for the byte comparison */
static char *slurp(const char *dir, const char *name, MPI_Offset *n)
{
    char p[4096];
    MPI_File fh;
    MPI_Status st;
    path(p, dir, name);
    if (MPI_File_open(MPI_COMM_SELF, p, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS) {
        *n = -1;
        return NULL;
    }
    MPI_File_get_size(fh, n);
    char *b = malloc(*n + 1);
    MPI_File_read_at(fh, 0, b, (int)*n, MPI_BYTE, &st);
    MPI_File_close(&fh);
    return b;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc != 3 || nprocs < 2 || nprocs % 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 4 %s BUFFERED_DIR TWIN_DIR\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN);
    run = 0;
    script(argv[1]);
    run = 1;
    script(argv[2]);
    int bad = strcmp(log_buf[0], log_buf[1]) != 0;
    if (bad) {
        /* the first line that differs */
        const char *a = log_buf[0], *b = log_buf[1];
        while (*a && *a == *b) {
            if (*a == '\n') {
                a++, b++;
                if (strncmp(a, b, strcspn(a, "\n") + 1) != 0)
                    break;
                continue;
            }
            a++, b++;
        }
        while (a > log_buf[0] && a[-1] != '\n')
            a--;
        while (b > log_buf[1] && b[-1] != '\n')
            b--;
        fprintf(stderr, "rank %d: transcripts differ: buffered \"%.*s\" twin \"%.*s\"\n", rank, (int)strcspn(a, "\n"),
                a, (int)strcspn(b, "\n"), b);
    }
    long long bytes = 0;
    if (rank == 0)
        for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
            MPI_Offset n0, n1;
            char *a = slurp(argv[1], files[i], &n0), *b = slurp(argv[2], files[i], &n1);
            if (n0 != n1 || n0 < 0 || memcmp(a, b, n0) != 0) {
                long at = -1;
                for (MPI_Offset k = 0; n0 == n1 && k < n0; k++)
                    if (a[k] != b[k]) {
                        at = k;
                        break;
                    }
                fprintf(stderr, "%s: bytes differ (sizes %lld / %lld, first at %ld)\n", files[i], (long long)n0,
                        (long long)n1, at);
                bad = 1;
            }
            bytes += n0;
            free(a), free(b);
        }
    int any = 0, seen = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&buffered_seen, &seen, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0 && !any)
        printf("ok %ld calls, %lld bytes compared, buffered=%d\n", calls, bytes, seen);
    MPI_Finalize();
    return any;
}
