// The public Communicator: creation from a launcher's environment or an explicit address, and the
// collective calls, which only describe the operation and hand it to CommImpl.
#include <charconv>
#include <vector>

#include "bootstrap/rendezvous.h"
#include "comm/all_to_allv.h"
#include "comm/comm_impl.h"
#include "comm/settings.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/launch_env.h"

namespace tpf {
namespace {

using coll::OpDesc;
using coll::OpKind;

OpDesc make(OpKind kind, const void* send, void* recv, size_t count, DType dtype,
            ReduceOp op = ReduceOp::sum, int root = 0, int peer = 0) {
  OpDesc desc;
  desc.kind = kind;
  desc.send = send;
  desc.recv = recv;
  desc.count = count;
  desc.dtype = dtype;
  desc.op = op;
  desc.root = root;
  desc.peer = peer;
  return desc;
}

// What Communicator::create makes a communicator of.
detail::CommSetup created_setup(int rank, int size, std::shared_ptr<Store> store,
                                const std::string& name, const CommOptions& options) {
  if (!store) throw Error(ErrorCode::invalid_argument, "Communicator::create: store is null");
  if (name.empty()) throw Error(ErrorCode::invalid_argument, "Communicator::create: empty name");
  detail::CommSetup setup;
  setup.rank = rank;
  setup.size = size;
  setup.name = name;
  setup.store = std::move(store);
  setup.settings = detail::resolve_comm_settings(options);
  setup.job_id = setup.settings.job_id;
  setup.options = options;
  return setup;
}

}  // namespace

Communicator::Communicator() = default;
Communicator::Communicator(std::unique_ptr<detail::CommImpl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

Communicator Communicator::from_env(const CommOptions& options) {
  LaunchEnv env = detect_launch_env();
  detail::CommSettings settings = detail::resolve_comm_settings(options);
  auto rendezvous = bootstrap::rendezvous(env, settings.setup_timeout);
  detail::CommSetup setup;
  setup.rank = env.rank;
  setup.size = env.world_size;
  setup.name = "world";
  setup.store = rendezvous.store;
  setup.job_id = env.job_id.empty() ? settings.job_id : env.job_id;
  setup.keep_alive = std::shared_ptr<TcpStoreServer>(std::move(rendezvous.server));
  setup.store_knows_job_ranks = true;  // its client declared env.rank
  setup.options = options;
  setup.settings = std::move(settings);
  return Communicator(std::make_unique<detail::CommImpl>(std::move(setup)));
}

Communicator Communicator::create(int rank, int size, const std::string& store_address,
                                  const std::string& secret, const CommOptions& options) {
  auto colon = store_address.rfind(':');
  unsigned port = 0;
  const char* begin = store_address.data() + (colon == std::string::npos ? 0 : colon + 1);
  const char* end = store_address.data() + store_address.size();
  auto parsed = std::from_chars(begin, end, port);
  if (colon == std::string::npos || colon == 0 || parsed.ec != std::errc() || parsed.ptr != end ||
      port == 0 || port > 65535) {
    throw Error(ErrorCode::invalid_argument,
                "store address '" + store_address + "' is not of the form host:port");
  }
  auto store = std::make_shared<TcpStoreClient>(
      store_address.substr(0, colon), static_cast<uint16_t>(port), secret,
      detail::resolve_comm_settings(options).setup_timeout, rank);
  detail::CommSetup setup = created_setup(rank, size, std::move(store), "world", options);
  setup.store_knows_job_ranks = true;  // its client declared `rank`
  return Communicator(std::make_unique<detail::CommImpl>(std::move(setup)));
}

Communicator Communicator::create(int rank, int size, std::shared_ptr<Store> store,
                                  const std::string& name, const CommOptions& options) {
  return Communicator(std::make_unique<detail::CommImpl>(
      created_setup(rank, size, std::move(store), name, options)));
}

static detail::CommImpl& checked(const std::unique_ptr<detail::CommImpl>& impl) {
  if (!impl) throw Error(ErrorCode::invalid_argument, "use of an invalid (empty) Communicator");
  return *impl;
}

int Communicator::rank() const { return checked(impl_).rank(); }
int Communicator::size() const { return checked(impl_).size(); }
int Communicator::host_count() const { return checked(impl_).host_count(); }
int Communicator::host_of(int rank) const { return checked(impl_).host_of(rank); }
int Communicator::job_rank(int rank) const { return checked(impl_).job_rank(rank); }
int Communicator::ranks_on_machine() const { return checked(impl_).ranks_on_machine(); }
const std::string& Communicator::name() const { return checked(impl_).name(); }
uint64_t Communicator::next_sequence() const { return checked(impl_).next_sequence(); }
void Communicator::abort() { checked(impl_).abort(); }

Communicator Communicator::split(int color, int key, const CommOptions& options) const {
  return Communicator(checked(impl_).split(color, key, options));
}

Communicator Communicator::shrink(const CommOptions& options) const {
  return Communicator(checked(impl_).shrink(options));
}

Work Communicator::all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                    ReduceOp op, const CallOptions& call) {
  return checked(impl_).submit_async(make(OpKind::all_reduce, send, recv, count, dtype, op), call);
}
Work Communicator::reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                ReduceOp op, int root, const CallOptions& call) {
  return checked(impl_).submit_async(make(OpKind::reduce, send, recv, count, dtype, op, root),
                                     call);
}
Work Communicator::broadcast_async(const void* send, void* recv, size_t count, DType dtype,
                                   int root, const CallOptions& call) {
  return checked(impl_).submit_async(
      make(OpKind::broadcast, send, recv, count, dtype, ReduceOp::sum, root), call);
}
Work Communicator::all_gather_async(const void* send, void* recv, size_t send_count, DType dtype,
                                    const CallOptions& call) {
  return checked(impl_).submit_async(make(OpKind::all_gather, send, recv, send_count, dtype), call);
}
Work Communicator::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                        DType dtype, ReduceOp op, const CallOptions& call) {
  return checked(impl_).submit_async(
      make(OpKind::reduce_scatter, send, recv, recv_count, dtype, op), call);
}
Work Communicator::all_to_all_async(const void* send, void* recv, size_t count, DType dtype,
                                    const CallOptions& call) {
  return checked(impl_).submit_async(make(OpKind::all_to_all, send, recv, count, dtype), call);
}
Work Communicator::all_to_allv_async(const void* send, std::span<const size_t> send_counts,
                                     std::span<const size_t> send_displs, void* recv,
                                     std::span<const size_t> recv_counts,
                                     std::span<const size_t> recv_displs, DType dtype,
                                     const CallOptions& call) {
  detail::CommImpl& impl = checked(impl_);
  // Copies: the caller's count arrays need not outlive this call.
  auto body = [&impl, send, recv, dtype,
               send_counts = std::vector(send_counts.begin(), send_counts.end()),
               send_displs = std::vector(send_displs.begin(), send_displs.end()),
               recv_counts = std::vector(recv_counts.begin(), recv_counts.end()),
               recv_displs = std::vector(recv_displs.begin(), recv_displs.end())](
                  const detail::CommImpl::RunCollective& run_now) {
    const detail::AllToAllvSteps steps{
        [&](const int64_t* mine, int64_t* table, size_t row) {
          run_now(make(OpKind::all_gather, mine, table, row, DType::i64));
        },
        [&](const void* out, void* in, size_t count) {
          run_now(make(OpKind::all_to_all, out, in, count, dtype));
        }};
    detail::all_to_allv(impl.rank(), impl.size(), "communicator '" + impl.name() + "'", send,
                        send_counts, send_displs, recv, recv_counts, recv_displs, dtype, steps, "");
  };
  return impl.submit_composite("all_to_allv", std::move(body), call);
}

