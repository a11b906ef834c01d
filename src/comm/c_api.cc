// The C API (include/tpf/tpf_c.h): converts arguments, calls the C++ Communicator, and turns
// exceptions into status codes plus a per-thread message.
#include "tpf/tpf_c.h"

#include <new>
#include <string>
#include <vector>

#include "comm/all_to_allv.h"
#include "tpf/comm.h"
#include "tpf/error.h"

struct tpf_comm {
  tpf::Communicator comm;
  tpf::CallOptions call;
};

namespace {

thread_local std::string last_error;

tpf_status fail(tpf_status status, std::string message) {
  last_error = std::move(message);
  return status;
}

// Runs `body`, mapping every exception to a status.
template <class Body>
tpf_status guarded(const char* what, Body&& body) {
  try {
    body();
    return TPF_OK;
  } catch (const tpf::Error& e) {
    return fail(static_cast<tpf_status>(static_cast<int>(e.code()) + 1), e.what());
  } catch (const std::bad_alloc&) {
    return fail(TPF_ERR_RESOURCE, std::string(what) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(TPF_ERR_INTERNAL, std::string(what) + ": " + e.what());
  }
}

void check_handle(tpf_comm_t comm, const char* what) {
  if (comm == nullptr) {
    throw tpf::Error(tpf::ErrorCode::invalid_argument, std::string(what) + ": the communicator is NULL");
  }
}

size_t checked_count(int64_t count, const char* what) {
  if (count < 0) {
    throw tpf::Error(tpf::ErrorCode::invalid_argument,
                     std::string(what) + ": count " + std::to_string(count) + " is negative");
  }
  return static_cast<size_t>(count);
}

tpf::DType as_dtype(int dtype) { return static_cast<tpf::DType>(static_cast<uint8_t>(dtype < 0 || dtype > 255 ? 255 : dtype)); }
tpf::ReduceOp as_op(int op) { return static_cast<tpf::ReduceOp>(static_cast<uint8_t>(op < 0 || op > 255 ? 255 : op)); }

}  // namespace

extern "C" {

const char* tpf_last_error(void) { return last_error.c_str(); }

tpf_status tpf_comm_from_env(tpf_comm_t* out) {
  return guarded("tpf_comm_from_env", [&] {
    if (out == nullptr) throw tpf::Error(tpf::ErrorCode::invalid_argument, "tpf_comm_from_env: out is NULL");
    *out = new tpf_comm{tpf::Communicator::from_env(), {}};
  });
}

tpf_status tpf_comm_create(int rank, int size, const char* store_address, const char* secret,
                           tpf_comm_t* out) {
  return guarded("tpf_comm_create", [&] {
    if (out == nullptr || store_address == nullptr) {
      throw tpf::Error(tpf::ErrorCode::invalid_argument, "tpf_comm_create: out or store_address is NULL");
    }
    *out = new tpf_comm{tpf::Communicator::create(rank, size, store_address, secret ? secret : ""), {}};
  });
}

tpf_status tpf_comm_split(tpf_comm_t comm, int color, int key, tpf_comm_t* out) {
  return guarded("tpf_comm_split", [&] {
    check_handle(comm, "tpf_comm_split");
    if (out == nullptr) throw tpf::Error(tpf::ErrorCode::invalid_argument, "tpf_comm_split: out is NULL");
    tpf::Communicator child = comm->comm.split(color, key);
    *out = child.valid() ? new tpf_comm{std::move(child), comm->call} : nullptr;
  });
}

tpf_status tpf_comm_shrink(tpf_comm_t comm, tpf_comm_t* out) {
  return guarded("tpf_comm_shrink", [&] {
    check_handle(comm, "tpf_comm_shrink");
    if (out == nullptr)
      throw tpf::Error(tpf::ErrorCode::invalid_argument, "tpf_comm_shrink: out is NULL");
    *out = new tpf_comm{comm->comm.shrink(), comm->call};
  });
}

tpf_status tpf_comm_destroy(tpf_comm_t comm) {
  return guarded("tpf_comm_destroy", [&] { delete comm; });
}

tpf_status tpf_comm_rank(tpf_comm_t comm, int* rank) {
  return guarded("tpf_comm_rank", [&] {
    check_handle(comm, "tpf_comm_rank");
    if (rank == nullptr) throw tpf::Error(tpf::ErrorCode::invalid_argument, "tpf_comm_rank: rank is NULL");
    *rank = comm->comm.rank();
  });
}

tpf_status tpf_comm_size(tpf_comm_t comm, int* size) {
  return guarded("tpf_comm_size", [&] {
    check_handle(comm, "tpf_comm_size");
    if (size == nullptr) throw tpf::Error(tpf::ErrorCode::invalid_argument, "tpf_comm_size: size is NULL");
    *size = comm->comm.size();
  });
}

tpf_status tpf_comm_job_rank(tpf_comm_t comm, int rank, int* job_rank) {
  return guarded("tpf_comm_job_rank", [&] {
    check_handle(comm, "tpf_comm_job_rank");
    if (job_rank == nullptr)
      throw tpf::Error(tpf::ErrorCode::invalid_argument, "tpf_comm_job_rank: job_rank is NULL");
    *job_rank = comm->comm.job_rank(rank);
  });
}

tpf_status tpf_comm_abort(tpf_comm_t comm) {
  return guarded("tpf_comm_abort", [&] {
    check_handle(comm, "tpf_comm_abort");
    comm->comm.abort();
  });
}

tpf_status tpf_comm_set_timeout_ms(tpf_comm_t comm, int64_t timeout_ms) {
  return guarded("tpf_comm_set_timeout_ms", [&] {
    check_handle(comm, "tpf_comm_set_timeout_ms");
    if (timeout_ms < 0) {
      throw tpf::Error(tpf::ErrorCode::invalid_argument,
                       "tpf_comm_set_timeout_ms: " + std::to_string(timeout_ms) + " is negative");
    }
    comm->call.timeout = timeout_ms == 0 ? std::nullopt
                                         : std::optional(std::chrono::milliseconds(timeout_ms));
  });
}

tpf_status tpf_all_reduce(tpf_comm_t comm, const void* send, void* recv, int64_t count, int dtype, int op) {
  return guarded("tpf_all_reduce", [&] {
    check_handle(comm, "tpf_all_reduce");
    comm->comm.all_reduce(send, recv, checked_count(count, "tpf_all_reduce"), as_dtype(dtype), as_op(op), comm->call);
  });
}

tpf_status tpf_reduce(tpf_comm_t comm, const void* send, void* recv, int64_t count, int dtype, int op, int root) {
  return guarded("tpf_reduce", [&] {
    check_handle(comm, "tpf_reduce");
    comm->comm.reduce(send, recv, checked_count(count, "tpf_reduce"), as_dtype(dtype), as_op(op), root, comm->call);
  });
}

tpf_status tpf_broadcast(tpf_comm_t comm, const void* send, void* recv, int64_t count, int dtype, int root) {
  return guarded("tpf_broadcast", [&] {
    check_handle(comm, "tpf_broadcast");
    comm->comm.broadcast(send, recv, checked_count(count, "tpf_broadcast"), as_dtype(dtype), root, comm->call);
  });
}

tpf_status tpf_all_gather(tpf_comm_t comm, const void* send, void* recv, int64_t send_count, int dtype) {
  return guarded("tpf_all_gather", [&] {
    check_handle(comm, "tpf_all_gather");
    comm->comm.all_gather(send, recv, checked_count(send_count, "tpf_all_gather"), as_dtype(dtype), comm->call);
  });
}

tpf_status tpf_reduce_scatter(tpf_comm_t comm, const void* send, void* recv, int64_t recv_count, int dtype, int op) {
  return guarded("tpf_reduce_scatter", [&] {
    check_handle(comm, "tpf_reduce_scatter");
    comm->comm.reduce_scatter(send, recv, checked_count(recv_count, "tpf_reduce_scatter"), as_dtype(dtype),
                              as_op(op), comm->call);
  });
}

tpf_status tpf_all_to_all(tpf_comm_t comm, const void* send, void* recv, int64_t count, int dtype) {
  return guarded("tpf_all_to_all", [&] {
    check_handle(comm, "tpf_all_to_all");
    comm->comm.all_to_all(send, recv, checked_count(count, "tpf_all_to_all"), as_dtype(dtype), comm->call);
  });
}

tpf_status tpf_all_to_allv(tpf_comm_t comm, const void* send, const int64_t* send_counts,
                           const int64_t* send_displs, void* recv, const int64_t* recv_counts,
                           const int64_t* recv_displs, int dtype) {
  return guarded("tpf_all_to_allv", [&] {
    check_handle(comm, "tpf_all_to_allv");
    const size_t n = static_cast<size_t>(comm->comm.size());
    // NULL arrays and negative entries are this rank's problem; the C++ call tells every rank.
    std::string problem;
    auto convert = [&](const int64_t* values, const char* name) {
      std::vector<size_t> out(n, 0);
      if (values == nullptr) {
        if (problem.empty()) problem = std::string(name) + " is NULL";
        return out;
      }
      for (size_t i = 0; i < n; ++i) {
        if (values[i] < 0 && problem.empty()) {
          problem = std::string(name) + "[" + std::to_string(i) + "] = " +
                    std::to_string(values[i]) + " is negative";
        }
        out[i] = values[i] < 0 ? 0 : static_cast<size_t>(values[i]);
      }
      return out;
    };
    const auto sc = convert(send_counts, "send_counts");
    const auto sd = convert(send_displs, "send_displs");
    const auto rc = convert(recv_counts, "recv_counts");
    const auto rd = convert(recv_displs, "recv_displs");
    tpf::detail::all_to_allv(comm->comm, send, sc, sd, recv, rc, rd, as_dtype(dtype), comm->call,
                             problem);
  });
}

tpf_status tpf_gather(tpf_comm_t comm, const void* send, void* recv, int64_t send_count, int dtype, int root) {
  return guarded("tpf_gather", [&] {
    check_handle(comm, "tpf_gather");
    comm->comm.gather(send, recv, checked_count(send_count, "tpf_gather"), as_dtype(dtype), root, comm->call);
  });
}

tpf_status tpf_scatter(tpf_comm_t comm, const void* send, void* recv, int64_t recv_count, int dtype, int root) {
  return guarded("tpf_scatter", [&] {
    check_handle(comm, "tpf_scatter");
    comm->comm.scatter(send, recv, checked_count(recv_count, "tpf_scatter"), as_dtype(dtype), root, comm->call);
  });
}

tpf_status tpf_send(tpf_comm_t comm, const void* buf, int64_t count, int dtype, int peer) {
  return guarded("tpf_send", [&] {
    check_handle(comm, "tpf_send");
    comm->comm.send(buf, checked_count(count, "tpf_send"), as_dtype(dtype), peer, comm->call);
  });
}

tpf_status tpf_recv(tpf_comm_t comm, void* buf, int64_t count, int dtype, int peer) {
  return guarded("tpf_recv", [&] {
    check_handle(comm, "tpf_recv");
    comm->comm.recv(buf, checked_count(count, "tpf_recv"), as_dtype(dtype), peer, comm->call);
  });
}

tpf_status tpf_barrier(tpf_comm_t comm) {
  return guarded("tpf_barrier", [&] {
    check_handle(comm, "tpf_barrier");
    comm->comm.barrier(comm->call);
  });
}

}  // extern "C"
