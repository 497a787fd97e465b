"""A pytest hook that writes every skipped test to TACH_SKIP_LOG (when set), so that
scripts/test-all ends with a summary of what did not run and why. Both test trees'
conftest.py import it."""
import os


def pytest_runtest_logreport(report):
    log = os.environ.get("TACH_SKIP_LOG")
    if report.skipped and log:
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        with open(log, "a") as f:
            f.write(f"SKIPPED: {report.nodeid}: {why}\n")
