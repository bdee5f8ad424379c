"""Runs Microsoft's own ``azure-servicebus`` test suite against a running ironbus.

``cargo xtask compat mssuite`` starts the server, creates ``.venv`` from ``requirements.txt`` and
runs this script with the venv's Python and the ``IRONBUS_*`` variables set. Steps:

1. Download the ``azure-servicebus`` sdist of ``SDK_VERSION`` from PyPI (``pip download``) into
   ``.sdist/`` unless it is there, and extract its ``tests/`` and ``samples/``. The suite's code is
   never committed (``.sdist/`` is ignored).
2. Run the sync and management tests (``tests/test_*.py``, ``tests/mgmt_tests/test_*.py``) with
   pytest: ``standins/`` first on ``PYTHONPATH`` (our ``devtools_testutils`` and
   ``servicebus_preparer``; ``--import-mode=append`` keeps the suite's own ``servicebus_preparer``
   behind ours), ``pytest-timeout`` per test, the development CA trusted by the admin clients.
3. Print and write (``.work/summary.txt``) the passed / failed / errors / skipped counts per file.
4. Compare with ``expected-failures.txt``: a failure not listed there, or a listed test that now
   passes, fails the run. ``--update-expected`` rewrites the file from this run, keeping the
   reasons of tests already listed and marking new ones ``unknown``.

Arguments after the options go to pytest (``-k queue``, a test id); a partial run only judges the
tests it ran.

``--quick`` runs the representative subset of ``QUICK`` (what CI runs, a few minutes): a file or
test of each area, the TLS transport included. ``--samples`` runs the sdist's
``samples/sync_samples`` instead of the tests, each as a script with the environment variables
the samples read, and judges them against ``samples-not-applicable.txt`` the same way.
``--parallel N`` runs the tests in N pytest-xdist processes: the whole suite is mostly waiting
(lock durations, receive timeouts), so N above the core count shortens it. The management tests
still run on their own first: they clear the whole namespace.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tarfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

SDK = "azure-servicebus"
SDK_VERSION = "7.15.0"
HERE = Path(__file__).resolve().parent
SDIST_DIR = HERE / ".sdist"
WORK_DIR = HERE / ".work"
EXPECTED = HERE / "expected-failures.txt"
SAMPLES_NOT_APPLICABLE = HERE / "samples-not-applicable.txt"
SAMPLE_STANDINS = HERE / "standins" / "samples"
# Per-sample deadline: auto_lock_renew.py sleeps through 280 s of simulated work.
SAMPLE_TIMEOUT_SECONDS = 420
# Samples that receive until they are stopped, on Service Bus too: a shorter deadline.
# list_sessions.py lists a subscription's sessions, which needs a session-enabled one; the other
# samples receive from the subscription without sessions.
SESSION_SUBSCRIPTION = "samples-session-subscription"
SAMPLE_ENV = {"list_sessions.py": {"SERVICEBUS_SUBSCRIPTION_NAME": SESSION_SUBSCRIPTION}}
RUNS_UNTIL_STOPPED = {"failure_and_recovery.py": 60, "receive_iterator_queue.py": 60}
# The representative subset (``--quick``, CI; about 3 minutes of tests): management of every entity
# kind, the message and batch models (the wire-shape divergences included), subscriptions over AMQP
# over TLS (send, receive, dead-letter, expiry), sessions (browse, deferral, dead-letter, expiry),
# the client and its credentials. test_queues.py is left out: its tests wait out lock durations
# (over an hour for the file).
QUICK = [
    "tests/mgmt_tests/test_mgmt_namespaces.py",
    "tests/mgmt_tests/test_mgmt_queues.py",
    "tests/mgmt_tests/test_mgmt_topics.py",
    "tests/mgmt_tests/test_mgmt_subscriptions.py",
    "tests/mgmt_tests/test_mgmt_rules.py",
    "tests/test_message.py",
    "tests/test_batch_sizing.py",
    "tests/test_connection_string_parser.py",
    "tests/test_subscriptions.py",
    "tests/test_sb_client.py::TestServiceBusClient::test_sb_client_bad_credentials",
    "tests/test_sb_client.py::TestServiceBusClient::test_sb_client_close_spawned_handlers",
    "tests/test_sb_client.py::TestServiceBusClient::test_client_sas_credential",
    "tests/test_sessions.py::TestServiceBusSession::test_session_by_servicebus_client_browse_messages_client",
    "tests/test_sessions.py::TestServiceBusSession::test_session_by_servicebus_client_iter_messages_with_retrieve_deferred_client",
    "tests/test_sessions.py::TestServiceBusSession::test_session_by_servicebus_client_receive_with_retrieve_deadletter",
    "tests/test_sessions.py::TestServiceBusSession::test_session_message_expiry",
]
STANDINS = HERE / "standins"
# Per-test deadline. The longest tests wait by design, against Service Bus too: 4 min 5 s for the
# connection idle timeout then 1 min (test_queue_receive_keep_conn_alive), 5 min
# (test_queue_receiver_sender_resume_after_link_timeout), 13 receives of 20 s
# (test_session_cancel_scheduled_messages), three 60 s receive waits (test_github_issue_6178).
TEST_TIMEOUT_SECONDS = 420
FAILING = ("failed", "error")


def sdist_root() -> Path:
    """The extracted sdist (``tests/`` and ``samples/``), downloaded first if missing."""
    root = SDIST_DIR / f"{SDK.replace('-', '_')}-{SDK_VERSION}"
    if (root / "tests").is_dir():
        return root
    download = SDIST_DIR / "download"
    download.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
        "--no-binary", ":all:", "-d", str(download), f"{SDK}=={SDK_VERSION}",
    ]
    print("$ " + " ".join(command), flush=True)
    subprocess.run(command, check=True)
    archives = sorted(download.glob("*.tar.gz"))
    if not archives:
        sys.exit(f"pip download left no sdist in {download}")
    prefix = root.name + "/"
    with tarfile.open(archives[0]) as archive:
        members = [
            m for m in archive.getmembers()
            if m.name.startswith(prefix + "tests/") or m.name.startswith(prefix + "samples/")
        ]
        archive.extractall(SDIST_DIR, members=members, filter="data")
    if not (root / "tests").is_dir():
        sys.exit(f"the sdist has no {prefix}tests/")
    return root


def test_files(root: Path) -> List[str]:
    return sync_test_files(root) + mgmt_test_files(root)


def sync_test_files(root: Path) -> List[str]:
    return sorted(glob.glob("tests/test_*.py", root_dir=root))


def mgmt_test_files(root: Path) -> List[str]:
    return sorted(glob.glob("tests/mgmt_tests/test_*.py", root_dir=root))


CA_BEGIN = "# ironbus development CA (compat/mssuite/run.py) begin\n"
CA_END = "# ironbus development CA end\n"


def trust_development_ca() -> None:
    """Adds ironbus's development CA to the venv's certifi bundle, replacing the one of an earlier
    run: the SDK's AMQP-over-TLS and WebSocket transports verify the server against
    ``certifi.where()`` unless a test passes ``connection_verify`` (the suite's do not), as a
    machine that trusts its namespace's certificate would. Only ``.venv`` is touched."""
    import certifi

    bundle = Path(certifi.where())
    text = bundle.read_text(encoding="utf-8")
    start = text.find(CA_BEGIN)
    if start >= 0:
        end = text.find(CA_END, start)
        text = text[:start] + (text[end + len(CA_END):] if end >= 0 else "")
    ca = Path(os.environ["IRONBUS_CA_CERT"]).read_text(encoding="utf-8")
    if not text.endswith("\n"):
        text += "\n"
    bundle.write_text(text + CA_BEGIN + ca.strip() + "\n" + CA_END, encoding="utf-8")


# pytest options whose value is the next argument.
OPTIONS_WITH_VALUES = {
    "-k", "-m", "-p", "-n", "-o", "-c", "-W", "--deselect", "--numprocesses", "--maxfail",
    "--timeout", "--durations", "--junitxml", "--basetemp", "--rootdir",
}


def run_pytest(root: Path, results: Path, pytest_args: List[str], parallel: int = 0) -> None:
    """Runs pytest, its per-test outcomes written to ``results``. With ``parallel`` > 1 and no
    selection, the management tests run first on their own (they list and clear every queue and
    topic of the namespace, so no other test may share it with them), then the other files in
    ``parallel`` pytest-xdist processes."""
    # Test ids and paths named on the command line (not the values of options such as `-k`):
    # without any, the suite's sync and management files are run.
    selection = [
        a for before, a in zip([""] + pytest_args, pytest_args)
        if not a.startswith("-") and before not in OPTIONS_WITH_VALUES
    ]
    workers = [f"--numprocesses={parallel}"] if parallel > 1 else []
    if selection or not workers:
        pytest(root, results, workers + pytest_args + ([] if selection else test_files(root)))
        return
    merged = {}
    for phase, (files, extra) in enumerate([(mgmt_test_files(root), []), (sync_test_files(root), workers)]):
        part = results.with_suffix(f".{phase}.json")
        part.unlink(missing_ok=True)
        pytest(root, part, extra + pytest_args + files)
        if part.exists():
            merged.update(json.loads(part.read_text(encoding="utf-8")))
            part.unlink()
    results.write_text(json.dumps(merged, indent=1, sort_keys=True), encoding="utf-8")


def pytest(root: Path, results: Path, arguments: List[str]) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(STANDINS)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["IRONBUS_MSSUITE_RESULTS"] = str(results)
    # The tests' own admin clients (azure-core over requests) trust ironbus's development CA.
    env["REQUESTS_CA_BUNDLE"] = env["IRONBUS_CA_CERT"]
    command = [
        sys.executable, "-m", "pytest", "-c", str(HERE / "pytest.ini"), "--rootdir", str(root),
        "-p", "ironbus_mssuite_plugin", "--import-mode=append", f"--timeout={TEST_TIMEOUT_SECONDS}",
        "-q", "-rN", "--tb=short",
    ] + arguments
    print("$ (cd " + str(root) + ") " + " ".join(command), flush=True)
    # pytest's own exit code says nothing the ratchet does not: judged below.
    subprocess.run(command, cwd=root, env=env, check=False)


def samples_env() -> Dict[str, str]:
    """The environment variables the samples read, naming entities of their own (created if
    missing), with the namespace addressed as on Service Bus: ``localhost`` on ports 443 and
    5671, and a connection string without ``UseDevelopmentEmulator``."""
    sys.path.insert(0, str(STANDINS))
    import ironbus_target
    import servicebus_preparer

    import functools

    # Entities of their own, apart from the tests' standing ones.
    queue, session_queue = "samples-queue", "samples-session-queue"
    topic, subscription = "samples-topic", "samples-subscription"
    with ironbus_target.admin_client() as admin:
        ensure = servicebus_preparer._ensure
        ensure(admin.get_queue, admin.create_queue, queue)
        ensure(admin.get_queue, functools.partial(admin.create_queue, requires_session=True), session_queue)
        ensure(admin.get_topic, admin.create_topic, topic)
        ensure(
            functools.partial(admin.get_subscription, topic),
            functools.partial(admin.create_subscription, topic),
            subscription,
        )
        ensure(
            functools.partial(admin.get_subscription, topic),
            functools.partial(admin.create_subscription, topic, requires_session=True),
            SESSION_SUBSCRIPTION,
        )
    namespace = ironbus_target.fully_qualified_namespace()
    key_name, key = ironbus_target.KEY_NAME, ironbus_target.shared_access_key()
    return {
        "SERVICEBUS_CONNECTION_STR": (
            f"Endpoint=sb://{namespace}/;SharedAccessKeyName={key_name};SharedAccessKey={key}"
        ),
        "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE": namespace,
        "SERVICEBUS_QUEUE_NAME": queue,
        "SERVICEBUS_SESSION_QUEUE_NAME": session_queue,
        "SERVICEBUS_SESSION_ID": servicebus_preparer.ENV_SESSION_ID,
        "SERVICEBUS_TOPIC_NAME": topic,
        "SERVICEBUS_SUBSCRIPTION_NAME": subscription,
        "SERVICEBUS_SAS_POLICY": key_name,
        "SERVICEBUS_SAS_KEY": key,
    }


def run_samples(root: Path, selection: List[str]) -> Dict[str, dict]:
    """Runs each sync sample as a script; its outcome by ``samples/sync_samples/<name>``."""
    directory = root / "samples" / "sync_samples"
    names = sorted(p.name for p in directory.glob("*.py"))
    if selection:
        names = [n for n in names if any(s in n for s in selection)]
    env = dict(os.environ)
    env.update(samples_env())
    env["PYTHONPATH"] = os.pathsep.join([str(SAMPLE_STANDINS), str(STANDINS)])
    # The admin clients (azure-core over requests) trust the development CA, as in the tests.
    env["REQUESTS_CA_BUNDLE"] = env["IRONBUS_CA_CERT"]
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    results = {}
    for name in names:
        started = time.monotonic()
        deadline = RUNS_UNTIL_STOPPED.get(name, SAMPLE_TIMEOUT_SECONDS)
        try:
            done = subprocess.run(
                [sys.executable, name], cwd=directory, env={**env, **SAMPLE_ENV.get(name, {})}, capture_output=True, text=True,
                timeout=deadline, check=False,
            )
            outcome = "passed" if done.returncode == 0 else "failed"
            output = (done.stderr or done.stdout).strip().splitlines()
            message = output[-1][:300] if output and outcome == "failed" else ""
        except subprocess.TimeoutExpired:
            outcome, message = "failed", f"still running after {deadline} s"
        elapsed = time.monotonic() - started
        print(f"{outcome:>7}  {elapsed:6.1f} s  {name}  {message}", flush=True)
        results[f"samples/sync_samples/{name}"] = {"outcome": outcome, "message": message}
    return results


def file_of(node_id: str) -> str:
    return node_id.split("::", 1)[0]


def summary(results: Dict[str, dict]) -> str:
    per_file: Dict[str, Counter] = defaultdict(Counter)
    for node_id, result in results.items():
        per_file[file_of(node_id)][result["outcome"]] += 1
    columns = ("passed", "failed", "error", "skipped")
    width = max([len("file")] + [len(f) for f in per_file])
    lines = [f"{'file':<{width}}  " + "  ".join(f"{c:>7}" for c in columns)]
    total: Counter = Counter()
    for name in sorted(per_file):
        counts = per_file[name]
        total.update(counts)
        lines.append(f"{name:<{width}}  " + "  ".join(f"{counts[c]:>7}" for c in columns))
    lines.append(f"{'total':<{width}}  " + "  ".join(f"{total[c]:>7}" for c in columns))
    return "\n".join(lines)


def read_expected(path: Path = EXPECTED) -> Dict[str, str]:
    """Test id -> ``category: note`` from ``expected-failures.txt`` (``<id>  <category>  # note``)."""
    expected = {}
    if not path.exists():
        return expected
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        node_id, _, reason = line.partition(" ")
        expected[node_id] = reason.strip()
    return expected


def write_expected(results: Dict[str, dict], old: Dict[str, str], path: Path = EXPECTED) -> None:
    header = [
        line for line in (path.read_text(encoding="utf-8").splitlines() if path.exists() else [])
        if line.startswith("#")
    ]
    body = []
    for node_id in sorted(results):
        if results[node_id]["outcome"] in FAILING:
            reason = old.get(node_id) or f"unknown  # {results[node_id]['message'][:120]}"
            body.append(f"{node_id}  {reason}")
    path.write_text("\n".join(header + body) + "\n", encoding="utf-8")
    print(f"wrote {path} ({len(body)} expected failures)")


def judge(results: Dict[str, dict], expected: Dict[str, str]) -> Tuple[List[str], List[str]]:
    unexpected_failures = [
        f"{n}  ({results[n]['outcome']}: {results[n]['message'][:200]})"
        for n in sorted(results)
        if results[n]["outcome"] in FAILING and n not in expected
    ]
    unexpected_passes = [
        f"{n}  (listed as {expected[n]})"
        for n in sorted(results)
        if results[n]["outcome"] == "passed" and n in expected
    ]
    return unexpected_failures, unexpected_passes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update-expected", action="store_true", help="rewrite the expected list")
    parser.add_argument("--quick", action="store_true", help="the representative subset (CI)")
    parser.add_argument("--samples", action="store_true", help="run samples/sync_samples instead")
    parser.add_argument("--parallel", type=int, default=0, metavar="N",
                        help="run the tests in N processes (pytest-xdist); each test has entities "
                             "of its own, and most of a test's time is waiting")
    args, pytest_args = parser.parse_known_args()
    root = sdist_root()
    trust_development_ca()
    WORK_DIR.mkdir(exist_ok=True)
    results_path = WORK_DIR / ("samples.json" if args.samples else "results.json")
    results_path.unlink(missing_ok=True)
    started = time.monotonic()
    expected_path = SAMPLES_NOT_APPLICABLE if args.samples else EXPECTED
    if args.samples:
        results = run_samples(root, pytest_args)
        results_path.write_text(json.dumps(results, indent=1), encoding="utf-8")
    else:
        if args.quick:
            pytest_args = pytest_args + QUICK
        run_pytest(root, results_path, pytest_args, args.parallel)
        if not results_path.exists():
            print("pytest wrote no results (see its output above)")
            return 1
        results = json.loads(results_path.read_text(encoding="utf-8"))
    elapsed = time.monotonic() - started
    expected = read_expected(expected_path)
    table = summary(results)
    unexpected_failures, unexpected_passes = judge(results, expected)
    what = "samples" if args.samples else "tests"
    report = [
        f"azure-servicebus {SDK_VERSION} {what} against ironbus: {len(results)} in {elapsed:.0f} s",
        table,
        f"unexpected failures ({len(unexpected_failures)}):",
        *("  " + line for line in unexpected_failures),
        f"unexpected passes ({len(unexpected_passes)}): remove them from {expected_path.name}",
        *("  " + line for line in unexpected_passes),
    ]
    text = "\n".join(report)
    summary_path = WORK_DIR / ("samples-summary.txt" if args.samples else "summary.txt")
    summary_path.write_text(text + "\n", encoding="utf-8")
    print("\n" + text)
    print(f"(written to {summary_path}; per-item results in {results_path})")
    if args.update_expected:
        write_expected(results, expected, expected_path)
        return 0
    return 1 if unexpected_failures or unexpected_passes else 0


if __name__ == "__main__":
    sys.exit(main())
