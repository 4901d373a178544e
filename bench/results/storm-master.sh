# Sourced by the auth-storm scripts under bench/results/. storm_master_pid prints the pid of
# the salt-master that an auth_storm run of bench/run (started just before) restarts: it
# waits up to 60 s for the first master, then up to 30 s for a newer one.
storm_master_pid() {
  local first= cur=
  for _ in $(seq 1 600); do first=$(pgrep -n -x salt-master) && break; sleep 0.1; done
  cur=$first
  for _ in $(seq 1 1500); do
    cur=$(pgrep -n -x salt-master)
    if [ -n "$cur" ] && [ "$cur" != "$first" ]; then break; fi
    sleep 0.02
  done
  echo "$cur"
}
