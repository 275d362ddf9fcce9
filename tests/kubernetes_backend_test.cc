// The Kubernetes backend without a cluster: the exact Pod and Secret it
// creates, the launch's undo, what pods and nodes say (watch events -> poll),
// 410 Gone, adoption, gangs, followed logs and the options' errors, over a
// FakeApi (tests/fake_kubernetes_api.h) that records every request and plays
// a tiny API server.
// The real control plane is exercised by tests/kubernetes_integration_test.py.
#include <gtest/gtest.h>

#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "api/base/base64.h"
#include "tests/fake_kubernetes_api.h"
#include "tests/temp_dir.h"
#include "workers/kubernetes/gang.h"
#include "workers/kubernetes/kubernetes_backend.h"
#include "workers/kubernetes/pod_log.h"
#include "workers/kubernetes/pod_manifest.h"
#include "workers/kubernetes/pod_state.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;
using muster::api::WorkerStatus;
using muster::workers::LaunchSpec;
using muster::workers::ProcessState;
namespace k8s = muster::workers::kubernetes;

namespace {

using muster::testing::Call;
using muster::testing::FakeApi;

json node(const std::string& name, const std::string& cpu, const std::string& memory, const std::string& ready = "True") {
  return {{"metadata", {{"name", name}}},
          {"status",
           {{"allocatable", {{"cpu", cpu}, {"memory", memory}, {"pods", "110"}}},
            {"conditions", json::array({{{"type", "Ready"}, {"status", ready}, {"message", "kubelet says so"}}})}}}};
}

k8s::KubernetesOptions options(const fs::path& state) {
  k8s::KubernetesOptions o;
  o.state_dir = state;
  o.namespace_name = "ml";
  o.image = "muster-agent:1";
  o.master_address = "10.0.0.1";
  o.host_mounts = {"/usr", "/work/build"};
  o.daemon_id = "d1";
  o.start_threads = false;
  return o;
}

LaunchSpec spec(const std::string& id, const fs::path& state, double cpu = 0.5, double mem = 1.5) {
  LaunchSpec s;
  s.worker_id = id;
  s.cpu = cpu;
  s.memory_gb = mem;
  s.agent_argv = {"/work/build/bin/muster-agent", "--kernel", "python3", "--script", "/proj/train.py", "--"};
  s.working_dir = state / "workers" / id;
  s.log_path = s.working_dir / "output.log";
  fs::create_directories(s.working_dir);
  s.env = {{"MUSTER_URL", "https://10.0.0.1:7878"},
           {"MUSTER_WORKER_ID", id},
           {"MUSTER_AGENT_TOKEN", "secret-" + id},
           {"MUSTER_PROJECT_DIR", "/proj"},
           {"MUSTER_LOG_FILE", s.log_path.string()},
           {"MUSTER_LOG_MAX_BYTES", "65536"},
           {"MUSTER_LOG_KEEP", "1"}};
  return s;
}

std::string event(const std::string& type, const json& pod) { return json{{"type", type}, {"object", pod}}.dump() + "\n"; }

json with_status(json pod, const json& status) {
  pod["status"] = status;
  pod["metadata"]["resourceVersion"] = "200";
  return pod;
}

struct Fixture {
  muster::testing::TempDir dir{"muster-k8s"};
  FakeApi* api = nullptr;
  std::unique_ptr<k8s::KubernetesBackend> backend;
  explicit Fixture(std::function<void(k8s::KubernetesOptions&)> tweak = {}) {
    auto fake = std::make_unique<FakeApi>();
    api = fake.get();
    auto o = options(dir.path());
    if (tweak) tweak(o);
    auto b = k8s::KubernetesBackend::create(o, std::move(fake));
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    backend = std::move(b).value();
  }
};

TEST(KubernetesQuantities, CpuAndMemoryAsTheApiWritesThem) {
  EXPECT_EQ(k8s::cpu_quantity(0.5), "500m");
  EXPECT_EQ(k8s::cpu_quantity(2), "2000m");
  EXPECT_EQ(k8s::cpu_quantity(0.0001), "1m");
  EXPECT_EQ(k8s::memory_quantity(1.5), "1536Mi");
  EXPECT_EQ(k8s::memory_quantity(2), "2Gi");
  EXPECT_EQ(k8s::parse_milli_quantity("1900m"), 1900);
  EXPECT_EQ(k8s::parse_milli_quantity("2"), 2000);
  EXPECT_EQ(k8s::parse_milli_quantity("0.5"), 500);
  EXPECT_EQ(k8s::parse_quantity("3916484Ki"), 3916484LL * 1024);
  EXPECT_EQ(k8s::parse_quantity("1Gi"), 1LL << 30);
  EXPECT_EQ(k8s::parse_quantity("2M"), 2000000);
  EXPECT_EQ(k8s::parse_quantity("1e3"), 1000);
  EXPECT_FALSE(k8s::parse_quantity("lots"));
  EXPECT_FALSE(k8s::parse_quantity("1Qi"));
}

TEST(KubernetesPodManifest, ExactPodAndSecret) {
  muster::testing::TempDir dir("muster-k8s");
  auto o = options(dir.path());
  LaunchSpec s = spec("w1", dir.path());
  s.nvidia_gpu = 2;
  const std::string wd = s.working_dir.string();
  const json want = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", "muster-d1-w1"},
        {"namespace", "ml"},
        {"labels", {{"app.kubernetes.io/managed-by", "musterd"}, {"muster.io/daemon", "d1"}, {"muster.io/worker", "w1"}}}}},
      {"spec",
       {{"restartPolicy", "Never"},
        {"enableServiceLinks", false},
        {"automountServiceAccountToken", false},
        {"containers",
         {{{"name", "agent"},
           {"image", "muster-agent:1"},
           {"imagePullPolicy", "IfNotPresent"},
           {"command", s.agent_argv},
           {"workingDir", wd},
           {"env",
            {{{"name", "MUSTER_CGROUP"}, {"value", "none"}},
             {{"name", "MUSTER_LIMITS_ENFORCED_BY"}, {"value", "kubernetes"}},
             {{"name", "MUSTER_PROJECT_DIR"}, {"value", "/proj"}},
             {{"name", "MUSTER_URL"}, {"value", "https://10.0.0.1:7878"}},
             {{"name", "MUSTER_WORKER_ID"}, {"value", "w1"}},
             {{"name", "MUSTER_AGENT_TOKEN"},
              {"valueFrom", {{"secretKeyRef", {{"name", "muster-d1-w1-token"}, {"key", "agent-token"}}}}}}}},
           {"resources",
            {{"requests", {{"cpu", "500m"}, {"memory", "1536Mi"}}},
             {"limits", {{"cpu", "500m"}, {"memory", "1536Mi"}, {"nvidia.com/gpu", "2"}}}}},
           {"volumeMounts",
            {{{"name", "worker"}, {"mountPath", wd}},
             {{"name", "project"}, {"mountPath", "/proj"}},
             {{"name", "host-0"}, {"mountPath", "/usr"}, {"readOnly", true}},
             {{"name", "host-1"}, {"mountPath", "/work/build"}, {"readOnly", true}}}}}}},
        {"volumes",
         {{{"name", "worker"}, {"emptyDir", json::object()}},
          {{"name", "project"}, {"hostPath", {{"path", "/proj"}, {"type", "Directory"}}}},
          {{"name", "host-0"}, {"hostPath", {{"path", "/usr"}, {"type", "Directory"}}}},
          {{"name", "host-1"}, {"hostPath", {{"path", "/work/build"}, {"type", "Directory"}}}}}}}}};
  EXPECT_EQ(k8s::pod_manifest(s, o, "d1"), want) << k8s::pod_manifest(s, o, "d1").dump(2);
  const json secret = k8s::secret_manifest(s, o, "d1");
  EXPECT_EQ(secret["metadata"]["name"], "muster-d1-w1-token");
  EXPECT_EQ(secret["stringData"]["agent-token"], "secret-w1");
  EXPECT_EQ(secret["metadata"]["labels"]["muster.io/worker"], "w1");
  // The token is never in the Pod.
  EXPECT_EQ(k8s::pod_manifest(s, o, "d1").dump().find("secret-w1"), std::string::npos);

  // A PVC for the project, the agent at another path in the image, a service account.
  o.project_volume = {k8s::ProjectVolume::Kind::kClaim, "project-rwx"};
  o.agent_path = "/opt/muster/bin/muster-agent";
  o.service_account = "muster-workers";
  const json pod = k8s::pod_manifest(s, o, "d1");
  EXPECT_EQ(pod["spec"]["volumes"][1], (json{{"name", "project"}, {"persistentVolumeClaim", {{"claimName", "project-rwx"}}}}));
  EXPECT_EQ(pod["spec"]["containers"][0]["command"][0], "/opt/muster/bin/muster-agent");
  EXPECT_EQ(pod["spec"]["serviceAccountName"], "muster-workers");
  EXPECT_EQ(pod["spec"]["automountServiceAccountToken"], true);
}

