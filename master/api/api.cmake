# The REST API (salt-api's rest_cherrypy; issue 19 "api"): HTTP(S) server on Boost.Beast
# with OpenSSL, the rest_cherrypy URL set, lowstate dispatch through the CLI service.
# Its own io_context and threads; salt-master's daemon starts it when the master config
# has a rest_cherrypy block.
sylvite_library(sylvite_master_rest
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/api_group.cpp
    ${CMAKE_CURRENT_LIST_DIR}/api_http.cpp
    ${CMAKE_CURRENT_LIST_DIR}/api_lowstate.cpp
    ${CMAKE_CURRENT_LIST_DIR}/api_routes.cpp
    ${CMAKE_CURRENT_LIST_DIR}/api_server.cpp
    ${CMAKE_CURRENT_LIST_DIR}/api_ws.cpp
  DEPS sylvite::master_api sylvite::master_console sylvite::master sylvite::master_ipc sylvite::cli sylvite::config sylvite::pki sylvite::crypto sylvite::wire
       sylvite::util Boost::headers OpenSSL::SSL OpenSSL::Crypto Threads::Threads)
