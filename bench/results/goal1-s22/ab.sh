#!/bin/bash
# Issue 21 goal 1, session 22: A/B/C of the ZeroMQ socket change (no ZMQ_EVENTS query per
# message; replies sent in batches), alternated, sylvite only, ZeroMQ, 1k, the journaled
# ext4 image: session 21's script over ZeroMQ. A = master and swarm before, B = master
# after with the swarm before, C = both after. Build each into a copy of build/bin first:
#   git stash; ninja -C build; cp -a build/bin /tmp/sylbin-before; git stash pop; ...
# Usage (root, repository root): bench/results/goal1-s22/ab.sh BEFORE_BIN AFTER_BIN OUT_DIR [PAIRS]
TRANSPORT=zeromq exec bench/results/goal1-s21/ab.sh "$@"