TEST(KubernetesBackend, LaunchCreatesTheSecretThenThePod) {
  Fixture f;
  ASSERT_TRUE(f.backend->launch({spec("w1", f.dir.path())}).is_ok());
  const auto posts = f.api->calls_of("POST");
  ASSERT_EQ(posts.size(), 2u);
  EXPECT_EQ(posts[0].path, "/api/v1/namespaces/ml/secrets");
  EXPECT_EQ(posts[1].path, "/api/v1/namespaces/ml/pods");
  EXPECT_EQ(json::parse(posts[1].body), k8s::pod_manifest(spec("w1", f.dir.path()), options(f.dir.path()), "d1"));
  EXPECT_EQ(f.backend->poll("w1").state, ProcessState::kPending);
  const json id = json::parse(f.backend->process_identity("w1"));
  EXPECT_EQ(id["pod"], "muster-d1-w1");
  EXPECT_EQ(id["uid"], "uid-muster-d1-w1");
  EXPECT_EQ(id["max_bytes"], 64ull << 20);
}

TEST(KubernetesBackend, ARefusedPodUndoesTheLaunchAndNamesTheWorker) {
  Fixture f;
  int pods_posted = 0;
  f.api->refuse = [&pods_posted](const std::string& method, const std::string& path) {
    return method == "POST" && path == "/api/v1/namespaces/ml/pods" && ++pods_posted == 2;
  };
  const auto s = f.backend->launch({spec("w1", f.dir.path()), spec("w2", f.dir.path())});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("worker w2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("refused by the test"), std::string::npos) << s.message();
  std::vector<std::string> deleted;
  for (const auto& c : f.api->calls_of("DELETE")) deleted.push_back(c.path);
  const std::vector<std::string> want = {
      "/api/v1/namespaces/ml/pods/muster-d1-w1?gracePeriodSeconds=0", "/api/v1/namespaces/ml/secrets/muster-d1-w1-token",
      "/api/v1/namespaces/ml/pods/muster-d1-w2?gracePeriodSeconds=0", "/api/v1/namespaces/ml/secrets/muster-d1-w2-token"};
  EXPECT_EQ(deleted, want);
  EXPECT_TRUE(f.api->pods.empty());
  EXPECT_EQ(f.backend->poll("w1").state, ProcessState::kUnknown);
}

TEST(KubernetesBackend, WatchEventsBecomeWorkerStates) {
  Fixture f;
  ASSERT_TRUE(f.backend->launch({spec("w1", f.dir.path()), spec("w2", f.dir.path()), spec("w3", f.dir.path()),
                                 spec("w4", f.dir.path())})
                  .is_ok());
  ASSERT_TRUE(f.backend->relist().is_ok());
  const json p1 = f.api->pods["muster-d1-w1"], p2 = f.api->pods["muster-d1-w2"], p3 = f.api->pods["muster-d1-w3"],
             p4 = f.api->pods["muster-d1-w4"];
  const json unschedulable = {
      {"phase", "Pending"},
      {"conditions",
       {{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"},
         {"message", "0/1 nodes are available: 1 Insufficient memory."}}}}};
  f.api->queued.push_back({event("MODIFIED", with_status(p1, unschedulable))});
  ASSERT_TRUE(f.backend->watch_once().is_ok());
  auto st = f.backend->poll("w1");
  EXPECT_EQ(st.state, ProcessState::kPending);
  EXPECT_EQ(st.reason, "Unschedulable: 0/1 nodes are available: 1 Insufficient memory.");

  json running = p1;
  running["spec"]["nodeName"] = "n1";
  const json oom = {{"phase", "Failed"},
                    {"containerStatuses",
                     {{{"name", "agent"}, {"state", {{"terminated", {{"exitCode", 137}, {"reason", "OOMKilled"}}}}}}}}};
  json p2n = p2, p3n = p3, p4n = p4;
  p2n["spec"]["nodeName"] = p3n["spec"]["nodeName"] = p4n["spec"]["nodeName"] = "n1";
  // Split across chunks mid-line, as a real stream may be.
  const std::string events = event("MODIFIED", with_status(running, {{"phase", "Running"}})) +
                             event("MODIFIED", with_status(p2n, oom)) +
                             event("MODIFIED", with_status(p3n, {{"phase", "Failed"}, {"reason", "Evicted"},
                                                                 {"message", "The node was low on resource: memory."}})) +
                             event("MODIFIED", with_status(p4n, {{"phase", "Running"}}));
  f.api->queued.push_back({events.substr(0, 50), events.substr(50)});
  ASSERT_TRUE(f.backend->watch_once().is_ok());
  EXPECT_EQ(f.backend->poll("w1").state, ProcessState::kRunning);
  st = f.backend->poll("w2");
  EXPECT_EQ(st.state, ProcessState::kExited);
  EXPECT_EQ(st.exit_code, 137);
  EXPECT_EQ(st.outcome, WorkerStatus::kFailed);
  EXPECT_EQ(st.reason, "OOMKilled: the pod passed its memory limit (1536Mi) (pod muster-d1-w2 on node n1)");
  st = f.backend->poll("w3");
  EXPECT_EQ(st.state, ProcessState::kExited);
  EXPECT_EQ(st.reason, "Evicted: The node was low on resource: memory. (pod muster-d1-w3 on node n1)");

  // Deleted behind muster's back: lost, naming the node.
  f.api->queued.push_back({event("DELETED", with_status(running, {{"phase", "Running"}}))});
  ASSERT_TRUE(f.backend->watch_once().is_ok());
  st = f.backend->poll("w1");
  EXPECT_EQ(st.state, ProcessState::kLost);
  EXPECT_EQ(st.outcome, WorkerStatus::kLost);
  EXPECT_EQ(st.reason, "the pod muster-d1-w1 was deleted outside muster (on node n1)");

  // A node gone NotReady: its running worker is lost, naming the node.
  f.api->nodes = {{"items", json::array({node("n1", "4", "8Gi", "Unknown")})}};
  f.backend->housekeeping();
  st = f.backend->poll("w4");
  EXPECT_EQ(st.state, ProcessState::kLost);
  EXPECT_EQ(st.outcome, WorkerStatus::kLost);
  EXPECT_EQ(st.reason, "node n1 is NotReady (Unknown): kubelet says so (pod muster-d1-w4)");
  // The watch asked from the kept resourceVersion.
  EXPECT_NE(f.api->streams.back().find("&resourceVersion=200"), std::string::npos) << f.api->streams.back();
  EXPECT_NE(f.api->streams.back().find("labelSelector=muster.io%2Fdaemon%3Dd1"), std::string::npos);
}

TEST(KubernetesBackend, GoneListsAgain) {
  Fixture f;
  ASSERT_TRUE(f.backend->launch({spec("w1", f.dir.path())}).is_ok());
  ASSERT_TRUE(f.backend->relist().is_ok());
  const int lists = f.api->lists;
  // While the watch was away the pod started and the version expired.
  f.api->pods["muster-d1-w1"]["spec"]["nodeName"] = "n1";
  f.api->pods["muster-d1-w1"]["status"] = {{"phase", "Running"}};
  f.api->queued.push_back(
      {json{{"type", "ERROR"}, {"object", {{"kind", "Status"}, {"code", 410}, {"reason", "Expired"}}}}.dump() + "\n"});
  ASSERT_TRUE(f.backend->watch_once().is_ok());
  EXPECT_EQ(f.api->lists, lists + 1);
  EXPECT_EQ(f.backend->poll("w1").state, ProcessState::kRunning);
  // A pod missing from a fresh list was deleted meanwhile: lost.
  f.api->pods.clear();
  ASSERT_TRUE(f.backend->relist().is_ok());
  EXPECT_EQ(f.backend->poll("w1").state, ProcessState::kLost);
}

TEST(KubernetesBackend, StopDeletesWithTheGraceOnce) {
  Fixture f;
  ASSERT_TRUE(f.backend->launch({spec("w1", f.dir.path())}).is_ok());
  ASSERT_TRUE(f.backend->stop("w1", 4500ms).is_ok());
  ASSERT_TRUE(f.backend->stop("w1", 4500ms).is_ok());
  ASSERT_TRUE(f.backend->stop("nobody", 1s).is_ok());
  const auto deletes = f.api->calls_of("DELETE");
  ASSERT_EQ(deletes.size(), 1u);
  EXPECT_EQ(deletes[0].path, "/api/v1/namespaces/ml/pods/muster-d1-w1?gracePeriodSeconds=5");
}

TEST(KubernetesBackend, ARestartedDaemonAdoptsItsPods) {
  muster::testing::TempDir dir("muster-k8s");
  std::map<std::string, json> pods;
  std::string identity;
  {
    auto fake = std::make_unique<FakeApi>();
    FakeApi* api = fake.get();
    auto b = k8s::KubernetesBackend::create(options(dir.path()), std::move(fake));
    ASSERT_TRUE(b.is_ok());
    ASSERT_TRUE(b.value()->launch({spec("w1", dir.path()), spec("w2", dir.path())}).is_ok());
    identity = b.value()->process_identity("w1");
    b.value()->shutdown();
    EXPECT_TRUE(api->calls_of("DELETE").empty());  // the pods outlive the daemon
    pods = api->pods;
  }
  pods.erase("muster-d1-w2");  // deleted while no daemon watched
  pods["muster-d1-w1"]["spec"]["nodeName"] = "n1";
  pods["muster-d1-w1"]["status"] = {{"phase", "Running"}};
  auto fake = std::make_unique<FakeApi>();
  fake->pods = pods;
  auto b = k8s::KubernetesBackend::create(options(dir.path()), std::move(fake));
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b.value()->poll("w1").state, ProcessState::kUnknown);
  b.value()->adopt("w1", identity);
  b.value()->adopt("w2", json{{"pod", "muster-d1-w2"}, {"uid", "uid-muster-d1-w2"}}.dump());
  ASSERT_TRUE(b.value()->relist().is_ok());
  EXPECT_EQ(b.value()->poll("w1").state, ProcessState::kRunning);
  const auto lost = b.value()->poll("w2");
  EXPECT_EQ(lost.state, ProcessState::kLost);
  EXPECT_NE(lost.reason.find("muster-d1-w2 no longer exists"), std::string::npos) << lost.reason;
}

