// Base64 (RFC 4648, standard alphabet, '=' padding) for bytes that travel in
// JSON: the values ranks swap through musterd's world rendezvous.
//
//   std::string wire = base::base64_encode(bytes);
//   auto back = base::base64_decode(wire);   // nullopt: not base64
#pragma once

#include <optional>
#include <string>

namespace muster::base {

std::string base64_encode(const std::string& bytes);
// nullopt for a length that is not a multiple of 4, a character outside the
// alphabet, or padding anywhere but the last one or two places.
std::optional<std::string> base64_decode(const std::string& text);

}  // namespace muster::base
