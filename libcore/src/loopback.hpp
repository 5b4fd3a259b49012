// Addresses that only reach the host they are used on, which a store spanning hosts must not
// publish.
#pragma once

#include <sys/socket.h>

#include <string>

namespace ddstage::detail {

/// True for 127.0.0.0/8, ::1 and IPv4-mapped 127.x addresses.
bool is_loopback(const sockaddr& addr) noexcept;

/// The numeric host of an IPv4 or IPv6 socket address ("10.9.0.2", "::1"); empty for others.
std::string numeric_host(const sockaddr& addr);

/// The first loopback address `host` resolves to (numeric: Debian's "127.0.1.1 NAME" line
/// gives "127.0.1.1"), or empty when it resolves to none, or not at all.
std::string loopback_address_of(const std::string& host);

}  // namespace ddstage::detail