TEST(KubernetesBackend, AGangWaitsUntilAllOfItFits) {
  Fixture f;
  f.api->nodes = {{"items", json::array({node("n1", "2", "8Gi")})}};
  std::vector<LaunchSpec> gang;
  for (const char* id : {"t0", "t1"}) {
    gang.push_back(spec(id, f.dir.path(), 2, 1));
    gang.back().env["MUSTER_CLUSTER_ID"] = "c1";
  }
  ASSERT_TRUE(f.backend->launch(gang).is_ok());
  EXPECT_TRUE(f.api->calls_of("POST").empty());  // not one pod of a gang that does not fit
  auto st = f.backend->poll("t0");
  EXPECT_EQ(st.state, ProcessState::kPending);
  EXPECT_EQ(st.reason, "waiting for the whole group of 2 to fit: 4 CPUs and 2 GiB requested, 2 CPUs and 8 GiB free on "
                       "1 ready node");
  EXPECT_EQ(f.backend->process_identity("t0"), "");
  // A plain worker is not held: it queues in the scheduler.
  ASSERT_TRUE(f.backend->launch({spec("solo", f.dir.path(), 8, 1)}).is_ok());
  EXPECT_EQ(f.api->pods.count("muster-d1-solo"), 1u);
  f.api->pods.clear();
  // A second node, but a pod of someone else's takes 1 CPU of it: still no fit.
  f.api->nodes = {{"items", json::array({node("n1", "2", "8Gi"), node("n2", "2", "8Gi")})}};
  json other = {{"metadata", {{"name", "other"}}},
                {"spec", {{"nodeName", "n2"}, {"containers", {{{"resources", {{"requests", {{"cpu", "1"}}}}}}}}}},
                {"status", {{"phase", "Running"}}}};
  f.api->other_pods = {other};
  f.backend->housekeeping();
  EXPECT_TRUE(f.api->pods.empty());
  EXPECT_NE(f.backend->poll("t1").reason.find("3 CPUs and 16 GiB free on 2 ready nodes"), std::string::npos)
      << f.backend->poll("t1").reason;
  // It ends: both pods are created together.
  f.api->other_pods.clear();
  f.backend->housekeeping();
  EXPECT_EQ(f.api->pods.count("muster-d1-t0"), 1u);
  EXPECT_EQ(f.api->pods.count("muster-d1-t1"), 1u);
  EXPECT_NE(f.backend->process_identity("t1"), "");
  // A held gang's worker stopped: it leaves the gang, no request.
  f.api->nodes = {{"items", json::array()}};
  std::vector<LaunchSpec> g2 = {spec("u0", f.dir.path()), spec("u1", f.dir.path())};
  for (auto& s : g2) s.env["MUSTER_CLUSTER_ID"] = "c2";
  ASSERT_TRUE(f.backend->launch(g2).is_ok());
  const size_t calls = f.api->calls.size();
  ASSERT_TRUE(f.backend->stop("u0", 1s).is_ok());
  EXPECT_EQ(f.api->calls.size(), calls);
  EXPECT_EQ(f.backend->poll("u0").outcome, WorkerStatus::kStopped);
  EXPECT_EQ(f.backend->poll("u1").state, ProcessState::kPending);
}

