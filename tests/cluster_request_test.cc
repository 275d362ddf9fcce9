// api::parse_cluster_request: a table of bad bodies, each naming its field; and
// the cluster object's JSON.
#include "api/cluster.h"

#include <gtest/gtest.h>

namespace muster::service {
namespace {

using nlohmann::json;

struct BadCase {
  const char* body;
  const char* field;
  const char* message_part;
};

TEST(ClusterRequestTest, Defaults) {
  auto r = api::parse_cluster_request(json::parse(R"({"n_workers": 2})"), 64);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->mode, api::ClusterKind::kPs);
  EXPECT_EQ(r->n_ps, 0);
  EXPECT_EQ(r->ssh_port, 2222);
  EXPECT_EQ(r->slots, 1);
  EXPECT_TRUE(r->launch);
  EXPECT_EQ(r->timeout_seconds, 60);
}

TEST(ClusterRequestTest, FullMpiRequest) {
  auto r = api::parse_cluster_request(json::parse(R"({"mode":"mpi","n_workers":2,"cpu":0.5,"memory":2,"nvidia_gpu":0,
      "worker_script":"train.py","args":["--x","1"],"env":{"A_1":"v"},"slots":2,"ssh_port":2200,
      "network_interface":"eth0","timeout_seconds":0,"launch":false})"),
                                 64);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->mode, api::ClusterKind::kMpi);
  EXPECT_EQ(r->slots, 2);
  EXPECT_EQ(r->ssh_port, 2200);
  EXPECT_EQ(r->env.at("A_1"), "v");
  EXPECT_FALSE(r->launch);
  EXPECT_EQ(r->timeout_seconds, 0);
  auto back = api::cluster_request_from_json(r->to_json());
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->to_json(), r->to_json());
}

// 2.0 is the integer 2 to JSON Schema (api/openapi.yaml) and what Python's
// json writes for a float holding a whole number.
TEST(ClusterRequestTest, WholeNumbersWrittenAsFloatsAreIntegers) {
  auto r = api::parse_cluster_request(json::parse(R"({"n_workers": 2.0, "slots": 3.0, "n_ps": 0.0})"), 8);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->n_workers, 2);
  EXPECT_EQ(r->slots, 3);
}

TEST(ClusterRequestTest, HorovodOptionsAndTf2Roles) {
  auto r = api::parse_cluster_request(json::parse(R"({"mode":"mpi","n_workers":2,"worker_script":"t.py",
      "network_interfaces":["eth0","ib0"],"fusion_threshold_mb":0,"cycle_time_ms":2.5,
      "timeline_filename":"/tmp/tl.json","start_timeout":30,"verbose":true})"),
                                 64);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->network_interfaces, (std::vector<std::string>{"eth0", "ib0"}));
  EXPECT_EQ(r->fusion_threshold_mb, 0);
  EXPECT_EQ(r->cycle_time_ms, 2.5);
  EXPECT_EQ(r->timeline_filename, "/tmp/tl.json");
  EXPECT_EQ(r->start_timeout, 30);
  EXPECT_TRUE(r->verbose);
  auto back = api::cluster_request_from_json(r->to_json());
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->to_json(), r->to_json());
  // The older single name is still accepted, as a list of one.
  auto one = api::parse_cluster_request(json::parse(R"({"mode":"mpi","n_workers":1,"worker_script":"t.py",
      "network_interface":"eth0"})"), 64);
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(one->network_interfaces, (std::vector<std::string>{"eth0"}));
  EXPECT_FALSE(one->fusion_threshold_mb.has_value());
  auto ps = api::parse_cluster_request(json::parse(R"({"n_workers":2,"n_ps":1,"n_chief":1,"n_evaluator":1})"), 64);
  ASSERT_TRUE(ps.is_ok()) << ps.status().message();
  EXPECT_EQ(ps->n_chief, 1);
  EXPECT_EQ(ps->n_evaluator, 1);
  EXPECT_EQ(api::cluster_request_from_json(ps->to_json())->n_evaluator, 1);
  // A record written before these fields existed still loads.
  json old = one->to_json();
  for (const char* key : {"network_interfaces", "fusion_threshold_mb", "cycle_time_ms", "timeline_filename",
                          "start_timeout", "verbose", "n_chief", "n_evaluator"}) {
    old.erase(key);
  }
  old["network_interface"] = "eth9";
  auto loaded = api::cluster_request_from_json(old);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ(loaded->network_interfaces, (std::vector<std::string>{"eth9"}));
}

