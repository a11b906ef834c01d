#include "support/async_waits.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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

void expect_timed_waits_end_at_their_time(Communicator& comm, int peer) {
  const size_t count = (size_t{1} << 18) + 5;  // 1 MiB: many chunks within a host
  auto value = [](size_t i) { return static_cast<int32_t>(i * 31 + 7); };
  if (comm.rank() == 0) {
    std::vector<int32_t> in(count, -1);
    Work received = comm.recv_async(in.data(), count, DType::i32, peer);
    TPF_CHILD_CHECK(!received.wait_for(std::chrono::milliseconds(1)),
                    "wait_for returned true before the peer had sent");
    TPF_CHILD_CHECK(!received.completed(), "the receive ended before the peer had sent");
    comm.barrier();  // now the peer sends
    TPF_CHILD_CHECK(received.wait_for(std::chrono::seconds(60)), "the receive never finished");
    for (size_t i = 0; i < count; ++i) {
      if (in[i] == value(i)) continue;
      TPF_CHILD_CHECK(false, "element " + std::to_string(i) + " is " + std::to_string(in[i]));
    }
    return;
  }
  comm.barrier();
  if (comm.rank() != peer) return;
  std::vector<int32_t> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = value(i);
  comm.send(out.data(), count, DType::i32, 0);
}

}  // namespace tpf::testing
