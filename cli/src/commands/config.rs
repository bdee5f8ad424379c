//! `export` and `import`: the namespace as the emulator's `config.json` (the format ironbus
//! reads with `--config`; `schema/config.json`), and that file applied to a namespace,
//! idempotently: what is missing is created, what differs is updated, the rest is left alone
//! (`schema/import.json`). Properties fixed at creation that differ are reported, not changed.

use serde_json::{json, Map, Value as Json};

use crate::args::{Export, Import};
use crate::atom::{Element, Entry, Kind, IRONBUS_NS};
use crate::error::{CliError, Context, ErrorKind, Result};
use crate::management::{subscription_path, Management};
use crate::output::{self, Table};
use crate::rules::Rule;
use crate::time::duration_millis;
use crate::view::typed;
use crate::Target;

/// The properties exported per kind (those ironbus's `--config` reads), in schema order: the
/// writable ones but keys, the default rule (exported as `Rules`) and a topic's EnableExpress;
/// none of a rule's (a subscription's `Rules` carry them).
fn exported(kind: Kind) -> impl Iterator<Item = &'static str> {
    let all = if kind == Kind::Rule { &[][..] } else { kind.schema_order() };
    all.iter().copied().filter(move |name| match *name {
        "AuthorizationRules" | "DefaultRuleDescription" => false,
        "EnableExpress" => kind != Kind::Topic,
        _ => true,
    })
}

/// Whether `name` is exported for `kind`.
fn is_exported(kind: Kind, name: &str) -> bool {
    exported(kind).any(|exported| exported == name)
}

/// Properties that cannot change after creation.
const FIXED: [&str; 4] =
    ["RequiresSession", "RequiresDuplicateDetection", "EnablePartitioning", "PartitionCount"];

fn is_forward(name: &str) -> bool {
    matches!(name, "ForwardTo" | "ForwardDeadLetteredMessagesTo")
}

/// An entity's `Properties` as `config.json` has them: per-partition sizes, forward targets
/// by name, the partition count only when partitioned.
pub(crate) fn config_properties(entry: &Entry) -> Map<String, Json> {
    let mut props = Map::new();
    let partitioned = entry.flag("EnablePartitioning");
    let partitions = entry.number("PartitionCount");
    for name in exported(entry.kind) {
        let Some(text) = entry.get(name) else { continue };
        let value = match name {
            n if is_forward(n) => {
                let target = forward_name(text);
                if target.is_empty() {
                    continue;
                }
                Json::String(target)
            }
            "PartitionCount" if !partitioned => continue,
            "MaxSizeInMegabytes" if partitioned && partitions > 1 => {
                json!(entry.number("MaxSizeInMegabytes") / partitions)
            }
            _ => typed(text),
        };
        props.insert((*name).to_owned(), value);
    }
    props
}

/// `sb://host/name` (or a bare name) as the name.
fn forward_name(text: &str) -> String {
    let text = text.trim();
    match text.split_once("://") {
        Some((_, rest)) => {
            rest.split_once('/').map_or("", |(_, path)| path).trim_matches('/').to_owned()
        }
        None => text.trim_matches('/').to_owned(),
    }
}

/// Whether a config value and the entity's current one mean the same.
fn same(name: &str, wanted: &Json, current: Option<&Json>) -> bool {
    let Some(current) = current else {
        // Absent means empty for text (no forward target, no metadata).
        return wanted.as_str().is_some_and(str::is_empty);
    };
    match (wanted, current) {
        (Json::String(a), Json::String(b)) if is_forward(name) => a.eq_ignore_ascii_case(b),
        (Json::String(a), Json::String(b)) => {
            a == b || (duration_millis(a).is_some() && duration_millis(a) == duration_millis(b))
        }
        (a, b) => a == b,
    }
}

/// What an import must change on an existing entity: properties to update, and properties
/// that differ but are fixed at creation.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Diff {
    /// Properties to update.
    pub(crate) changed: Vec<String>,
    /// Properties that differ but cannot change.
    pub(crate) fixed: Vec<String>,
}

/// Compares the `wanted` config properties with the entity `current`.
pub(crate) fn diff(wanted: &Map<String, Json>, current: &Entry) -> Diff {
    let now = config_properties(current);
    let mut diff = Diff::default();
    for (name, value) in wanted {
        if !is_exported(current.kind, name) || same(name, value, now.get(name)) {
            continue;
        }
        if FIXED.contains(&name.as_str()) {
            diff.fixed.push(name.clone());
        } else {
            diff.changed.push(name.clone());
        }
    }
    diff
}

