# clusterspec/: ClusterSpec, TF_CONFIG, launch lines, hostfile, shell quoting.
muster_gtest(clusterspec_test
  SOURCES
    cluster_spec_test.cc
    tf_config_test.cc
    shell_quote_test.cc
    hostfile_test.cc
    launch_line_test.cc
  DEPS muster_clusterspec
  LABEL unit
  TIMEOUT 60)
