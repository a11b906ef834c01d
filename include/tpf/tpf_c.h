/* The C API of tpfabric: the Communicator of tpf/comm.h behind an opaque handle. Every call returns
 * a tpf_status; on failure tpf_last_error() gives the message (kept per thread). Counts are signed
 * so that a negative count from a caller is reported, not reinterpreted as a huge one. */
#ifndef TPF_TPF_C_H_
#define TPF_TPF_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libtpfabric.so, which is otherwise built with hidden visibility (tpf/export.h). */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
#endif

typedef struct tpf_comm* tpf_comm_t;

/* Values match tpf::ErrorCode plus one. */
typedef enum tpf_status {
  TPF_OK = 0,
  TPF_ERR_INVALID_ARGUMENT = 1,
  TPF_ERR_TIMEOUT = 2,
  TPF_ERR_MISMATCH = 3,
  TPF_ERR_PEER_DIED = 4,
  TPF_ERR_ABORTED = 5,
  TPF_ERR_RESOURCE = 6,
  TPF_ERR_BOOTSTRAP = 7,
  TPF_ERR_SYSTEM = 8,
  TPF_ERR_INTERNAL = 9
} tpf_status;

/* Values match tpf::DType and tpf::ReduceOp. */
typedef enum tpf_dtype { TPF_F32, TPF_F64, TPF_F16, TPF_BF16, TPF_I8, TPF_U8, TPF_I32, TPF_I64 } tpf_dtype;
typedef enum tpf_op { TPF_SUM, TPF_PROD, TPF_MIN, TPF_MAX, TPF_AVG } tpf_op;

/* The message of the last failed call on this thread ("" if none). */
const char* tpf_last_error(void);

tpf_status tpf_comm_from_env(tpf_comm_t* out);
tpf_status tpf_comm_create(int rank, int size, const char* store_address, const char* secret,
                           tpf_comm_t* out);
/* color < 0 gives *out == NULL. */
tpf_status tpf_comm_split(tpf_comm_t comm, int color, int key, tpf_comm_t* out);
/* After ranks of `comm` died or were found lost: the communicator of the ranks that go on
   (tpf::Communicator::shrink). Called by every surviving rank; `comm` stays failed. */
tpf_status tpf_comm_shrink(tpf_comm_t comm, tpf_comm_t* out);
tpf_status tpf_comm_destroy(tpf_comm_t comm);
tpf_status tpf_comm_rank(tpf_comm_t comm, int* rank);
tpf_status tpf_comm_size(tpf_comm_t comm, int* size);
/* `rank`'s rank in the job: in the communicator `comm` was split from, and so on up. */
tpf_status tpf_comm_job_rank(tpf_comm_t comm, int rank, int* job_rank);
tpf_status tpf_comm_abort(tpf_comm_t comm);
/* Per-operation deadline of later calls on this handle, in milliseconds (0: the default). */
tpf_status tpf_comm_set_timeout_ms(tpf_comm_t comm, int64_t timeout_ms);

tpf_status tpf_all_reduce(tpf_comm_t comm, const void* send, void* recv, int64_t count, int dtype, int op);
tpf_status tpf_reduce(tpf_comm_t comm, const void* send, void* recv, int64_t count, int dtype, int op, int root);
tpf_status tpf_broadcast(tpf_comm_t comm, const void* send, void* recv, int64_t count, int dtype, int root);
tpf_status tpf_all_gather(tpf_comm_t comm, const void* send, void* recv, int64_t send_count, int dtype);
tpf_status tpf_reduce_scatter(tpf_comm_t comm, const void* send, void* recv, int64_t recv_count, int dtype, int op);
tpf_status tpf_all_to_all(tpf_comm_t comm, const void* send, void* recv, int64_t count, int dtype);
/* A count per pair (MPI_Alltoallv): each array holds one entry per rank, displacements in
   elements; recv_counts[i] on rank j must equal send_counts[j] on rank i. Disagreeing counts, or
   any rank's invalid arguments, fail every rank with the same error. */
tpf_status tpf_all_to_allv(tpf_comm_t comm, const void* send, const int64_t* send_counts,
                           const int64_t* send_displs, void* recv, const int64_t* recv_counts,
                           const int64_t* recv_displs, int dtype);
tpf_status tpf_gather(tpf_comm_t comm, const void* send, void* recv, int64_t send_count, int dtype, int root);
tpf_status tpf_scatter(tpf_comm_t comm, const void* send, void* recv, int64_t recv_count, int dtype, int root);
tpf_status tpf_send(tpf_comm_t comm, const void* buf, int64_t count, int dtype, int peer);
tpf_status tpf_recv(tpf_comm_t comm, void* buf, int64_t count, int dtype, int peer);
tpf_status tpf_barrier(tpf_comm_t comm);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* TPF_TPF_C_H_ */
