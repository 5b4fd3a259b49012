// The control loop: rank 0 takes requests from its control socket and broadcasts each as a
// command; every rank executes the commands in the same order.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "mpi/mpi_exchange.hpp"
#include "server/server_rank.hpp"

namespace ddstage::detail {
namespace {

constexpr auto accept_poll = std::chrono::milliseconds(200);

}  // namespace

Message ServerRank::execute(const ControlCommand& command) {
  Message reply;
  // record_memory() is collective: a rank-0-only failure (publish() on a full disk) must not
  // skip it, or rank 0's next broadcast meets the others still inside the gather.
  try {
    if (command.op == "load") {
      reply = load(command.load);
    } else if (command.op == "unload") {
      reply = unload(command.dataset);
    } else if (command.op == "stop") {
      reply = stop();
    }
  } catch (const Error& e) {
    reply = error_reply(ErrorRecord::of(e));
  }
  record_memory();
  return command.op == "status" && is_root() ? status_reply(status()) : reply;
}

Message ServerRank::answer(const Message& request, ControlConnection& client) {
  try {
    const ControlCommand command = command_of(request);
    {
      std::lock_guard lock(m_record_mutex);
      m_running = command.op;
    }
    m_client = &client;
    if (command.op == "stop") return stop_request();
    broadcast(command, comm());
    return execute(command);
  } catch (const Error& e) {
    return error_reply(ErrorRecord::of(e));
  } catch (const YAML::Exception& e) {
    return error_reply({.type = ErrorClass::usage,
                        .kind = ErrorKind::usage,
                        .text = "malformed control request: " + e.msg});
  }
}

void ServerRank::serve_rank0() {
  while (!m_stopping) {
    // The front desk checked the token; what comes here is from a holder of it.
    auto request = m_control->next(accept_poll);
    if (!request) continue;
    const Message reply = answer(request->message, request->connection);
    m_client = nullptr;
    {
      std::lock_guard lock(m_record_mutex);
      m_running.clear();
    }
    m_control->done();
    try {
      request->connection.send(reply);
    } catch (const Error& e) {
      spdlog::warn("could not answer {}: {}", request->connection.peer(), e.what());
    }
    // Stopped alone: the ranks it could not reach are still in MPI_COMM_WORLD.
    if (m_stopped_alone) m_exit.leave(1);
  }
}

void ServerRank::serve_others() {
  while (!m_stopping) execute(broadcast(ControlCommand{}, comm()));
}

std::optional<Message> ServerRank::front_desk(const Message& request, bool busy) {
  // Unchecked YAML from the peer: a missing key must not throw on the front desk's thread.
  const auto op = op_of(request);
  if (op == "heartbeat") {
    if (!m_peers || !m_peers->heard(heartbeat_rank(request))) {
      return error_reply({.type = ErrorClass::usage,
                          .kind = ErrorKind::usage,
                          .text = "heartbeat from no rank of this store"});
    }
    return ok_reply();
  }
  if (op != "status") return std::nullopt;
  StatusReply reply = status();
  std::lock_guard lock(m_record_mutex);
  // A status must not wait for a load to end; what it reports is as of the command before.
  if (busy && !m_running.empty()) reply.busy = m_running;
  return status_reply(reply);
}

}  // namespace ddstage::detail