TEST(ClusterRequestTest, BadBodiesNameTheField) {
  const BadCase cases[] = {
      {R"([])", "", "must be a JSON object"},
      {R"({})", "n_workers", "is required"},
      {R"({"n_workers": 0})", "n_workers", "1..8"},
      {R"({"n_workers": 9})", "n_workers", "1..8"},
      {R"({"n_workers": "2"})", "n_workers", "must be an integer"},
      {R"({"n_workers": 1.5})", "n_workers", "must be an integer"},
      {R"({"n_workers": 5, "n_ps": 4})", "n_workers", "more than the 8 workers"},
      {R"({"n_workers": 1, "n_ps": -1})", "n_ps", "0..7"},
      {R"({"n_workers": 1, "n_ps": 8})", "n_ps", "0..7"},
      {R"({"n_workers": null})", "n_workers", "is required"},
      {R"({"n_workers": 1, "ps_script": "../up.py"})", "ps_script", "'..'"},
      {R"({"n_workers": 1, "worker_script": "/etc/passwd"})", "worker_script", "relative to the project"},
      {R"({"n_workers": 1, "mode": "allreduce"})", "mode", "\"ps\", \"mpi\", \"elastic\" or \"torchrun\""},
      {R"({"n_workers": 1, "mode": "mpi"})", "worker_script", "required in mpi mode"},
      {R"({"n_workers": 1, "mode": "elastic"})", "worker_script", "required in elastic mode"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "n_ps": 1})", "n_ps", "ps mode only"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "ps_script": "p.py"})", "ps_script", "ps mode only"},
      {R"({"n_workers": 1, "launch": false})", "launch", "mpi mode only"},
      {R"({"n_workers": 1, "cpu": 0})", "cpu", "greater than 0"},
      {R"({"n_workers": 1, "memory": -1})", "memory", "greater than 0"},
      {R"({"n_workers": 1, "cpu": "1"})", "cpu", "must be a number"},
      {R"({"n_workers": 1, "nvidia_gpu": -1})", "nvidia_gpu", "0..64"},
      {R"({"n_workers": 1, "worker_script": 3})", "worker_script", "must be a string"},
      {R"({"n_workers": 1, "worker_script": "a\u0000b"})", "worker_script", "NUL"},
      {R"({"n_workers": 1, "args": "x"})", "args", "list of strings"},
      {R"({"n_workers": 1, "args": [1]})", "args", "list of strings"},
      {R"({"n_workers": 1, "env": []})", "env", "object"},
      {R"({"n_workers": 1, "env": {"A B": "x"}})", "env", "must match"},
      {R"j({"n_workers": 1, "env": {"$(id)": "x"}})j", "env", "must match"},
      {R"({"n_workers": 1, "env": {"A": 1}})", "env", "must be a string"},
      {R"({"n_workers": 1, "slots": 0})", "slots", "1..1024"},
      {R"({"n_workers": 1, "ssh_port": 70000})", "ssh_port", "1..65535"},
      {R"({"n_workers": 1, "network_interface": "eth0; id"})", "network_interface", "not an interface name"},
      {R"({"n_workers": 1, "timeout_seconds": -1})", "timeout_seconds", ">= 0"},
      {R"({"n_workers": 1, "launch": "yes"})", "launch", "true or false"},
      {R"({"n_workers": 1, "n_wokers": 2})", "n_wokers", "unknown field"},
      {R"({"n_workers": 1, "n_chief": 2})", "n_chief", "0..1"},
      {R"({"n_workers": 1, "n_evaluator": -1})", "n_evaluator", "0..1"},
      {R"({"n_workers": 1, "n_evaluator": true})", "n_evaluator", "must be an integer"},
      {R"({"n_workers": 6, "n_ps": 1, "n_chief": 1, "n_evaluator": 1})", "n_workers", "n_chief + n_evaluator is 9"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "n_chief": 1})", "n_chief", "ps mode only"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "n_evaluator": 1})", "n_evaluator", "ps mode only"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "network_interfaces": "eth0"})", "network_interfaces", "list"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "network_interfaces": ["eth0", "a b"]})", "network_interfaces", "not an interface name"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "network_interfaces": [3]})", "network_interfaces", "not an interface name"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "network_interface": "eth0", "network_interfaces": ["eth1"]})", "network_interfaces", "give one of them"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "fusion_threshold_mb": -1})", "fusion_threshold_mb", "0..1048576"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "fusion_threshold_mb": 1.5})", "fusion_threshold_mb", "integer"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "cycle_time_ms": 0})", "cycle_time_ms", "greater than 0"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "timeline_filename": "--x"})", "timeline_filename", "must not start with '-'"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "timeline_filename": 1})", "timeline_filename", "must be a string"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "start_timeout": 0})", "start_timeout", "1..86400"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "verbose": 1})", "verbose", "true or false"},
      {R"({"n_workers": 1, "fusion_threshold_mb": 64})", "fusion_threshold_mb", "mpi mode only"},
      {R"({"n_workers": 1, "verbose": true})", "verbose", "mpi mode only"},
      {R"({"n_workers": 1, "workers": ["a"]})", "workers", "mpi mode only"},
      {R"({"mode": "mpi", "worker_script": "t.py", "workers": []})", "workers", "non-empty list"},
      {R"({"mode": "mpi", "worker_script": "t.py", "workers": "a"})", "workers", "non-empty list"},
      {R"({"mode": "mpi", "worker_script": "t.py", "workers": [1]})", "workers", "worker ids"},
      {R"({"mode": "mpi", "worker_script": "t.py", "workers": ["a", "a"]})", "workers", "twice"},
      {R"({"mode": "mpi", "worker_script": "t.py", "workers": ["a"], "n_workers": 1})", "n_workers", "left out"},
      {R"({"n_workers": 1, "python": "python3"})", "python", "not an absolute path"},
      {R"({"n_workers": 1, "python": "/no/such/python"})", "python", "does not exist"},
      {R"({"n_workers": 1, "python": 3})", "python", "must be a string"},
      {R"({"n_workers": 1, "mode": "torchrun"})", "worker_script", "required in torchrun mode"},
      {R"({"n_workers": 1, "mode": "torchrun", "worker_script": "t.py", "n_ps": 1})", "n_ps", "ps mode only"},
      {R"({"n_workers": 1, "mode": "torchrun", "worker_script": "t.py", "n_chief": 1})", "n_chief", "ps mode only"},
      {R"({"n_workers": 1, "mode": "torchrun", "worker_script": "t.py", "slots": 2})", "slots", "nproc_per_node"},
      {R"({"n_workers": 1, "mode": "torchrun", "worker_script": "t.py", "launch": false})", "launch", "mpi mode only"},
      {R"({"n_workers": 1, "mode": "torchrun", "worker_script": "t.py", "verbose": true})", "verbose", "mpi mode only"},
      {R"({"n_workers": 1, "mode": "torchrun", "worker_script": "t.py", "nproc_per_node": 0})", "nproc_per_node", "1..1024"},
      {R"({"n_workers": 1, "mode": "torchrun", "worker_script": "t.py", "nproc_per_node": 1.5})", "nproc_per_node", "integer"},
      {R"({"n_workers": 1, "mode": "torchrun", "worker_script": "t.py", "max_restarts": -1})", "max_restarts", "0..1000"},
      {R"({"n_workers": 1, "mode": "mpi", "worker_script": "t.py", "nproc_per_node": 2})", "nproc_per_node", "torchrun mode only"},
      {R"({"n_workers": 1, "mode": "elastic", "worker_script": "t.py", "max_restarts": 1})", "max_restarts", "ps, mpi and torchrun modes"},
  };
  for (const auto& c : cases) {
    auto r = api::parse_cluster_request(json::parse(c.body), 8);
    ASSERT_FALSE(r.is_ok()) << c.body;
    EXPECT_EQ(r.status().code(), api::ErrorCode::kInvalidArgument) << c.body;
    EXPECT_EQ(r.status().field(), c.field) << c.body;
    EXPECT_NE(r.status().message().find(c.message_part), std::string::npos) << c.body << " -> " << r.status().message();
  }
}

