//! `overview`: every queue, topic and subscription with counts, size, status and partitions,
//! read from the management API (`schema/overview.json`).

use serde_json::{json, Value};

use crate::atom::{Entry, Kind};
use crate::error::Result;
use crate::management::{subscription_path, Management};
use crate::output::{self, Table};
use crate::view::EntityView;
use crate::Target;

/// The namespace's entities: queues, and topics each with its subscriptions.
pub(crate) struct Namespace {
    pub queues: Vec<Entry>,
    pub topics: Vec<(Entry, Vec<Entry>)>,
}

impl Namespace {
    /// Reads every queue, topic and subscription.
    pub(crate) async fn read(management: &Management) -> Result<Self> {
        let queues = management.list(Kind::Queue, None).await?;
        let mut topics = Vec::new();
        for topic in management.list(Kind::Topic, None).await? {
            let subscriptions = management.list(Kind::Subscription, Some(&topic.name)).await?;
            topics.push((topic, subscriptions));
        }
        Ok(Namespace { queues, topics })
    }

    /// Every entity's view, topics followed by their subscriptions.
    pub(crate) fn views(&self) -> Vec<EntityView<'_>> {
        let mut views: Vec<EntityView<'_>> =
            self.queues.iter().map(|q| EntityView::new(q.name.clone(), q)).collect();
        for (topic, subscriptions) in &self.topics {
            views.push(EntityView::new(topic.name.clone(), topic));
            for s in subscriptions {
                views.push(EntityView::new(subscription_path(&topic.name, &s.name), s));
            }
        }
        views
    }

    /// As JSON (`schema/overview.json`).
    pub(crate) fn json(&self) -> Value {
        let queues: Vec<Value> =
            self.queues.iter().map(|q| EntityView::new(q.name.clone(), q).json()).collect();
        let topics: Vec<Value> = self
            .topics
            .iter()
            .map(|(topic, subscriptions)| {
                let mut value = EntityView::new(topic.name.clone(), topic).json();
                let subs: Vec<Value> = subscriptions
                    .iter()
                    .map(|s| EntityView::new(subscription_path(&topic.name, &s.name), s).json())
                    .collect();
                value["subscriptions"] = Value::Array(subs);
                value
            })
            .collect();
        json!({ "queues": queues, "topics": topics })
    }

    /// As a table.
    pub(crate) fn table(&self) -> String {
        let mut table = Table::new(&EntityView::HEADERS);
        for view in self.views() {
            table.row(view.row());
        }
        if table.is_empty() {
            return "no queues or topics\n".to_owned();
        }
        table.render()
    }
}

/// Runs `overview`.
pub(crate) async fn run(target: &Target) -> Result<()> {
    let namespace = Namespace::read(&target.management()).await?;
    output::emit(target.format, &namespace.json(), || namespace.table());
    Ok(())
}
