#!/bin/bash
# Issue 21 goal 1, session 23: the master's ZeroMQ ports served by native ZMTP (N,
# zmq_engine: native) or by libzmq sockets (L, zmq_engine: libzmq), one build, alternated;
# T = the same build on TCP, for reference. The swarm is the same binary in all three, on
# libzmq sockets as it was then (--swarm-zmq-engine libzmq; native is the default since
# session 25).
# Usage (root, repository root): bench/results/goal1-s23/ab.sh BIN OUT_DIR [ROUNDS]
exec bench/results/ab-fanout.sh "$1" "$2" "${3:-5}" \
  N='--transport zeromq --master-opt zmq_engine="native" --swarm-zmq-engine libzmq' \
  L='--transport zeromq --master-opt zmq_engine="libzmq" --swarm-zmq-engine libzmq' \
  T='--transport tcp'
