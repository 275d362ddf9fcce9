// The agent routes (/api/v1/agent/workers/{id}/...): muster-agent's side of
// the protocol, each authorised by that worker's agent token.
//
// Protocol (bodies defined in api/agent_protocol.h), as the agent runs it:
//  a) register {ip_address, port?} -> {hold}; the worker becomes running.
//  b) if hold: wait-release (long-poll, 204 = ask again) until 200
//     {env, files}; the agent writes the files and adds the env.
//  c) heartbeat {} every MUSTER_HEARTBEAT_S while the script runs; 409 means
//     the worker was stopped (or declared lost): kill the script and exit.
//  d) exit {exit_code} once the script ended (128+signal if killed).
#pragma once

#include "service/registry/registry.h"
#include "service/router.h"

namespace muster::service {

void register_agent_routes(Router& router, WorkerRegistry& registry);

}  // namespace muster::service
