/*
 * An HDF5 file through a chosen driver: `h5vfd strata|sec2 FILE [MODE]`.
 *
 * Creates FILE (chunked + gzip dataset, attributes, an extendible dataset
 * resized twice, 200 small datasets in a group), flushes, closes, reopens
 * read-write to add a dataset and rewrite an attribute, closes, reopens
 * read-only and checks every value. No object timestamps, so two drivers
 * give the same bytes. Prints "ok checksum=<hex>" (of every value read).
 * MODE is the strata driver's mode (default, scratch, workflow; none: the
 * configuration's).
 */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "H5FDstrata.h"

#define R 300
#define C 500

static uint64_t h = 1469598103934665603ull;
static void mix(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
}

#define CHECK(x)                                                                                                  \
    do {                                                                                                          \
        if ((x) < 0) {                                                                                            \
            fprintf(stderr, "%s failed (line %d)\n", #x, __LINE__);                                              \
            exit(1);                                                                                              \
        }                                                                                                         \
    } while (0)

static hid_t fapl_for(const char *driver, const char *mode)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (!strcmp(driver, "sec2"))
        CHECK(H5Pset_fapl_sec2(fapl));
    else {
        CHECK(H5Pset_fapl_strata(fapl, mode));
        char back[16] = "?";
        CHECK(H5Pget_fapl_strata(fapl, back, sizeof back));
        if (strcmp(back, mode ? mode : "")) {
            fprintf(stderr, "H5Pget_fapl_strata gave %s\n", back);
            exit(1);
        }
    }
    return fapl;
}