TEST(KubernetesBackend, TheLogIsFollowedIntoTheDaemonsFileAndResumed) {
  Fixture f;
  const LaunchSpec s = spec("w1", f.dir.path());
  ASSERT_TRUE(f.backend->launch({s}).is_ok());
  f.api->queued.push_back({"2024-05-01T10:00:00.5Z hello\n2024-05-01T10:00:01", ".000000001Z wor", "ld\n"});
  f.backend->follow_log("w1");
  // The resume point is kept with every chunk written (a daemon killed now
  // resumes after "world", repeating nothing).
  {
    std::ifstream since(f.dir.path() / "kubernetes" / "logs" / "w1.since");
    std::string kept;
    std::getline(since, kept);
    EXPECT_EQ(kept, "2024-05-01T10:00:01.000000001Z");
  }
  // The stream broke; the next follow resumes from the last time, and what
  // the kubelet sends again (the same second) is not written twice.
  f.api->queued.push_back({"2024-05-01T10:00:01.000000001Z world\n2024-05-01T10:00:02Z again\n"});
  f.backend->follow_log("w1");
  EXPECT_NE(f.api->streams.back().find("&sinceTime=2024-05-01T10:00:01Z"), std::string::npos) << f.api->streams.back();
  EXPECT_NE(f.api->streams.back().find("/pods/muster-d1-w1/log?container=agent&follow=true&timestamps=true"),
            std::string::npos);
  std::ifstream in(s.log_path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "hello\nworld\nagain\n");
  // The streams ended while the pod ran: the log may trail the agent's exit
  // report, which the registry holds until the log is complete.
  EXPECT_FALSE(f.backend->log_complete("w1"));
  EXPECT_TRUE(f.backend->log_complete("nobody")) << "no followed log: nothing trails";
  // The pod ended and its log is read: housekeeping deletes it and its Secret.
  f.api->queued.push_back({event("MODIFIED", with_status(f.api->pods["muster-d1-w1"],
                                                         {{"phase", "Succeeded"},
                                                          {"containerStatuses",
                                                           {{{"name", "agent"},
                                                             {"state", {{"terminated", {{"exitCode", 0}}}}}}}}}))});
  ASSERT_TRUE(f.backend->watch_once().is_ok());
  EXPECT_FALSE(f.backend->log_complete("w1")) << "ended, but its stream has not been read to the end since";
  f.backend->follow_log("w1");
  EXPECT_TRUE(f.backend->log_complete("w1"));
  f.backend->housekeeping();
  std::vector<std::string> deleted;
  for (const auto& c : f.api->calls_of("DELETE")) deleted.push_back(c.path);
  ASSERT_EQ(deleted.size(), 2u);
  EXPECT_EQ(deleted[0], "/api/v1/namespaces/ml/pods/muster-d1-w1?gracePeriodSeconds=0");
  const auto st = f.backend->poll("w1");
  EXPECT_EQ(st.state, ProcessState::kExited);
  EXPECT_EQ(st.exit_code, 0);
}

