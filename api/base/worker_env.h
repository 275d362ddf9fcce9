// The worker's environment, named once: every MUSTER_* variable musterd, a
// backend or muster-agent sets for a worker (the agent, and the script it
// runs), with who sets it and who reads it. C++ spells none of these names
// but here; the Python modules that read one are named beside it (another
// language has to spell the string, once per module).
//
// Not here: the runtime's tuning knobs (MUSTER_COMM_*, MUSTER_PS_TIMEOUT_MS,
// MUSTER_FUSION_THRESHOLD_MB, ...: a user's settings, read in
// runtime/comm/comm_env.cc, runtime/ps/options.cc and the runtime units
// beside them), and the notebook's (MUSTER_STATE_DIR, MUSTER_TOKEN: the
// SDKs, sdk/cpp/config.cc and muster/config.py).
// This is the floor (api/base): the agent protocol (api/agent_protocol.h),
// the world rendezvous (clusterspec/rendezvous_protocol.h) and the runtime
// all take their names from it.
#pragma once

namespace muster::base {

// ---- The agent's, set by musterd when it launches a worker (api::to_env,
// read by api::parse_agent_env in muster-agent).
// The daemon as the worker reaches it: http(s)://<master_ip>:<port>. The
// script reads it too: runtime/report/metrics_reporter.cc; muster/_http.py,
// muster/config.py, muster/metrics.py.
inline constexpr const char* kEnvUrl = "MUSTER_URL";
// The worker's id (also the script's: metrics_reporter.cc, the rendezvous
// client; muster/metrics.py).
inline constexpr const char* kEnvWorkerId = "MUSTER_WORKER_ID";
// The agent's bearer token (the agent hides it from the script; a script
// started by hand may use it for its metrics: muster/metrics.py).
inline constexpr const char* kEnvAgentToken = "MUSTER_AGENT_TOKEN";
// The daemon's address on the workers' network.
inline constexpr const char* kEnvMasterIp = "MUSTER_MASTER_IP";
// Seconds between the agent's heartbeats.
inline constexpr const char* kEnvHeartbeatSeconds = "MUSTER_HEARTBEAT_S";
// "1": the agent reserves a TCP port and registers it (cluster tasks).
inline constexpr const char* kEnvReservePort = "MUSTER_RESERVE_PORT";
// The worker's cores and GiB, for the agent's limits.
inline constexpr const char* kEnvCpu = "MUSTER_CPU";
inline constexpr const char* kEnvMemoryGb = "MUSTER_MEMORY_GB";
// Seconds the agent runs on without reaching the daemon (never set by the daemon).
inline constexpr const char* kEnvOrphanTimeoutSeconds = "MUSTER_ORPHAN_TIMEOUT_S";
// Seconds the agent gives what the script left running between SIGTERM and SIGKILL.
inline constexpr const char* kEnvStopGraceSeconds = "MUSTER_STOP_GRACE_S";
// The cgroup v2 directory the backend chose for the worker ("none": none).
inline constexpr const char* kEnvCgroup = "MUSTER_CGROUP";
// musterd's own soft limit on open files, put back by the agent for the script.
inline constexpr const char* kEnvFileLimit = "MUSTER_NOFILE_SOFT";
// What enforces cpu and memory when the backend's runtime does ("the pod").
inline constexpr const char* kEnvLimitsEnforcedBy = "MUSTER_LIMITS_ENFORCED_BY";
// For tests only: a directory standing in for /sys/fs/cgroup.
inline constexpr const char* kEnvCgroupRoot = "MUSTER_CGROUP_ROOT";
// How an https:// daemon is verified: its certificate's SHA-256 (what
// musterd sets) and/or a CA file on the worker's host; the script inherits
// both (runtime clients, api/base/client_socket.h; muster/tls.py,
// muster/config.py, muster/metrics.py, muster/client.py).
inline constexpr const char* kEnvTlsFingerprint = "MUSTER_TLS_FINGERPRINT";
inline constexpr const char* kEnvCaFile = "MUSTER_CA_FILE";
// Where the agent writes the worker's output, its cap and its rotation
// (set by the backend that starts the agent: api/log_capture.h).
inline constexpr const char* kEnvLogFile = "MUSTER_LOG_FILE";
inline constexpr const char* kEnvLogMaxBytes = "MUSTER_LOG_MAX_BYTES";
inline constexpr const char* kEnvLogKeep = "MUSTER_LOG_KEEP";

// ---- The script's, passed through by the agent or set by it.
// The worker's token for the training metrics it posts (metrics_reporter.cc;
// muster/metrics.py).
inline constexpr const char* kEnvMetricsToken = "MUSTER_METRICS_TOKEN";
// musterd's project directory (the examples' notebooks).
inline constexpr const char* kEnvProjectDir = "MUSTER_PROJECT_DIR";
// The GPUs reserved for the worker: "0,1".
inline constexpr const char* kEnvGpuDevices = "MUSTER_GPU_DEVICES";
// Set by the agent once it registered: the worker's address, its reserved
// port, and its scratch directory (muster/__init__.py).
inline constexpr const char* kEnvIpAddress = "MUSTER_IP_ADDRESS";
inline constexpr const char* kEnvPort = "MUSTER_PORT";
inline constexpr const char* kEnvWorkerDir = "MUSTER_WORKER_DIR";
// Where the runtime extension is, when musterd found one (service/worker_python.h;
// muster/extension_path.py, muster/runtime.py, muster/interpreter.py, muster/torch/ps.py).
inline constexpr const char* kEnvRuntimePath = "MUSTER_RUNTIME_PATH";

// ---- A cluster task's (service/cluster/: tasks.cc and the modes).
// The cluster the task belongs to (every mode's tasks; rendezvous client).
inline constexpr const char* kEnvClusterId = "MUSTER_CLUSTER_ID";
// Its task type and index (ps and torchrun modes).
inline constexpr const char* kEnvTaskType = "MUSTER_TASK_TYPE";
inline constexpr const char* kEnvTaskIndex = "MUSTER_TASK_INDEX";
// How many times the cluster restarted (max_restarts).
inline constexpr const char* kEnvRestartCount = "MUSTER_RESTART_COUNT";
// The secret of a ps cluster's parameter servers (runtime/ps/options.cc).
inline constexpr const char* kEnvPsSecret = "MUSTER_PS_SECRET";
// mpi mode: every rank's host's GPUs, read by the rank wrapper of
// service/cluster/mpi_mode.cc (a shell line, which sets MUSTER_GPU_DEVICE).
inline constexpr const char* kEnvRankGpus = "MUSTER_RANK_GPUS";
// The interface muster's TCP transport uses between hosts
// (runtime/comm/tcp/interfaces.cc), from the request (elastic) or the
// registered address (torchrun).
inline constexpr const char* kEnvCommTcpInterface = "MUSTER_COMM_TCP_IFACE";

// ---- An elastic cluster's rank (clusterspec/rendezvous_protocol.h; the
// runtime's rendezvous client, runtime/comm/musterd/, and runtime/elastic/;
// muster/torch/elastic/membership.py, muster/torch/optimizer.py).
// musterd for the rendezvous calls: http://host:port.
inline constexpr const char* kEnvRendezvousUrl = "MUSTER_RENDEZVOUS_URL";
// The bearer of the rendezvous calls.
inline constexpr const char* kEnvRendezvousToken = "MUSTER_RENDEZVOUS_TOKEN";
// How long a rank waits for a generation to form (ms): the start timeout.
inline constexpr const char* kEnvRendezvousTimeoutMs = "MUSTER_RENDEZVOUS_TIMEOUT_MS";
// The world's bounds.
inline constexpr const char* kEnvElasticMinNp = "MUSTER_ELASTIC_MIN_NP";
inline constexpr const char* kEnvElasticMaxNp = "MUSTER_ELASTIC_MAX_NP";

}  // namespace muster::base
