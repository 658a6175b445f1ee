// An in-process Communicator for unit tests: N ranks run as threads of one process and share a
// FakeHub that matches their messages. Same semantics as the real transports (communicator.h):
// FIFO matching per direction, sends complete only once matched by a receive (the strictest
// rendezvous), collectives summed in rank order. Host tensors only. Data is copied straight from
// the sender's tensor into the receiver's, so nothing is staged.
//
//   FakeHub hub(3);
//   std::unique_ptr<Communicator> comm = hub.Make(rank);  // one per thread
//
// Ownership: communicators share the hub's state, so the hub may go before them. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"

namespace baton {

class FakeHub {
 public:
  explicit FakeHub(int size);
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  int size() const;
  // The communicator of `rank`; make each rank's once.
  std::unique_ptr<Communicator> Make(int rank);
  // Aborts every rank: their pending and later operations throw with `reason`.
  void Abort(const std::string& reason);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace baton