// mpi clusters: each host address is a running pod of this daemon; the
// rsh agent muster-kube-rsh gets a map of them and a kubeconfig made from
// the backend's own connection (0600), and a host without a pod, or no
// kubectl, is refused naming it.
TEST(KubernetesBackend, MpiPreflightMapsHostsToPodsForTheRshAgent) {
  Fixture f([](k8s::KubernetesOptions& o) {
    o.connection.host = "10.0.0.2";
    o.connection.port = 6443;
    o.connection.token = "tok-1";
    o.connection.ca_pem = "-----BEGIN CERTIFICATE-----\n";
    o.kubectl = "/bin/sh";  // any executable: preflight only finds it
  });
  ASSERT_TRUE(f.backend->launch({spec("w1", f.dir.path()), spec("w2", f.dir.path())}).is_ok());
  ASSERT_TRUE(f.backend->relist().is_ok());
  json p1 = with_status(f.api->pods["muster-d1-w1"], {{"phase", "Running"}, {"podIP", "10.244.1.5"}});
  json p2 = with_status(f.api->pods["muster-d1-w2"], {{"phase", "Running"}, {"podIP", "10.244.2.7"}});
  f.api->queued.push_back({event("MODIFIED", p1) + event("MODIFIED", p2)});
  ASSERT_TRUE(f.backend->watch_once().is_ok());

  auto bad = f.backend->preflight_mpi({{"10.244.1.5", "10.244.9.9"}, 2222, "python3"});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("10.244.9.9: no running pod of this daemon has this address"),
            std::string::npos)
      << bad.status().message();

  auto ok = f.backend->preflight_mpi({{"10.244.1.5", "10.244.2.7"}, 2222, "python3"});
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  const std::string agent = ok.value().rsh_agent;
  const auto space = agent.find(' ');
  ASSERT_NE(space, std::string::npos) << agent;
  EXPECT_EQ(fs::path(agent.substr(0, space)).filename(), "muster-kube-rsh");
  const fs::path map = agent.substr(space + 1);
  std::ifstream in(map);
  std::stringstream text;
  text << in.rdbuf();
  const fs::path config = f.dir.path() / "kubernetes" / "mpi" / "kubeconfig";
  EXPECT_EQ(text.str(), "kubectl /bin/sh\nkubeconfig " + config.string() +
                            "\nnamespace ml\nhost 10.244.1.5 muster-d1-w1\nhost 10.244.2.7 muster-d1-w2\n");
  EXPECT_EQ(fs::status(map).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(fs::status(config).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  // The kubeconfig is one the backend's own reader takes back, as kubectl will.
  auto back = k8s::read_kubeconfig(config);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value().server, "https://10.0.0.2:6443");
  EXPECT_EQ(back.value().connection.token, "tok-1");
  EXPECT_EQ(back.value().connection.ca_pem, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_EQ(back.value().namespace_name, "ml");

  Fixture none([](k8s::KubernetesOptions& o) { o.kubectl = "no-such-kubectl-here"; });
  ASSERT_TRUE(none.backend->launch({spec("w1", none.dir.path())}).is_ok());
  ASSERT_TRUE(none.backend->relist().is_ok());
  none.api->queued.push_back({event("MODIFIED", with_status(none.api->pods["muster-d1-w1"],
                                                            {{"phase", "Running"}, {"podIP", "10.244.1.5"}}))});
  ASSERT_TRUE(none.backend->watch_once().is_ok());
  auto missing = none.backend->preflight_mpi({{"10.244.1.5"}, 2222, "python3"});
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("--backend-opt kubectl=PATH"), std::string::npos)
      << missing.status().message();
}

