// A communicator's first failure, recorded in the job's store: the way its cause reaches a rank
// on another host when the connection the notice would take is gone. UCX closes a connection
// whose send buffer it cannot read, so the peer on the other end learns of the failure only as
// a lost connection; where a host-mate of the peer heard the notice, the host's shared memory
// tells it (UcxNetwork::set_host_failures), but with one rank per host nobody is left to tell
// it but the store. The first rank to publish wins; later ones change nothing.
//
// Store operations run on threads of their own: a store that does not answer (its host lost, or
// stopped) holds up neither the failing rank nor a rank waiting for a notice beyond the waits
// they choose (a TCP store's own bound is 30 s past its request). Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "tpf/store.h"
#include "transport/shm_fabric.h"

namespace tpf::transport {

class FailureBoard {
 public:
  // `store`: the communicator's own (prefixed) store; null: nothing is published or read.
  explicit FailureBoard(std::shared_ptr<Store> store);
  ~FailureBoard();  // stops the reader; a publication in flight finishes on its own
  FailureBoard(const FailureBoard&) = delete;
  FailureBoard& operator=(const FailureBoard&) = delete;

  // Publishes `record` unless another rank did first (the first call only); returns at once.
  void publish(const FailureRecord& record);
  // Waits at most `limit` for this rank's publication to reach the store (so that a process that
  // exits after its failure leaves it there); true if it did or none was started.
  bool await_published(std::chrono::milliseconds limit);
  // The record a rank published, where it is known by now. Never blocks: the first call starts a
  // reader that looks every kLookEvery until it finds one or the board goes.
  std::optional<FailureRecord> published();

  static constexpr std::chrono::milliseconds kLookEvery{5};

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the threads, which may outlive the board
};

// The record a rank published on the board of `store` (the communicator's prefixed store), if any
// by now: one look, two store calls where there is one (CreationWatchStore looks so between the
// slices of a creation's waits). Throws what the store throws.
std::optional<FailureRecord> read_published_failure(Store& store);

// A record as the store holds it and a failure notice carries it ("<code>\n<message>", or
// "<code> <lost process>\n<message>" where it names one), and back; nullopt for a value that is
// not one.
std::string encode_failure_record(const FailureRecord& record);
std::optional<FailureRecord> decode_failure_record(const std::string& text);

}  // namespace tpf::transport
