# `cmake --install` of muster's libraries as one CMake package, "muster",
# with a component per half a program can use:
#   sdk      muster::sdk (the C++ REST client; sdk/cpp)
#   runtime  muster::runtime (the training runtime a worker program links:
#            comm, distributed, ps, data, nn, optim, report) and its parts
#            (muster::comm, muster::ps, ...), with base and clusterspec below.
# Headers land under include/muster/<folder>/... and name each other by their
# path in the tree ("runtime/comm/communicator.h"), as in the build; a
# consumer writes <muster/runtime/comm/communicator.h> or the short form.
#   cmake --install build --component runtime --prefix /opt/muster
#   find_package(muster REQUIRED COMPONENTS runtime)
#   target_link_libraries(app PRIVATE muster::runtime)
# tests/runtime_install_test.py installs it and builds such a consumer.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(MUSTER_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/muster)

# muster_install_runtime(target EXPORT_NAME name [HEADER_DIRS dir...] [NO_HEADERS]):
# installs a library of the runtime component (export set musterRuntimeTargets)
# as muster::<name>, with the headers (*.h) of the listed folders, relative to
# the calling CMakeLists.txt (default: its own folder, not its subfolders).
function(muster_install_runtime target)
  cmake_parse_arguments(ARG "NO_HEADERS" "EXPORT_NAME" "HEADER_DIRS" ${ARGN})
  if(NOT ARG_EXPORT_NAME)
    message(FATAL_ERROR "muster_install_runtime(${target}): EXPORT_NAME is required")
  endif()
  if(NOT ARG_HEADER_DIRS AND NOT ARG_NO_HEADERS)
    set(ARG_HEADER_DIRS .)
  endif()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${ARG_EXPORT_NAME})
  install(TARGETS ${target} EXPORT musterRuntimeTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
  file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  foreach(dir ${ARG_HEADER_DIRS})
    file(GLOB headers ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*.h)
    set(dest ${CMAKE_INSTALL_INCLUDEDIR}/muster/${folder})
    if(NOT dir STREQUAL ".")
      string(APPEND dest /${dir})
    endif()
    install(FILES ${headers} DESTINATION ${dest} COMPONENT runtime)
  endforeach()
endfunction()

# The package: export sets and musterConfig.cmake. Called once, after every
# folder has added its targets (top-level CMakeLists.txt).
function(muster_install_package)
  install(EXPORT musterRuntimeTargets NAMESPACE muster:: DESTINATION ${MUSTER_CMAKE_INSTALL_DIR}
    FILE muster-runtime-targets.cmake COMPONENT runtime)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/sdk/cmake/musterConfig.cmake.in
    ${PROJECT_BINARY_DIR}/musterConfig.cmake INSTALL_DESTINATION ${MUSTER_CMAKE_INSTALL_DIR})
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/musterConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
  # Either component alone gives a usable package: both carry the config.
  foreach(component sdk runtime)
    install(FILES ${PROJECT_BINARY_DIR}/musterConfig.cmake ${PROJECT_BINARY_DIR}/musterConfigVersion.cmake
      DESTINATION ${MUSTER_CMAKE_INSTALL_DIR} COMPONENT ${component})
  endforeach()
endfunction()