TEST(KubernetesLogLines, TimesAreStrippedAndCompared) {
  EXPECT_EQ(k8s::normalize_log_time("2024-05-01T10:00:00.5Z"), "2024-05-01T10:00:00.500000000Z");
  EXPECT_EQ(k8s::normalize_log_time("2024-05-01T10:00:00Z"), "2024-05-01T10:00:00.000000000Z");
  EXPECT_EQ(k8s::normalize_log_time("yesterday"), "");
  k8s::LogCursor c;
  EXPECT_EQ(k8s::take_log_lines(c, "unstamped line\n2024-05-01T10:00:00Z x"), "unstamped line\n");
  EXPECT_EQ(k8s::take_log_lines(c, "\n"), "x\n");
}

// ---- options

struct Files {
  muster::testing::TempDir dir{"muster-k8s-opts"};
  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir.path() / name) << text;
    return dir.path() / name;
  }
};

std::map<std::string, std::string> base_opts(Files& f) {
  return {{"api_server", "https://10.1.2.3:6443"},
          {"token_file", f.write("token", "tok\n").string()},
          {"ca_file", f.write("ca.crt", "PEM").string()},
          {"image", "img"},
          {"master_address", "10.0.0.1"}};
}

k8s::InClusterSource no_cluster() { return {}; }