/// Sets config property `name` to `value` on a description.
fn apply(
    target: &Target,
    description: &mut Element,
    kind: Kind,
    name: &str,
    value: &Json,
    partitions: u64,
) -> Result<()> {
    let order = kind.schema_order();
    let text = match value {
        Json::Bool(b) => b.to_string(),
        Json::Number(n) if name == "MaxSizeInMegabytes" && partitions > 1 => {
            (n.as_u64().unwrap_or(0) * partitions).to_string()
        }
        Json::Number(n) => n.to_string(),
        Json::String(s) if is_forward(name) => {
            if s.trim().is_empty() {
                description.remove(name);
                return Ok(());
            }
            if s.contains("://") {
                s.clone()
            } else {
                format!("sb://{}/{}", target.endpoints.host, s.trim_matches('/'))
            }
        }
        Json::String(s) => s.clone(),
        other => {
            return Err(CliError::usage(format!(
                "property {name}: {other} is not a boolean, number or string"
            )))
        }
    };
    if name == "PartitionCount" {
        let mut element = Element::text(name, text);
        element.namespace = IRONBUS_NS.to_owned();
        description.put(element, order);
    } else {
        description.set(name, text, order);
    }
    Ok(())
}

/// Runs `export`.
pub(crate) async fn export(target: &Target, args: &Export) -> Result<()> {
    let management = target.management();
    let name = management
        .namespace_name()
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| "sbemulatorns".to_owned());
    let mut queues = Vec::new();
    for q in management.list(Kind::Queue, None).await? {
        queues.push(json!({ "Name": q.name, "Properties": config_properties(&q) }));
    }
    let mut topics = Vec::new();
    for t in management.list(Kind::Topic, None).await? {
        let mut subscriptions = Vec::new();
        for s in management.list(Kind::Subscription, Some(&t.name)).await? {
            let rules =
                management.list(Kind::Rule, Some(&subscription_path(&t.name, &s.name))).await?;
            let rules = rules.iter().map(Rule::from_entry).collect::<Result<Vec<_>>>()?;
            let mut sub = json!({ "Name": s.name, "Properties": config_properties(&s) });
            // Only `$Default` taking everything is what a subscription without Rules gets.
            let default_only = rules.len() == 1
                && rules[0].name == "$Default"
                && rules[0].to_config()["SqlFilter"]["SqlExpression"] == "1=1"
                && rules[0].action.is_none();
            if !rules.is_empty() && !default_only {
                sub["Rules"] = Json::Array(
                    rules
                        .iter()
                        .map(|r| json!({ "Name": r.name, "Properties": r.to_config() }))
                        .collect(),
                );
            }
            subscriptions.push(sub);
        }
        topics.push(json!({ "Name": t.name, "Properties": config_properties(&t), "Subscriptions": subscriptions }));
    }
    let config = json!({
        "UserConfig": {
            "Namespaces": [{ "Name": name, "Queues": queues, "Topics": topics }],
            "Logging": { "Type": "File" }
        }
    });
    match &args.file {
        Some(path) => {
            let text = serde_json::to_string_pretty(&config)
                .context(ErrorKind::Io, || "writing JSON".to_owned())?;
            std::fs::write(path, text + "\n")
                .context(ErrorKind::Io, || format!("writing {}", path.display()))?;
            let summary = json!({ "file": path.display().to_string(), "queues": queues.len(), "topics": topics.len() });
            output::emit(target.format, &summary, || {
                format!(
                    "exported {} queue(s) and {} topic(s) to {}\n",
                    queues.len(),
                    topics.len(),
                    path.display()
                )
            });
        }
        None => output::emit(output::Format::Json, &config, String::new),
    }
    Ok(())
}

/// One thing an import did.
struct Step {
    kind: Kind,
    path: String,
    action: &'static str,
    fields: Vec<String>,
}

