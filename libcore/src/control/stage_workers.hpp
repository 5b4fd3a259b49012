// Where a rank answers stage requests: threads of their own, so that reading origin for a
// first touch never holds up the front desk (heartbeats, status) nor waits behind a command.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "control_server.hpp"
#include "stage_messages.hpp"

namespace ddstage::detail {

struct StageWorkersOptions {
  /// Requests answered at once: each may wait on origin, and several asking for the same
  /// samples wait on the one that fetches them.
  unsigned threads = 4;
  /// Requests waiting for a thread; one more is refused at once (the reader fails over to
  /// another replica, or retries) rather than queued without bound.
  std::size_t max_queued = 1024;
  /// How long a reader may take to read its reply before it is dropped.
  std::chrono::milliseconds send_timeout{10000};
};

/// A pool answering stage requests (stage_messages.hpp's answer_stage) on the connections
/// they came on.
class StageWorkers {
 public:
  /// find is called on the workers' threads, several at once.
  explicit StageWorkers(FindLazyRegion find, StageWorkersOptions options = {});
  /// Finishes the requests being answered; queued ones are dropped unanswered (their readers
  /// see the connection close, as they would see this rank go).
  ~StageWorkers();
  StageWorkers(const StageWorkers&) = delete;
  StageWorkers& operator=(const StageWorkers&) = delete;

  /// Queues request (an authenticated {op: stage}) for a worker; never blocks. Past
  /// max_queued it is refused at once with an error reply.
  void submit(ControlRequest request);

 private:
  void run(const std::stop_token& stop);

  FindLazyRegion m_find;
  StageWorkersOptions m_options;
  std::mutex m_mutex;
  std::condition_variable_any m_ready;
  std::deque<ControlRequest> m_queue;
  std::vector<std::jthread> m_threads;  // last: started once the rest is set, stopped first
};

}  // namespace ddstage::detail
