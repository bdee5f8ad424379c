"""Unit tests of the driver's ledger (standard library only: ``python3 -m unittest test_ledger``)."""

import threading
import unittest

from ledger import Ledger, verdict


class ErrorsTest(unittest.TestCase):
    def test_errors_are_counted_by_operation_kind_and_retriability(self):
        ledger = Ledger()
        ledger.error("send", "ServiceBusConnectionError", True)
        ledger.error("send", "ServiceBusConnectionError", True)
        ledger.error("complete", "MessageLockLostError", False)
        report = ledger.verdict()
        self.assertEqual(report["errors"], [
            {"operation": "send", "error": "ServiceBusConnectionError", "retriable": True,
             "count": 2},
            {"operation": "complete", "error": "MessageLockLostError", "retriable": False,
             "count": 1},
        ])
        self.assertEqual(report["non_retriable_errors"], 1)
        self.assertEqual(Ledger().verdict()["errors"], [])


class VerdictTest(unittest.TestCase):
    def test_every_acknowledged_message_completed_once_passes(self):
        report = verdict(["p0-0", "p0-1"], ["p0-0", "p0-1"], {"p0-0": 1, "p0-1": 1},
                         {"p0-0": 1, "p0-1": 1})
        self.assertEqual(report["sent"], 2)
        self.assertEqual(report["received"], 2)
        self.assertEqual((report["lost"], report["duplicated"], report["unknown"]), (0, 0, 0))
        self.assertTrue(report["passed"])

    def test_acknowledged_but_never_completed_is_lost(self):
        report = verdict(["a", "b"], ["a", "b"], {"a": 1, "b": 2}, {"a": 1})
        self.assertEqual(report["lost"], 1)
        self.assertEqual(report["lost_ids"], ["b"])
        self.assertFalse(report["passed"])

    def test_received_again_after_a_failed_completion_is_not_a_duplicate(self):
        # Delivered twice, the first completion failed (not recorded), the second succeeded.
        report = verdict(["a"], ["a"], {"a": 2}, {"a": 1})
        self.assertEqual((report["duplicated"], report["redelivered"]), (0, 1))
        self.assertTrue(report["passed"])

    def test_an_ambiguous_failed_completion_never_returned_is_unsettled_not_lost(self):
        report = verdict(["a", "b"], ["a", "b"], {"a": 1, "b": 1}, {}, ambiguous_completions=["a"])
        self.assertEqual((report["unsettled"], report["lost"]), (1, 1))
        self.assertEqual(report["unsettled_ids"], ["a"])
        self.assertEqual(report["lost_ids"], ["b"])
        self.assertFalse(report["passed"])
        settled = verdict(["a"], ["a"], {"a": 2}, {"a": 1}, ambiguous_completions=["a"])
        self.assertEqual((settled["unsettled"], settled["lost"]), (0, 0))
        self.assertTrue(settled["passed"])

    def test_completed_twice_is_a_duplicate(self):
        report = verdict(["a"], ["a"], {"a": 2}, {"a": 2})
        self.assertEqual(report["duplicated"], 1)
        self.assertEqual(report["duplicated_ids"], ["a"])
        self.assertFalse(report["passed"])

    def test_completed_but_unacknowledged_send_is_unconfirmed_not_unknown(self):
        # The send was stored but its acknowledgement lost, and the retry never succeeded.
        report = verdict(["a"], [], {"a": 1}, {"a": 1})
        self.assertEqual((report["unconfirmed"], report["unknown"], report["lost"]), (1, 0, 0))
        self.assertTrue(report["passed"])

    def test_completed_but_never_sent_is_unknown(self):
        report = verdict([], [], {"x": 1}, {"x": 1})
        self.assertEqual(report["unknown"], 1)
        self.assertEqual(report["unknown_ids"], ["x"])
        self.assertFalse(report["passed"])

    def test_an_unacknowledged_send_never_received_is_fine(self):
        report = verdict(["a"], [], {}, {})
        self.assertEqual((report["sent"], report["lost"]), (0, 0))
        self.assertTrue(report["passed"])

    def test_ids_are_listed_in_natural_order(self):
        ids = ["p1-10", "p1-9", "p0-100", "probe2-3"]
        report = verdict(ids, ids, {}, {})
        self.assertEqual(report["lost_ids"], ["p0-100", "p1-9", "p1-10", "probe2-3"])


class LedgerTest(unittest.TestCase):
    def test_threads_record_into_one_verdict(self):
        ledger = Ledger()

        def producer(k):
            for n in range(200):
                ledger.attempt(f"p{k}-{n}")
                ledger.acknowledge(f"p{k}-{n}")
                ledger.deliver(f"p{k}-{n}", (k << 48) | n)
                ledger.complete(f"p{k}-{n}")

        threads = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        report = ledger.verdict()
        self.assertEqual((report["sent"], report["received"], report["lost"]), (800, 800, 0))
        self.assertTrue(report["passed"])

    def test_a_duplicate_names_its_partition_and_a_return_after_completion(self):
        ledger = Ledger()
        ledger.attempt("a")
        ledger.acknowledge("a")
        ledger.deliver("a", (7 << 48) | 12)
        ledger.complete("a")
        ledger.deliver("a", (7 << 48) | 12)
        ledger.complete("a")
        ledger.complete_failed("a", ambiguous=False)
        report = ledger.verdict()
        self.assertEqual(report["failed_completions"], 1)
        self.assertEqual(report["duplicated_partitions"], [7])
        self.assertEqual(report["returned_after_completion"], 1)
        self.assertEqual(report["returned_after_completion_ids"], ["a"])
        self.assertFalse(report["passed"])


if __name__ == "__main__":
    unittest.main()
