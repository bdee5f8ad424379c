"""The pytest plugin of the harness (``-p ironbus_mssuite_plugin``).

- ``test_proxy``: the fixture the suite's conftest asks for. The real kit starts its recording
  proxy there; a live run against ironbus has nothing to start.
- Writes every test's outcome (``passed`` / ``failed`` / ``error`` / ``skipped``) and the first line
  of its failure to the JSON file named by ``IRONBUS_MSSUITE_RESULTS``, for ``run.py``'s summary:
  after every test, so that a run stopped part-way (the whole suite takes over an hour) still
  says what it measured. Under pytest-xdist (``run.py --parallel N``) only the controller writes:
  it sees every worker's reports.
"""

import json
import os

import pytest

_results = {}


@pytest.fixture(scope="session")
def test_proxy():
    yield None


def _first_line(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.strip().splitlines()[0][:300] if crash.message.strip() else ""
    text = str(report.longrepr or "").strip()
    return text.splitlines()[-1][:300] if text else ""


def pytest_runtest_logreport(report):
    entry = _results.setdefault(report.nodeid, {"outcome": "passed", "message": "", "duration": 0.0})
    entry["duration"] += report.duration
    if report.skipped:
        if entry["outcome"] == "passed":
            entry["outcome"] = "skipped"
            entry["message"] = _first_line(report)
    elif report.failed:
        outcome = "failed" if report.when == "call" else "error"
        if entry["outcome"] not in ("failed", "error"):
            entry["outcome"] = outcome
            entry["message"] = f"{report.when}: {_first_line(report)}"


def pytest_collectreport(report):
    if report.failed:
        _results[report.nodeid] = {
            "outcome": "error",
            "message": f"collect: {_first_line(report)}",
            "duration": 0.0,
        }


def _write():
    path = os.environ.get("IRONBUS_MSSUITE_RESULTS")
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(path + ".part", "w", encoding="utf-8") as out:
            json.dump(_results, out, indent=1, sort_keys=True)
        os.replace(path + ".part", path)


def pytest_runtest_logfinish(nodeid, location):
    _write()


def pytest_sessionfinish(session):
    _write()
