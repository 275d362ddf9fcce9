// PsCluster: what the parameter-server runtime needs from TF_CONFIG.
//
// The ps task addresses in index order, the training tasks ("chief" first
// when there is one, then "worker"s) and who this task is. Built from
// TensorFlow's TF_CONFIG JSON:
//
//   auto cluster = muster::runtime::ps::PsCluster::from_env();   // reads TF_CONFIG
//   cluster.ps;               // {"10.0.0.7:2222", ...}
//   cluster.worker_index();   // 0 for the chief (or worker 0 without a chief)
//
// or by hand in tests: PsCluster{.ps = {...}, .workers = {...}, .task_type = "worker"}.
#pragma once

#include <string>
#include <vector>

namespace muster::runtime::ps {

struct PsCluster {
  std::vector<std::string> ps;       // "host:port", ps task index order
  std::vector<std::string> workers;  // chief (if any) first, then workers
  std::string task_type = "worker";  // "chief", "worker" or "ps"
  int task_index = 0;
  bool has_chief = false;

  // Index of this task among the training tasks: the chief is 0; worker i is
  // i, or i + 1 when there is a chief. -1 for a ps task.
  int worker_index() const;
  // True for the chief, or worker 0 when there is no chief.
  bool is_chief() const { return worker_index() == 0; }
  int num_workers() const { return static_cast<int>(workers.size()); }

  // Parses TF_CONFIG with muster::clusterspec::TfConfig (TensorFlow's rules); throws InvalidArgument
  // naming what is wrong.
  static PsCluster from_tf_config(const std::string& json);
  static PsCluster from_env();
};

// Splits "host:port"; throws InvalidArgument.
void split_address(const std::string& address, std::string* host, unsigned short* port);

}  // namespace muster::runtime::ps
