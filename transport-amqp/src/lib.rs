//! ironbus-transport-amqp: Azure Service Bus's AMQP 1.0 dialect.
