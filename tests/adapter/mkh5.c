/*
 * Writes a small HDF5 file for the adapter tests: groups, a chunked and
 * compressed 2-D dataset, a 1-D dataset, attributes and a string. Object
 * modification times are not tracked, so the file's bytes depend only on
 * its content. Usage: mkh5 OUT.h5
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                   \
    do {                                                           \
        if ((x) < 0) {                                             \
            fprintf(stderr, "mkh5: %s failed (line %d)\n", #x, __LINE__); \
            exit(1);                                               \
        }                                                          \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: mkh5 OUT.h5\n");
        return 2;
    }
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST));
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    CHECK(H5Pset_obj_track_times(fcpl, 0)); /* the root group */
    hid_t f = H5Fcreate(argv[1], H5F_ACC_TRUNC, fcpl, fapl);
    CHECK(f);
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    CHECK(H5Pset_obj_track_times(gcpl, 0));
    hid_t g = H5Gcreate2(f, "/simulation", H5P_DEFAULT, gcpl, H5P_DEFAULT);
    CHECK(g);

    enum { NX = 300, NY = 257 };
    double *grid = malloc(sizeof(double) * NX * NY);
    for (int i = 0; i < NX; i++)
        for (int j = 0; j < NY; j++)
            grid[i * NY + j] = (double)i * 0.5 - (double)j * 0.25 + (double)((i * 31 + j * 17) % 97) / 7.0;
    hsize_t dims[2] = {NX, NY}, chunk[2] = {64, 64};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    CHECK(H5Pset_obj_track_times(dcpl, 0));
    CHECK(H5Pset_chunk(dcpl, 2, chunk));
    CHECK(H5Pset_deflate(dcpl, 4));
    hid_t ds = H5Dcreate2(g, "temperature", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(ds);
    CHECK(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, grid));
    hid_t aspace = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(ds, "step", H5T_STD_I32LE, aspace, H5P_DEFAULT, H5P_DEFAULT);
    int step = 42;
    CHECK(H5Awrite(attr, H5T_NATIVE_INT, &step));
    H5Aclose(attr);
    hid_t str = H5Tcopy(H5T_C_S1);
    CHECK(H5Tset_size(str, 16));
    attr = H5Acreate2(g, "code", str, aspace, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(H5Awrite(attr, str, "strata-test\0\0\0\0\0"));
    H5Aclose(attr);
    H5Tclose(str);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);

    enum { N = 100000 };
    int *ids = malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++)
        ids[i] = (i * 7919) % 100003;
    hsize_t n = N;
    space = H5Screate_simple(1, &n, NULL);
    dcpl = H5Pcreate(H5P_DATASET_CREATE);
    CHECK(H5Pset_obj_track_times(dcpl, 0));
    ds = H5Dcreate2(f, "/ids", H5T_STD_I32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(ds);
    CHECK(H5Dwrite(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids));
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Sclose(aspace);
    H5Gclose(g);
    H5Pclose(gcpl);
    CHECK(H5Fclose(f));
    H5Pclose(fapl);
    H5Pclose(fcpl);
    free(grid);
    free(ids);
    return 0;
}