TEST(KubernetesOptions, ReadsEveryKey) {
  Files f;
  auto opts = base_opts(f);
  opts["namespace"] = "ml";
  opts["host_mounts"] = "/usr,/work/build";
  opts["project_volume"] = "pvc:proj";
  opts["agent_path"] = "/opt/muster-agent";
  opts["poll_ms"] = "500";
  opts["gang"] = "false";
  opts["service_account"] = "sa";
  auto o = k8s::KubernetesOptions::from_map("/state", opts, no_cluster());
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  EXPECT_EQ(o->connection.host, "10.1.2.3");
  EXPECT_EQ(o->connection.port, 6443);
  EXPECT_EQ(o->connection.token, "tok");
  EXPECT_EQ(o->connection.ca_pem, "PEM");
  EXPECT_EQ(o->namespace_name, "ml");
  EXPECT_EQ(o->host_mounts, (std::vector<std::string>{"/usr", "/work/build"}));
  EXPECT_EQ(o->project_volume.kind, k8s::ProjectVolume::Kind::kClaim);
  EXPECT_EQ(o->project_volume.claim, "proj");
  EXPECT_EQ(o->poll_interval, 500ms);
  EXPECT_FALSE(o->gang);
}

TEST(KubernetesOptions, ErrorsNameTheKey) {
  Files f;
  struct Case {
    std::string key, value, field, says;
  };
  const std::vector<Case> cases = {
      {"colour", "blue", "backend-opt", "unknown --backend-opt 'colour'"},
      {"api_server", "http://10.1.2.3", "api_server", "expected https://"},
      {"api_server", "https://10.1.2.3:99999", "api_server", "not a port number"},
      {"poll_ms", "5x", "poll_ms", "poll_ms='5x'"},
      {"gang", "maybe", "gang", "expected true, false, 1 or 0"},
      {"namespace", "ML_team", "namespace", "not a namespace name"},
      {"host_mounts", "usr", "host_mounts", "'usr' is not an absolute path"},
      {"project_volume", "nfs", "project_volume", "hostPath, pvc:<claim name> or none"},
      {"token", "t", "token", "token or token_file, not both"},
      {"ca_file", "/nonexistent/ca", "ca_file", "cannot be read"},
      {"image", "", "image", "needs --backend-opt image="},
  };
  for (const auto& c : cases) {
    auto opts = base_opts(f);
    opts[c.key] = c.value;
    auto o = k8s::KubernetesOptions::from_map("/state", opts, no_cluster());
    ASSERT_FALSE(o.is_ok()) << c.key;
    EXPECT_EQ(o.status().field(), c.field) << c.key << ": " << o.status().message();
    EXPECT_NE(o.status().message().find(c.says), std::string::npos) << c.key << ": " << o.status().message();
  }
  auto none = k8s::KubernetesOptions::from_map("/state", {{"image", "img"}}, no_cluster());
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("needs the API server"), std::string::npos);
}

