# Master daemon core (auth, keys, requests, publish, CLI socket) and salt-master.
# Only daemon.cpp includes Asio (core/transport); everything else is sans-I/O.
sylvite_library(sylvite_master
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/keys.cpp
    ${CMAKE_CURRENT_LIST_DIR}/auth.cpp
    ${CMAKE_CURRENT_LIST_DIR}/master_sign.cpp
    ${CMAKE_CURRENT_LIST_DIR}/minion_data.cpp
    ${CMAKE_CURRENT_LIST_DIR}/worker_pool.cpp
    ${CMAKE_CURRENT_LIST_DIR}/event_hub.cpp
    ${CMAKE_CURRENT_LIST_DIR}/key_service.cpp
    ${CMAKE_CURRENT_LIST_DIR}/job_service.cpp
    ${CMAKE_CURRENT_LIST_DIR}/request_router.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cluster_node.cpp
    ${CMAKE_CURRENT_LIST_DIR}/master.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cli_service.cpp
  DEPS sylvite_master_services sylvite_cluster sylvite_config sylvite_pki sylvite_match sylvite_crypto sylvite_wire sylvite_util
       Threads::Threads)

sylvite_library(sylvite_master_daemon
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/daemon.cpp
  DEPS sylvite_master sylvite_cluster_bus sylvite_transport)

sylvite_executable(salt-master
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/bin/main.cpp
  DEPS sylvite_master_daemon CLI11::CLI11)
target_compile_definitions(salt-master PRIVATE SYLVITE_VERSION="${PROJECT_VERSION}")
