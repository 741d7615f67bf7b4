/*
 * HDF5 write/read timing for `strata bench hdf5`:
 *   h5bench sec2|strata FILE BYTES CHUNK [default|scratch|workflow] [sync]
 *
 * Writes one chunked 1-D dataset of doubles (BYTES in all, CHUNK bytes per
 * chunk, one H5Dwrite per chunk), closes the file (`sync`: then fsyncs it —
 * the destination's durable write, for the peers), reopens it, reads it back
 * chunk by chunk and checks every value. Prints
 *   ok write_s=W read_s=R
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

herr_t H5Pset_fapl_strata(hid_t fapl_id, const char *mode); /* libstrata_h5fd */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CHECK(x)                                                                                                  \
    do {                                                                                                          \
        if ((x) < 0) {                                                                                            \
            fprintf(stderr, "%s failed (line %d)\n", #x, __LINE__);                                              \
            exit(1);                                                                                              \
        }                                                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: h5bench sec2|strata FILE BYTES CHUNK [mode] [sync]\n");
        return 2;
    }
    const char *mode = NULL;
    int sync = 0;
    for (int i = 5; i < argc; i++) {
        if (!strcmp(argv[i], "sync"))
            sync = 1;
        else
            mode = argv[i];
    }
    hsize_t n = strtoull(argv[3], 0, 10) / 8, per = strtoull(argv[4], 0, 10) / 8;
    if (!n || !per || n % per) {
        fprintf(stderr, "BYTES must be a multiple of CHUNK, both multiples of 8\n");
        return 2;
    }
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (!strcmp(argv[1], "strata"))
        CHECK(H5Pset_fapl_strata(fapl, mode));
    else
        CHECK(H5Pset_fapl_sec2(fapl));
    double *buf = malloc(per * sizeof(double)), *got = malloc(per * sizeof(double));

    double t0 = now();
    hid_t f = H5Fcreate(argv[2], H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(f);
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    CHECK(H5Pset_chunk(dcpl, 1, &per));
    hid_t ds = H5Dcreate2(f, "data", H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(ds);
    hid_t ms = H5Screate_simple(1, &per, NULL);
    for (hsize_t at = 0; at < n; at += per) {
        for (hsize_t i = 0; i < per; i++)
            buf[i] = (double)(at + i) * 0.25;
        hid_t fs = H5Dget_space(ds);
        CHECK(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, NULL, &per, NULL));
        CHECK(H5Dwrite(ds, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, buf));
        H5Sclose(fs);
    }
    H5Dclose(ds), H5Pclose(dcpl), H5Sclose(sp);
    CHECK(H5Fclose(f));
    if (sync) {
        int fd = open(argv[2], O_RDONLY);
        if (fd < 0 || fsync(fd) != 0) {
            perror("fsync");
            return 1;
        }
        close(fd);
    }
    double t1 = now();

    f = H5Fopen(argv[2], H5F_ACC_RDONLY, fapl);
    CHECK(f);
    ds = H5Dopen2(f, "data", H5P_DEFAULT);
    for (hsize_t at = 0; at < n; at += per) {
        hid_t fs = H5Dget_space(ds);
        CHECK(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, NULL, &per, NULL));
        CHECK(H5Dread(ds, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, got));
        H5Sclose(fs);
        for (hsize_t i = 0; i < per; i++)
            if (got[i] != (double)(at + i) * 0.25) {
                fprintf(stderr, "value %llu differs\n", (unsigned long long)(at + i));
                return 1;
            }
    }
    H5Dclose(ds), H5Sclose(ms);
    CHECK(H5Fclose(f));
    double t2 = now();
    H5Pclose(fapl);
    printf("ok write_s=%.6f read_s=%.6f\n", t1 - t0, t2 - t1);
    free(buf), free(got);
    return 0;
}
