"""Topics, subscriptions and rules through the official SDK: the ``ServiceBusAdministrationClient``
(ATOM over HTTPS) creates, reads, updates, lists and deletes them, with every rule filter and
action Python has; ``ServiceBusClient`` sends to a topic and receives from its subscriptions and
a subscription's dead-letter queue (AMQP).

Each test creates its own topic, named ``py-topic-<what>-<random>`` so that reruns against the same
server do not collide, and deletes it at the end (which deletes its subscriptions and rules).
"""

import datetime
import uuid

import pytest
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.management import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)

from helpers import body_text, receive_n, receive_none


def fresh(what: str) -> str:
    return f"py-topic-{what}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic(admin):
    """A fresh topic, deleted (with everything under it) after the test."""
    name = fresh("t")
    admin.create_topic(name)
    yield name
    try:
        admin.delete_topic(name)
    except ResourceNotFoundError:
        pass


def test_topic_lifecycle(admin):
    name = fresh("life")
    created = admin.create_topic(
        name,
        default_message_time_to_live=datetime.timedelta(hours=1),
        requires_duplicate_detection=True,
        duplicate_detection_history_time_window=datetime.timedelta(minutes=2),
    )
    assert created.name == name
    assert created.default_message_time_to_live == datetime.timedelta(hours=1)
    assert created.requires_duplicate_detection is True
    with pytest.raises(ResourceExistsError):
        admin.create_topic(name)

    props = admin.get_topic(name)
    assert props.duplicate_detection_history_time_window == datetime.timedelta(minutes=2)
    assert props.enable_partitioning is False
    assert props.status == "Active"
    props.max_size_in_megabytes = 2048
    props.default_message_time_to_live = datetime.timedelta(hours=2)
    admin.update_topic(props)
    updated = admin.get_topic(name)
    assert updated.max_size_in_megabytes == 2048
    assert updated.default_message_time_to_live == datetime.timedelta(hours=2)
    assert updated.requires_duplicate_detection is True

    assert name in [t.name for t in admin.list_topics()]
    runtime = admin.get_topic_runtime_properties(name)
    assert runtime.name == name
    assert runtime.subscription_count == 0
    assert runtime.scheduled_message_count == 0
    assert runtime.size_in_bytes == 0
    assert name in [t.name for t in admin.list_topics_runtime_properties()]
    # A topic is not a queue.
    assert name not in [q.name for q in admin.list_queues()]

    admin.delete_topic(name)
    with pytest.raises(ResourceNotFoundError):
        admin.get_topic(name)
    with pytest.raises(ResourceNotFoundError):
        admin.delete_topic(name)


def test_subscription_lifecycle(admin, topic):
    with pytest.raises(ResourceNotFoundError):
        admin.create_subscription(fresh("missing"), "s")
    created = admin.create_subscription(
        topic, "s1", max_delivery_count=3, lock_duration=datetime.timedelta(seconds=30)
    )
    assert created.name == "s1"
    assert created.max_delivery_count == 3
    assert created.lock_duration == datetime.timedelta(seconds=30)
    with pytest.raises(ResourceExistsError):
        admin.create_subscription(topic, "s1")
    admin.create_subscription(topic, "s2", dead_lettering_on_message_expiration=True)

    props = admin.get_subscription(topic, "s1")
    assert props.requires_session is False
    assert props.dead_lettering_on_filter_evaluation_exceptions is True
    assert props.status == "Active"
    assert [s.name for s in admin.list_subscriptions(topic)] == ["s1", "s2"]
    assert admin.get_topic_runtime_properties(topic).subscription_count == 2

    runtime = admin.get_subscription_runtime_properties(topic, "s1")
    assert runtime.name == "s1"
    assert runtime.active_message_count == 0
    assert runtime.dead_letter_message_count == 0
    assert runtime.total_message_count == 0

    # A new subscription has the rule $Default, a True filter.
    rules = list(admin.list_rules(topic, "s1"))
    assert [r.name for r in rules] == ["$Default"]
    assert isinstance(rules[0].filter, TrueRuleFilter)

    props.max_delivery_count = 7
    admin.update_subscription(topic, props)
    assert admin.get_subscription(topic, "s1").max_delivery_count == 7

    admin.delete_subscription(topic, "s1")
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription(topic, "s1")
    assert [s.name for s in admin.list_subscriptions(topic)] == ["s2"]