static hid_t untimed(hid_t cls)
{
    hid_t p = H5Pcreate(cls);
    CHECK(H5Pset_obj_track_times(p, 0));
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: h5vfd strata|sec2 FILE [default|scratch|workflow]\n");
        return 2;
    }
    const char *mode = argc == 4 ? argv[3] : NULL;
    hid_t fapl = fapl_for(argv[1], mode);
    hid_t f = H5Fcreate(argv[2], H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(f);

    /* a chunked, compressed 2-D dataset */
    double *grid = malloc(sizeof(double) * R * C);
    for (int i = 0; i < R * C; i++)
        grid[i] = (i % 977) * 0.5 + (i / C);
    hsize_t dims[2] = {R, C}, chunk[2] = {64, 100};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = untimed(H5P_DATASET_CREATE);
    CHECK(H5Pset_chunk(dcpl, 2, chunk));
    CHECK(H5Pset_deflate(dcpl, 6));
    hid_t ds = H5Dcreate2(f, "grid", H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, grid));
    int units[3] = {7, 8, 9};
    hsize_t three = 3;
    hid_t asp = H5Screate_simple(1, &three, NULL);
    hid_t at = H5Acreate2(ds, "units", H5T_NATIVE_INT, asp, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(H5Awrite(at, H5T_NATIVE_INT, units));
    H5Aclose(at), H5Sclose(asp), H5Dclose(ds), H5Sclose(sp), H5Pclose(dcpl);

    /* an extendible dataset, resized twice */
    hsize_t cur = 100, maxd = H5S_UNLIMITED, ch = 50;
    sp = H5Screate_simple(1, &cur, &maxd);
    dcpl = untimed(H5P_DATASET_CREATE);
    CHECK(H5Pset_chunk(dcpl, 1, &ch));
    ds = H5Dcreate2(f, "series", H5T_NATIVE_INT, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int series[400];
    for (int i = 0; i < 400; i++)
        series[i] = i * i - 3;
    CHECK(H5Dwrite(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, series));
    for (hsize_t grow = 250; grow <= 400; grow += 150) {
        CHECK(H5Dset_extent(ds, &grow));
        hid_t fs = H5Dget_space(ds);
        hsize_t start = grow == 250 ? 100 : 250, count = grow - start;
        CHECK(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL));
        hid_t ms = H5Screate_simple(1, &count, NULL);
        CHECK(H5Dwrite(ds, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, series + start));
        H5Sclose(ms), H5Sclose(fs);
    }
    H5Dclose(ds), H5Sclose(sp), H5Pclose(dcpl);

    /* many small datasets */
    hid_t gcpl = untimed(H5P_GROUP_CREATE);
    hid_t g = H5Gcreate2(f, "small", H5P_DEFAULT, gcpl, H5P_DEFAULT);
    hsize_t ten = 10;
    sp = H5Screate_simple(1, &ten, NULL);
    dcpl = untimed(H5P_DATASET_CREATE);
    for (int k = 0; k < 200; k++) {
        char name[32];
        int v[10];
        for (int i = 0; i < 10; i++)
            v[i] = k * 10 + i;
        snprintf(name, sizeof name, "d%03d", k);
        ds = H5Dcreate2(g, name, H5T_NATIVE_INT, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        CHECK(H5Dwrite(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v));
        H5Dclose(ds);
    }
    H5Sclose(sp), H5Pclose(dcpl), H5Gclose(g), H5Pclose(gcpl);
    CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL));
    CHECK(H5Fclose(f));

    /* reopen read-write: one more dataset, an attribute rewritten */
    f = H5Fopen(argv[2], H5F_ACC_RDWR, fapl);
    CHECK(f);
    ds = H5Dopen2(f, "grid", H5P_DEFAULT);
    at = H5Aopen(ds, "units", H5P_DEFAULT);
    units[1] = 80;
    CHECK(H5Awrite(at, H5T_NATIVE_INT, units));
    H5Aclose(at), H5Dclose(ds);
    sp = H5Screate_simple(1, &ten, NULL);
    dcpl = untimed(H5P_DATASET_CREATE);
    ds = H5Dcreate2(f, "late", H5T_NATIVE_INT, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(H5Dwrite(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, series));
    H5Dclose(ds), H5Sclose(sp), H5Pclose(dcpl);
    CHECK(H5Fclose(f));

    /* reopen read-only and check everything */
    f = H5Fopen(argv[2], H5F_ACC_RDONLY, fapl);
    CHECK(f);
    double *back = malloc(sizeof(double) * R * C);
    ds = H5Dopen2(f, "grid", H5P_DEFAULT);
    CHECK(H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, back));
    int bad = memcmp(back, grid, sizeof(double) * R * C) != 0;
    mix(back, sizeof(double) * R * C);
    int u[3];
    at = H5Aopen(ds, "units", H5P_DEFAULT);
    CHECK(H5Aread(at, H5T_NATIVE_INT, u));
    bad |= u[0] != 7 || u[1] != 80 || u[2] != 9;
    mix(u, sizeof u);
    H5Aclose(at), H5Dclose(ds);
    int s2[400];
    ds = H5Dopen2(f, "series", H5P_DEFAULT);
    CHECK(H5Dread(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, s2));
    bad |= memcmp(s2, series, sizeof series) != 0;
    mix(s2, sizeof s2);
    H5Dclose(ds);
    for (int k = 0; k < 200; k++) {
        char name[32];
        int v[10];
        snprintf(name, sizeof name, "small/d%03d", k);
        ds = H5Dopen2(f, name, H5P_DEFAULT);
        CHECK(ds);
        CHECK(H5Dread(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v));
        for (int i = 0; i < 10; i++)
            bad |= v[i] != k * 10 + i;
        mix(v, sizeof v);
        H5Dclose(ds);
    }
    ds = H5Dopen2(f, "late", H5P_DEFAULT);
    CHECK(H5Dread(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, s2));
    bad |= memcmp(s2, series, 10 * sizeof(int)) != 0;
    H5Dclose(ds);
    CHECK(H5Fclose(f));
    H5Pclose(fapl);
    if (bad) {
        fprintf(stderr, "values read back differ\n");
        return 1;
    }
    printf("ok checksum=%016llx\n", (unsigned long long)h);
    free(grid), free(back);
    return 0;
}
