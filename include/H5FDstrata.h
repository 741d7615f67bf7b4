/*
 * H5FDstrata.h — the strata HDF5 virtual file driver (libstrata_h5fd.so).
 *
 * A file opened through this driver is a file of strata's file model, served
 * by the running daemon (STRATA_SOCKET, or the configured socket): the same
 * buffered file the POSIX adapter (`strata run`) sees at that path, drained
 * to the same destination.
 *
 *   hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
 *   H5Pset_fapl_strata(fapl, "default");      // or "scratch", "workflow", NULL
 *   hid_t f = H5Fcreate("/data/out.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
 *
 * Link with -lstrata_h5fd (and HDF5). Modes: "default" (buffered, flushed to
 * the destination in the background; H5Fflush is durable like fsync),
 * "scratch" (never persisted), "workflow" (kept until staged out), NULL (the
 * mode the configuration gives the path). BYPASS is not a mode of this
 * driver: use sec2.
 */
#ifndef H5FD_STRATA_H
#define H5FD_STRATA_H

#include <hdf5.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The driver's identifier (registered on first use). */
#define H5FD_STRATA (H5FD_strata_init())

hid_t H5FD_strata_init(void);

/* Selects the strata driver on a file access property list. */
herr_t H5Pset_fapl_strata(hid_t fapl_id, const char *mode);

/* The mode set on fapl_id (copied into mode, at most len bytes with the
 * NUL; "" for the configuration's). */
herr_t H5Pget_fapl_strata(hid_t fapl_id, char *mode, size_t len);

#ifdef __cplusplus
}
#endif

#endif
