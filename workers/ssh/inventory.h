// Inventory: the hosts the SSH backend places workers on.
//
// File format: one host a line; `#` starts a comment; blank lines are ignored.
//
//   # address        key=value settings (all optional)
//   gpu1.lab         user=alice identity=~/.ssh/id_ed25519 slots=4
//   10.213.0.2       port=2222 user=root identity=/root/.muster/container/ssh/id_ed25519 slots=2
//
// Keys: port (default 22), user (default $USER, else root), identity (a
// private key file; default ~/.ssh/id_ed25519), slots (workers the host takes
// at once, default 1). `~/` expands to $HOME. Errors name file and line.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "api/status.h"
#include "workers/remote/host.h"
#include "workers/remote/remote.h"

namespace muster::workers::ssh {

// The ssh backend is built on workers/remote/ (shared with the container
// backend): its hosts, sessions and connector are remote's.
using remote::ConnectOptions;
using remote::Connector;
using remote::Host;
using remote::ReadEvent;
using remote::ReadState;
using remote::RemoteProcess;
using remote::RemoteResult;
using remote::RemoteSession;
using remote::make_libssh2_connector;
using base::shell_quote;

// `source` names the text in errors (usually the file path).
api::Result<std::vector<Host>> parse_inventory(const std::string& text, const std::string& source);
api::Result<std::vector<Host>> load_inventory(const std::filesystem::path& file);

}  // namespace muster::workers::ssh
