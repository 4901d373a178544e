"""pytest plugin loaded by scripts/test.sh (-p pytest_noskip): a skipped test is not a
passed test. Under CI=true a run with any skipped test fails (exit 1) after listing the
skip reasons; elsewhere the reasons are listed (-rs) and the run's status is unchanged."""
import os


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def pytest_sessionfinish(session, exitstatus):
    if not _ci() or hasattr(session.config, "workerinput"):  # xdist workers: the controller decides
        return
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = tr.stats.get("skipped", []) if tr is not None else []
    if skipped:
        session.config._sylvite_skipped = len(skipped)
        if session.exitstatus == 0:
            session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = getattr(config, "_sylvite_skipped", 0)
    if n:
        terminalreporter.write_line(
            f"CI=true: {n} test(s) skipped; a skip is a failure here (reasons above, '-rs')", red=True)
