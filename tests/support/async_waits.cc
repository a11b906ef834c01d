#include "support/async_waits.h"

#include <cstdint>
#include <optional>

#include "support/expect_error.h"
#include "support/multiproc.h"
#include "tpf/error.h"

namespace tpf::testing {

void expect_destroy_ends_a_pending_wait(Communicator& comm, int peer) {
  std::optional<Communicator> pair = comm.split(0, comm.rank());
  if (comm.rank() == 0) {
    int32_t never = -1;
    WaitOnAnotherThread waiter(pair->recv_async(&never, 1, DType::i32, peer));
    pair.reset();
    const Error e = expect_error("the wait", [&] { waiter.join(); });
    TPF_CHILD_CHECK(e.code() == ErrorCode::aborted, e.what());
    TPF_CHILD_CHECK(never == -1, "the buffer was written");
  }
  comm.barrier();  // rank 0 is done: the others may leave now
}

}  // namespace tpf::testing
