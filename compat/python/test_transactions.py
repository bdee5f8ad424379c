"""Transactions with an independent AMQP 1.0 client: Apache Qpid Proton (``python-qpid-proton``).

The official Python and JS SDKs never open a transaction coordinator (amqp.md §8); .NET and Java
do. Proton speaks AMQP 1.0 transactions as the spec writes them (its declare and discharge use the
symbolic descriptors ``amqp:declare:list`` / ``amqp:discharge:list``), so it is a second,
independent judge beside fe2o3-amqp's controller (transport-amqp's tests). The official SDK
checks what became visible.

Covers part C's checklist of ../shared/protocol/topics-sessions-transactions.md: a send in a
transaction is invisible until the commit and never appears after a rollback; a message accepted
in a transaction that rolls back keeps its lock (the same delivery completes again); a receive,
a send through the received queue to a second one (send-via) and the completion commit
together; a discharge of an unknown transaction is refused; closing the connection rolls back.

Proton runs its reactor on a thread of its own; :class:`TxnClient` hands it one call at a time
and waits (bounded) for the answer.
"""

import queue
import threading
import uuid
from urllib.parse import urlparse

import pytest
from azure.servicebus import ServiceBusMessage
from proton import Delivery, Link, Message, symbol
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import ApplicationEvent, Container, EventInjector, LinkOption

from helpers import body_text, peek_all, receive_n, receive_none

ANSWER_TIMEOUT = 20.0
TRANSFER_DESTINATION = symbol("com.microsoft:transfer-destination-address")


class _LinkProperties(LinkOption):
    def __init__(self, properties):
        self.properties = properties

    def apply(self, link):
        link.properties = self.properties


