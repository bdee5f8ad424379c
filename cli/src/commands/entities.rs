//! `queue`, `topic` and `subscription`: list, show, create, update, delete over the management
//! API. A create sends only the properties given (the broker's defaults for the rest); an
//! update reads the description, changes what was given and sends the rest back as it was.

use serde_json::{json, Value};

use crate::args::{
    CommonOptions, DeliveryOptions, DuplicateOptions, PartitionOptions, QueueAction, QueueOptions,
    SubscriptionAction, SubscriptionOptions, TopicAction, TopicOptions,
};
use crate::atom::{Element, Entry, Kind, IRONBUS_NS};
use crate::error::{CliError, Result};
use crate::management::subscription_path;
use crate::output::{self, Table};
use crate::time::iso_duration;
use crate::view::EntityView;
use crate::Target;

/// Runs `queue <action>`.
pub(crate) async fn queue(target: &Target, action: QueueAction) -> Result<()> {
    match action {
        QueueAction::List => list(target, Kind::Queue, None).await,
        QueueAction::Show { name } => show(target, &name).await,
        QueueAction::Create { name, options } => {
            write(target, Kind::Queue, &name, false, |d| queue_options(target, d, &options)).await
        }
        QueueAction::Update { name, options } => {
            write(target, Kind::Queue, &name, true, |d| queue_options(target, d, &options)).await
        }
        QueueAction::Delete { name } => delete(target, Kind::Queue, &name).await,
    }
}

/// Runs `topic <action>`.
pub(crate) async fn topic(target: &Target, action: TopicAction) -> Result<()> {
    match action {
        TopicAction::List => list(target, Kind::Topic, None).await,
        TopicAction::Show { name } => show(target, &name).await,
        TopicAction::Create { name, options } => {
            write(target, Kind::Topic, &name, false, |d| topic_options(d, &options)).await
        }
        TopicAction::Update { name, options } => {
            write(target, Kind::Topic, &name, true, |d| topic_options(d, &options)).await
        }
        TopicAction::Delete { name } => delete(target, Kind::Topic, &name).await,
    }
}

/// Runs `subscription <action>`.
pub(crate) async fn subscription(target: &Target, action: SubscriptionAction) -> Result<()> {
    match action {
        SubscriptionAction::List { topic } => list(target, Kind::Subscription, Some(&topic)).await,
        SubscriptionAction::Show { topic, name } => {
            show(target, &subscription_path(&topic, &name)).await
        }
        SubscriptionAction::Create { topic, name, options } => {
            let path = subscription_path(&topic, &name);
            write(target, Kind::Subscription, &path, false, |d| {
                subscription_options(target, d, &options)
            })
            .await
        }
        SubscriptionAction::Update { topic, name, options } => {
            let path = subscription_path(&topic, &name);
            write(target, Kind::Subscription, &path, true, |d| {
                subscription_options(target, d, &options)
            })
            .await
        }
        SubscriptionAction::Delete { topic, name } => {
            delete(target, Kind::Subscription, &subscription_path(&topic, &name)).await
        }
    }
}

/// Lists the entities of `kind` (under `parent`), as a table or a JSON array.
async fn list(target: &Target, kind: Kind, parent: Option<&str>) -> Result<()> {
    let entries = target.management().list(kind, parent).await?;
    let path = |e: &Entry| match parent {
        Some(topic) => subscription_path(topic, &e.name),
        None => e.name.clone(),
    };
    let views: Vec<EntityView<'_>> = entries.iter().map(|e| EntityView::new(path(e), e)).collect();
    let json = Value::Array(views.iter().map(EntityView::json).collect());
    output::emit(target.format, &json, || {
        let mut table = Table::new(&EntityView::HEADERS);
        for view in &views {
            table.row(view.row());
        }
        if table.is_empty() {
            format!("no {}s\n", kind.as_str())
        } else {
            table.render()
        }
    });
    Ok(())
}

/// Shows one entity.
async fn show(target: &Target, path: &str) -> Result<()> {
    let entry = target.management().get(path).await?;
    let view = EntityView::new(path, &entry);
    output::emit(target.format, &view.json(), || view.details());
    Ok(())
}

/// Creates or updates the entity at `path`: `apply` sets the flags' values on its description.
async fn write(
    target: &Target,
    kind: Kind,
    path: &str,
    update: bool,
    apply: impl FnOnce(&mut Element) -> Result<()>,
) -> Result<()> {
    let management = target.management();
    let name = path.rsplit('/').next().unwrap_or(path);
    let mut entry =
        if update { management.get(path).await? } else { Entry::new(kind, name, Vec::new()) };
    if entry.kind != kind {
        return Err(CliError::usage(format!(
            "`{path}` is a {}, not a {}",
            entry.kind.as_str(),
            kind.as_str()
        )));
    }
    apply(&mut entry.description)?;
    let stored = management.put(path, &entry, update).await?;
    let view = EntityView::new(path, &stored);
    let verb = if update { "updated" } else { "created" };
    output::emit(target.format, &view.json(), || format!("{verb} {} {path}\n", kind.as_str()));
    Ok(())
}

