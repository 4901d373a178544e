#!/bin/bash
# Issue 21 goal 1, session 25: the swarm's ZeroMQ sockets without libzmq. One build,
# alternated:
#   S = master native ZMTP (the default), swarm native ZMTP (bench/run's default now)
#   Z = master native ZMTP, swarm on libzmq sockets (as in sessions 23-24)
#   T = TCP, for reference (the swarm has no ZeroMQ sockets there)
# Usage (root, repository root): bench/results/goal1-s25/ab.sh BIN OUT_DIR [ROUNDS]
exec bench/results/ab-fanout.sh "$1" "$2" "${3:-5}" \
  S='--transport zeromq --swarm-zmq-engine native' \
  Z='--transport zeromq --swarm-zmq-engine libzmq' \
  T='--transport tcp'