class TxnClient(MessagingHandler, TransactionHandler):
    """A Proton connection driven from the test's thread: ``call`` runs a function on the
    reactor's thread; the function registers what answers it (by delivery, link or
    transaction) and the test waits for that answer."""

    def __init__(self, url: str, user: str, password: str):
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.url, self.user, self.password = url, user, password
        self.injector = EventInjector()
        self.calls: "queue.Queue" = queue.Queue()
        self.waiting = {}
        self.opened: "queue.Queue" = queue.Queue()
        self.connection = None
        self.container = Container(self)
        self.container.selectable(self.injector)
        self.failure = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self._wait(self.opened, "the connection to open")

    def _run(self):
        try:
            self.container.run()
        except Exception as error:  # surfaced to the test's thread by `_wait`
            self.failure = error
            for _, answers in list(self.waiting.values()):
                answers.put(error)
            self.opened.put(error)

    # ---- the test's side ----

    def _wait(self, answers: "queue.Queue", what: str):
        try:
            answer = answers.get(timeout=ANSWER_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"timed out waiting for {what}") from None
        if isinstance(answer, Exception):
            raise answer
        return answer

    def call(self, what: str, fn):
        if self.failure is not None:
            raise AssertionError(f"the Proton reactor failed: {self.failure!r}")
        answers: "queue.Queue" = queue.Queue()
        self.calls.put((fn, answers))
        self.injector.trigger(ApplicationEvent("call"))
        return self._wait(answers, what)

    def declare(self):
        return self.call("declared", lambda a: self._expect(
            self.container.declare_transaction(self.connection, handler=self), a))

    def sender(self, address: str, via_destination=None):
        options = []
        if via_destination:
            options.append(_LinkProperties({TRANSFER_DESTINATION: via_destination}))
        return self.call(f"a sender on {address}", lambda a: self._expect(
            self.container.create_sender(self.connection, target=address, options=options), a))

    def receiver(self, address: str):
        return self.call(f"a receiver on {address}", lambda a: self._expect(
            self.container.create_receiver(self.connection, source=address), a))

    def send(self, sender, body: str, txn=None, properties=None):
        """Sends and returns the broker's outcome: (remote state, remote data, condition)."""
        message = Message(body=body.encode(), id=str(uuid.uuid4()), properties=properties)

        def start(answers):
            delivery = txn.send(sender, message) if txn else sender.send(message)
            self._expect(delivery, answers)
        return self.call("a send's outcome", start)

    def receive(self, receiver):
        """The next delivery (and its message), one unit of credit at a time."""
        def start(answers):
            self._expect(receiver, answers)
            receiver.flow(1)
        return self.call("a delivery", start)

    def accept(self, delivery, txn):
        def start(answers):
            txn.accept(delivery)
            # Proton releases what an aborted transaction accepted (a client's choice); these
            # tests ask what the broker keeps, so the client keeps its hands off.
            txn._pending.clear()
            answers.put(None)
        self.call("an accept", start)

    def settle(self, delivery):
        """Accepts and settles a delivery outside any transaction."""
        def start(answers):
            delivery.local.data = None
            delivery.update(Delivery.ACCEPTED)
            delivery.settle()
            answers.put(None)
        self.call("a plain accept", start)

    def discharge(self, txn, commit: bool):
        """``committed``, ``aborted`` or ``commit-failed``."""
        return self.call("a discharge", lambda a: (
            self._expect(txn, a), txn.commit() if commit else txn.abort()))

    def discharge_unknown(self, txn):
        """Discharges a transaction id the broker never gave out."""
        def start(answers):
            txn.id = b"txn:never-declared"
            self._expect(txn, answers)
            txn.commit()
        return self.call("a discharge of an unknown id", start)

    def close(self):
        if self.connection is None or self.failure is not None:
            self.container.stop()
            return
        self.call("the close", lambda a: (self.connection.close(), a.put(None)))
        self.connection = None
        self.container.stop()
        self.thread.join(timeout=5)

    # ---- the reactor's side ----

    @staticmethod
    def _key(thing):
        # Proton hands out fresh wrapper objects for the same link or delivery: key those by
        # what names them; transactions are plain Python objects.
        if isinstance(thing, Delivery):
            return ("delivery", thing.link.name, repr(thing.tag))
        if isinstance(thing, Link):
            return ("link", thing.name)
        return ("object", id(thing))

    def _expect(self, key, answers):
        self.waiting[self._key(key)] = (key, answers)

    def _answer(self, key, value):
        entry = self.waiting.pop(self._key(key), None)
        if entry is not None:
            entry[1].put(value)

    def on_start(self, event):
        self.connection = event.container.connect(
            self.url, user=self.user, password=self.password,
            allowed_mechs="PLAIN", allow_insecure_mechs=True, sasl_enabled=True)

    def on_connection_opened(self, event):
        self.opened.put(True)

    def on_transport_error(self, event):
        self.opened.put(AssertionError(f"transport error: {event.transport.condition}"))

    def on_call(self, event):
        fn, answers = self.calls.get_nowait()
        fn(answers)

    def on_link_opened(self, event):
        self._answer(event.link, event.link)

    def on_link_error(self, event):
        self._answer(event.link, AssertionError(f"link refused: {event.link.remote_condition}"))

    def on_message(self, event):
        self._answer(event.receiver, (event.delivery, event.message))

    def on_settled(self, event):
        self._outcome(event.delivery)

    def on_rejected(self, event):
        self._outcome(event.delivery)

    def _outcome(self, d):
        # Only our sends wait for an outcome (received deliveries have binary tags, which
        # Proton's `tag` cannot show as text).
        if d.link.is_sender:
            self._answer(d, (d.remote_state, d.remote.data, d.remote.condition))

    def on_transaction_declared(self, event):
        self._answer(event.transaction, event.transaction)

    def on_transaction_declare_failed(self, event):
        self._answer(event.transaction, AssertionError("declare failed"))

    def on_transaction_committed(self, event):
        self._answer(event.transaction, "committed")

    def on_transaction_aborted(self, event):
        self._answer(event.transaction, "aborted")

    def on_transaction_commit_failed(self, event):
        self._answer(event.transaction, "commit-failed")


TRANSACTIONAL_STATE = 0x34


@pytest.fixture
def proton(connection_string):
    fields = dict(
        part.split("=", 1) for part in connection_string.split(";") if "=" in part)
    endpoint = urlparse(fields["Endpoint"])
    url = f"amqp://{endpoint.hostname}:{endpoint.port or 5672}"
    client = TxnClient(url, fields["SharedAccessKeyName"], fields["SharedAccessKey"])
    yield client
    client.close()


