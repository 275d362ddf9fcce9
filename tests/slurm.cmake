# workers/slurm: the backend over a fake Slurm (unit), and musterd
# --backend slurm against a real Slurm (munge, slurmctld, two slurmd nodes in
# network namespaces; root) started by tests/slurm_testbed.py (integration).
muster_gtest(slurm_backend_test SOURCES slurm_backend_test.cc DEPS muster_workers_slurm muster_service
  LABEL unit TIMEOUT 60)
muster_python_test(slurm_integration SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/slurm_integration_test.py
  LABEL integration TIMEOUT 600)
add_dependencies(slurm_backend_test musterd muster_agent)
