/*
 * Parallel HDF5 through MPI-IO: `ph5 FILE` on 4 ranks (or any even count).
 *
 * Creates FILE with H5Pset_fapl_mpio, a chunked 2-D dataset of ints (rows
 * split between ranks, chunk boundaries inside every rank's slab), written
 * collectively, plus an independent write of a second dataset and an
 * attribute; closes, reopens, reads everything back on every rank (the
 * neighbour's slab included) and checks each value. No timestamps in the
 * object headers, so two runs give byte-identical files. Rank 0 prints
 * "ok <values> values, buffered=<0|1>" (whether strata's MPI-IO adapter
 * served the file: its key in MPI_File_get_info).
 */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define ROWS 256
#define COLS 1000

static int value(int r, int c)
{
    return r * 7919 + c * 31 + 5;
}

#define CHECK(x)                                                                                                  \
    do {                                                                                                          \
        if ((x) < 0) {                                                                                            \
            fprintf(stderr, "rank %d: %s failed (line %d)\n", rank, #x, __LINE__);                               \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                         \
        }                                                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    int rank, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc != 2 || ROWS % n) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 4 %s FILE\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rows = ROWS / n;
    hsize_t dims[2] = {ROWS, COLS}, chunk[2] = {ROWS / n / 2 + 3, 128};
    int *slab = malloc(sizeof(int) * rows * COLS);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < COLS; c++)
            slab[r * COLS + c] = value(rank * rows + r, c);

    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    CHECK(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    hid_t f = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(f);
    /* which MPI-IO serves the file: strata's adapter adds its key to the info */
    void *handle = NULL;
    int buffered = 0;
    CHECK(H5Fget_vfd_handle(f, fapl, &handle));
    {
        MPI_Info info;
        char v[16];
        int flag = 0;
        MPI_File_get_info(*(MPI_File *)handle, &info);
        MPI_Info_get(info, "strata_buffered", 15, v, &flag);
        buffered = flag;
        MPI_Info_free(&info);
    }
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    CHECK(H5Pset_chunk(dcpl, 2, chunk));
    CHECK(H5Pset_obj_track_times(dcpl, 0));
    hid_t ds = H5Dcreate2(f, "grid", H5T_NATIVE_INT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(ds);
    hsize_t start[2] = {(hsize_t)rank * rows, 0}, count[2] = {(hsize_t)rows, COLS};
    hid_t fs = H5Dget_space(ds);
    CHECK(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL));
    hid_t ms = H5Screate_simple(2, count, NULL);
    hid_t coll = H5Pcreate(H5P_DATASET_XFER);
    CHECK(H5Pset_dxpl_mpio(coll, H5FD_MPIO_COLLECTIVE));
    CHECK(H5Dwrite(ds, H5T_NATIVE_INT, ms, fs, coll, slab));
    /* a contiguous dataset written independently, one row per rank */
    hsize_t d1[1] = {(hsize_t)n * COLS};
    hid_t s1 = H5Screate_simple(1, d1, NULL);
    hid_t ocpl = H5Pcreate(H5P_DATASET_CREATE);
    CHECK(H5Pset_obj_track_times(ocpl, 0));
    hid_t ds1 = H5Dcreate2(f, "rows", H5T_NATIVE_INT, s1, H5P_DEFAULT, ocpl, H5P_DEFAULT);
    hsize_t st1[1] = {(hsize_t)rank * COLS}, c1[1] = {COLS};
    hid_t fs1 = H5Dget_space(ds1);
    CHECK(H5Sselect_hyperslab(fs1, H5S_SELECT_SET, st1, NULL, c1, NULL));
    hid_t ms1 = H5Screate_simple(1, c1, NULL);
    hid_t ind = H5Pcreate(H5P_DATASET_XFER);
    CHECK(H5Pset_dxpl_mpio(ind, H5FD_MPIO_INDEPENDENT));
    CHECK(H5Dwrite(ds1, H5T_NATIVE_INT, ms1, fs1, ind, slab));
    hid_t as = H5Screate(H5S_SCALAR);
    hid_t at = H5Acreate2(ds, "ranks", H5T_NATIVE_INT, as, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(H5Awrite(at, H5T_NATIVE_INT, &n));
    H5Aclose(at), H5Sclose(as);
    H5Sclose(ms1), H5Sclose(fs1), H5Dclose(ds1), H5Sclose(s1), H5Pclose(ocpl);
    H5Sclose(ms), H5Sclose(fs), H5Dclose(ds), H5Sclose(space), H5Pclose(dcpl);
    CHECK(H5Fclose(f));

    /* reopen read-only; every rank checks the whole grid and the rows */
    f = H5Fopen(argv[1], H5F_ACC_RDONLY, fapl);
    CHECK(f);
    ds = H5Dopen2(f, "grid", H5P_DEFAULT);
    int *all = malloc(sizeof(int) * ROWS * COLS);
    CHECK(H5Dread(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, coll, all));
    long bad = 0;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++)
            bad += all[r * COLS + c] != value(r, c);
    int ranks = 0;
    at = H5Aopen(ds, "ranks", H5P_DEFAULT);
    CHECK(H5Aread(at, H5T_NATIVE_INT, &ranks));
    bad += ranks != n;
    H5Aclose(at), H5Dclose(ds);
    ds1 = H5Dopen2(f, "rows", H5P_DEFAULT);
    CHECK(H5Dread(ds1, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, ind, all));
    for (int k = 0; k < n; k++)
        for (int c = 0; c < COLS; c++)
            bad += all[k * COLS + c] != value(k * rows, c);
    H5Dclose(ds1);
    CHECK(H5Fclose(f));
    long total = 0;
    MPI_Allreduce(&bad, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (total)
        fprintf(stderr, "rank %d: %ld values differ\n", rank, bad);
    else if (rank == 0)
        printf("ok %d values, buffered=%d\n", ROWS * COLS + n * COLS, buffered);
    H5Pclose(fapl), H5Pclose(coll), H5Pclose(ind);
    free(slab), free(all);
    MPI_Finalize();
    return total != 0;
}
