#include "loopback.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <array>
#include <memory>

namespace ddstage::detail {

bool is_loopback(const sockaddr& addr) noexcept {
  if (addr.sa_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(addr);
    return (ntohl(in.sin_addr.s_addr) >> 24) == 127;
  }
  if (addr.sa_family != AF_INET6) return false;
  const auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(&in6) || (IN6_IS_ADDR_V4MAPPED(&in6) && in6.s6_addr[12] == 127);
}

std::string numeric_host(const sockaddr& addr) {
  const socklen_t length = addr.sa_family == AF_INET    ? sizeof(sockaddr_in)
                           : addr.sa_family == AF_INET6 ? sizeof(sockaddr_in6)
                                                        : 0;
  std::array<char, NI_MAXHOST> host{};
  if (length == 0 ||
      ::getnameinfo(&addr, length, host.data(), host.size(), nullptr, 0, NI_NUMERICHOST) != 0) {
    return {};
  }
  return host.data();
}

std::string loopback_address_of(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &list) != 0) return {};
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(list, &::freeaddrinfo);
  for (const addrinfo* ai = list; ai; ai = ai->ai_next) {
    if (ai->ai_addr && is_loopback(*ai->ai_addr)) return numeric_host(*ai->ai_addr);
  }
  return {};
}

}  // namespace ddstage::detail