/// Runs `import`: a first pass creates and updates everything but forward targets (which may
/// name entities later in the file), a second sets those.
pub(crate) async fn import(target: &Target, args: &Import) -> Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .context(ErrorKind::Io, || format!("reading {}", args.file.display()))?;
    let config: Json = serde_json::from_str(&text)
        .context(ErrorKind::Usage, || format!("{} is not JSON", args.file.display()))?;
    let namespace = config.pointer("/UserConfig/Namespaces/0").ok_or_else(|| {
        CliError::usage(format!("{}: no UserConfig.Namespaces[0]", args.file.display()))
    })?;
    let namespaces =
        config.pointer("/UserConfig/Namespaces").and_then(Json::as_array).map_or(0, Vec::len);
    if namespaces > 1 {
        output::note(&format!(
            "note: importing the file's first namespace only; {} more are left out (import each into its own namespace)",
            namespaces - 1
        ));
    }
    if namespace.get("Policies").is_some() {
        output::note(
            "note: Policies are not imported: a namespace's keys are the server's (--policy)",
        );
    }
    let management = target.management();
    let mut steps = Vec::new();
    let mut entities = Vec::new();
    for queue in array(namespace, "Queues") {
        entities.push((Kind::Queue, entity_name(queue)?.to_owned(), queue));
    }
    for topic in array(namespace, "Topics") {
        let name = entity_name(topic)?;
        entities.push((Kind::Topic, name.to_owned(), topic));
        for sub in array(topic, "Subscriptions") {
            entities.push((Kind::Subscription, subscription_path(name, entity_name(sub)?), sub));
        }
    }
    for (kind, path, declared) in &entities {
        let step =
            reconcile(target, &management, *kind, path, declared, Pass::AllButForwards).await?;
        let created = step.action == "created";
        steps.push(step);
        let mut declared_rules = Vec::new();
        for rule in array(declared, "Rules") {
            let rule = Rule::from_config(entity_name(rule)?, rule.get("Properties"))?;
            declared_rules.push(rule.name.to_ascii_lowercase());
            steps.push(reconcile_rule(&management, path, &rule).await?);
        }
        if created && !declared_rules.is_empty() && !declared_rules.iter().any(|n| n == "$default")
        {
            // As `--config` does: declared rules replace `$Default`.
            management.delete(&format!("{path}/Rules/$Default")).await?;
        }
    }
    for (kind, path, declared) in &entities {
        let step = reconcile(target, &management, *kind, path, declared, Pass::Forwards).await?;
        if step.action != "unchanged" {
            steps.push(step);
        }
    }
    let json = Json::Array(
        steps
            .iter()
            .map(|s| json!({ "kind": s.kind.as_str(), "path": s.path, "action": s.action, "fields": s.fields }))
            .collect(),
    );
    output::emit(target.format, &json!({ "steps": json }), || {
        let mut table = Table::new(&["ACTION", "KIND", "PATH", "FIELDS"]);
        for s in &steps {
            table.row(vec![
                s.action.to_owned(),
                s.kind.as_str().to_owned(),
                s.path.clone(),
                s.fields.join(", "),
            ]);
        }
        if table.is_empty() {
            "nothing to import\n".to_owned()
        } else {
            table.render()
        }
    });
    Ok(())
}

/// Which properties a pass of `import` applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Everything but forward targets (and creates what is missing).
    AllButForwards,
    /// Forward targets only.
    Forwards,
}

fn array<'a>(value: &'a Json, key: &str) -> impl Iterator<Item = &'a Json> {
    value.get(key).and_then(Json::as_array).into_iter().flatten()
}

fn entity_name(value: &Json) -> Result<&str> {
    value
        .get("Name")
        .and_then(Json::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| CliError::usage(format!("an entity without a Name: {value}")))
}

