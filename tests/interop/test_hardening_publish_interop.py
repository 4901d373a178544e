"""Issue 14 item 7 against real Salt 3008.5: an unmodified salt-minion under a sylvite
master with the new defaults (signed publishes, serials that are the master's clock in
microseconds) runs its jobs, checks the signature when its own sign_pub_messages is
on, and refuses a replay on its connection by the serial (Salt's own check)."""
from conftest import SALT3008
from sylvite_harness import wait_for
from test_hardening_publish import (PubProxy, frame_body, lines, log_count, make_frame, run_counted_job,
                                    wait_log)

REAL_MINION = str(SALT3008 / "salt-minion")


def test_real_minion_accepts_signed_time_serials_and_refuses_replay_and_unsigned(env):
    master = env.master().start().wait_ready()
    proxy = PubProxy(master.publish_port)
    try:
        m = env.minion("real1", master, publish_port=proxy.port)
        m.write_config(multiprocessing=False, log_level_logfile="debug", sign_pub_messages=True)
        m.start(binary=REAL_MINION)
        wait_for(lambda: "real1" in master.keys().get("minions_pre", []), 90, "real1 pending")
        assert master.salt_key("-a", "real1", "-y").returncode == 0
        wait_for(lambda: master.salt_json("real1", "test.ping", "-t", "10").get("real1") is True, 90,
                 "real1 to answer", interval=1)
        counter = env.root / "real1.count"
        frame = run_counted_job(master, proxy, "real1", counter)
        body = frame_body(frame)
        assert body.get("sig_algo") == "PKCS1v15-SHA1" and body.get("sig")

        # Replay on the same connection: Salt's Crypticle serial check refuses it.
        before = log_count(m, "invalid serial")
        proxy.inject(frame)
        wait_log(m, "invalid serial", before, timeout=60)
        assert lines(counter) == 1

        # The same publish without its signature: Salt's minion (sign_pub_messages) refuses
        # it before decrypting, without a log line. So send it, then the signed replay as a
        # marker: had the unsigned one been decrypted, its stale serial would be logged too,
        # i.e. two new "invalid serial" lines instead of one.
        unsigned = {k: v for k, v in body.items() if k not in ("sig", "sig_algo")}

        def in_logfile():
            p = m.root / "minion.log"
            return p.read_text(errors="replace").count("invalid serial") if p.exists() else 0
        before = in_logfile()
        proxy.inject(make_frame(unsigned))
        proxy.inject(frame)
        wait_for(lambda: in_logfile() > before, 60, "the marker's refusal in minion.log")
        assert in_logfile() == before + 1, "the unsigned publish was decrypted"
        assert lines(counter) == 1

        # Still serving: a new job runs once.
        out = wait_for(lambda: master.salt_json("real1", "cmd.run", f"echo ran >> {counter}", "-t", "20"), 90,
                       "a job after the refusals")
        assert "real1" in out
        assert lines(counter) == 2
    finally:
        proxy.close()