// horovodrun -H: the ranks on running workers, in the interpreter asked for;
// n_workers is their number. The request keeps both across a restart.
TEST(ClusterRequestTest, RanksOnRunningWorkersInAnInterpreter) {
  auto r = api::parse_cluster_request(
      json::parse(R"({"mode":"mpi","workers":["w1","w2"],"worker_script":"t.py","python":"/bin/sh"})"), 8);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->workers, (std::vector<std::string>{"w1", "w2"}));
  EXPECT_EQ(r->n_workers, 2);
  EXPECT_EQ(r->python, "/bin/sh");
  auto back = api::cluster_request_from_json(r->to_json());
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->workers, r->workers);
  EXPECT_EQ(back->python, "/bin/sh");
}

TEST(ClusterRequestTest, TorchrunRequestRoundTrips) {
  auto r = api::parse_cluster_request(json::parse(R"({"mode":"torchrun","n_workers":2,"worker_script":"ddp.py",
      "nproc_per_node":4,"max_restarts":3,"args":["--epochs","1"]})"),
                                 64);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->mode, api::ClusterKind::kTorchrun);
  EXPECT_EQ(r->nproc_per_node, 4);
  EXPECT_EQ(r->max_restarts, 3);
  auto back = api::cluster_request_from_json(r->to_json());
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->to_json(), r->to_json());
  EXPECT_EQ(back->mode, api::ClusterKind::kTorchrun);
}

