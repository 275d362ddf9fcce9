// Names and addresses that reach a command line or a cluster spec.
//
// These are the only shapes of host, port and environment-variable name that
// clusterspec/ accepts, so nothing a caller sends can smuggle shell syntax or
// an extra argument into a launch line.
#pragma once

#include <optional>
#include <string>

namespace muster::clusterspec {

// ^[A-Za-z0-9._-]+$ (host names and IPv4 addresses), at most 253 characters,
// not starting with '-' or '.'.
bool is_valid_host(const std::string& host);
inline constexpr const char* kHostRule = "must match ^[A-Za-z0-9._-]+$ and not start with '-' or '.'";

// ^[A-Za-z_][A-Za-z0-9_]*$
bool is_valid_env_name(const std::string& name);

// A network interface name as Linux allows it: 1..15 characters of
// [A-Za-z0-9._-], not starting with '-'.
bool is_valid_interface(const std::string& name);

// "host:port" split into its parts.
struct Address {
  std::string host;  // without brackets for IPv6
  int port = 0;
};

// Parses "host:port" or "[ipv6]:port"; port 1..65535 in decimal.
// Throws SpecError naming the address and what is wrong with it.
Address parse_address(const std::string& address);

// The same check without throwing: nullopt when valid, else the reason.
std::optional<std::string> address_error(const std::string& address);

// A value quoted for an error message: in double quotes, control characters
// as \xNN, cut after 80 characters. Never lets a newline or NUL through.
std::string quoted(const std::string& value);

// "host:port", bracketing hosts that contain ':'.
std::string format_address(const std::string& host, int port);

}  // namespace muster::clusterspec