/// Creates the entity at `path` from `declared` (its `Properties`), or updates what differs,
/// for the properties of `pass`.
async fn reconcile(
    target: &Target,
    management: &Management,
    kind: Kind,
    path: &str,
    declared: &Json,
    pass: Pass,
) -> Result<Step> {
    let empty = Map::new();
    let all = declared.get("Properties").and_then(Json::as_object).unwrap_or(&empty);
    let wanted: Map<String, Json> = all
        .iter()
        .filter(|(k, _)| is_forward(k) == (pass == Pass::Forwards))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let unknown: Vec<String> = wanted.keys().filter(|k| !is_exported(kind, k)).cloned().collect();
    let partitions = wanted.get("PartitionCount").and_then(Json::as_u64).unwrap_or(0);
    match management.get(path).await {
        Ok(current) => {
            let diff = diff(&wanted, &current);
            if diff.changed.is_empty() {
                let action = if diff.fixed.is_empty() { "unchanged" } else { "differs-fixed" };
                return Ok(Step { kind, path: path.to_owned(), action, fields: diff.fixed });
            }
            let mut entry = current.clone();
            let current_partitions = if current.flag("EnablePartitioning") {
                current.number("PartitionCount")
            } else {
                0
            };
            for name in &diff.changed {
                apply(
                    target,
                    &mut entry.description,
                    kind,
                    name,
                    &wanted[name],
                    current_partitions,
                )?;
            }
            management.put(path, &entry, true).await?;
            let mut fields = diff.changed;
            fields.extend(
                diff.fixed.into_iter().map(|f| format!("{f} (fixed at creation, not changed)")),
            );
            Ok(Step { kind, path: path.to_owned(), action: "updated", fields })
        }
        Err(e) if e.kind() == ErrorKind::NotFound && pass == Pass::AllButForwards => {
            let name = path.rsplit('/').next().unwrap_or(path);
            let mut entry = Entry::new(kind, name, Vec::new());
            for (key, value) in wanted.iter().filter(|(k, _)| !unknown.contains(k)) {
                apply(target, &mut entry.description, kind, key, value, partitions)?;
            }
            management.put(path, &entry, false).await?;
            let fields = unknown.into_iter().map(|u| format!("{u} (not imported)")).collect();
            Ok(Step { kind, path: path.to_owned(), action: "created", fields })
        }
        Err(e) => Err(e),
    }
}

/// Creates the rule at `subscription/Rules/name`, or updates it when its filter or action differ.
async fn reconcile_rule(management: &Management, subscription: &str, rule: &Rule) -> Result<Step> {
    let path = format!("{subscription}/Rules/{}", rule.name);
    match management.get(&path).await {
        Ok(current) => {
            if Rule::from_entry(&current)?.normalized() == rule.normalized() {
                return Ok(Step {
                    kind: Kind::Rule,
                    path,
                    action: "unchanged",
                    fields: Vec::new(),
                });
            }
            management.put(&path, &rule.to_entry(), true).await?;
            Ok(Step {
                kind: Kind::Rule,
                path,
                action: "updated",
                fields: vec!["Filter".into(), "Action".into()],
            })
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            management.put(&path, &rule.to_entry(), false).await?;
            Ok(Step { kind: Kind::Rule, path, action: "created", fields: Vec::new() })
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atom::{parse, Document};

    fn queue(children: &str) -> Entry {
        let xml = format!(
            r#"<entry xmlns="http://www.w3.org/2005/Atom"><title>q</title><content><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">{children}</QueueDescription></content></entry>"#
        );
        let Document::Entry(entry) = parse(&xml).unwrap() else { panic!("an entry") };
        entry
    }

    #[test]
    fn export_gives_per_partition_sizes_and_forward_names() {
        let entry = queue(
            r#"<LockDuration>PT1M</LockDuration><MaxSizeInMegabytes>2048</MaxSizeInMegabytes><MaxDeliveryCount>5</MaxDeliveryCount><ForwardTo>sb://localhost:5672/dest</ForwardTo><SizeInBytes>9</SizeInBytes><EnablePartitioning>true</EnablePartitioning><PartitionCount xmlns="urn:ironbus:servicebus:extensions">2</PartitionCount>"#,
        );
        let props = config_properties(&entry);
        assert_eq!(props["LockDuration"], "PT1M");
        assert_eq!(props["MaxSizeInMegabytes"], 1024);
        assert_eq!(props["MaxDeliveryCount"], 5);
        assert_eq!(props["ForwardTo"], "dest");
        assert_eq!(props["PartitionCount"], 2);
        assert!(!props.contains_key("SizeInBytes"), "runtime figures are not configuration");
    }

    #[test]
    fn the_diff_updates_what_differs_and_reports_what_is_fixed() {
        let entry = queue("<LockDuration>PT1M</LockDuration><MaxDeliveryCount>10</MaxDeliveryCount><RequiresSession>false</RequiresSession>");
        let same: Map<String, Json> =
            serde_json::from_value(json!({"LockDuration": "PT60S", "MaxDeliveryCount": 10}))
                .unwrap();
        assert_eq!(diff(&same, &entry), Diff::default(), "PT60S is PT1M");
        let other: Map<String, Json> = serde_json::from_value(
            json!({"MaxDeliveryCount": 3, "RequiresSession": true, "ForwardTo": ""}),
        )
        .unwrap();
        assert_eq!(
            diff(&other, &entry),
            Diff {
                changed: vec!["MaxDeliveryCount".into()],
                fixed: vec!["RequiresSession".into()]
            }
        );
    }
}