/// Deletes the entity at `path`.
async fn delete(target: &Target, kind: Kind, path: &str) -> Result<()> {
    target.management().delete(path).await?;
    let json = json!({ "deleted": path, "kind": kind.as_str() });
    output::emit(target.format, &json, || format!("deleted {} {path}\n", kind.as_str()));
    Ok(())
}

/// Sets boolean, number, text and duration elements in schema order.
struct Setter<'a> {
    description: &'a mut Element,
    order: &'static [&'static str],
}

impl Setter<'_> {
    fn flag(&mut self, name: &str, value: Option<bool>) {
        if let Some(v) = value {
            self.description.set(name, if v { "true" } else { "false" }, self.order);
        }
    }

    fn number(&mut self, name: &str, value: Option<impl ToString>) {
        if let Some(v) = value {
            self.description.set(name, v.to_string(), self.order);
        }
    }

    fn duration(&mut self, name: &str, value: Option<&String>) -> Result<()> {
        if let Some(v) = value {
            self.description.set(name, iso_duration(v)?, self.order);
        }
        Ok(())
    }

    fn status(&mut self, value: Option<&String>) -> Result<()> {
        let Some(v) = value else { return Ok(()) };
        let status = ["Active", "Disabled", "SendDisabled", "ReceiveDisabled"]
            .into_iter()
            .find(|s| s.eq_ignore_ascii_case(v))
            .ok_or_else(|| {
                CliError::usage(format!(
                    "--status `{v}`: expected Active, Disabled, SendDisabled or ReceiveDisabled"
                ))
            })?;
        self.description.set("Status", status, self.order);
        Ok(())
    }

    /// A forward target as `sb://host/name`; empty removes it.
    fn forward(&mut self, target: &Target, name: &str, value: Option<&String>) {
        match value.map(|v| v.trim()) {
            None => {}
            Some("") => self.description.remove(name),
            Some(v) if v.contains("://") => self.description.set(name, v, self.order),
            Some(v) => {
                let url = format!("sb://{}/{}", target.endpoints.host, v.trim_start_matches('/'));
                self.description.set(name, url, self.order);
            }
        }
    }

    fn partitions(&mut self, partitioned: Option<bool>, count: Option<u32>) {
        self.flag("EnablePartitioning", partitioned.or(count.map(|_| true)));
        if let Some(n) = count {
            let mut element = Element::text("PartitionCount", n.to_string());
            element.namespace = IRONBUS_NS.to_owned();
            self.description.put(element, self.order);
        }
    }
}

fn queue_options(target: &Target, description: &mut Element, o: &QueueOptions) -> Result<()> {
    let mut s = Setter { description, order: Kind::Queue.schema_order() };
    s.partitioning(&o.partitioning);
    s.delivery(target, &o.delivery)?;
    s.duplicates(&o.duplicates)?;
    s.common(&o.common)
}

fn topic_options(description: &mut Element, o: &TopicOptions) -> Result<()> {
    let mut s = Setter { description, order: Kind::Topic.schema_order() };
    s.partitioning(&o.partitioning);
    s.duplicates(&o.duplicates)?;
    s.common(&o.common)
}

fn subscription_options(
    target: &Target,
    description: &mut Element,
    o: &SubscriptionOptions,
) -> Result<()> {
    let mut s = Setter { description, order: Kind::Subscription.schema_order() };
    s.delivery(target, &o.delivery)?;
    s.duration("DefaultMessageTimeToLive", o.ttl.as_ref())?;
    s.status(o.status.as_ref())
}

impl Setter<'_> {
    fn partitioning(&mut self, o: &PartitionOptions) {
        self.partitions(o.partitioned, o.partitions);
    }

    fn duplicates(&mut self, o: &DuplicateOptions) -> Result<()> {
        let window = o.duplicate_window.as_ref();
        self.flag("RequiresDuplicateDetection", o.duplicate_detection.or(window.map(|_| true)));
        self.duration("DuplicateDetectionHistoryTimeWindow", window)
    }

    fn delivery(&mut self, target: &Target, o: &DeliveryOptions) -> Result<()> {
        self.duration("LockDuration", o.lock_duration.as_ref())?;
        self.flag("RequiresSession", o.sessions);
        self.flag("DeadLetteringOnMessageExpiration", o.dead_letter_on_expiry);
        self.number("MaxDeliveryCount", o.max_delivery_count);
        self.forward(target, "ForwardTo", o.forward_to.as_ref());
        self.forward(target, "ForwardDeadLetteredMessagesTo", o.forward_dead_letters_to.as_ref());
        Ok(())
    }

    fn common(&mut self, o: &CommonOptions) -> Result<()> {
        self.duration("DefaultMessageTimeToLive", o.ttl.as_ref())?;
        self.number("MaxSizeInMegabytes", o.max_size_mb);
        self.status(o.status.as_ref())
    }
}
