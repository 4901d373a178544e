# Master daemon core (auth, keys, requests, publish, CLI socket) and salt-master.
# Only daemon.cpp includes Asio (core/transport); everything else is sans-I/O.
sylvite_library(sylvite_master
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/keys.cpp
    ${CMAKE_CURRENT_LIST_DIR}/auth.cpp
    ${CMAKE_CURRENT_LIST_DIR}/master_sign.cpp
    ${CMAKE_CURRENT_LIST_DIR}/minion_data.cpp
    ${CMAKE_CURRENT_LIST_DIR}/mine.cpp
    ${CMAKE_CURRENT_LIST_DIR}/worker_pool.cpp
    ${CMAKE_CURRENT_LIST_DIR}/event_hub.cpp
    ${CMAKE_CURRENT_LIST_DIR}/key_service.cpp
    ${CMAKE_CURRENT_LIST_DIR}/job_service.cpp
    ${CMAKE_CURRENT_LIST_DIR}/request_router.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cluster_node.cpp
    ${CMAKE_CURRENT_LIST_DIR}/master.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cli_service.cpp
    ${CMAKE_CURRENT_LIST_DIR}/reactor.cpp
    ${CMAKE_CURRENT_LIST_DIR}/pg_events.cpp
  HEADERS ${CMAKE_CURRENT_LIST_DIR}/services.hpp
  DEPS sylvite::master_services sylvite::master_pg sylvite::master_ipc sylvite::master_api sylvite::cluster sylvite::lb_admin sylvite::config sylvite::pki
       sylvite::match sylvite::crypto sylvite::wire sylvite::util Threads::Threads)

sylvite_library(sylvite_master_daemon
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/daemon.cpp ${CMAKE_CURRENT_LIST_DIR}/event_publisher.cpp
          ${CMAKE_CURRENT_LIST_DIR}/pub_processes.cpp
  DEPS sylvite::master sylvite::master_api sylvite::master_rest sylvite::cluster_bus sylvite::transport sylvite::transport_zmq)

sylvite_executable(salt-master
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/bin/main.cpp
  DEPS sylvite::master_daemon sylvite::version CLI11::CLI11)

# sylvite-publisher: a publish process of a master with publish_processes > 0
# (master/pub_processes.hpp starts it next to salt-master).
sylvite_executable(sylvite-publisher
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/bin/publisher.cpp
  DEPS sylvite::transport sylvite::master_ipc sylvite::util)
add_dependencies(salt-master sylvite-publisher)