@pytest.fixture
def fresh_queues(admin):
    created = []

    def make(what: str, **properties) -> str:
        name = f"py-txn-{what}-{uuid.uuid4().hex[:8]}"
        admin.create_queue(name, **properties)
        created.append(name)
        return name

    yield make
    for name in created:
        admin.delete_queue(name)


def test_a_send_is_invisible_until_the_commit_and_gone_after_a_rollback(
    proton, fresh_queues, client
):
    q = fresh_queues("send")
    sender = proton.sender(q)
    txn = proton.declare()
    state, data, condition = proton.send(sender, "committed", txn=txn)
    assert state == TRANSACTIONAL_STATE, (state, condition)
    with client.get_queue_receiver(q) as receiver:
        assert peek_all(receiver) == [], "a transactional send is invisible before the commit"
    assert proton.discharge(txn, commit=True) == "committed"

    rolled_back = proton.declare()
    proton.send(sender, "rolled back", txn=rolled_back)
    assert proton.discharge(rolled_back, commit=False) == "aborted"
    with client.get_queue_receiver(q) as receiver:
        received = receive_n(receiver, 1)
        assert [body_text(m) for m in received] == ["committed"]
        receiver.complete_message(received[0])
        assert receive_none(receiver) == [], "the rolled-back send never appears"


def test_an_accept_in_a_rolled_back_transaction_leaves_the_message_locked(
    proton, fresh_queues, client
):
    q = fresh_queues("accept")
    with client.get_queue_sender(q) as s:
        s.send_messages(ServiceBusMessage("work"))
    receiver = proton.receiver(q)
    delivery, message = proton.receive(receiver)
    assert bytes(message.body) == b"work"

    txn = proton.declare()
    proton.accept(delivery, txn)
    assert proton.discharge(txn, commit=False) == "aborted"
    with client.get_queue_receiver(q) as sdk:
        assert receive_none(sdk) == [], "still locked by the Proton receiver after the rollback"
    # The same delivery completes again. (Outside a transaction: Proton 0.40 encodes a second
    # transactional disposition of one delivery wrongly — a list that claims more items than
    # it has — which the broker refuses as a decode error. transport-amqp's raw-frame tests
    # settle a delivery again in a transaction that commits.)
    proton.settle(delivery)
    with client.get_queue_receiver(q) as sdk:
        assert peek_all(sdk) == [], "completed by the plain accept after the rollback"


def test_receive_send_via_and_complete_commit_together(proton, fresh_queues, client):
    q_in = fresh_queues("in")
    q_out = fresh_queues("out")
    with client.get_queue_sender(q_in) as s:
        s.send_messages(ServiceBusMessage("order"))
    receiver = proton.receiver(q_in)
    via = proton.sender(q_in, via_destination=q_out)
    delivery, _ = proton.receive(receiver)

    txn = proton.declare()
    for body in ("invoice", "shipment"):
        state, _, condition = proton.send(via, body, txn=txn)
        assert state == TRANSACTIONAL_STATE, (state, condition)
    proton.accept(delivery, txn)
    with client.get_queue_receiver(q_out) as out:
        assert peek_all(out) == [], "nothing reaches the destination before the commit"
    assert proton.discharge(txn, commit=True) == "committed"

    with client.get_queue_receiver(q_out) as out:
        received = receive_n(out, 2)
        assert sorted(body_text(m) for m in received) == ["invoice", "shipment"]
        for m in received:
            out.complete_message(m)
        assert receive_none(out) == [], "each exactly once"
    with client.get_queue_receiver(q_in) as sdk:
        assert peek_all(sdk) == [], "the order was completed with the commit"


def test_a_discharge_of_an_unknown_transaction_fails(proton, fresh_queues):
    txn = proton.declare()
    assert proton.discharge_unknown(txn) == "commit-failed"


def test_closing_the_connection_rolls_back(proton, fresh_queues, client):
    q = fresh_queues("close")
    sender = proton.sender(q)
    txn = proton.declare()
    proton.send(sender, "never", txn=txn)
    proton.close()
    with client.get_queue_receiver(q) as receiver:
        assert receive_none(receiver) == []
