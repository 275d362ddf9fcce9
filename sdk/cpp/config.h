// Finding musterd: URL and token, each separately, in this order:
//   1. explicit values (ClientOptions), 2. MUSTER_URL / MUSTER_TOKEN,
//   3. the state directory ($MUSTER_STATE_DIR, else $HOME/.muster):
//      <state>/musterd.json {"url": ...} and <state>/token (both written by musterd).
#pragma once

#include <string>

namespace muster::sdk {

struct Endpoint {
  std::string url;    // "http://127.0.0.1:7878", no trailing slash
  std::string token;
};

// The state directory as above.
std::string state_dir();

// Fills what `given` leaves empty; throws MusterError("unconfigured") naming
// what is missing and where it looked.
Endpoint discover(Endpoint given = {});

}  // namespace muster::sdk