Work Communicator::gather_async(const void* send, void* recv, size_t send_count, DType dtype,
                                int root, const CallOptions& call) {
  return checked(impl_).submit_async(
      make(OpKind::gather, send, recv, send_count, dtype, ReduceOp::sum, root), call);
}
Work Communicator::scatter_async(const void* send, void* recv, size_t recv_count, DType dtype,
                                 int root, const CallOptions& call) {
  return checked(impl_).submit_async(
      make(OpKind::scatter, send, recv, recv_count, dtype, ReduceOp::sum, root), call);
}
Work Communicator::send_async(const void* buf, size_t count, DType dtype, int peer,
                              const CallOptions& call) {
  return checked(impl_).submit_async(
      make(OpKind::send, buf, nullptr, count, dtype, ReduceOp::sum, 0, peer), call);
}
Work Communicator::recv_async(void* buf, size_t count, DType dtype, int peer,
                              const CallOptions& call) {
  return checked(impl_).submit_async(
      make(OpKind::recv, nullptr, buf, count, dtype, ReduceOp::sum, 0, peer), call);
}
Work Communicator::barrier_async(const CallOptions& call) {
  return checked(impl_).submit_async(make(OpKind::barrier, nullptr, nullptr, 0, DType::u8), call);
}

// Blocking forms: the same operations, run inline when nothing is queued.
void Communicator::all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                              const CallOptions& call) {
  checked(impl_).run_blocking(make(OpKind::all_reduce, send, recv, count, dtype, op), call);
}
void Communicator::reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                          int root, const CallOptions& call) {
  checked(impl_).run_blocking(make(OpKind::reduce, send, recv, count, dtype, op, root), call);
}
void Communicator::broadcast(const void* send, void* recv, size_t count, DType dtype, int root,
                             const CallOptions& call) {
  checked(impl_).run_blocking(
      make(OpKind::broadcast, send, recv, count, dtype, ReduceOp::sum, root), call);
}
void Communicator::all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                              const CallOptions& call) {
  checked(impl_).run_blocking(make(OpKind::all_gather, send, recv, send_count, dtype), call);
}
void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                  ReduceOp op, const CallOptions& call) {
  checked(impl_).run_blocking(make(OpKind::reduce_scatter, send, recv, recv_count, dtype, op),
                              call);
}
void Communicator::all_to_all(const void* send, void* recv, size_t count, DType dtype,
                              const CallOptions& call) {
  checked(impl_).run_blocking(make(OpKind::all_to_all, send, recv, count, dtype), call);
}
void Communicator::gather(const void* send, void* recv, size_t send_count, DType dtype, int root,
                          const CallOptions& call) {
  checked(impl_).run_blocking(
      make(OpKind::gather, send, recv, send_count, dtype, ReduceOp::sum, root), call);
}
void Communicator::scatter(const void* send, void* recv, size_t recv_count, DType dtype, int root,
                           const CallOptions& call) {
  checked(impl_).run_blocking(
      make(OpKind::scatter, send, recv, recv_count, dtype, ReduceOp::sum, root), call);
}
void Communicator::send(const void* buf, size_t count, DType dtype, int peer,
                        const CallOptions& call) {
  checked(impl_).run_blocking(
      make(OpKind::send, buf, nullptr, count, dtype, ReduceOp::sum, 0, peer), call);
}
void Communicator::recv(void* buf, size_t count, DType dtype, int peer, const CallOptions& call) {
  checked(impl_).run_blocking(
      make(OpKind::recv, nullptr, buf, count, dtype, ReduceOp::sum, 0, peer), call);
}
void Communicator::barrier(const CallOptions& call) {
  checked(impl_).run_blocking(make(OpKind::barrier, nullptr, nullptr, 0, DType::u8), call);
}

}  // namespace tpf
