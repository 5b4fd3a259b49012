// Rank 0's fan-out: each command's part goes to every live rank's own control socket at once,
// each answer awaited with a deadline, so that a rank lost on the way costs a command, never a
// wait without end; and the parts themselves, as every rank executes them.
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "control/control_channel.hpp"
#include "ddstage/error.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "server/server_rank.hpp"

namespace ddstage::detail {
namespace {

/// One rank's answer, or why none came: the rank did not answer (unreachable), or rank 0 ran out
/// of its own descriptors or memory reaching it (local), which says nothing of the rank.
struct Answer {
  std::optional<Message> reply;
  std::string unreachable;
  std::string local;
};

double fraction_of(const Message& interim) {
  const auto p = progress_of(interim);
  return p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total)
                       : 0.0;
}

}  // namespace

PartReply ServerRank::part(const PartCommand& command,
                           const std::function<void(uint64_t done, uint64_t total)>& progress) {
  if (command.op == "check") {
    check_regions(command);
  } else if (command.op == "fill") {
    auto regions = fill_regions(command, progress);
    return {memory_used(), std::move(regions)};
  } else if (command.op == "commit") {
    auto pending = m_pending.extract(command.dataset);
    // A replaced region is destroyed, not move-assigned: its registration goes before its memory
    // (clients could still read it by its old key) and its tracking after.
    if (!command.add) m_loaded.erase(command.dataset);
    if (pending) {
      auto& held = m_loaded[command.dataset];
      for (auto& shard : pending.mapped()) {
        // Served from now on: the background fill may start (load --lazy --prefetch).
        if (shard.lazy && command.load.prefetch) shard.lazy.region().start_prefetch();
        held.push_back(std::move(shard));
      }
    }
  } else if (command.op == "abort") {
    m_pending.erase(command.dataset);
  } else if (command.op == "unload") {
    m_loaded.erase(command.dataset);
  } else if (command.op == "stop") {
    m_pending.clear();
    m_loaded.clear();
    // A normal end: what ranks killed on this node left goes too (leave() does it otherwise).
    sweep_dead_ranks(m_store_id);
    m_stopping = true;
  } else {
    throw UsageError("unknown part '" + command.op + "'");
  }
  return {memory_used(), {}};
}

PartsOutcome ServerRank::on_ranks(const std::map<int, PartCommand>& parts,
                                  std::chrono::milliseconds timeout,
                                  const std::function<void(int rank, double fraction)>& progress) {
  std::map<int, std::string> addresses;
  {
    std::lock_guard lock(m_descriptor_mutex);
    for (const auto& [rank, part] : parts)
      addresses[rank] = m_descriptor.ranks.at(static_cast<std::size_t>(rank)).control;
  }
  std::map<int, Answer> answers;
  for (const auto& [rank, part] : parts) answers[rank];  // every slot made before the threads
  {
    std::vector<std::jthread> senders;
    for (const auto& [rank, part] : parts) {
      if (rank == 0) continue;
      senders.emplace_back([&, rank = rank, &part = part, &answer = answers[rank]] {
        try {
          answer.reply = control_request(addresses.at(rank), m_token, part_request(part), timeout,
                                         [&](const Message& interim) {
                                           if (progress) progress(rank, fraction_of(interim));
                                         });
        } catch (const IoError& e) {
          (local_resource_error(e.native_code()) ? answer.local : answer.unreachable) = e.what();
        } catch (const std::exception& e) {
          answer.unreachable = e.what();
        }
      });
    }
    if (const auto own = parts.find(0); own != parts.end()) {
      answers[0].reply = guarded_part(own->second, [&](uint64_t done, uint64_t total) {
        if (progress)
          progress(0, total ? static_cast<double>(done) / static_cast<double>(total) : 1);
      });
    }
  }  // the senders join here
  PartsOutcome outcome;
  for (auto& [rank, answer] : answers) {
    std::optional<ErrorRecord> failure;
    if (!answer.local.empty()) {
      // Never a reason to mark the rank lost: the command fails as rank 0's own.
      failure = ErrorRecord{
          .text = fmt::format("could not reach rank {} for the {}: {} (rank 0's own limit, not "
                              "the rank's loss: raise `ulimit -n` or free memory)",
                              rank, parts.at(rank).op, answer.local)};
    } else if (!answer.reply) {
      mark_lost(rank, "no answer to rank 0: " + answer.unreachable);
      failure = ErrorRecord{
          .text = fmt::format("lost during the {}: {}", parts.at(rank).op, answer.unreachable)};
    } else if (auto refused = failure_of(*answer.reply)) {
      failure = std::move(refused);
    } else {
      try {
        outcome.replies[rank] = part_reply_of(*answer.reply);
        std::lock_guard lock(m_record_mutex);
        m_memory_used.at(static_cast<std::size_t>(rank)) = outcome.replies[rank].memory_used;
      } catch (const Error& e) {
        failure = ErrorRecord::of(e);
      }
    }
    if (failure && !outcome.failure)
      outcome.failure.emplace(answer.local.empty() ? rank : 0, std::move(*failure));
  }
  return outcome;
}

Message ServerRank::guarded_part(
    const PartCommand& command,
    const std::function<void(uint64_t done, uint64_t total)>& progress) {
  try {
    return part_reply(part(command, progress));
  } catch (const Error& e) {
    return error_reply(ErrorRecord::of(e));
  } catch (const std::exception& e) {
    // Out of memory, threads or descriptors: the part fails, the rank serves on.
    return error_reply({.text = e.what()});
  }
}

void ServerRank::raise_failure(const PartsOutcome& outcome) const {
  if (!outcome.failure) return;
  const auto& [rank, error] = *outcome.failure;
  error.raise(m_mpi.size() == 1 ? std::string() : rank_label(rank) + ": ");
}

}  // namespace ddstage::detail