TEST(KubernetesOptions, InClusterDefaults) {
  Files f;
  f.write("token", "sa-token\n");
  f.write("ca.crt", "SA-CA");
  f.write("namespace", "notebooks\n");
  k8s::InClusterSource pod;
  pod.env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}};
  pod.service_account_dir = f.dir.path();
  auto o = k8s::KubernetesOptions::from_map("/state", {{"image", "img"}, {"master_address", "10.244.0.7"}}, pod);
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  EXPECT_EQ(o->connection.host, "10.96.0.1");
  EXPECT_EQ(o->connection.port, 443);
  EXPECT_EQ(o->connection.token, "sa-token");
  EXPECT_EQ(o->connection.ca_pem, "SA-CA");
  EXPECT_EQ(o->namespace_name, "notebooks");
}

TEST(KubernetesOptions, Kubeconfig) {
  Files f;
  f.write("client.key", "KEY");
  const fs::path kc = f.write("config", R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: other
  cluster:
    server: https://other:1
- name: testbed
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: )" + muster::base::base64_encode("THE-CA") + R"(
contexts:
- name: dev
  context:
    cluster: testbed
    user: admin
    namespace: team
users:
- name: admin
  user:
    client-certificate-data: )" + muster::base::base64_encode("CERT") + R"(
    client-key: client.key
)");
  auto k = k8s::read_kubeconfig(kc);
  ASSERT_TRUE(k.is_ok()) << k.status().message();
  EXPECT_EQ(k->connection.host, "127.0.0.1");
  EXPECT_EQ(k->connection.port, 6443);
  EXPECT_EQ(k->connection.ca_pem, "THE-CA");
  EXPECT_EQ(k->connection.client_cert_pem, "CERT");
  EXPECT_EQ(k->connection.client_key_pem, "KEY");
  EXPECT_EQ(k->namespace_name, "team");
  auto o = k8s::KubernetesOptions::from_map("/state", {{"kubeconfig", kc.string()}, {"image", "i"}, {"master_address", "10.0.0.1"}},
                                            no_cluster());
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  EXPECT_EQ(o->namespace_name, "team");

  // The JSON form, with a token; an exec plugin is refused.
  const fs::path js = f.write("config.json", json{{"current-context", "c"},
                                                   {"contexts", {{{"name", "c"}, {"context", {{"cluster", "k"}, {"user", "u"}}}}}},
                                                   {"clusters", {{{"name", "k"}, {"cluster", {{"server", "https://k8s.example:443"}}}}}},
                                                   {"users", {{{"name", "u"}, {"user", {{"token", "abc"}}}}}}}
                                                 .dump());
  k = k8s::read_kubeconfig(js);
  ASSERT_TRUE(k.is_ok()) << k.status().message();
  EXPECT_EQ(k->connection.host, "k8s.example");
  EXPECT_EQ(k->connection.token, "abc");
  const fs::path exec = f.write("exec.yaml", R"(current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://k:6443"}}]
users: [{name: u, user: {exec: {command: aws}}}]
)");
  k = k8s::read_kubeconfig(exec);
  ASSERT_FALSE(k.is_ok());
  EXPECT_EQ(k.status().field(), "kubeconfig");
  EXPECT_NE(k.status().message().find("exec or auth-provider"), std::string::npos);
  k = k8s::read_kubeconfig(f.write("bad.yaml", "current-context: nope\n"));
  ASSERT_FALSE(k.is_ok());
  EXPECT_NE(k.status().message().find("no context named 'nope'"), std::string::npos);
}

}  // namespace