TEST(ClusterObjectTest, TorchrunClusterShowsItsLineAndNamesRanks) {
  api::Cluster c;
  c.id = "c-2";
  c.request.mode = api::ClusterKind::kTorchrun;
  c.request.nproc_per_node = 2;
  c.tasks = {{"worker", 0, "w0"}, {"worker", 1, "w1"}};
  c.torchrun_argv = {"torchrun", "--nnodes=2", "--nproc_per_node=2", "a b.py"};
  auto j = c.to_json();
  EXPECT_EQ(j["mode"], "torchrun");
  EXPECT_EQ(j["torchrun_command"], "torchrun --nnodes=2 --nproc_per_node=2 'a b.py'");
  EXPECT_EQ(j["nproc_per_node"], 2);
  EXPECT_EQ(j["max_restarts"], 0);
  EXPECT_EQ(c.task_name(c.tasks[1]), "worker 1 (id w1, ranks 2-3)");
  c.request.nproc_per_node = 1;
  EXPECT_EQ(c.task_name(c.tasks[1]), "worker 1 (id w1, rank 1)");
  auto back = api::Cluster::from_record(c.to_record());
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->torchrun_argv, c.torchrun_argv);
}

TEST(ClusterObjectTest, JsonHasTheApiFields) {
  api::Cluster c;
  c.id = "c-1";
  c.request.mode = api::ClusterKind::kMpi;
  c.status = api::ClusterStatus::kRunning;
  c.tasks = {{"worker", 0, "w0"}, {"worker", 1, "w1"}};
  c.horovodrun_argv = {"horovodrun", "-np", "2", "-H", "h:2", "python3", "a b.py"};
  auto j = c.to_json();
  for (const char* key : {"id", "mode", "status", "workers", "cluster_spec", "horovodrun_command", "mpirun_command",
                          "torchrun_command", "torchrun_argv", "hostfile", "reason"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["status"], "running");
  EXPECT_EQ(j["mode"], "mpi");
  EXPECT_EQ(j["workers"], json::parse(R"({"worker":["w0","w1"]})"));
  EXPECT_EQ(j["horovodrun_command"], "horovodrun -np 2 -H h:2 python3 'a b.py'");
  auto back = api::Cluster::from_record(c.to_record());
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->to_json(), j);
}

}  // namespace
}  // namespace muster::service