def test_rule_lifecycle(admin, topic):
    admin.create_subscription(topic, "s")
    admin.create_rule(
        topic,
        "s",
        "sqlRule",
        filter=SqlRuleFilter("color = @c AND n > @n", parameters={"@c": "red", "@n": 5}),
        action=SqlRuleAction("SET x = @v", parameters={"@v": "w"}),
    )
    admin.create_rule(
        topic,
        "s",
        "correlationRule",
        filter=CorrelationRuleFilter(
            correlation_id="cid",
            label="lbl",
            content_type="text/plain",
            properties={"region": "eu", "count": 3, "flag": True},
        ),
    )
    admin.create_rule(topic, "s", "trueRule", filter=TrueRuleFilter())
    admin.create_rule(topic, "s", "falseRule", filter=FalseRuleFilter())
    with pytest.raises(ResourceExistsError):
        admin.create_rule(topic, "s", "sqlRule", filter=TrueRuleFilter())
    with pytest.raises(ResourceNotFoundError):
        admin.create_rule(topic, "nope", "r", filter=TrueRuleFilter())

    sql = admin.get_rule(topic, "s", "sqlRule")
    assert isinstance(sql.filter, SqlRuleFilter)
    assert sql.filter.sql_expression == "color = @c AND n > @n"
    assert sql.filter.parameters == {"@c": "red", "@n": 5}
    assert isinstance(sql.action, SqlRuleAction)
    assert sql.action.sql_expression == "SET x = @v"
    assert sql.action.parameters == {"@v": "w"}

    corr = admin.get_rule(topic, "s", "correlationRule")
    assert isinstance(corr.filter, CorrelationRuleFilter)
    assert corr.filter.correlation_id == "cid"
    assert corr.filter.label == "lbl"
    assert corr.filter.content_type == "text/plain"
    assert corr.filter.properties == {"region": "eu", "count": 3, "flag": True}
    assert corr.action is None

    assert isinstance(admin.get_rule(topic, "s", "trueRule").filter, TrueRuleFilter)
    assert isinstance(admin.get_rule(topic, "s", "falseRule").filter, FalseRuleFilter)
    assert [r.name for r in admin.list_rules(topic, "s")] == [
        "$Default",
        "correlationRule",
        "falseRule",
        "sqlRule",
        "trueRule",
    ]

    sql.filter = SqlRuleFilter("color = 'blue'")
    sql.action = None
    admin.update_rule(topic, "s", sql)
    replaced = admin.get_rule(topic, "s", "sqlRule")
    assert replaced.filter.sql_expression == "color = 'blue'"
    assert replaced.action is None

    admin.delete_rule(topic, "s", "$Default")
    with pytest.raises(ResourceNotFoundError):
        admin.get_rule(topic, "s", "$Default")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_rule(topic, "s", "$Default")
    with pytest.raises(HttpResponseError):
        admin.create_rule(topic, "s", "tooLong", filter=SqlRuleFilter("a = " + "1" * 1100))


def test_every_subscription_receives_a_copy(admin, client, topic):
    admin.create_subscription(topic, "a")
    admin.create_subscription(topic, "b")
    admin.create_subscription(topic, "none")
    admin.delete_rule(topic, "none", "$Default")
    admin.create_rule(topic, "none", "never", filter=FalseRuleFilter())

    with client.get_topic_sender(topic) as sender:
        sender.send_messages(ServiceBusMessage("hello", subject="greeting"))
    assert admin.get_subscription_runtime_properties(topic, "a").active_message_count == 1

    for sub in ["a", "b"]:
        with client.get_subscription_receiver(topic, sub) as receiver:
            received = receive_n(receiver, 1)
            assert [body_text(m) for m in received] == ["hello"]
            assert received[0].subject == "greeting"
            receiver.complete_message(received[0])
    with client.get_subscription_receiver(topic, "none") as receiver:
        assert receive_none(receiver) == []
    assert admin.get_subscription_runtime_properties(topic, "a").active_message_count == 0


def test_a_subscriptions_dead_letter_queue(admin, client, topic):
    admin.create_subscription(topic, "dl")
    with client.get_topic_sender(topic) as sender:
        sender.send_messages(ServiceBusMessage("poison"))
    with client.get_subscription_receiver(topic, "dl") as receiver:
        (message,) = receive_n(receiver, 1)
        receiver.dead_letter_message(message, reason="bad", error_description="cannot parse")
    runtime = admin.get_subscription_runtime_properties(topic, "dl")
    assert runtime.active_message_count == 0
    assert runtime.dead_letter_message_count == 1
    with client.get_subscription_receiver(
        topic, "dl", sub_queue=ServiceBusSubQueue.DEAD_LETTER
    ) as receiver:
        (dead,) = receive_n(receiver, 1)
        assert body_text(dead) == "poison"
        assert dead.dead_letter_reason == "bad"
        assert dead.dead_letter_error_description == "cannot parse"
        receiver.complete_message(dead)
