# SDK tests: the Python SDK without a daemon (unit) and against a
# real musterd (integration); the C++ SDK against a real musterd.
muster_python_test(sdk_python_unit SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_unit_test.py LABEL unit TIMEOUT 120)
muster_python_test(sdk_python_follow_unit SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_follow_unit_test.py
  LABEL unit TIMEOUT 120)
muster_gtest(sdk_cpp_types_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/sdk_cpp_types_test.cc DEPS muster_sdk
  LABEL unit TIMEOUT 60)

# Integration: a real musterd started by the test (needs musterd and muster-agent built).
muster_python_test(sdk_python_integration SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_integration_test.py
  LABEL integration TIMEOUT 240)
muster_python_test(sdk_python_cluster SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_cluster_test.py
  LABEL integration TIMEOUT 240)
# Followed logs, warnings, Ctrl-C (real SIGINT) and progress; the muster CLI as a subprocess.
muster_python_test(sdk_python_follow SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_follow_test.py
  LABEL integration TIMEOUT 240)
muster_python_test(sdk_python_cli SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_cli_test.py
  LABEL integration TIMEOUT 240)
# pip install --no-build-isolation of sdk/python into a venv; its `muster` command against musterd.
muster_python_test(sdk_python_package SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_package_test.py
  LABEL integration TIMEOUT 240)
# The example notebooks and a ported CML notebook in a real ipykernel (nbclient). The
# training notebooks need the fashion_mnist program and muster-ps.
muster_python_test(sdk_python_notebook SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_notebook_test.py
  LABEL integration TIMEOUT 300 ENV "PYTEST_ADDOPTS=-k 'not training'")
muster_python_test(sdk_python_notebook_training SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_notebook_test.py
  LABEL integration TIMEOUT 300 ENV "PYTEST_ADDOPTS=-k 'training and not ddp';OMP_NUM_THREADS=1")
# Seed 001's Horovod cell (os.system("horovodrun -np N -H <worker IPs> -p 2222 python train.py")) with only
# the import changed, against a musterd without PYTHONPATH; what every kind of worker imports; failed ranks
# named with their last lines; python= (a venv's interpreter).
muster_python_test(horovodrun_seed SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/horovodrun_seed_test.py
  LABEL integration TIMEOUT 900 ENV "OMP_NUM_THREADS=1")
# cmake --install (component sdk) into a temp prefix; a find_package(muster) consumer built and run.
muster_python_test(sdk_cpp_install SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_cpp_install_test.py
  LABEL integration TIMEOUT 300)
muster_gtest(sdk_cpp_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/sdk_cpp_test.cc DEPS muster_sdk
  LABEL integration TIMEOUT 240)
# ... and over https: the pin from musterd.json, a CA file, a wrong pin refused.
muster_gtest(sdk_cpp_tls_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/sdk_cpp_tls_test.cc DEPS muster_sdk
  LABEL integration TIMEOUT 120)
# Every answer sdk_cpp_test's clients got (recorded through
# Client::set_response_observer) against api/openapi.yaml.
set_tests_properties(sdk_cpp_test PROPERTIES FIXTURES_SETUP sdk_cpp_responses)
add_test(NAME sdk_cpp_conformance COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/openapi_check_log.py
  ${CMAKE_BINARY_DIR}/sdk_cpp_test.responses.jsonl)
set_tests_properties(sdk_cpp_conformance PROPERTIES LABELS integration TIMEOUT 60
  FIXTURES_REQUIRED sdk_cpp_responses ENVIRONMENT "MUSTER_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
# Logs from the end with a marker, from_start, the size cap and rotation under a fast writer
# (300 MB through a 1 MiB cap), follow catching up, a cluster's launcher log capped.
muster_python_test(sdk_python_logs SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_logs_test.py
  LABEL integration TIMEOUT 600)
# Training curves: SummaryWriter's custom scalars from a seed-style script, kept across a daemon
# restart; a line per rank of an mpi cluster; /metrics' label sets unchanged.
muster_python_test(sdk_python_curves SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/sdk_python_curves_test.py
  LABEL integration TIMEOUT 300)
